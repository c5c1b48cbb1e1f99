package transientpool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// commitChunkBytes is the most one pwrite carries; Commit publishes the
// committed position and checks its context between chunks.
const commitChunkBytes = 4 << 20

// stickyError boxes the first failure of a write, commit or flush.
type stickyError struct{ err error }

// segment is one segment file of the transient backend.
//
// Memory: mapping is the file mapped MAP_SHARED, read-write; readers copy
// from it and, when the segment fell back (no buffer), Append writes into it.
// buffer, when not nil, is where Append encodes; Commit pwrites
// [committed, wrote) of it into the file at the same offset. Only bytes
// below committed are ever read, and they are in the page cache, so the
// mapping (and sendfile) see them.
//
// Positions: wrote ≥ committed ≥ flushed, atomics read lock-free. Append
// publishes wrote after encoding; Commit reads wrote, writes, then publishes
// committed; readers read committed and then the bytes below it. Those
// atomics order the buffer stores before the pwrite and the pwrite before the
// reads.
type segment struct {
	pool       *pool
	path       string
	fromOffset int64
	sizeBytes  int64
	osFile     *os.File
	fd         int
	mapping    []byte

	// buffer is nil when the segment writes through the mapping (fallback),
	// when it was opened existing and not truncated yet, and after the whole
	// segment was committed (its buffer went back to the pool).
	buffer atomic.Pointer[poolBuffer]

	wrotePosition     atomic.Int64
	committedPosition atomic.Int64
	flushedPosition   atomic.Int64

	ref           mappedfile.RefCount
	sticky        atomic.Pointer[stickyError]
	mappingLocked atomic.Bool

	closeErr    error // written by cleanup before cleanupDone is set
	cleanupDone atomic.Bool
}

var _ mappedfile.MappedFile = (*segment)(nil)

// openSegment maps an opened segment file. buf is the borrowed buffer of a
// new segment (nil: fallback or existing file). On error the caller still
// owns osFile and buf.
func openSegment(p *pool, spec mappedfile.Spec, osFile *os.File, existed bool, buf *poolBuffer) (*segment, error) {
	mapping, err := segfile.Map(osFile, spec.SizeBytes, true)
	if err != nil {
		return nil, err
	}
	s := &segment{
		pool:       p,
		path:       spec.Path,
		fromOffset: spec.FromOffset,
		sizeBytes:  spec.SizeBytes,
		osFile:     osFile,
		fd:         int(osFile.Fd()),
		mapping:    mapping,
	}
	if existed {
		// Full and durable until recovery calls Truncate.
		s.wrotePosition.Store(spec.SizeBytes)
		s.committedPosition.Store(spec.SizeBytes)
		s.flushedPosition.Store(spec.SizeBytes)
	}
	s.buffer.Store(buf)
	s.ref.Init()
	return s, nil
}

// Path implements mappedfile.MappedFile.
func (s *segment) Path() string { return s.path }

// FromOffset implements mappedfile.MappedFile.
func (s *segment) FromOffset() int64 { return s.fromOffset }

// SizeBytes implements mappedfile.MappedFile.
func (s *segment) SizeBytes() int64 { return s.sizeBytes }

// WrotePosition is where the next Append goes.
func (s *segment) WrotePosition() int64 { return s.wrotePosition.Load() }

// CommittedPosition is how far the buffer has been written to the file.
func (s *segment) CommittedPosition() int64 { return s.committedPosition.Load() }

// FlushedPosition is how far the file is durable.
func (s *segment) FlushedPosition() int64 { return s.flushedPosition.Load() }

// ReadablePosition is the committed position: bytes still only in the
// buffer are invisible to readers.
func (s *segment) ReadablePosition() int64 { return s.committedPosition.Load() }

// Err returns the sticky error, nil while there is none.
func (s *segment) Err() error {
	if e := s.sticky.Load(); e != nil {
		return e.err
	}
	return nil
}

// fail records err as the sticky error (the first one wins) and returns
// the sticky error.
func (s *segment) fail(err error) error {
	s.sticky.CompareAndSwap(nil, &stickyError{err: err})
	return s.sticky.Load().err
}

func (s *segment) closedError(op string) error {
	return fmt.Errorf("transientpool: %s %s: %w", op, s.path, mappedfile.ErrClosed)
}

// Append encodes n bytes in place at the write position: into the borrowed
// buffer, or into the file mapping when the segment fell back. It does not
// allocate.
func (s *segment) Append(n int, enc mappedfile.Encoder) (int64, error) {
	if e := s.sticky.Load(); e != nil {
		return 0, e.err
	}
	if n < 0 {
		return 0, fmt.Errorf("transientpool: append %d bytes: %w", n, mappedfile.ErrInvalidArgument)
	}
	if !s.ref.Retain() {
		return 0, s.closedError("append to")
	}
	defer s.ref.Release()
	wrote := s.wrotePosition.Load()
	if int64(n) > s.sizeBytes-wrote {
		return 0, fmt.Errorf("transientpool: append %d bytes at %d of %d: %w", n, wrote, s.sizeBytes, mappedfile.ErrFull)
	}
	target := s.mapping
	if buf := s.buffer.Load(); buf != nil {
		target = buf.data
	}
	end := wrote + int64(n)
	if err := enc.EncodeAt(target[wrote:end:end], wrote); err != nil {
		return 0, fmt.Errorf("transientpool: encode %d bytes at %d: %w", n, wrote, err)
	}
	s.wrotePosition.Store(end)
	return wrote, nil
}

// Commit pwrites [committed, wrote) of the buffer into the file at the same
// offset (exactly that range: no page rounding, so the buffer never needs the
// bytes before committed, which after a Truncate it does not have). When the
// segment writes through the mapping the bytes are already in the page cache
// and Commit only publishes them. Once the whole segment is committed the
// buffer goes back to the pool.
func (s *segment) Commit(ctx context.Context, leastPages int) (int64, error) {
	if e := s.sticky.Load(); e != nil {
		return s.committedPosition.Load(), e.err
	}
	if !s.ref.Retain() {
		return s.committedPosition.Load(), s.closedError("commit")
	}
	defer s.ref.Release()
	committed := s.committedPosition.Load()
	wrote := s.wrotePosition.Load()
	if !mappedfile.AbleTo(committed, wrote, s.sizeBytes, leastPages) {
		return committed, nil
	}
	buf := s.buffer.Load()
	if buf == nil {
		s.committedPosition.Store(wrote)
		return wrote, nil
	}
	for committed < wrote {
		if err := ctx.Err(); err != nil {
			return committed, fmt.Errorf("transientpool: commit %s at %d: %w", s.path, committed, err)
		}
		end := min(wrote, committed+commitChunkBytes)
		if err := s.writeBuffer(buf, committed, end); err != nil {
			return committed, s.fail(err)
		}
		committed = end
		s.committedPosition.Store(committed)
	}
	if committed == s.sizeBytes {
		s.returnBuffer()
	}
	return committed, nil
}

// writeBuffer pwrites [from, to) of buf into the file at from.
func (s *segment) writeBuffer(buf *poolBuffer, from, to int64) error {
	if _, err := s.osFile.WriteAt(buf.data[from:to], from); err != nil {
		return fmt.Errorf("transientpool: commit %s: pwrite [%d,%d): %w", s.path, from, to, err)
	}
	return nil
}

// returnBuffer gives the segment's buffer back to the pool, if it holds one.
func (s *segment) returnBuffer() {
	if buf := s.buffer.Swap(nil); buf != nil {
		s.pool.giveBack(buf)
	}
}

// Flush fdatasyncs the file and publishes as flushed the committed position
// read before the sync (what the sync is known to cover).
func (s *segment) Flush(ctx context.Context, leastPages int) (int64, error) {
	if e := s.sticky.Load(); e != nil {
		return s.flushedPosition.Load(), e.err
	}
	if err := ctx.Err(); err != nil {
		return s.flushedPosition.Load(), fmt.Errorf("transientpool: flush %s: %w", s.path, err)
	}
	if !s.ref.Retain() {
		return s.flushedPosition.Load(), s.closedError("flush")
	}
	defer s.ref.Release()
	flushed := s.flushedPosition.Load()
	committed := s.committedPosition.Load()
	if !mappedfile.AbleTo(flushed, committed, s.sizeBytes, leastPages) {
		return flushed, nil
	}
	if err := unix.Fdatasync(s.fd); err != nil {
		return flushed, s.fail(fmt.Errorf("transientpool: flush %s: fdatasync: %w", s.path, err))
	}
	s.flushedPosition.Store(committed)
	return committed, nil
}

// ReadAt copies committed bytes from the file mapping. It takes a short
// reference (Acquire), so it still works after Close or Delete while someone
// holds a Retain, and a concurrent Close cannot unmap under it.
func (s *segment) ReadAt(dst []byte, filePos int64) (int, error) {
	if !s.ref.Acquire() {
		return 0, s.closedError("read")
	}
	defer s.ref.Release()
	n, err := mappedfile.CheckRead(filePos, len(dst), s.committedPosition.Load())
	if n > 0 {
		copy(dst[:n], s.mapping[filePos:filePos+int64(n)])
	}
	return n, err
}

// SendRange sends committed bytes: with sendfile(2) from the page cache when
// w is a socket (a syscall.Conn), else one Write straight from the mapping.
func (s *segment) SendRange(ctx context.Context, w io.Writer, filePos, n int64) (int64, error) {
	if filePos < 0 || n < 0 || filePos > s.sizeBytes-n {
		return 0, fmt.Errorf("transientpool: send [%d,+%d) of %s: %w", filePos, n, s.path, mappedfile.ErrOutOfRange)
	}
	if !s.ref.Acquire() {
		return 0, s.closedError("send from")
	}
	defer s.ref.Release()
	if readable := s.committedPosition.Load(); filePos+n > readable {
		return 0, fmt.Errorf("transientpool: send [%d,%d) of %s: readable up to %d: %w",
			filePos, filePos+n, s.path, readable, mappedfile.ErrOutOfRange)
	}
	if n == 0 {
		return 0, nil
	}
	if _, ok := w.(syscall.Conn); ok {
		return segfile.SendFile(ctx, w, s.osFile, filePos, n)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("transientpool: send from %s: %w", s.path, err)
	}
	m, err := w.Write(s.mapping[filePos : filePos+n])
	if err == nil && int64(m) < n {
		err = io.ErrShortWrite
	}
	if err != nil {
		return int64(m), fmt.Errorf("transientpool: send [%d,%d) of %s: %w", filePos, filePos+n, s.path, err)
	}
	return n, nil
}

// Retain takes a reference that keeps the file and its memory alive.
func (s *segment) Retain() bool { return s.ref.Retain() }

// Release drops a reference taken by Retain.
func (s *segment) Release() { s.ref.Release() }

// Close releases the file once the last reference goes: the buffer back to
// the pool, the mapping unmapped, the descriptor closed. It does not commit
// or flush.
func (s *segment) Close() error {
	if !s.ref.Shutdown(s.cleanup) {
		return s.closedError("close")
	}
	return s.cleanupError()
}

// Delete closes the file and removes it from its directory now; readers
// holding references keep the memory until they release it, and the buffer
// returns to the pool then.
func (s *segment) Delete() error {
	if !s.ref.Shutdown(s.cleanup) {
		return s.closedError("delete")
	}
	if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("transientpool: delete: %w", err)
	}
	return s.cleanupError()
}

// cleanupError is the cleanup's error when it has already run (no reader
// held a reference at Close); otherwise it runs later and nobody sees it.
func (s *segment) cleanupError() error {
	if s.cleanupDone.Load() {
		return s.closeErr
	}
	return nil
}

// cleanup runs once, when the last reference is released after Close or
// Delete.
func (s *segment) cleanup() {
	s.returnBuffer()
	var errs []error
	if err := segfile.Unmap(s.mapping); err != nil {
		errs = append(errs, fmt.Errorf("transientpool: close %s: %w", s.path, err))
	}
	if err := s.osFile.Close(); err != nil {
		errs = append(errs, fmt.Errorf("transientpool: close: %w", err))
	}
	s.closeErr = errors.Join(errs...)
	s.cleanupDone.Store(true)
}
