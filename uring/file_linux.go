package uring

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
)

// lease is a staging buffer lent to one segment while it is written. Its
// refs count the readers serving bytes from it (uring-direct); Shutdown
// returns the buffer to the pool once the last of them is done, so a buffer
// is never reused under a reader.
type lease struct {
	buf *stagingBuffer
	// fromPosition: bytes below it are read from the file, not the buffer
	// (a segment truncated at recovery holds only its tail block).
	fromPosition int64
	refs         mappedfile.RefCount
	locked       atomic.Bool
}

// file is one segment of the uring or uring-direct backend.
//
// Appends encode in place into the lease's off-heap buffer at the segment
// position. Commit writes [committed, wrote) to the file through the ring
// (uring: buffered WRITE_FIXED; uring-direct: O_DIRECT writes of whole
// blocks, the partial tail block padded with zeros from a bounce block and
// rewritten by the next commit). Flush is an io_uring FSYNC(DATASYNC).
//
// The buffer goes back to the pool when nothing needs it any more: for
// uring when the full segment is committed (reads come from the page cache),
// for uring-direct when it is committed and flushed (until then reads are
// served from the buffer, since O_DIRECT writes drop the page cache).
type file struct {
	backend    *backend
	path       string
	fromOffset int64
	sizeBytes  int64
	direct     bool
	preZero    bool
	align      int64 // O_DIRECT block (1 for buffered)

	writeFile *os.File // O_DIRECT for uring-direct
	readFile  *os.File // buffered reads (the same file for uring)
	fd        int32

	wrotePosition     atomic.Int64
	committedPosition atomic.Int64
	flushedPosition   atomic.Int64
	stickyErr         atomic.Pointer[error]
	refs              mappedfile.RefCount
	lease             atomic.Pointer[lease]

	// syncMu serializes Commit, Flush and Truncate (the contract already
	// has one goroutine call them; the lock makes a mistake harmless).
	syncMu  sync.Mutex
	writer  *writer
	extents [2]extent
	fsync   [1]Request
	tickets [1]Ticket
}

func dirOf(path string) string { return filepath.Dir(path) }

func (f *file) Path() string             { return f.path }
func (f *file) FromOffset() int64        { return f.fromOffset }
func (f *file) SizeBytes() int64         { return f.sizeBytes }
func (f *file) WrotePosition() int64     { return f.wrotePosition.Load() }
func (f *file) CommittedPosition() int64 { return f.committedPosition.Load() }
func (f *file) FlushedPosition() int64   { return f.flushedPosition.Load() }

// ReadablePosition is committed for uring and wrote for uring-direct
// (whose unflushed bytes are served from the staging buffer).
func (f *file) ReadablePosition() int64 {
	if f.direct {
		return f.wrotePosition.Load()
	}
	return f.committedPosition.Load()
}

// Err returns the sticky error.
func (f *file) Err() error {
	if p := f.stickyErr.Load(); p != nil {
		return *p
	}
	return nil
}

// fail records err as the sticky error (the first one wins) and returns
// the sticky error.
func (f *file) fail(err error) error {
	f.stickyErr.CompareAndSwap(nil, &err)
	return f.Err()
}

func (f *file) closedError(op string) error {
	return fmt.Errorf("uring: %s %s: %w", op, f.path, mappedfile.ErrClosed)
}

// Append reserves n bytes at the write position and encodes into the
// staging buffer in place. It does not allocate.
func (f *file) Append(n int, enc mappedfile.Encoder) (int64, error) {
	if !f.refs.Retain() {
		return 0, f.closedError("append")
	}
	defer f.refs.Release()
	if err := f.Err(); err != nil {
		return 0, err
	}
	wrote := f.wrotePosition.Load()
	if n <= 0 {
		return 0, fmt.Errorf("uring: %s: append of %d bytes: %w", f.path, n, mappedfile.ErrInvalidArgument)
	}
	if int64(n) > f.sizeBytes-wrote {
		return 0, fmt.Errorf("uring: %s: append of %d bytes at %d of %d: %w", f.path, n, wrote, f.sizeBytes, mappedfile.ErrFull)
	}
	// A lease is held whenever wrote < sizeBytes.
	end := wrote + int64(n)
	dst := f.lease.Load().buf.mem[wrote:end:end]
	if err := enc.EncodeAt(dst, wrote); err != nil {
		clear(dst)
		return 0, fmt.Errorf("uring: %s: encode at %d: %w", f.path, wrote, err)
	}
	f.wrotePosition.Store(end)
	return wrote, nil
}

// Commit writes [committed, wrote) through the ring and waits for it. A
// failed write is sticky; a cancelled ctx is not (the bytes written before
// it still count).
func (f *file) Commit(ctx context.Context, leastPages int) (int64, error) {
	if !f.refs.Retain() {
		return f.committedPosition.Load(), f.closedError("commit")
	}
	defer f.refs.Release()
	f.syncMu.Lock()
	defer f.syncMu.Unlock()
	committed := f.committedPosition.Load()
	if err := f.Err(); err != nil {
		return committed, err
	}
	wrote := f.wrotePosition.Load()
	if !mappedfile.AbleTo(committed, wrote, f.sizeBytes, leastPages) {
		return committed, nil
	}
	if err := ctx.Err(); err != nil {
		return committed, fmt.Errorf("uring: commit %s: %w", f.path, err)
	}
	l := f.lease.Load()
	var end int64
	var err error
	if f.direct {
		end, err = f.commitDirectLocked(ctx, l, committed, wrote)
	} else {
		f.extents[0] = extent{fileOff: committed, mem: l.buf.mem[committed:wrote]}
		end, err = f.writer.write(ctx, f.target(l, 0), f.extents[:1])
	}
	if end = min(end, wrote); end > committed {
		committed = end
		f.committedPosition.Store(committed)
	}
	if err != nil {
		if ctx.Err() == nil {
			err = f.fail(fmt.Errorf("uring: commit %s: %w", f.path, err))
		}
		return committed, err
	}
	if committed == f.sizeBytes && !f.direct {
		f.releaseLease()
	}
	return committed, nil
}

// commitDirectLocked writes whole blocks from the block holding committed
// up to wrote; the partial tail block goes through the lease's bounce block,
// copied from the buffer and padded with zeros, so the file never holds a
// byte past wrote other than zeros. The previous commit's tail block is
// rewritten here; this commit waits for all its writes, so two writes to one
// block are never in flight together.
func (f *file) commitDirectLocked(ctx context.Context, l *lease, committed, wrote int64) (int64, error) {
	start := committed - committed%f.align
	tailStart := wrote - wrote%f.align
	mem := l.buf.mem
	ext := f.extents[:0]
	if tailStart > start {
		ext = append(ext, extent{fileOff: start, mem: mem[start:tailStart]})
	}
	if wrote > tailStart {
		bounce := mem[f.sizeBytes : f.sizeBytes+f.align] // the bounce block
		n := copy(bounce, mem[tailStart:wrote])
		clear(bounce[n:])
		ext = append(ext, extent{fileOff: tailStart, mem: bounce})
	}
	var flags uint32
	if f.preZero {
		flags = RWFDSync
	}
	end, err := f.writer.write(ctx, f.target(l, flags), ext)
	if end < committed {
		end = committed // the rewrite of the old tail block failed: nothing new
	}
	return end, err
}

func (f *file) target(l *lease, rwFlags uint32) writeTarget {
	t := writeTarget{fd: f.fd, bufIndex: -1, rwFlags: rwFlags, align: f.align}
	if l.buf.fixed {
		t.bufIndex = l.buf.index
	}
	return t
}

// Flush makes committed bytes durable with an io_uring FSYNC(DATASYNC) and
// advances the flushed position (least-pages rule against it). With PreZero
// the committed bytes were written with RWF_DSYNC and are durable already:
// Flush only advances the position, without I/O. A failure is sticky and
// never retried.
func (f *file) Flush(ctx context.Context, leastPages int) (int64, error) {
	if !f.refs.Retain() {
		return f.flushedPosition.Load(), f.closedError("flush")
	}
	defer f.refs.Release()
	f.syncMu.Lock()
	defer f.syncMu.Unlock()
	flushed := f.flushedPosition.Load()
	if err := f.Err(); err != nil {
		return flushed, err
	}
	// Read committed before the fsync: only bytes written before it started
	// are covered by it.
	committed := f.committedPosition.Load()
	if !mappedfile.AbleTo(flushed, committed, f.sizeBytes, leastPages) {
		return flushed, nil
	}
	if err := ctx.Err(); err != nil {
		return flushed, fmt.Errorf("uring: flush %s: %w", f.path, err)
	}
	if !f.preZero {
		if err := f.fdatasync(ctx); err != nil {
			return flushed, err
		}
	}
	f.flushedPosition.Store(committed)
	if committed == f.sizeBytes {
		f.releaseLease()
	}
	return committed, nil
}

// fdatasync runs FSYNC(DATASYNC) through the ring; a failure is sticky.
func (f *file) fdatasync(ctx context.Context) error {
	f.fsync[0] = Request{Opcode: OpFsync, Fd: f.fd, OpFlags: FsyncDataSync}
	if err := f.backend.ring.Submit(ctx, f.fsync[:], f.tickets[:]); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("uring: flush %s: %w", f.path, err)
		}
		return f.fail(fmt.Errorf("uring: flush %s: %w", f.path, err))
	}
	if c := f.backend.ring.Wait(f.tickets[0]); c.Res < 0 {
		return f.fail(fmt.Errorf("uring: flush %s: fdatasync: %w", f.path, c.Err()))
	}
	return nil
}

// startLease borrows a staging buffer for writing from position from on.
// uring-direct also loads the block holding from (its head is valid data
// that the next commit rewrites) and reads bytes below it from the file.
func (f *file) startLease(ctx context.Context, from int64) error {
	buf, err := f.backend.pool.borrow(ctx, f.backend.bufferBytes(f.sizeBytes), f.direct)
	if err != nil {
		return fmt.Errorf("uring: %s: %w", f.path, err)
	}
	l := &lease{buf: buf}
	l.refs.Init()
	if f.direct {
		l.fromPosition = from - from%f.align
		if from > l.fromPosition {
			if _, err := f.readFile.ReadAt(buf.mem[l.fromPosition:from], l.fromPosition); err != nil {
				f.backend.pool.giveBack(buf)
				return fmt.Errorf("uring-direct: %s: load the tail block at %d: %w", f.path, l.fromPosition, err)
			}
		}
	}
	f.lease.Store(l)
	return nil
}

// releaseLease gives the buffer back once its readers are done; the lease
// pointer stays (Retain on it fails from now on).
func (f *file) releaseLease() {
	l := f.lease.Load()
	if l == nil {
		return
	}
	l.refs.Shutdown(func() {
		if l.locked.Load() {
			_ = segfile.Unlock(l.buf.mem[:f.sizeBytes])
		}
		f.backend.pool.giveBack(l.buf)
	})
}

// retainLease returns the live lease with a reference, or nil.
func (f *file) retainLease() *lease {
	l := f.lease.Load()
	if l == nil || !l.refs.Retain() {
		return nil
	}
	return l
}

// ReadAt copies readable bytes: from the file (the page cache) for uring
// and for sealed uring-direct segments, from the staging buffer for the
// part of an unsealed uring-direct segment that O_DIRECT writes.
func (f *file) ReadAt(dst []byte, filePos int64) (int, error) {
	if !f.refs.Acquire() {
		return 0, f.closedError("read")
	}
	defer f.refs.Release()
	n, err := mappedfile.CheckRead(filePos, len(dst), f.ReadablePosition())
	if n == 0 {
		return 0, err
	}
	fromFile := int64(n)
	var l *lease
	if f.direct {
		if l = f.retainLease(); l != nil {
			defer l.refs.Release()
			fromFile = min(max(l.fromPosition-filePos, 0), int64(n))
		}
	}
	if fromFile > 0 {
		if m, rerr := f.readFile.ReadAt(dst[:fromFile], filePos); rerr != nil {
			return m, fmt.Errorf("uring: read %s at %d: %w", f.path, filePos, rerr)
		}
	}
	if fromFile < int64(n) {
		copy(dst[fromFile:n], l.buf.mem[filePos+fromFile:])
	}
	return n, err
}

// SendRange writes readable bytes to w: sendfile(2) from the page cache
// where the bytes are in the file, a plain write from the staging buffer
// for the part of an unsealed uring-direct segment.
func (f *file) SendRange(ctx context.Context, w io.Writer, filePos, n int64) (int64, error) {
	if !f.refs.Acquire() {
		return 0, f.closedError("send")
	}
	defer f.refs.Release()
	if readable := f.ReadablePosition(); filePos < 0 || n < 0 || filePos+n > readable {
		return 0, fmt.Errorf("uring: send %s [%d,%d) past readable %d: %w", f.path, filePos, filePos+n, readable, mappedfile.ErrOutOfRange)
	}
	if n == 0 {
		return 0, nil
	}
	fromFile := n
	var l *lease
	if f.direct {
		if l = f.retainLease(); l != nil {
			defer l.refs.Release()
			fromFile = min(max(l.fromPosition-filePos, 0), n)
		}
	}
	var sent int64
	if fromFile > 0 {
		m, err := segfile.SendFile(ctx, w, f.readFile, filePos, fromFile)
		sent += m
		if err != nil {
			return sent, fmt.Errorf("uring: send %s: %w", f.path, err)
		}
	}
	if fromFile < n {
		if err := ctx.Err(); err != nil {
			return sent, fmt.Errorf("uring: send %s: %w", f.path, err)
		}
		m, err := w.Write(l.buf.mem[filePos+fromFile : filePos+n])
		sent += int64(m)
		if err != nil {
			return sent, fmt.Errorf("uring: send %s from the buffer: %w", f.path, err)
		}
	}
	return sent, nil
}

// Warm touches and locks the staging buffer (the memory appends write).
// FlushEveryPages does not apply: the buffer is not file backed. Advise
// applies madvise(WILLNEED, SEQUENTIAL) to it.
func (f *file) Warm(ctx context.Context, opts mappedfile.WarmOptions) error {
	if !f.refs.Retain() {
		return f.closedError("warm")
	}
	defer f.refs.Release()
	l := f.retainLease()
	if l == nil {
		return nil // full and committed: no buffer to warm
	}
	defer l.refs.Release()
	mem := l.buf.mem[:f.sizeBytes]
	if opts.Touch && f.wrotePosition.Load() == 0 {
		for i := 0; i < len(mem); i += mappedfile.PageSize {
			if i%(1<<20) == 0 {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("uring: warm %s: %w", f.path, err)
				}
			}
			mem[i] = 0
		}
	}
	if opts.Advise {
		if err := segfile.AdviseWrite(mem); err != nil {
			return fmt.Errorf("uring: warm %s: %w", f.path, err)
		}
	}
	if opts.Lock && !l.locked.Load() {
		if err := segfile.Lock("uring: warm "+f.path, mem); err != nil {
			return err
		}
		l.locked.Store(true)
	}
	return nil
}

// Cool munlocks the staging buffer. It never madvise(DONTNEED)s it: the
// buffer is registered with the ring, its pages pinned, and dropping them
// would split the mapping from what the kernel writes.
func (f *file) Cool() error {
	if !f.refs.Retain() {
		return f.closedError("cool")
	}
	defer f.refs.Release()
	l := f.retainLease()
	if l == nil {
		return nil
	}
	defer l.refs.Release()
	if l.locked.CompareAndSwap(true, false) {
		if err := segfile.Unlock(l.buf.mem[:f.sizeBytes]); err != nil {
			return fmt.Errorf("uring: cool %s: %w", f.path, err)
		}
	}
	return nil
}

func (f *file) Retain() bool { return f.refs.Retain() }
func (f *file) Release()     { f.refs.Release() }

// Truncate sets every position to validEnd and durably zeroes the rest of
// the file. A segment with room left gets a staging buffer again.
func (f *file) Truncate(ctx context.Context, validEnd int64) error {
	if !f.refs.Retain() {
		return f.closedError("truncate")
	}
	defer f.refs.Release()
	f.syncMu.Lock()
	defer f.syncMu.Unlock()
	if validEnd < 0 || validEnd > f.sizeBytes {
		return fmt.Errorf("uring: truncate %s to %d of %d: %w", f.path, validEnd, f.sizeBytes, mappedfile.ErrOutOfRange)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("uring: truncate %s: %w", f.path, err)
	}
	if err := segfile.ZeroRange(f.readFile, validEnd, f.sizeBytes-validEnd); err != nil {
		return f.fail(fmt.Errorf("uring: truncate %s at %d: %w", f.path, validEnd, err))
	}
	f.releaseLease()
	f.wrotePosition.Store(validEnd)
	f.committedPosition.Store(validEnd)
	f.flushedPosition.Store(validEnd)
	if validEnd < f.sizeBytes {
		return f.startLease(ctx, validEnd)
	}
	return nil
}

// Close releases the file once the last reference is gone; it does not flush.
func (f *file) Close() error {
	if !f.refs.Shutdown(f.cleanup) {
		return f.closedError("close")
	}
	return nil
}

// Delete closes the file and removes it now; readers holding a reference
// keep reading through the open descriptors until they release it.
func (f *file) Delete() error {
	if !f.refs.Shutdown(f.cleanup) {
		return f.closedError("delete")
	}
	if err := os.Remove(f.path); err != nil {
		return fmt.Errorf("uring: delete %s: %w", f.path, err)
	}
	return nil
}

// cleanup runs once, when the last reference is released.
func (f *file) cleanup() {
	f.releaseLease()
	f.closeFiles()
}

func (f *file) closeFiles() {
	if f.readFile != f.writeFile {
		_ = f.readFile.Close()
	}
	_ = f.writeFile.Close()
}
