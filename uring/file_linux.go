package uring

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// lease is a staging buffer lent to one segment while it is written. Its
// refs count the readers copying from it; release returns the buffer to
// the pool once the last of them is done, so a buffer is never reused
// under a reader.
type lease struct {
	buf    *stagingBuffer
	refs   mappedfile.RefCount
	locked atomic.Bool
	// start is the first file position the ring holds (a new segment's 0,
	// or the block a Truncate reloaded): below it the ring never had the
	// segment's bytes.
	start atomic.Int64
}

// file is one segment of the uring or uring-direct backend.
//
// # Where the bytes are
//
// Appends encode in place into the lease's staging ring at position mod
// ringBytes (an append that wraps round the ring's end is encoded aside and
// copied in two pieces).
// The ring holds the segment's bytes from fileReadable to wrote, and keeps
// those below until the appender comes round to them; readers copy from
// the ring whatever it still holds (for uring-direct the file's pages are
// not cached — an O_DIRECT write drops them — so a read of a just-committed
// record from the file would wait for the device, and dispatch reads every
// record just after its commit), and read the rest from the file. Commit writes the pending bytes
// to the file and moves fileReadable up: to committed for uring (the bytes
// are in the page cache), to the start of the block holding committed for
// uring-direct (that block is written again, padded, by the next commit;
// reading it through the page cache while O_DIRECT rewrites it could leave
// a stale page there). Records are readable at wrote, from the ring.
//
// An append needs wrote+n − fileReadable ≤ ringBytes. When the ring is full
// (the commit service fell behind) the append commits the pending bytes
// itself first: the producer waits for the disk, as it would in the page
// cache's dirty throttling, and no byte is ever lost or overwritten.
//
// Readers copy from the ring without a lock: the appender publishes the
// end of what it is about to write (reserved) before it writes, and a
// reader, after copying, checks that the appender has not come round the
// ring to the bytes it copied (reserved − ringBytes ≤ the first copied
// position); if it has, those bytes are in the file by then and the reader
// reads them again from there.
//
// # Commit and Flush
//
// See the package doc: uring commits with pwrite(2) and flushes with
// fdatasync(2); uring-direct commits with one vectored io_uring write of
// whole blocks (the partial last block through the bounce page, padded with
// zeros) and flushes with an io_uring FSYNC(DATASYNC). With SyncAtCommit a
// commit is durable by itself (SyncMethod) and Flush only moves the flushed
// position.
//
// Errors are sticky: after a failed write or sync the file returns the same
// error forever. A cancelled ctx is not an error of the file: the bytes
// written before it still count, and a real I/O error seen at the same
// time still becomes sticky.
type file struct {
	mappedfile.Base // path, size, positions, sticky error, references

	backend    *backend
	name       string // "uring" or "uring-direct", for errors
	direct     bool
	align      int64 // O_DIRECT block (1 for buffered)
	syncCommit bool  // commits are durable (Options.SyncAtCommit)
	syncMethod SyncMethod

	writeFile *os.File // O_DIRECT for uring-direct
	readFile  *os.File // buffered reads (the same file for uring)
	fd        int32

	fileReadable atomic.Int64          // bytes below it are read from the file
	reserved     atomic.Int64          // end of the append being encoded
	readFence    atomic.Int64          // readers' barrier (see lapped)
	lease        atomic.Pointer[lease] // nil when the file has no staging buffer

	// commitMu serializes Commit, Truncate and an append's own commit;
	// flushMu serializes Flush. Neither is held across the other's I/O.
	commitMu sync.Mutex
	flushMu  sync.Mutex
	tickets  [2]Ticket
	reqs     [2]Request
	fsyncReq [1]Request
	fsyncTk  [1]Ticket
}

func dirOf(path string) string { return filepath.Dir(path) }

// ErrNoStagingBuffer: an append to a file that has no staging buffer (a
// Truncate that could not get one failed; truncate again).
var ErrNoStagingBuffer = errors.New("uring: the file has no staging buffer")

// Append reserves n bytes at the write position and encodes into the
// staging ring in place. It does not allocate. When the ring is full it
// commits the pending bytes first (see file).
func (f *file) Append(n int, enc mappedfile.Encoder) (int64, error) {
	wrote, err := f.BeginAppend(n, enc)
	if err != nil {
		return 0, err
	}
	defer f.Release()
	l := f.lease.Load()
	if l == nil || l.refs.Closing() {
		return 0, f.appendFailed(wrote, ErrNoStagingBuffer)
	}
	ringBytes := l.buf.ringBytes
	end := wrote + int64(n)
	if end-f.fileReadable.Load() > ringBytes {
		if err := f.makeRoomFor(n, end, ringBytes); err != nil {
			return 0, err
		}
	}
	// Publish the reservation before writing into the ring (a full
	// barrier: the ring stores must not become visible before it). It
	// never moves back, even after an encoder failed: its clear reached
	// the ring too. The ring holds older bytes; the encoder overwrites
	// every byte of dst (mappedfile.Encoder's contract), so dst is not
	// cleared first.
	f.reserved.Swap(max(end, f.reserved.Load()))
	off := wrote % ringBytes
	if off+int64(n) <= ringBytes {
		dst := l.buf.ring[off : off+int64(n) : off+int64(n)]
		if err := enc.EncodeAt(dst, wrote); err != nil {
			clear(dst)
			return 0, f.encodeFailed(wrote, err)
		}
	} else if err := appendWrapped(l, off, n, wrote, enc); err != nil {
		return 0, f.encodeFailed(wrote, err)
	}
	f.PublishWrote(end)
	return wrote, nil
}

// The slow paths of Append, out of line: with hundreds of producers an
// append's stack lines are cold, and their temporaries would widen its
// frame.

// appendFailed is the error of an append at wrote that found err.
//
//go:noinline
func (f *file) appendFailed(wrote int64, err error) error {
	return fmt.Errorf("%s: %s: append at %d: %w", f.name, f.Path(), wrote, err)
}

// encodeFailed is the error of an encoder that failed at wrote.
//
//go:noinline
func (f *file) encodeFailed(wrote int64, err error) error {
	return fmt.Errorf("%s: %s: encode at %d: %w", f.name, f.Path(), wrote, err)
}

// makeRoomFor checks that an append of n bytes fits the ring at all, and
// commits so that it fits now (makeRoom).
//
//go:noinline
func (f *file) makeRoomFor(n int, end, ringBytes int64) error {
	if int64(n) > ringBytes-f.align {
		return fmt.Errorf("%s: %s: append of %d bytes is larger than the staging ring (%d bytes; Options.StagingBytes): %w",
			f.name, f.Path(), n, ringBytes, mappedfile.ErrInvalidArgument)
	}
	return f.makeRoom(end, ringBytes)
}

// appendWrapped encodes an append that wraps round the ring's end aside,
// then copies the two pieces; a failed encoder's bytes are cleared.
//
//go:noinline
func appendWrapped(l *lease, off int64, n int, wrote int64, enc mappedfile.Encoder) error {
	tmp := l.buf.wrapBuffer(n)
	err := enc.EncodeAt(tmp, wrote)
	if err != nil {
		clear(tmp)
	}
	k := copy(l.buf.ring[off:], tmp)
	copy(l.buf.ring, tmp[k:])
	return err
}

// makeRoom commits the pending bytes so that the ring can take an append
// ending at end. It runs on the appender's goroutine, under commitMu (after
// a commit already under way, which may have made room).
func (f *file) makeRoom(end, ringBytes int64) error {
	f.commitMu.Lock()
	defer f.commitMu.Unlock()
	if end-f.fileReadable.Load() <= ringBytes {
		return nil
	}
	if _, err := f.commitLocked(context.Background()); err != nil {
		return err
	}
	if end-f.fileReadable.Load() > ringBytes {
		return fmt.Errorf("%s: %s: staging ring still full after a commit (readable from the file up to %d, append to %d, ring %d bytes): %w",
			f.name, f.Path(), f.fileReadable.Load(), end, ringBytes, mappedfile.ErrInvalidArgument)
	}
	return nil
}

// Commit writes [committed, wrote) to the file (see file).
func (f *file) Commit(ctx context.Context, leastPages int) (int64, error) {
	f.commitMu.Lock()
	defer f.commitMu.Unlock()
	from, _, able, err := f.BeginCommit(leastPages)
	if err != nil {
		return from, err
	}
	defer f.Release()
	if !able {
		return from, nil
	}
	if err := ctx.Err(); err != nil {
		return from, fmt.Errorf("%s: commit %s: %w", f.name, f.Path(), err)
	}
	return f.commitLocked(ctx)
}

// commitLocked commits everything written. commitMu is held.
func (f *file) commitLocked(ctx context.Context) (int64, error) {
	committed := f.CommittedPosition()
	wrote := f.WrotePosition()
	if wrote <= committed {
		return committed, nil
	}
	l := f.lease.Load() // held while anything is uncommitted
	var res writeResult
	if f.direct {
		res = f.commitDirect(ctx, l, committed, wrote)
	} else {
		res = f.commitBuffered(ctx, l, committed, wrote)
	}
	if res.end > committed {
		committed = res.end
		f.PublishCommitted(committed)
		if f.direct {
			f.fileReadable.Store(committed - committed%f.align)
		} else {
			f.fileReadable.Store(committed)
		}
	}
	if res.ioErr != nil {
		return committed, f.Fail(fmt.Errorf("%s: commit %s: %w", f.name, f.Path(), res.ioErr))
	}
	if res.ctxErr != nil {
		return committed, fmt.Errorf("%s: commit %s: %w", f.name, f.Path(), res.ctxErr)
	}
	if committed == f.SizeBytes() {
		f.releaseLease() // everything is in the file
	}
	return committed, nil
}

// writeResult is how far a commit got: end is the file offset up to which
// every byte is written (and durable, for a durable commit); ioErr is a
// failed write or sync (sticky); ctxErr a cancellation before anything
// failed (not sticky).
type writeResult struct {
	end    int64
	ioErr  error
	ctxErr error
}

// ringPieces appends to dst the memory of segment range [from, to) in the
// ring, split where it wraps.
func ringPieces(dst [][]byte, ring []byte, ringBytes, from, to int64) [][]byte {
	off := from % ringBytes
	n := to - from
	if off+n <= ringBytes {
		return append(dst, ring[off:off+n])
	}
	return append(dst, ring[off:ringBytes], ring[:off+n-ringBytes])
}

// commitBuffered writes [committed, wrote) into the page cache with
// pwrite(2), or, with SyncAtCommit, durably (see SyncMethod).
func (f *file) commitBuffered(ctx context.Context, l *lease, committed, wrote int64) writeResult {
	var piecesArr [2][]byte
	pieces := ringPieces(piecesArr[:0], l.buf.ring, l.buf.ringBytes, committed, wrote)
	if f.syncCommit && f.syncMethod == SyncLinkedFsync {
		return f.ringWriteSync(ctx, l, committed, wrote, pieces)
	}
	off := committed
	for _, p := range pieces {
		if err := segfile.Pwrite(f.Path(), int(f.fd), p, off); err != nil {
			return writeResult{end: committed, ioErr: err}
		}
		off += int64(len(p))
	}
	if f.syncCommit {
		if err := segfile.Fdatasync(f.Path(), int(f.fd)); err != nil {
			return writeResult{end: committed, ioErr: err}
		}
	}
	return writeResult{end: wrote}
}

// commitDirect writes the whole blocks covering [committed, wrote) in one
// vectored request: the ring's blocks, and the partial last block through
// the bounce page, padded with zeros.
func (f *file) commitDirect(ctx context.Context, l *lease, committed, wrote int64) writeResult {
	start := committed - committed%f.align
	tailStart := wrote - wrote%f.align
	var piecesArr [3][]byte
	pieces := piecesArr[:0]
	if tailStart > start {
		pieces = ringPieces(pieces, l.buf.ring, l.buf.ringBytes, start, tailStart)
	}
	if wrote > tailStart {
		bounce := l.buf.bounce[:f.align]
		off := tailStart % l.buf.ringBytes
		n := copy(bounce, l.buf.ring[off:off+wrote-tailStart])
		clear(bounce[n:])
		pieces = append(pieces, bounce)
	}
	var res writeResult
	if f.syncCommit && f.syncMethod == SyncSyscalls {
		res = f.pwriteDSync(start, wrote, pieces)
	} else {
		res = f.ringWriteSync(ctx, l, start, wrote, pieces)
	}
	res.end = max(res.end, committed) // a failed rewrite of the old tail block loses nothing
	return res
}

// pwriteDSync writes pieces from start with pwritev2(RWF_DSYNC) on the
// committing goroutine: one O_DIRECT write, durable when it returns (one
// device flush, or FUA writes where the device has them and the write
// needs no metadata). Measured here, a 4 KiB durable append this way takes
// 100–125 µs at the median against 130–175 µs through io_uring: there the
// kernel runs the write's sync in a workqueue and completes the request by
// task_work, two more thread wake-ups than a system call that sleeps and
// syncs on its own thread.
func (f *file) pwriteDSync(start, logicalEnd int64, pieces [][]byte) writeResult {
	done := start
	noProgress := 0
	for len(pieces) > 0 {
		total := iovecBytes(pieces)
		op := segfile.Op{Kind: segfile.OpWriteDurable, Path: f.Path(), Offset: done, Length: total, Via: "pwritev2"}
		var n int
		var err error
		for { // each attempt through the seam, as segfile's own calls: it sees an interrupted one and its retry
			if err = segfile.Begin(op); err == nil {
				n, err = unix.Pwritev2(int(f.fd), pieces, done, unix.RWF_DSYNC)
			}
			segfile.End(op, err)
			if err != unix.EINTR {
				break
			}
		}
		if err != nil {
			return writeResult{end: min(done, logicalEnd), ioErr: fmt.Errorf("pwritev2(RWF_DSYNC) [%d,+%d): %w", done, total, err)}
		}
		if int64(n) >= total {
			return writeResult{end: logicalEnd}
		}
		advance := int64(n) - int64(n)%f.align
		if advance == 0 {
			if noProgress++; noProgress > maxNoProgress {
				return writeResult{end: min(done, logicalEnd), ioErr: fmt.Errorf("pwritev2(RWF_DSYNC) [%d,+%d): %d short writes without progress: %w",
					done, total, noProgress, io.ErrShortWrite)}
			}
		} else {
			noProgress = 0
		}
		done += advance
		pieces = skipBytes(pieces, advance)
	}
	return writeResult{end: logicalEnd}
}

// ringWriteSync writes pieces (memory of the lease) to the file from
// offset start through the ring as one vectored write — with RWF_DSYNC, or
// linked to an FSYNC(DATASYNC), when commits are durable — and resubmits
// the rest after a short write. logicalEnd is where the segment's data
// ends (the last piece may be padding beyond it).
func (f *file) ringWriteSync(ctx context.Context, l *lease, start, logicalEnd int64, pieces [][]byte) writeResult {
	done := start // file offset written so far
	// reached is what a result may report as committed when the commit
	// stops short: with RWF_DSYNC every byte written is durable; with a
	// write linked to an fsync nothing is until the fsync that follows the
	// last write succeeds (after a short write the linked fsync was
	// cancelled), and a commit with SyncAtCommit must not claim bytes that
	// no sync covered — Flush would then publish them as flushed.
	linked := f.syncCommit && f.syncMethod == SyncLinkedFsync
	reached := func() int64 {
		if linked {
			return min(start, logicalEnd)
		}
		return min(done, logicalEnd)
	}
	noProgress := 0
	for len(pieces) > 0 {
		total := iovecBytes(pieces)
		w, failed := f.ringWriteOnce(ctx, l, done, logicalEnd, pieces, total)
		if failed != nil {
			failed.end = min(failed.end, reached())
			return *failed
		}
		written := w.written
		if written >= total {
			if w.syncErr != nil {
				return writeResult{end: reached(), ioErr: fmt.Errorf("io_uring fdatasync: %w", w.syncErr)}
			}
			return writeResult{end: logicalEnd}
		}
		// A short write: go on from the last whole block written (a linked
		// fsync was cancelled or ran early; it is issued again with the rest).
		advance := written - written%f.align
		if advance == 0 {
			if noProgress++; noProgress > maxNoProgress {
				return writeResult{end: reached(), ioErr: fmt.Errorf("io_uring write [%d,+%d): %d short writes without progress: %w",
					done, total, noProgress, io.ErrShortWrite)}
			}
		} else {
			noProgress = 0
		}
		done += advance
		pieces = skipBytes(pieces, advance)
		if err := ctx.Err(); err != nil {
			return writeResult{end: reached(), ctxErr: err}
		}
	}
	return writeResult{end: logicalEnd}
}

// ringWrite is what one submitted write did: the bytes written and the
// linked fsync's error (with SyncLinkedFsync).
type ringWrite struct {
	written int64
	syncErr error
}

// ringWriteOnce submits one vectored write of pieces (total bytes) at file
// offset done — with RWF_DSYNC, or linked to an FSYNC(DATASYNC), when
// commits are durable — and waits for it. It returns what the write did,
// or the result that ends ringWriteSync when the write failed or was not
// submitted.
func (f *file) ringWriteOnce(ctx context.Context, l *lease, done, logicalEnd int64, pieces [][]byte, total int64) (ringWrite, *writeResult) {
	r := f.backend.ring
	fail := func(res writeResult) (ringWrite, *writeResult) { return ringWrite{}, &res }
	nv := f.putIovecs(l, pieces)
	q := Request{Opcode: OpWritev, Fd: f.fd, Offset: uint64(done), Addr: uint64(uintptr(unsafe.Pointer(&l.buf.iovecs[0]))), Len: uint32(nv)}
	if l.buf.fixed && r.Supports(OpWritevFixed) {
		q.Opcode, q.BufIndex = OpWritevFixed, uint16(l.buf.index)
	}
	write := segfile.Op{Kind: segfile.OpPwrite, Path: f.Path(), Offset: done, Length: total, Via: viaRing}
	linked := f.syncCommit && f.syncMethod == SyncLinkedFsync
	if f.syncCommit && !linked {
		q.OpFlags |= RWFDSync
		write.Kind = segfile.OpWriteDurable
	}
	sync := segfile.Op{Kind: segfile.OpFdatasync, Path: f.Path(), Via: viaRing}
	if err := segfile.Begin(write); err != nil {
		segfile.End(write, err) // the linked fsync was never issued
		return fail(writeResult{end: min(done, logicalEnd), ioErr: fmt.Errorf("io_uring write [%d,+%d): %w", done, total, err)})
	}
	var syncErr error
	reqs := f.reqs[:1]
	if linked {
		if syncErr = segfile.Begin(sync); syncErr == nil {
			q.Flags |= FlagIOLink
			f.reqs[1] = Request{Opcode: OpFsync, Fd: f.fd, OpFlags: FsyncDataSync}
			reqs = f.reqs[:2]
		}
	}
	f.reqs[0] = q
	tickets := f.tickets[:len(reqs)]
	if err := r.Submit(ctx, reqs, tickets); err != nil {
		segfile.End(write, err)
		if linked {
			segfile.End(sync, err)
		}
		if ctx.Err() != nil && !errors.Is(err, ErrRingBroken) {
			return fail(writeResult{end: min(done, logicalEnd), ctxErr: err})
		}
		return fail(writeResult{end: min(done, logicalEnd), ioErr: err})
	}
	cw := r.Wait(tickets[0])
	segfile.End(write, cw.Err())
	if linked {
		if len(reqs) == 2 {
			syncErr = r.Wait(tickets[1]).Err()
		}
		segfile.End(sync, syncErr)
	}
	if cw.Res < 0 {
		return fail(writeResult{end: min(done, logicalEnd), ioErr: fmt.Errorf("io_uring write [%d,+%d): %w", done, total, cw.Err())})
	}
	return ringWrite{written: int64(cw.Res), syncErr: syncErr}, nil
}

// putIovecs writes the iovec array for pieces into the lease's iovec page
// (off-heap: the kernel reads it during the submission).
func (f *file) putIovecs(l *lease, pieces [][]byte) int {
	iovs := unsafe.Slice((*iovec)(unsafe.Pointer(&l.buf.iovecs[0])), len(l.buf.iovecs)/int(unsafe.Sizeof(iovec{})))
	for i, p := range pieces {
		iovs[i] = iovec{base: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(p)))), len: uint64(len(p))}
	}
	return len(pieces)
}

func iovecBytes(pieces [][]byte) int64 {
	var n int64
	for _, p := range pieces {
		n += int64(len(p))
	}
	return n
}

// skipBytes drops the first n bytes of pieces.
func skipBytes(pieces [][]byte, n int64) [][]byte {
	for n > 0 && len(pieces) > 0 {
		if n >= int64(len(pieces[0])) {
			n -= int64(len(pieces[0]))
			pieces = pieces[1:]
			continue
		}
		pieces[0] = pieces[0][n:]
		n = 0
	}
	return pieces
}

// Flush makes committed bytes durable and advances the flushed position
// (least-pages rule against it): fdatasync for uring, an io_uring
// FSYNC(DATASYNC) for uring-direct, nothing when commits are durable
// already. It reads committed before syncing, so the sync covers every byte
// it reports. A failure is sticky and never retried. Commits go on while a
// Flush syncs.
func (f *file) Flush(ctx context.Context, leastPages int) (int64, error) {
	f.flushMu.Lock()
	defer f.flushMu.Unlock()
	from, to, able, err := f.BeginFlush(ctx, leastPages)
	if err != nil {
		return from, err
	}
	defer f.Release()
	if !able {
		return from, nil
	}
	if !f.syncCommit {
		if err := f.sync(ctx); err != nil {
			return from, err
		}
	}
	f.PublishFlushed(to)
	return to, nil
}

// sync makes everything written so far durable; a failure is sticky.
func (f *file) sync(ctx context.Context) error {
	if !f.direct {
		if err := segfile.Fdatasync(f.Path(), int(f.fd)); err != nil {
			return f.Fail(fmt.Errorf("%s: flush: %w", f.name, err))
		}
		return nil
	}
	r := f.backend.ring
	op := segfile.Op{Kind: segfile.OpFdatasync, Path: f.Path(), Via: viaRing}
	if err := segfile.Begin(op); err != nil {
		segfile.End(op, err)
		return f.Fail(fmt.Errorf("%s: flush %s: io_uring fdatasync: %w", f.name, f.Path(), err))
	}
	f.fsyncReq[0] = Request{Opcode: OpFsync, Fd: f.fd, OpFlags: FsyncDataSync}
	if err := r.Submit(ctx, f.fsyncReq[:], f.fsyncTk[:]); err != nil {
		segfile.End(op, err)
		if ctx.Err() != nil && !errors.Is(err, ErrRingBroken) {
			return fmt.Errorf("%s: flush %s: %w", f.name, f.Path(), err)
		}
		return f.Fail(fmt.Errorf("%s: flush %s: %w", f.name, f.Path(), err))
	}
	c := r.Wait(f.fsyncTk[0])
	segfile.End(op, c.Err())
	if c.Res < 0 {
		return f.Fail(fmt.Errorf("%s: flush %s: io_uring fdatasync: %w", f.name, f.Path(), c.Err()))
	}
	return nil
}

// viaRing names io_uring requests to the fault seam.
const viaRing = "io_uring"

// startLease gives the file a staging buffer for writing from position
// from on: lease is the file's own, still live, or one borrowed now. For
// uring-direct the block holding from is loaded from the file (its head is
// valid data the next commit writes again).
func (f *file) startLease(ctx context.Context, from int64) (*lease, error) {
	if l := f.lease.Load(); l != nil && !l.refs.Closing() {
		return l, nil
	}
	buf, err := f.backend.pool.borrow(ctx, f.backend.pool.ringBytesFor(f.SizeBytes()))
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", f.name, f.Path(), err)
	}
	l := &lease{buf: buf}
	l.start.Store(from - from%f.align)
	l.refs.Init()
	return l, nil
}

// loadTail copies [blockStart(from), from) from the file into the ring.
func (f *file) loadTail(l *lease, from int64) error {
	head := from - from%f.align
	if from == head {
		return nil
	}
	off := head % l.buf.ringBytes
	if _, err := f.readFile.ReadAt(l.buf.ring[off:off+from-head], head); err != nil {
		return fmt.Errorf("%s: %s: load the tail block at %d: %w", f.name, f.Path(), head, err)
	}
	return nil
}

// releaseLease gives the buffer back once its readers are done.
func (f *file) releaseLease() {
	l := f.lease.Load()
	if l == nil {
		return
	}
	l.refs.Shutdown(func() {
		if l.locked.Load() {
			_ = segfile.Unlock(l.buf.ring[:l.buf.ringBytes])
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

// ReadAt copies readable bytes: from the file below fileReadable, from the
// staging ring above it.
func (f *file) ReadAt(dst []byte, filePos int64) (int, error) {
	if !f.Acquire() {
		return 0, f.ClosedError("read")
	}
	defer f.Release()
	n, err := mappedfile.CheckRead(filePos, len(dst), f.ReadablePosition())
	if n == 0 {
		return 0, err
	}
	if rerr := f.read(dst[:n], filePos); rerr != nil {
		return 0, rerr
	}
	return n, err
}

// read fills dst with the bytes at filePos, all below wrote.
func (f *file) read(dst []byte, filePos int64) error {
	for len(dst) > 0 {
		fromFile := int64(len(dst))
		l := f.retainLease()
		if l != nil {
			fromFile = max(min(f.ringFrom(l)-filePos, fromFile), 0)
		}
		if fromFile > 0 {
			if m, err := f.readFile.ReadAt(dst[:fromFile], filePos); err != nil {
				if l != nil {
					l.refs.Release()
				}
				return fmt.Errorf("%s: read %s at %d (%d of %d bytes): %w", f.name, f.Path(), filePos, m, fromFile, err)
			}
			dst, filePos = dst[fromFile:], filePos+fromFile
		}
		if l == nil || len(dst) == 0 {
			if l != nil {
				l.refs.Release()
			}
			continue
		}
		off := filePos % l.buf.ringBytes
		if k := copy(dst, l.buf.ring[off:]); k < len(dst) {
			copy(dst[k:], l.buf.ring) // wrapped round the ring's end
		}
		lapped := f.lapped(l, filePos)
		l.refs.Release()
		if !lapped {
			return nil
		}
		// The appender came round the ring: these bytes are in the file
		// now; the next round reads them from there.
	}
	return nil
}

// ringFrom is the lowest position the ring of l still holds: at or after
// the lease's start, not yet come round to by the appender, and at most
// fileReadable (above it the ring is the only copy). A reader checks again
// after copying (lapped).
func (f *file) ringFrom(l *lease) int64 {
	return min(f.fileReadable.Load(), max(l.start.Load(), f.reserved.Load()-l.buf.ringBytes))
}

// lapped reports whether the appender may have overwritten the ring bytes
// of positions ≥ from that a reader just copied. The atomic add is a full
// barrier, so the copy's loads happen before the reservation is read.
func (f *file) lapped(l *lease, from int64) bool {
	f.readFence.Add(1)
	return f.reserved.Load()-l.buf.ringBytes > from
}

// sendBuffers holds the bounce buffers SendRange copies ring bytes through
// (a ring byte may be overwritten after a check; a socket cannot take it
// back).
var sendBuffers = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// SendRange writes readable bytes to w: sendfile(2) from the page cache for
// the part in the file, a copy out of the staging ring (checked as ReadAt
// does) for the rest.
func (f *file) SendRange(ctx context.Context, w io.Writer, filePos, n int64) (int64, error) {
	if !f.Acquire() {
		return 0, f.ClosedError("send")
	}
	defer f.Release()
	if readable := f.ReadablePosition(); filePos < 0 || n < 0 || filePos+n > readable {
		return 0, fmt.Errorf("%s: send %s [%d,%d) past readable %d: %w", f.name, f.Path(), filePos, filePos+n, readable, mappedfile.ErrOutOfRange)
	}
	var sent int64
	var bp *[]byte
	defer func() {
		if bp != nil {
			sendBuffers.Put(bp)
		}
	}()
	for sent < n {
		if err := ctx.Err(); err != nil {
			return sent, fmt.Errorf("%s: send %s: %w", f.name, f.Path(), err)
		}
		pos := filePos + sent
		// sendfile from the page cache — except, for uring-direct, bytes the
		// ring still holds: O_DIRECT commits leave them uncached, and a
		// slave's sender would read them back from the device.
		low := f.fileReadable.Load()
		if f.direct {
			if l := f.retainLease(); l != nil {
				low = f.ringFrom(l)
				l.refs.Release()
			}
		}
		if pos < low {
			m, err := segfile.SendFile(ctx, w, f.readFile, pos, min(low-pos, n-sent))
			sent += m
			if err != nil {
				return sent, fmt.Errorf("%s: send %s: %w", f.name, f.Path(), err)
			}
			continue
		}
		if bp == nil {
			bp = sendBuffers.Get().(*[]byte)
		}
		chunk := (*bp)[:min(int64(len(*bp)), n-sent)]
		if err := f.read(chunk, pos); err != nil {
			return sent, err
		}
		m, err := w.Write(chunk)
		sent += int64(m)
		if err != nil {
			return sent, fmt.Errorf("%s: send %s from the staging buffer: %w", f.name, f.Path(), err)
		}
	}
	return sent, nil
}

// Warm touches and locks the staging ring (the memory appends write).
// FlushEveryPages does not apply: the ring is not file backed. Advise
// applies madvise(WILLNEED, SEQUENTIAL) to it.
func (f *file) Warm(ctx context.Context, opts mappedfile.WarmOptions) error {
	if !f.Retain() {
		return f.ClosedError("warm")
	}
	defer f.Release()
	l := f.retainLease()
	if l == nil {
		return nil // full and committed: no buffer to warm
	}
	defer l.refs.Release()
	mem := l.buf.ring[:l.buf.ringBytes]
	if opts.Touch && f.WrotePosition() == 0 {
		for i := 0; i < len(mem); i += mappedfile.PageSize {
			if i%(1<<20) == 0 {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("%s: warm %s: %w", f.name, f.Path(), err)
				}
			}
			mem[i] = 0
		}
	}
	if opts.Advise {
		if err := segfile.AdviseWrite(mem); err != nil {
			return fmt.Errorf("%s: warm %s: %w", f.name, f.Path(), err)
		}
	}
	if opts.Lock && l.locked.CompareAndSwap(false, true) {
		if err := segfile.Lock(f.name+": warm "+f.Path(), mem); err != nil {
			l.locked.Store(false)
			return err
		}
	}
	return nil
}

// Cool munlocks the staging ring. It never madvise(DONTNEED)s it: the
// buffer may be registered with the ring, its pages pinned, and dropping
// them would split the mapping from what the kernel writes.
func (f *file) Cool() error {
	if !f.Retain() {
		return f.ClosedError("cool")
	}
	defer f.Release()
	l := f.retainLease()
	if l == nil {
		return nil
	}
	defer l.refs.Release()
	if l.locked.CompareAndSwap(true, false) {
		if err := segfile.Unlock(l.buf.ring[:l.buf.ringBytes]); err != nil {
			return fmt.Errorf("%s: cool %s: %w", f.name, f.Path(), err)
		}
	}
	return nil
}

// Truncate sets every position to validEnd and makes [validEnd, SizeBytes)
// zeros, durably: it writes zeros over the blocks there that are not zeros
// already (never FALLOC_FL_ZERO_RANGE or PUNCH_HOLE, which would turn
// written extents back into unwritten ones and cost every later durable
// write a journal commit), then fdatasyncs the file — always, so bytes
// below validEnd left in the page cache by a crashed process become durable
// before anything claims they are. A segment with room left gets a staging
// buffer first: if none can be had, Truncate fails and changes nothing.
func (f *file) Truncate(ctx context.Context, validEnd int64) error {
	return f.truncate(ctx, validEnd, true)
}

var _ mappedfile.EndSetter = (*file)(nil)

// SetEnd implements mappedfile.EndSetter: Truncate without the zeroing and
// the sync — a clean reopen of a segment need not read, nor write, the rest
// of it (up to a whole segment: the bytes past the end of a reused one are
// its old records).
func (f *file) SetEnd(ctx context.Context, validEnd int64) error {
	return f.truncate(ctx, validEnd, false)
}

func (f *file) truncate(ctx context.Context, validEnd int64, zero bool) error {
	f.commitMu.Lock()
	defer f.commitMu.Unlock()
	f.flushMu.Lock()
	defer f.flushMu.Unlock()
	if err := f.BeginTruncate(ctx, validEnd); err != nil {
		return err
	}
	defer f.Release()
	if f.lease.Load() != nil && validEnd > f.CommittedPosition() {
		// Bytes below validEnd are only in the staging ring: write them
		// first (the tail block is reloaded from the file below).
		if _, err := f.commitLocked(ctx); err != nil {
			return err
		}
	}
	var l *lease
	if validEnd < f.SizeBytes() {
		var err error
		if l, err = f.startLease(ctx, validEnd); err != nil {
			return err
		}
	}
	giveBackNew := func() {
		if l != nil && l != f.lease.Load() {
			f.backend.pool.giveBack(l.buf)
		}
	}
	if zero {
		if _, err := zeroTail(ctx, f.readFile, validEnd, f.SizeBytes()); err != nil {
			giveBackNew()
			if ctx.Err() != nil {
				return fmt.Errorf("%s: truncate %s at %d: %w", f.name, f.Path(), validEnd, err)
			}
			return f.Fail(fmt.Errorf("%s: truncate %s at %d: %w", f.name, f.Path(), validEnd, err))
		}
		if err := segfile.Fdatasync(f.Path(), int(f.readFile.Fd())); err != nil {
			giveBackNew()
			return f.Fail(fmt.Errorf("%s: truncate at %d: %w", f.name, validEnd, err))
		}
	}
	if l != nil && f.direct {
		if err := f.loadTail(l, validEnd); err != nil {
			giveBackNew()
			return err
		}
	}
	if old := f.lease.Load(); old != l {
		f.releaseLease()
		f.lease.Store(l)
	} else if l != nil {
		// The same ring goes on from validEnd: what it held below the
		// appender's old reach minus a ring is gone, and lowering reserved
		// below must not make those bytes look held again.
		l.start.Store(max(l.start.Load(), f.reserved.Load()-l.buf.ringBytes))
	}
	low := validEnd
	if f.direct {
		low -= validEnd % f.align
	}
	f.reserved.Store(validEnd)
	f.fileReadable.Store(low)
	f.FinishTruncate(validEnd)
	return nil
}

// cleanup releases the staging buffer and the descriptors; it runs once,
// at the last Release after Close or Delete.
func (f *file) cleanup() error {
	f.releaseLease()
	return f.closeFiles()
}

func (f *file) closeFiles() error {
	var err error
	if f.readFile != f.writeFile {
		err = f.readFile.Close()
	}
	if werr := f.writeFile.Close(); werr != nil && err == nil {
		err = werr
	}
	return err
}
