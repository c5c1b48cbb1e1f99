package mmapio

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
)

// file is one mapped segment.
//
// Every field but the atomics is set by Open and never written again, so
// readers need no lock. The mapping is touched only under a reference
// (refs.Retain), so Close and Delete never unmap it under anybody.
// Committed and readable positions are the write position: the mapping is
// the page cache, there is nothing to hand over.
type file struct {
	path       string
	fromOffset int64
	sizeBytes  int64
	osFile     *os.File
	mapping    []byte // MAP_SHARED, read-write, sizeBytes long; off the Go heap
	opts       *Options

	refs            mappedfile.RefCount
	wrotePosition   atomic.Int64 // published after the bytes below it are encoded
	flushedPosition atomic.Int64
	// overwrittenFrom is the lowest position WriteAt changed since the last
	// Flush took it (noOverwrite: none). WriteAt lowers it, Flush swaps it.
	overwrittenFrom atomic.Int64
	sticky          atomic.Pointer[error] // first failed write or flush; never cleared
	closed          atomic.Bool           // Close or Delete called
	locked          atomic.Bool           // Warm mlocked the mapping
	lockedSum       *atomic.Int64         // the backend's count of locked bytes
	cleanupDone     atomic.Bool           // unmapped and closed
	cleanupErr      error                 // written before cleanupDone is set
}

func (m *file) Path() string             { return m.path }
func (m *file) FromOffset() int64        { return m.fromOffset }
func (m *file) SizeBytes() int64         { return m.sizeBytes }
func (m *file) WrotePosition() int64     { return m.wrotePosition.Load() }
func (m *file) CommittedPosition() int64 { return m.wrotePosition.Load() }
func (m *file) FlushedPosition() int64   { return m.flushedPosition.Load() }
func (m *file) ReadablePosition() int64  { return m.wrotePosition.Load() }

// Err implements mappedfile.MappedFile.
func (m *file) Err() error {
	if p := m.sticky.Load(); p != nil {
		return *p
	}
	return nil
}

// setSticky records err as the sticky error unless one is already there, and
// returns the sticky error.
func (m *file) setSticky(err error) error {
	if m.sticky.CompareAndSwap(nil, &err) {
		return err
	}
	return *m.sticky.Load()
}

func (m *file) closedError(op string) error {
	return fmt.Errorf("mmapio: %s %s: %w", op, m.path, mappedfile.ErrClosed)
}

// Append implements mappedfile.MappedFile. The encoder writes straight into
// the mapping; the new write position is published with one atomic store
// after it returns, so a concurrent reader never sees a half-encoded record.
// The success path does not allocate.
func (m *file) Append(n int, enc mappedfile.Encoder) (int64, error) {
	if err := m.Err(); err != nil {
		return 0, err
	}
	if n < 0 || enc == nil {
		return 0, fmt.Errorf("mmapio: append %d bytes to %s (encoder %T): %w", n, m.path, enc, mappedfile.ErrInvalidArgument)
	}
	if !m.refs.Retain() {
		return 0, m.closedError("append to")
	}
	defer m.refs.Release()
	wrote := m.wrotePosition.Load()
	if int64(n) > m.sizeBytes-wrote {
		return 0, fmt.Errorf("mmapio: append %d bytes to %s at %d of %d: %w",
			n, m.path, wrote, m.sizeBytes, mappedfile.ErrFull)
	}
	end := wrote + int64(n)
	encodeErr, faultErr := m.encodeGuarded(enc, m.mapping[wrote:end:end], wrote)
	if faultErr != nil {
		return 0, m.setSticky(faultErr)
	}
	if encodeErr != nil {
		return 0, fmt.Errorf("mmapio: append %d bytes to %s at %d: encode: %w", n, m.path, wrote, encodeErr)
	}
	m.wrotePosition.Store(end)
	return wrote, nil
}

// Commit implements mappedfile.MappedFile: a no-op, appended bytes are in
// the file's page cache already. It returns the write position.
func (m *file) Commit(ctx context.Context, _ int) (int64, error) {
	if err := m.Err(); err != nil {
		return m.wrotePosition.Load(), err
	}
	if m.refs.Closing() {
		return m.wrotePosition.Load(), m.closedError("commit")
	}
	return m.wrotePosition.Load(), nil
}

// Flush implements mappedfile.MappedFile: msync(MS_SYNC) of the pages
// holding [flushed, wrote), when the least-pages rule allows. Bytes
// rewritten by WriteAt since the last Flush extend the range down to the
// lowest of them and are synced whatever leastPages says, even when nothing
// was appended.
func (m *file) Flush(ctx context.Context, leastPages int) (int64, error) {
	flushed := m.flushedPosition.Load()
	if err := m.Err(); err != nil {
		return flushed, err
	}
	if !m.refs.Retain() {
		return flushed, m.closedError("flush")
	}
	defer m.refs.Release()
	// Read the write position once: everything below it was encoded before
	// it was published, so it is all in the pages msync writes back.
	wrote := m.wrotePosition.Load()
	overwritten := m.overwrittenFrom.Load() != noOverwrite
	if !overwritten && !mappedfile.AbleTo(flushed, wrote, m.sizeBytes, leastPages) {
		return flushed, nil
	}
	if err := ctx.Err(); err != nil {
		return flushed, fmt.Errorf("mmapio: flush %s: %w", m.path, err)
	}
	// An overwrite at or above wrote (racing with this Flush) stays above
	// the new flushed position: the next Flush covers it anyway.
	from := min(flushed, m.overwrittenFrom.Swap(noOverwrite))
	if err := segfile.Msync(m.mapping, from, wrote); err != nil {
		return flushed, m.setSticky(fmt.Errorf("mmapio: flush %s: %w", m.path, err))
	}
	m.flushedPosition.Store(wrote)
	return wrote, nil
}
