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
)

// commitChunkBytes is the most one pwrite carries; Commit publishes the
// committed position and checks its context between chunks.
const commitChunkBytes = 4 << 20

// segment is one segment file of the transient backend.
//
// Memory: mapping is the file mapped MAP_SHARED, read-write; readers copy
// from it and, when the segment fell back (no buffer), Append writes into it.
// buffer, when not nil, is where Append encodes; Commit pwrites
// [committed, wrote) of it into the file at the same offset. Only bytes
// below committed are ever read, and they are in the page cache, so the
// mapping (and sendfile) see them.
//
// Positions (wrote ≥ committed ≥ flushed), the sticky error and the
// references are the embedded Base's. Append publishes wrote after encoding;
// Commit reads wrote, writes, then publishes committed; readers read
// committed and then the bytes below it. Those atomics order the buffer
// stores before the pwrite and the pwrite before the reads.
type segment struct {
	mappedfile.Base
	pool    *pool
	osFile  *os.File
	fd      int
	mapping []byte

	// buffer is nil when the segment writes through the mapping (fallback),
	// when it was opened existing and not truncated yet, and after the whole
	// segment was committed (its buffer went back to the pool).
	buffer atomic.Pointer[poolBuffer]

	mappingLocked atomic.Bool
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
		pool:    p,
		osFile:  osFile,
		fd:      int(osFile.Fd()),
		mapping: mapping,
	}
	// Existing: full and durable until recovery calls Truncate. Readers
	// see committed bytes only.
	s.Init(mappedfile.BaseConfig{Spec: spec, Backend: "transientpool", Existed: existed,
		Cleanup: s.cleanup, Remove: s.remove})
	s.buffer.Store(buf)
	return s, nil
}

// Append encodes n bytes in place at the write position: into the borrowed
// buffer, or into the file mapping when the segment fell back. It does not
// allocate. A failed encoder's bytes are cleared, so the buffer holds only
// what encoders wrote.
func (s *segment) Append(n int, enc mappedfile.Encoder) (int64, error) {
	wrote, err := s.BeginAppend(n, enc)
	if err != nil {
		return 0, err
	}
	defer s.Release()
	target := s.mapping
	if buf := s.buffer.Load(); buf != nil {
		target = buf.data
	}
	end := wrote + int64(n)
	dst := target[wrote:end:end]
	if err := enc.EncodeAt(dst, wrote); err != nil {
		clear(dst)
		return 0, fmt.Errorf("transientpool: encode %d bytes at %d: %w", n, wrote, err)
	}
	s.PublishWrote(end)
	return wrote, nil
}

// Commit pwrites [committed, wrote) of the buffer into the file at the same
// offset (exactly that range: no page rounding, so the buffer never needs the
// bytes before committed, which after a Truncate it does not have). When the
// segment writes through the mapping the bytes are already in the page cache
// and Commit only publishes them. Once the whole segment is committed the
// buffer goes back to the pool.
func (s *segment) Commit(ctx context.Context, leastPages int) (int64, error) {
	committed, wrote, able, err := s.BeginCommit(leastPages)
	if err != nil {
		return committed, err
	}
	defer s.Release()
	if !able {
		return committed, nil
	}
	buf := s.buffer.Load()
	if buf == nil {
		s.PublishCommitted(wrote)
		return wrote, nil
	}
	for committed < wrote {
		if err := ctx.Err(); err != nil {
			return committed, fmt.Errorf("transientpool: commit %s at %d: %w", s.Path(), committed, err)
		}
		end := min(wrote, committed+commitChunkBytes)
		if err := s.writeBuffer(buf, committed, end); err != nil {
			return committed, s.Fail(err)
		}
		committed = end
		s.PublishCommitted(committed)
	}
	if committed == s.SizeBytes() {
		s.returnBuffer()
	}
	return committed, nil
}

// writeBuffer pwrites [from, to) of buf into the file at from.
func (s *segment) writeBuffer(buf *poolBuffer, from, to int64) error {
	if err := segfile.Pwrite(s.Path(), s.fd, buf.data[from:to], from); err != nil {
		return fmt.Errorf("transientpool: commit: %w", err)
	}
	return nil
}

// returnBuffer gives the segment's buffer back to the pool, if it holds one.
func (s *segment) returnBuffer() {
	if buf := s.buffer.Swap(nil); buf != nil {
		buf.dirtyBytes = max(buf.dirtyBytes, s.WrotePosition())
		s.pool.giveBack(buf)
	}
}

// Flush fdatasyncs the file and publishes as flushed the committed position
// read before the sync (what the sync is known to cover).
func (s *segment) Flush(ctx context.Context, leastPages int) (int64, error) {
	flushed, committed, able, err := s.BeginFlush(ctx, leastPages)
	if err != nil {
		return flushed, err
	}
	defer s.Release()
	if !able {
		return flushed, nil
	}
	if err := segfile.Fdatasync(s.Path(), s.fd); err != nil {
		return flushed, s.Fail(fmt.Errorf("transientpool: flush: %w", err))
	}
	s.PublishFlushed(committed)
	return committed, nil
}

// ReadAt copies committed bytes from the file mapping. It takes a short
// reference (Acquire), so it still works after Close or Delete while someone
// holds a Retain, and a concurrent Close cannot unmap under it.
func (s *segment) ReadAt(dst []byte, filePos int64) (int, error) {
	if !s.Acquire() {
		return 0, s.ClosedError("read")
	}
	defer s.Release()
	n, err := mappedfile.CheckRead(filePos, len(dst), s.CommittedPosition())
	if n > 0 {
		copy(dst[:n], s.mapping[filePos:filePos+int64(n)])
	}
	return n, err
}

// SendRange sends committed bytes: with sendfile(2) from the page cache when
// w is a socket (a syscall.Conn), else one Write straight from the mapping.
func (s *segment) SendRange(ctx context.Context, w io.Writer, filePos, n int64) (int64, error) {
	if filePos < 0 || n < 0 || filePos > s.SizeBytes()-n {
		return 0, fmt.Errorf("transientpool: send [%d,+%d) of %s: %w", filePos, n, s.Path(), mappedfile.ErrOutOfRange)
	}
	if !s.Acquire() {
		return 0, s.ClosedError("send from")
	}
	defer s.Release()
	if readable := s.CommittedPosition(); filePos+n > readable {
		return 0, fmt.Errorf("transientpool: send [%d,%d) of %s: readable up to %d: %w",
			filePos, filePos+n, s.Path(), readable, mappedfile.ErrOutOfRange)
	}
	if n == 0 {
		return 0, nil
	}
	if _, ok := w.(syscall.Conn); ok {
		return segfile.SendFile(ctx, w, s.osFile, filePos, n)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("transientpool: send from %s: %w", s.Path(), err)
	}
	m, err := w.Write(s.mapping[filePos : filePos+n])
	if err == nil && int64(m) < n {
		err = io.ErrShortWrite
	}
	if err != nil {
		return int64(m), fmt.Errorf("transientpool: send [%d,%d) of %s: %w", filePos, filePos+n, s.Path(), err)
	}
	return n, nil
}

// remove unlinks the file and syncs its directory (Base.Delete). A file
// someone else removed already is not an error.
func (s *segment) remove() error {
	if err := segfile.Remove(s.Path()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// cleanup runs once, when the last reference is released after Close or
// Delete: the buffer back to the pool, the mapping unmapped, the descriptor
// closed. Nothing is committed or flushed.
func (s *segment) cleanup() error {
	s.returnBuffer()
	return errors.Join(segfile.Unmap(s.mapping), s.osFile.Close())
}
