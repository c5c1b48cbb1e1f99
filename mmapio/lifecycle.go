package mmapio

import (
	"context"
	"errors"
	"fmt"

	"github.com/mqstore/mqstore/internal/segfile"
)

// remove unlinks the file and syncs its directory (Base.Delete).
func (m *file) remove() error { return segfile.Remove(m.Path()) }

// cleanup runs once, when the last reference is released after Close or
// Delete: it unmaps and closes.
func (m *file) cleanup() error {
	if m.locked.Swap(false) {
		m.lockedSum.Add(-int64(len(m.mapping))) // munmap unlocks
	}
	return errors.Join(segfile.Unmap(m.mapping), m.osFile.Close())
}

// Truncate implements mappedfile.MappedFile. It zeroes the rest of the page
// holding validEnd through the mapping, and the whole pages after it with
// segfile.ZeroRangeContext: zeros written over the pages that are not zeros
// already, found by reading only what the file system reports as data, so
// written extents stay written (a prewritten segment stays prewritten; see
// mappedfile.Spec.Prewrite) and a fallocated tail is not read at all. Then
// one fdatasync of the whole file makes the zeros durable, and with them
// every byte below validEnd: recovery declares those valid, and after a
// crash (kill -9) they may be only in the page cache, so syncing just the
// zeroed tail would leave acknowledged records exposed to a later power
// loss. fdatasync writes back pages dirtied through the mapping too; the
// mapping shares the page cache the zeros are written into.
func (m *file) Truncate(ctx context.Context, validEnd int64) error {
	if err := m.BeginTruncate(ctx, validEnd); err != nil {
		return err
	}
	defer m.Release()
	size := m.SizeBytes()
	pageEnd := min(roundUpToPage(validEnd), size)
	if err := m.zeroGuarded(validEnd, pageEnd); err != nil {
		return m.Fail(err)
	}
	// Overwrites anywhere are covered by the whole-file sync below.
	m.overwrittenFrom.Store(noOverwrite)
	if err := segfile.ZeroRangeContext(ctx, m.osFile, pageEnd, size-pageEnd); err != nil {
		return m.Fail(fmt.Errorf("mmapio: truncate %s at %d: %w", m.Path(), validEnd, err))
	}
	m.FinishTruncate(validEnd)
	return nil
}
