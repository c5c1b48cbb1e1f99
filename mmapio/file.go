package mmapio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
)

// file is one mapped segment.
//
// Every field but the atomics is set by Open and never written again, so
// readers need no lock. The mapping is touched only under a reference
// (Retain or Acquire), so Close and Delete never unmap it under anybody.
// Positions, the sticky error and the references are the embedded Base's;
// the mapping is the page cache, so the file is write-through (committed and
// readable are the write position).
type file struct {
	mappedfile.Base
	osFile  *os.File
	mapping []byte // MAP_SHARED, read-write, sizeBytes long; off the Go heap
	opts    *Options

	// overwrittenFrom is the lowest position WriteAt changed since the last
	// Flush took it (noOverwrite: none). WriteAt lowers it, Flush swaps it.
	overwrittenFrom atomic.Int64
	// advisedRandom: the mapping is advised MADV_RANDOM while the file
	// is written (Spec.SmallFolios), until an append fills it.
	advisedRandom atomic.Bool
	locked        atomic.Bool   // Warm mlocked the mapping
	lockedSum     *atomic.Int64 // the backend's count of locked bytes
	// writeAhead (Spec.WriteAhead): Flush faults in writable the next
	// writeAheadBytes after the write position; aheadTo is how far it has.
	// (Atomics: Flush calls may overlap. Two that fault in the same pages
	// only do the work twice.)
	writeAhead atomic.Bool
	aheadTo    atomic.Int64
}

// writeAheadBytes is how far past the write position a Flush of a
// Spec.WriteAhead file faults pages in writable: 1 MiB, a few flushes'
// worth at hundreds of producers, and at most a sixteenth of the file. The
// pages ahead are dirtied as they are faulted in; those no append reaches
// before they are written back (the end of an idle store's file) go to
// the disk as the zeros they hold. Measured (docs/backends.md, *Write
// faults after msync*): sync Puts of 1 KiB by 256 producers ran 1.15–1.43×
// as fast at 0.5–0.7 of the CPU per message in the engine's benchmark; in
// mqbench's 1 s cells the rates did not separate and the CPU fell.
const writeAheadBytes = 1 << 20

// Append implements mappedfile.MappedFile. The encoder writes straight into
// the mapping; the new write position is published with one atomic store
// after it returns, so a concurrent reader never sees a half-encoded record.
// The success path does not allocate.
func (m *file) Append(n int, enc mappedfile.Encoder) (int64, error) {
	wrote, err := m.BeginAppend(n, enc)
	if err != nil {
		return 0, err
	}
	defer m.Release()
	end := wrote + int64(n)
	encodeErr, faultErr := m.encodeGuarded(enc, m.mapping[wrote:end:end], wrote)
	if faultErr != nil {
		return 0, m.Fail(faultErr)
	}
	if encodeErr != nil {
		return 0, fmt.Errorf("mmapio: append %d bytes to %s at %d: encode: %w", n, m.Path(), wrote, encodeErr)
	}
	m.PublishWrote(end)
	if end == int64(len(m.mapping)) && m.advisedRandom.Load() {
		m.adviseFull()
	}
	return wrote, nil
}

// adviseWriting advises MADV_RANDOM over a new file's mapping
// (Spec.SmallFolios): the pages appends fault in come one small folio each,
// with nothing read around them. The advice is a hint: a kernel that
// refuses it leaves the file as it was, and it is logged.
func (m *file) adviseWriting() {
	if err := segfile.AdviseRandom(m.mapping); err != nil {
		m.opts.Logger.Warn("mmapio: could not keep a segment's appends in small pages", slog.String("path", m.Path()), slog.Any("err", err))
		return
	}
	m.advisedRandom.Store(true)
}

// adviseFull takes adviseWriting's advice back once the file is full:
// readers of a finished file get the kernel's readahead again.
func (m *file) adviseFull() {
	if !m.advisedRandom.CompareAndSwap(true, false) {
		return
	}
	if err := segfile.AdviseNormal(m.mapping); err != nil {
		m.opts.Logger.Warn("mmapio: could not restore readahead on a full segment", slog.String("path", m.Path()), slog.Any("err", err))
	}
}

// Commit implements mappedfile.MappedFile: a no-op, appended bytes are in
// the file's page cache already. It returns the write position.
func (m *file) Commit(context.Context, int) (int64, error) { return m.CommitWriteThrough() }

// Flush implements mappedfile.MappedFile: msync(MS_SYNC) of the pages
// holding [flushed, wrote), when the least-pages rule allows. Bytes
// rewritten by WriteAt since the last Flush extend the range down to the
// lowest of them and are synced whatever leastPages says, even when nothing
// was appended.
func (m *file) Flush(ctx context.Context, leastPages int) (int64, error) {
	// wrote is read once, by BeginFlush: everything below it was encoded
	// before it was published, so it is all in the pages msync writes back.
	flushed, wrote, able, err := m.BeginFlush(ctx, leastPages)
	if err != nil {
		return flushed, err
	}
	defer m.Release()
	if !able && m.overwrittenFrom.Load() == noOverwrite {
		return flushed, nil
	}
	// An overwrite at or above wrote (racing with this Flush) stays above
	// the new flushed position: the next Flush covers it anyway.
	from := min(flushed, m.overwrittenFrom.Swap(noOverwrite))
	if err := segfile.Msync(m.Path(), m.mapping, from, wrote); err != nil {
		return flushed, m.Fail(fmt.Errorf("mmapio: flush: %w", err))
	}
	m.PublishFlushed(wrote)
	if m.writeAhead.Load() {
		m.faultAhead(wrote)
	}
	return wrote, nil
}

// faultAhead faults in writable the page holding wrote, which the msync
// just write-protected when an append left it partly written, and the
// pages up to writeAheadBytes past it that no Flush has faulted in yet.
// A failure (a kernel before MADV_POPULATE_WRITE, memory pressure) only
// leaves the appends to fault the pages themselves.
func (m *file) faultAhead(wrote int64) {
	pageSize := int64(os.Getpagesize())
	size := int64(len(m.mapping))
	page := wrote &^ (pageSize - 1)
	if page >= size {
		return
	}
	aheadTo := m.aheadTo.Load()
	if wrote != page && page < aheadTo {
		_ = segfile.PopulateWrite(m.mapping[page : page+pageSize])
	}
	from, to := max(page, aheadTo), min(page+min(writeAheadBytes, size/16&^(pageSize-1)), size)
	if to <= from {
		return
	}
	if err := segfile.PopulateWrite(m.mapping[from:to]); err != nil {
		m.writeAhead.Store(false) // not again: the appends fault as they did
		if errors.Is(err, segfile.ErrNoPopulateWrite) {
			return // macOS, or Linux before 5.14: nothing to say per file
		}
		m.opts.Logger.Warn("mmapio: could not fault in the pages ahead of the appends", slog.String("path", m.Path()), slog.Any("err", err))
		return
	}
	m.aheadTo.Store(to)
}
