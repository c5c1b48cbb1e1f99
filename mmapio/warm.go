package mmapio

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
)

// touchChunkPages is how many pages Touch handles between two looks at the
// context when WarmOptions.FlushEveryPages does not set the chunk (16 MiB).
const touchChunkPages = 4096

// populateWriteUnsupported is set once the kernel rejected
// MADV_POPULATE_WRITE (before Linux 5.14), so Touch stops asking.
var populateWriteUnsupported atomic.Bool

// Warm implements mappedfile.MappedFile. It advises (WILLNEED, SEQUENTIAL)
// first so the kernel reads ahead, then touches, then locks: mlock of a
// shared mapping faults pages in for reading only, so the touch is what
// spares the first append to each page its write fault.
//
// Touch covers the pages from the first page boundary at or above the write
// position to the end: pages already written are resident. Call Warm before
// the segment is handed to its writer; with Options.TouchByWriting (or a
// kernel without MADV_POPULATE_WRITE) the touch stores zeros and must not run
// concurrently with Append. Warm and Cool are called by one goroutine at a
// time (the allocation or retention service).
func (m *file) Warm(ctx context.Context, opts mappedfile.WarmOptions) error {
	if err := m.Err(); err != nil {
		return err
	}
	if opts.FlushEveryPages < 0 {
		return fmt.Errorf("mmapio: warm %s: FlushEveryPages %d: %w", m.Path(), opts.FlushEveryPages, mappedfile.ErrInvalidArgument)
	}
	if !m.Retain() {
		return m.ClosedError("warm")
	}
	defer m.Release()
	// A file kept in small folios while it is written (Spec.SmallFolios)
	// keeps its MADV_RANDOM: SEQUENTIAL would give the touch's faults the
	// large folios the advice is there to avoid.
	if opts.Advise && !m.advisedRandom.Load() {
		if err := segfile.AdviseWrite(m.mapping); err != nil {
			return fmt.Errorf("mmapio: warm %s: %w", m.Path(), err)
		}
	}
	if opts.Touch {
		if err := m.touch(ctx, opts.FlushEveryPages); err != nil {
			return err
		}
	}
	if opts.Lock && !m.locked.Load() {
		if err := segfile.Lock("mmapio: warm "+m.Path(), m.mapping); err != nil {
			return err
		}
		m.locked.Store(true)
		m.lockedSum.Add(int64(len(m.mapping)))
	}
	return nil
}

// touch faults in, writable, every page not written yet, in chunks of
// flushEveryPages pages (msynced after each) or touchChunkPages.
func (m *file) touch(ctx context.Context, flushEveryPages int) error {
	chunkBytes := int64(touchChunkPages) * mappedfile.PageSize
	if flushEveryPages > 0 {
		chunkBytes = int64(flushEveryPages) * mappedfile.PageSize
	}
	from := roundUpToPage(m.WrotePosition())
	for from < m.SizeBytes() {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("mmapio: warm %s: touched up to %d: %w", m.Path(), from, err)
		}
		to := min(from+chunkBytes, m.SizeBytes())
		if err := m.touchRange(from, to); err != nil {
			return m.Fail(err)
		}
		if flushEveryPages > 0 {
			if err := segfile.Msync(m.Path(), m.mapping, from, to); err != nil {
				return m.Fail(fmt.Errorf("mmapio: warm %s: %w", m.Path(), err))
			}
		}
		from = to
	}
	return nil
}

// touchRange faults in the pages of [from, to) writable; from is page aligned.
func (m *file) touchRange(from, to int64) error {
	if !m.opts.TouchByWriting && !populateWriteUnsupported.Load() {
		err := segfile.PopulateWrite(m.mapping[from:to])
		if err == nil {
			return nil
		}
		if !errors.Is(err, segfile.ErrNoPopulateWrite) {
			return fmt.Errorf("mmapio: warm %s [%d,%d): %w", m.Path(), from, to, err)
		}
		populateWriteUnsupported.Store(true)
	}
	return m.touchGuarded(from, to)
}

// Cool implements mappedfile.MappedFile: munlock when Warm locked, then
// madvise(DONTNEED). Dirty pages of a shared file mapping stay in the page
// cache, so nothing written is lost.
func (m *file) Cool() error {
	if !m.Retain() {
		return m.ClosedError("cool")
	}
	defer m.Release()
	if m.locked.Load() {
		if err := segfile.Unlock(m.mapping); err != nil {
			return fmt.Errorf("mmapio: cool %s: %w", m.Path(), err)
		}
		m.locked.Store(false)
		m.lockedSum.Add(-int64(len(m.mapping)))
	}
	if err := segfile.AdviseCold(m.mapping); err != nil {
		return fmt.Errorf("mmapio: cool %s: %w", m.Path(), err)
	}
	return nil
}

func roundUpToPage(pos int64) int64 {
	return (pos + mappedfile.PageSize - 1) &^ (mappedfile.PageSize - 1)
}
