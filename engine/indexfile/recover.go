package indexfile

import (
	"context"
	"errors"
	"fmt"

	"github.com/mqstore/mqstore/mappedfile"
)

// settleLocked makes f, the newest file, ready to take entries: slots that
// point at or past IndexCount are walked back along their chains (the
// kernel may write back slot pages before the header page), the header is
// written, both are flushed, and the entry area after the last entry is
// truncated (zeroed) so the write position sits at entry IndexCount.
// A full file needs none of it.
func (x *Index) settleLocked(ctx context.Context, f *file) error {
	if f.ready || f.header.IndexCount >= x.maxEntries {
		return nil
	}
	if _, err := x.overwriter(f); err != nil {
		return err
	}
	if err := x.repairSlotsLocked(f); err != nil {
		return err
	}
	if err := x.writeHeaderLocked(f); err != nil {
		return err
	}
	if err := f.flush(ctx); err != nil {
		return err
	}
	if err := f.mf.Truncate(ctx, x.entryPosition(f.header.IndexCount)); err != nil {
		return fmt.Errorf("indexfile: %s: truncate after entry %d: %w", f.mf.Path(), f.header.IndexCount-1, err)
	}
	f.flushedGeneration = f.generation
	f.ready = true
	return nil
}

// repairSlotsLocked makes every slot point at the newest entry below
// IndexCount with its hash. A slot that points at or past IndexCount was
// written back before the header (and maybe before its entry: the kernel
// writes pages back in any order), so the chain through that entry may be
// lost: then every slot is rebuilt from the entries the header counts,
// which a flush made durable together with it (their PrevIndex links are
// intact).
func (x *Index) repairSlotsLocked(f *file) error {
	buf := make([]byte, 16*1024*SlotSize)
	stale := false
	for slot := int64(0); slot < x.slotCount && !stale; {
		n := min(int64(len(buf))/SlotSize, x.slotCount-slot)
		chunk := buf[:n*SlotSize]
		if _, err := f.mf.ReadAt(chunk, x.slotPosition(slot)); err != nil {
			return fmt.Errorf("indexfile: %s: read slots: %w", f.mf.Path(), err)
		}
		for i := int64(0); i < n; i++ {
			if value := int32(be32(chunk[i*SlotSize:])); value < 0 || value >= f.header.IndexCount {
				stale = true
				break
			}
		}
		slot += n
	}
	if !stale {
		return nil
	}
	slots := make([]int32, x.slotCount)
	entries := make([]byte, 4096*EntrySize)
	for first := int32(1); first < f.header.IndexCount; {
		n := min(int32(len(entries)/EntrySize), f.header.IndexCount-first)
		chunk := entries[:int64(n)*EntrySize]
		if _, err := f.mf.ReadAt(chunk, x.entryPosition(first)); err != nil {
			return fmt.Errorf("indexfile: %s: read entries: %w", f.mf.Path(), err)
		}
		for i := int32(0); i < n; i++ {
			e := DecodeEntry(chunk[int64(i)*EntrySize:])
			if e.KeyHash >= 0 {
				slots[int64(e.KeyHash)%x.slotCount] = first + i
			}
		}
		first += n
	}
	for slot := int64(0); slot < x.slotCount; {
		n := min(int64(len(buf))/SlotSize, x.slotCount-slot)
		chunk := buf[:n*SlotSize]
		for i := int64(0); i < n; i++ {
			putBE32(chunk[i*SlotSize:], uint32(slots[slot+i]))
		}
		if _, err := f.ow.WriteAt(chunk, x.slotPosition(slot)); err != nil {
			return fmt.Errorf("indexfile: %s: rebuild slots: %w", f.mf.Path(), err)
		}
		slot += n
	}
	return nil
}

// TruncateByPhysical is recovery after the CommitLog was cut at
// physicalOffset: it deletes the newest files whose BeginPhyOffset ≥
// physicalOffset and, in the file that straddles it, undoes the entries of
// records at or past it, newest first (each one's slot gets its PrevIndex
// back), so the file is exactly what it was before those records were
// indexed; then MaxPhysicalOffset is below physicalOffset and the engine
// re-dispatches the records after it. The undone entries are zeroed on disk.
func (x *Index) TruncateByPhysical(ctx context.Context, physicalOffset int64) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return fmt.Errorf("indexfile %s: truncate: %w", x.dir, mappedfile.ErrClosed)
	}
	for n := len(x.files); n > 0 && x.files[n-1].header.BeginPhyOffset >= physicalOffset; n-- {
		if err := x.deleteLocked(n - 1); err != nil {
			return err
		}
	}
	n := len(x.files)
	if n == 0 {
		return nil
	}
	f := x.files[n-1]
	undone, err := x.undoLocked(f, physicalOffset)
	if err != nil {
		return err
	}
	if undone > 0 {
		f.ready = false
		f.generation++
	}
	return x.settleLocked(ctx, f)
}

// undoLocked removes the entries of f at or past physicalOffset from their
// chains and from the header, newest first; it returns how many.
func (x *Index) undoLocked(f *file, physicalOffset int64) (int32, error) {
	if _, err := x.overwriter(f); err != nil {
		return 0, err
	}
	h := &f.header
	var buf [EntrySize]byte
	var undone int32
	last := Entry{PhyOffset: h.BeginPhyOffset}
	for h.IndexCount > 1 {
		n := h.IndexCount - 1
		if _, err := f.mf.ReadAt(buf[:], x.entryPosition(n)); err != nil {
			return undone, fmt.Errorf("indexfile: %s: read entry %d: %w", f.mf.Path(), n, err)
		}
		e := DecodeEntry(buf[:])
		if e.PhyOffset < physicalOffset {
			last = e
			break
		}
		previous := e.PrevIndex
		if previous < 0 || previous >= n {
			previous = 0
		}
		putBE32(x.slot[:], uint32(previous))
		if _, err := f.ow.WriteAt(x.slot[:], x.slotPosition(int64(e.KeyHash)%x.slotCount)); err != nil {
			return undone, fmt.Errorf("indexfile: %s: restore slot of entry %d: %w", f.mf.Path(), n, err)
		}
		h.IndexCount--
		h.HashSlotCount = max(h.HashSlotCount-1, 0)
		undone++
	}
	if undone > 0 {
		// The header keeps milliseconds only for the last entry; the one
		// before is known to the second, which is all a query compares.
		h.EndPhyOffset = last.PhyOffset
		h.EndTimestamp = h.BeginTimestamp + int64(last.TimeDiff)*1000
	}
	return undone, nil
}

// DeleteBefore applies retention: it deletes, oldest first, the files whose
// EndPhyOffset < minPhysicalOffset, never the newest. It returns how many.
func (x *Index) DeleteBefore(ctx context.Context, minPhysicalOffset int64) (int, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return 0, fmt.Errorf("indexfile %s: delete: %w", x.dir, mappedfile.ErrClosed)
	}
	deleted := 0
	for len(x.files) > 1 && x.files[0].header.EndPhyOffset < minPhysicalOffset {
		if err := ctx.Err(); err != nil {
			return deleted, fmt.Errorf("indexfile %s: delete: %w", x.dir, err)
		}
		if err := x.deleteLocked(0); err != nil {
			return deleted, err
		}
		deleted++
	}
	return deleted, nil
}

func (x *Index) deleteLocked(i int) error {
	f := x.files[i]
	if err := f.mf.Delete(); err != nil && !errors.Is(err, mappedfile.ErrClosed) {
		return fmt.Errorf("indexfile: delete %s: %w", f.mf.Path(), err)
	}
	f.removed = true
	x.files = append(x.files[:i], x.files[i+1:]...)
	if err := x.fs.SyncDir(x.dir); err != nil {
		return fmt.Errorf("indexfile: delete %s: %w", f.mf.Path(), err)
	}
	return nil
}

// SyncFrom makes durable (fsync, whole files) every file holding entries of
// records at or after physicalOffset — every file when physicalOffset ≤ 0.
// After a crash the entries a dead process wrote may sit in the page cache,
// never synced, in files opened full that a Flush would not reach.
func (x *Index) SyncFrom(ctx context.Context, physicalOffset int64) error {
	x.mu.RLock()
	var paths []string
	for _, f := range x.files {
		if physicalOffset <= 0 || f.header.EndPhyOffset >= physicalOffset {
			paths = append(paths, f.mf.Path())
		}
	}
	x.mu.RUnlock()
	for _, p := range paths {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := x.fs.SyncFile(p); err != nil {
			return fmt.Errorf("indexfile: %w", err)
		}
	}
	return nil
}

// Flush writes the header of every changed file and makes the files
// durable. The headers are written under the lock; the flushes run outside
// it, concurrently with Put and Query. One flusher at a time.
func (x *Index) Flush(ctx context.Context) error {
	type pending struct {
		f          *file
		generation uint64
	}
	var todo []pending
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return fmt.Errorf("indexfile %s: flush: %w", x.dir, mappedfile.ErrClosed)
	}
	for _, f := range x.files {
		if f.generation == f.flushedGeneration {
			continue
		}
		if err := x.writeHeaderLocked(f); err != nil {
			x.mu.Unlock()
			return err
		}
		if f.mf.Retain() {
			todo = append(todo, pending{f, f.generation})
		}
	}
	x.mu.Unlock()
	var errs []error
	for _, p := range todo {
		err := p.f.flush(ctx)
		p.f.mf.Release()
		x.mu.Lock()
		switch {
		case err == nil:
			p.f.flushedGeneration = max(p.f.flushedGeneration, p.generation)
		case !p.f.removed:
			errs = append(errs, err)
		}
		x.mu.Unlock()
	}
	return errors.Join(errs...)
}
