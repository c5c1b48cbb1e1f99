package mappedfile

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/mqstore/mqstore/internal/invariants"
)

// Base is the bookkeeping every backend's file must agree on, so that a
// backend writes only its I/O. Embed it (by value) in the file type; it
// provides Path, FromOffset, SizeBytes, the four position getters, Err,
// Retain, Release, Close and Delete, and the Begin…/Publish… steps the
// backend's own Append, Commit, Flush and Truncate are built from:
//
//   - positions: wrote ≥ committed ≥ flushed, each only moving forward while
//     the file is open (Publish* assert it: a violation is a programmer
//     error and panics); readable is wrote or committed (Semantics);
//   - the sticky error: the first failed write, commit or sync (Fail), after
//     which every Begin* returns it, so nothing is written or synced again
//     (fsync is never retried: after a failure the data's state is unknown);
//   - the reference count (RocketMQ's ReferenceResource): Close and Delete
//     stop new references and run the backend's Cleanup when the last one is
//     released, so memory is never unmapped under a reader.
//
// A backend's methods then read:
//
//	func (f *file) Append(n int, enc mappedfile.Encoder) (int64, error) {
//		at, err := f.BeginAppend(n, enc) // sticky, closed, ErrFull, bad n
//		if err != nil {
//			return 0, err
//		}
//		defer f.Release()
//		dst := f.memory[at : at+int64(n)]
//		if err := enc.EncodeAt(dst, at); err != nil {
//			clear(dst)
//			return 0, err // an encoder error is not sticky
//		}
//		f.PublishWrote(at + int64(n))
//		return at, nil
//	}
//
//	func (f *file) Flush(ctx context.Context, leastPages int) (int64, error) {
//		from, to, able, err := f.BeginFlush(ctx, leastPages)
//		if err != nil {
//			return from, err
//		}
//		defer f.Release()
//		if !able {
//			return from, nil
//		}
//		if err := sync(f, from, to); err != nil {
//			return from, f.Fail(fmt.Errorf("…: %w", err)) // sticky from now on
//		}
//		f.PublishFlushed(to)
//		return to, nil
//	}
//
// Every Begin* that returns a nil error holds a reference: Release it when
// the operation is done. Open calls Init once, before the file is shared.
//
// Adopting it in an existing backend: replace the backend's own path,
// offset, size, position atomics, sticky error, RefCount and closed flags by
// an embedded Base; move the release of memory and descriptors into the
// Cleanup function and the unlink (with its directory sync) into Remove;
// delete the getters, Err, Retain, Release, Close and Delete it now
// inherits; and start Append, Commit, Flush and Truncate with the matching
// Begin* (Commit of a write-through backend is CommitWriteThrough).
type Base struct {
	path       string
	fromOffset int64
	sizeBytes  int64
	backend    string
	semantics  Semantics
	remove     func() error
	cleanup    func() error
	logger     *slog.Logger

	wrotePosition     atomic.Int64
	committedPosition atomic.Int64 // unused when WriteThrough: committed is wrote
	flushedPosition   atomic.Int64

	sticky atomic.Pointer[error]
	refs   RefCount
	closed atomic.Bool // Close or Delete called

	cleanupDone atomic.Bool
	cleanupErr  error  // written before cleanupDone is set
	released    func() // Retire's: run after a cleanup that succeeded
}

// Semantics says how a backend's positions relate.
type Semantics struct {
	// WriteThrough: appended bytes are in the file as soon as they are
	// written (mmap: the mapping is the page cache), so the committed
	// position is the write position and Commit has nothing to do.
	WriteThrough bool
	// ReadableUpToWrote: readers may see every appended byte (mmap; an
	// O_DIRECT backend serving its tail from the buffer); otherwise only
	// committed bytes are readable.
	ReadableUpToWrote bool
}

// BaseConfig is what Init needs.
type BaseConfig struct {
	Spec Spec
	// Backend prefixes the errors Base returns ("mmapio", "transientpool").
	Backend string
	// Existed: the file was there before Open, so it starts full and durable
	// (every position at SizeBytes) until recovery calls Truncate.
	Existed bool
	Semantics
	// Cleanup releases the file's memory and descriptors. It runs exactly
	// once, when the last reference is released after Close or Delete. Required.
	Cleanup func() error
	// Remove unlinks the file and makes that durable (syncs the directory).
	// Delete calls it before the references go. Required.
	Remove func() error
	// Logger receives a Cleanup error that no caller can see (it ran at the
	// last Release, after Close returned). Nil means slog.Default().
	Logger *slog.Logger
}

// Init sets the file's identity and starting positions. Call it once, in
// Open, before the file is shared.
func (b *Base) Init(cfg BaseConfig) {
	if cfg.Cleanup == nil || cfg.Remove == nil {
		panic("mappedfile: Base.Init without Cleanup or Remove")
	}
	b.path = cfg.Spec.Path
	b.fromOffset = cfg.Spec.FromOffset
	b.sizeBytes = cfg.Spec.SizeBytes
	b.backend = cfg.Backend
	b.semantics = cfg.Semantics
	b.cleanup = cfg.Cleanup
	b.remove = cfg.Remove
	b.logger = cfg.Logger
	if b.logger == nil {
		b.logger = slog.Default()
	}
	if cfg.Existed {
		b.wrotePosition.Store(b.sizeBytes)
		b.committedPosition.Store(b.sizeBytes)
		b.flushedPosition.Store(b.sizeBytes)
	}
	b.refs.Init()
	b.checkPositions()
}

// Path implements MappedFile.
func (b *Base) Path() string { return b.path }

// FromOffset implements MappedFile.
func (b *Base) FromOffset() int64 { return b.fromOffset }

// SizeBytes implements MappedFile.
func (b *Base) SizeBytes() int64 { return b.sizeBytes }

// WrotePosition implements MappedFile.
func (b *Base) WrotePosition() int64 { return b.wrotePosition.Load() }

// CommittedPosition implements MappedFile.
func (b *Base) CommittedPosition() int64 {
	if b.semantics.WriteThrough {
		return b.wrotePosition.Load()
	}
	return b.committedPosition.Load()
}

// FlushedPosition implements MappedFile.
func (b *Base) FlushedPosition() int64 { return b.flushedPosition.Load() }

// ReadablePosition implements MappedFile.
func (b *Base) ReadablePosition() int64 {
	if b.semantics.ReadableUpToWrote {
		return b.wrotePosition.Load()
	}
	return b.CommittedPosition()
}

// Err implements MappedFile: the sticky error, nil while there is none.
func (b *Base) Err() error {
	if p := b.sticky.Load(); p != nil {
		return *p
	}
	return nil
}

// Fail records err as the sticky error unless one is there already, and
// returns the sticky error. Call it for every failed write, commit or sync
// (not for a cancelled wait, an encoder's error or a bad argument: nothing
// failed then).
func (b *Base) Fail(err error) error {
	if err == nil {
		panic("mappedfile: Base.Fail(nil)")
	}
	b.sticky.CompareAndSwap(nil, &err)
	return *b.sticky.Load()
}

// Retain implements MappedFile.
func (b *Base) Retain() bool { return b.refs.Retain() }

// Release implements MappedFile.
func (b *Base) Release() { b.refs.Release() }

// Acquire takes a short reference for one read (ReadAt, SendRange): it
// succeeds after Close or Delete as long as the memory is still there
// (someone holds a Retain). Pair with Release.
func (b *Base) Acquire() bool { return b.refs.Acquire() }

// Closing reports whether Close or Delete has been called.
func (b *Base) Closing() bool { return b.refs.Closing() }

// ClosedError is the error of an operation on a closed file.
func (b *Base) ClosedError(op string) error {
	return fmt.Errorf("%s: %s %s: %w", b.backend, op, b.path, ErrClosed)
}

// BeginAppend checks an append of n bytes and returns where it goes. On a
// nil error the caller holds a reference, encodes into [at, at+n) and calls
// PublishWrote(at+n) (or not, when the encoder failed), then Release.
// Errors: the sticky error; ErrFull when the segment is full (whatever n) or
// n does not fit; ErrInvalidArgument for n ≤ 0 or a nil encoder; ErrClosed.
func (b *Base) BeginAppend(n int, enc Encoder) (at int64, err error) {
	if err := b.Err(); err != nil {
		return 0, err
	}
	wrote := b.wrotePosition.Load()
	if wrote >= b.sizeBytes || int64(n) > b.sizeBytes-wrote {
		return 0, fmt.Errorf("%s: append %d bytes to %s at %d of %d: %w", b.backend, n, b.path, wrote, b.sizeBytes, ErrFull)
	}
	if n <= 0 || enc == nil {
		return 0, fmt.Errorf("%s: append %d bytes to %s (encoder %T): %w", b.backend, n, b.path, enc, ErrInvalidArgument)
	}
	if !b.refs.Retain() {
		return 0, b.ClosedError("append to")
	}
	return wrote, nil
}

// PublishWrote makes [wrote, end) visible as written (one atomic store,
// after the bytes are in place). Called by the appending goroutine only.
func (b *Base) PublishWrote(end int64) {
	if wrote := b.wrotePosition.Load(); end < wrote || end > b.sizeBytes {
		panic(fmt.Sprintf("%s: %s: write position %d → %d of %d", b.backend, b.path, wrote, end, b.sizeBytes))
	}
	b.wrotePosition.Store(end)
	b.checkPositions()
}

// CommitWriteThrough is the whole Commit of a write-through backend: it
// returns the write position, or the sticky error, or ErrClosed.
func (b *Base) CommitWriteThrough() (int64, error) {
	wrote := b.wrotePosition.Load()
	if err := b.Err(); err != nil {
		return wrote, err
	}
	if b.refs.Closing() {
		return wrote, b.ClosedError("commit")
	}
	return wrote, nil
}

// BeginCommit starts a Commit: from is the committed position, to the write
// position (read once: everything below it is encoded), able whether the
// least-pages rule says to act. On a nil error the caller holds a reference;
// it writes [from, to) when able, calling PublishCommitted as bytes reach the
// file (Fail on an error), then Release.
func (b *Base) BeginCommit(leastPages int) (from, to int64, able bool, err error) {
	from = b.CommittedPosition()
	if err := b.Err(); err != nil {
		return from, from, false, err
	}
	if !b.refs.Retain() {
		return from, from, false, b.ClosedError("commit")
	}
	to = b.wrotePosition.Load()
	return from, to, AbleTo(from, to, b.sizeBytes, leastPages), nil
}

// PublishCommitted moves the committed position to pos (≤ wrote).
func (b *Base) PublishCommitted(pos int64) {
	if b.semantics.WriteThrough {
		panic(fmt.Sprintf("%s: %s: PublishCommitted on a write-through file", b.backend, b.path))
	}
	if c, w := b.committedPosition.Load(), b.wrotePosition.Load(); pos < c || pos > w {
		panic(fmt.Sprintf("%s: %s: committed position %d → %d with wrote %d", b.backend, b.path, c, pos, w))
	}
	b.committedPosition.Store(pos)
	b.checkPositions()
}

// BeginFlush starts a Flush: from is the flushed position, to the committed
// position (read once, before the sync: what a sync issued now is known to
// cover), able whether the least-pages rule says to act. On a nil error the
// caller holds a reference; it syncs at least [from, to) when able (it may
// sync anyway, e.g. for overwrites), calls PublishFlushed(to) on success or
// Fail on an error, then Release.
func (b *Base) BeginFlush(ctx context.Context, leastPages int) (from, to int64, able bool, err error) {
	from = b.flushedPosition.Load()
	if err := b.Err(); err != nil {
		return from, from, false, err
	}
	if err := ctx.Err(); err != nil {
		return from, from, false, fmt.Errorf("%s: flush %s: %w", b.backend, b.path, err)
	}
	if !b.refs.Retain() {
		return from, from, false, b.ClosedError("flush")
	}
	to = b.CommittedPosition()
	return from, to, AbleTo(from, to, b.sizeBytes, leastPages), nil
}

// PublishFlushed moves the flushed position to pos (≤ committed). Call it
// only after a sync covering [0, pos) returned without error.
func (b *Base) PublishFlushed(pos int64) {
	if f, c := b.flushedPosition.Load(), b.CommittedPosition(); pos < f || pos > c {
		panic(fmt.Sprintf("%s: %s: flushed position %d → %d with committed %d", b.backend, b.path, f, pos, c))
	}
	b.flushedPosition.Store(pos)
	b.checkPositions()
}

// BeginTruncate checks a Truncate to validEnd: the sticky error,
// ErrOutOfRange, the context, ErrClosed. On a nil error the caller holds a
// reference; it zeroes [validEnd, SizeBytes), syncs the whole valid range
// [0, validEnd) too (after a crash it may be only in the page cache), then
// calls FinishTruncate (or Fail), then Release.
func (b *Base) BeginTruncate(ctx context.Context, validEnd int64) error {
	if err := b.Err(); err != nil {
		return err
	}
	if validEnd < 0 || validEnd > b.sizeBytes {
		return fmt.Errorf("%s: truncate %s at %d of %d: %w", b.backend, b.path, validEnd, b.sizeBytes, ErrOutOfRange)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: truncate %s: %w", b.backend, b.path, err)
	}
	if !b.refs.Retain() {
		return b.ClosedError("truncate")
	}
	return nil
}

// FinishTruncate sets wrote, committed and flushed to validEnd
// (BeginTruncate checked it is within the file).
func (b *Base) FinishTruncate(validEnd int64) {
	invariants.Ordered3("0 ≤ truncated end ≤ segment size", 0, validEnd, b.sizeBytes)
	b.wrotePosition.Store(validEnd)
	b.committedPosition.Store(validEnd)
	b.flushedPosition.Store(validEnd)
	b.checkPositions()
}

// checkPositions asserts flushed ≤ committed ≤ written ≤ size: a byte is
// committed only once written and flushed only once committed. The
// Publish* calls check their own move (always, they are cheap); this is
// the whole order, under mqstore_invariants.
func (b *Base) checkPositions() {
	if invariants.Enabled {
		invariants.Ordered3("flushed ≤ committed ≤ written", b.flushedPosition.Load(), b.CommittedPosition(), b.wrotePosition.Load())
		invariants.Ordered("written ≤ segment size", b.wrotePosition.Load(), b.sizeBytes)
	}
}

// Close implements MappedFile: no new references; Cleanup runs now, or at
// the last Release (its error is returned when it runs now, logged later).
// It does not flush.
func (b *Base) Close() error {
	if !b.closed.CompareAndSwap(false, true) {
		return b.ClosedError("close")
	}
	return b.shutdown()
}

// Delete implements MappedFile: Remove now (the name goes), the memory and
// descriptors when the last reader releases its reference.
func (b *Base) Delete() error {
	if !b.closed.CompareAndSwap(false, true) {
		return b.ClosedError("delete")
	}
	var removeErr error
	if err := b.remove(); err != nil {
		removeErr = fmt.Errorf("%s: delete %s: %w", b.backend, b.path, err)
	}
	if err := b.shutdown(); err != nil {
		if removeErr != nil {
			return fmt.Errorf("%w; %w", removeErr, err)
		}
		return err
	}
	return removeErr
}

// Retirer is implemented by files built on Base. Retire is Delete without
// the unlink: the file leaves service at once (no new reference), and
// after the last reference goes and the backend has released the file's
// memory and descriptors, released runs — from whichever goroutine
// released last, so it must not block. The caller has moved the file out
// of its directory's name space already (renamed it); until released runs
// a reader that found the segment before may still read its old bytes.
type Retirer interface {
	Retire(released func()) error
}

// Retire implements Retirer.
func (b *Base) Retire(released func()) error {
	if !b.closed.CompareAndSwap(false, true) {
		return b.ClosedError("retire")
	}
	b.released = released
	return b.shutdown()
}

func (b *Base) shutdown() error {
	b.refs.Shutdown(b.runCleanup)
	if b.cleanupDone.Load() {
		return b.cleanupErr
	}
	return nil
}

// runCleanup runs once, at the last Release after Close or Delete.
func (b *Base) runCleanup() {
	err := b.cleanup()
	if err != nil {
		err = fmt.Errorf("%s: release %s: %w", b.backend, b.path, err)
		b.logger.Error("releasing a segment failed", "backend", b.backend, "path", b.path, "err", err)
	}
	b.cleanupErr = err
	b.cleanupDone.Store(true)
	if b.released != nil && err == nil {
		b.released()
	}
}
