package mmapio

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
)

// Retain implements mappedfile.MappedFile.
func (m *file) Retain() bool { return m.refs.Retain() }

// Release implements mappedfile.MappedFile.
func (m *file) Release() { m.refs.Release() }

// Close implements mappedfile.MappedFile. It does not flush. The mapping is
// unmapped and the descriptor closed when the last reference goes; an error
// from that is returned here when it happens at once, logged otherwise.
func (m *file) Close() error {
	if !m.closed.CompareAndSwap(false, true) {
		return m.closedError("close")
	}
	return m.shutdown()
}

// Delete implements mappedfile.MappedFile: the name goes at once, the memory
// and descriptor when the last reader releases its reference.
func (m *file) Delete() error {
	if !m.closed.CompareAndSwap(false, true) {
		return m.closedError("delete")
	}
	removeErr := os.Remove(m.path)
	if removeErr != nil {
		removeErr = fmt.Errorf("mmapio: delete %s: %w", m.path, removeErr)
	}
	return errors.Join(removeErr, m.shutdown())
}

func (m *file) shutdown() error {
	m.refs.Shutdown(m.cleanup)
	if m.cleanupDone.Load() {
		return m.cleanupErr
	}
	return nil
}

// cleanup runs once, when the last reference is released.
func (m *file) cleanup() {
	if m.locked.Swap(false) {
		m.lockedSum.Add(-int64(len(m.mapping))) // munmap unlocks
	}
	err := errors.Join(segfile.Unmap(m.mapping), m.osFile.Close())
	if err != nil {
		err = fmt.Errorf("mmapio: release %s: %w", m.path, err)
		m.opts.Logger.Error("mmapio: releasing a segment failed", "path", m.path, "err", err)
	}
	m.cleanupErr = err
	m.cleanupDone.Store(true)
}

// Truncate implements mappedfile.MappedFile. It zeroes the rest of the page
// holding validEnd through the mapping, and the whole pages after it with
// fallocate(FALLOC_FL_ZERO_RANGE) — an extent change, not 1 GiB of writes —
// falling back to writing zeros where the file system lacks it; one
// fdatasync then makes both durable (it writes back pages dirtied through
// the mapping too). The zeroed range leaves the page cache, so the mapping
// reads zeros there afterwards.
func (m *file) Truncate(ctx context.Context, validEnd int64) error {
	if err := m.Err(); err != nil {
		return err
	}
	if validEnd < 0 || validEnd > m.sizeBytes {
		return fmt.Errorf("mmapio: truncate %s at %d of %d: %w", m.path, validEnd, m.sizeBytes, mappedfile.ErrOutOfRange)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mmapio: truncate %s: %w", m.path, err)
	}
	if !m.refs.Retain() {
		return m.closedError("truncate")
	}
	defer m.refs.Release()
	pageEnd := min(roundUpToPage(validEnd), m.sizeBytes)
	if err := m.zeroGuarded(validEnd, pageEnd); err != nil {
		return m.setSticky(err)
	}
	// Overwrites at or above validEnd were just zeroed; those below it must
	// become durable with the rest (ZeroRange's fdatasync syncs the whole file).
	syncFrom := min(validEnd, m.overwrittenFrom.Swap(noOverwrite))
	var err error
	if pageEnd < m.sizeBytes {
		err = segfile.ZeroRange(m.osFile, pageEnd, m.sizeBytes-pageEnd)
	} else {
		err = segfile.Msync(m.mapping, syncFrom, pageEnd)
	}
	if err != nil {
		return m.setSticky(fmt.Errorf("mmapio: truncate %s at %d: %w", m.path, validEnd, err))
	}
	m.wrotePosition.Store(validEnd)
	m.flushedPosition.Store(validEnd)
	return nil
}
