package indexfile

import (
	"context"
	"fmt"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/mappedfile"
)

// Query returns the physical offsets of the entries whose keyHash equals
// key's and whose time (BeginTimestamp + TimeDiff*1000) is in [beginMs,
// endMs]: newest file first, newest entry first, at most max. Files whose
// time range does not overlap are skipped, and the walk stops at the first
// file that begins before beginMs (RocketMQ's IndexService.queryOffset).
// Different keys may share a hash: the caller reads each record and
// compares its keys.
func (x *Index) Query(ctx context.Context, key string, beginMs, endMs int64, max int) ([]int64, error) {
	if max <= 0 {
		return nil, fmt.Errorf("indexfile: query with max %d: %w", max, mappedfile.ErrInvalidArgument)
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.closed {
		return nil, fmt.Errorf("indexfile %s: query: %w", x.dir, mappedfile.ErrClosed)
	}
	keyHash := record.IndexKeyHash(key)
	var offsets []int64
	var buf [EntrySize]byte
	for i := len(x.files) - 1; i >= 0 && len(offsets) < max; i-- {
		if err := ctx.Err(); err != nil {
			return offsets, fmt.Errorf("indexfile: query: %w", err)
		}
		f := x.files[i]
		if timeMatched(f.header, beginMs, endMs) {
			var err error
			if offsets, err = x.selectLocked(ctx, f, keyHash, beginMs, endMs, max, offsets, buf[:]); err != nil {
				return offsets, err
			}
		}
		if f.header.BeginTimestamp < beginMs {
			break
		}
	}
	return offsets, nil
}

// timeMatched reports whether [begin, end] overlaps the file's time range.
func timeMatched(h Header, begin, end int64) bool {
	return (begin < h.BeginTimestamp && end > h.EndTimestamp) ||
		(begin >= h.BeginTimestamp && begin <= h.EndTimestamp) ||
		(end >= h.BeginTimestamp && end <= h.EndTimestamp)
}

// chainCheckEvery is how many entries a chain walk reads between checks of
// the context.
const chainCheckEvery = 1024

// selectLocked walks the chain of keyHash's slot in f, appending matches to
// offsets. The walk ends at the chain's end, at an entry older than begin,
// or at a broken link (an entry number that does not decrease).
func (x *Index) selectLocked(ctx context.Context, f *file, keyHash int32, begin, end int64, max int, offsets []int64, buf []byte) ([]int64, error) {
	h := f.header
	if h.IndexCount <= 1 {
		return offsets, nil
	}
	if _, err := f.mf.ReadAt(buf[:SlotSize], x.slotPosition(int64(keyHash)%x.slotCount)); err != nil {
		return offsets, fmt.Errorf("indexfile: %s: read slot: %w", f.mf.Path(), err)
	}
	next := int32(be32(buf))
	for steps := 1; next > 0 && next < h.IndexCount && len(offsets) < max; steps++ {
		if steps%chainCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return offsets, fmt.Errorf("indexfile: query: %w", err)
			}
		}
		if _, err := f.mf.ReadAt(buf[:EntrySize], x.entryPosition(next)); err != nil {
			return offsets, fmt.Errorf("indexfile: %s: read entry %d: %w", f.mf.Path(), next, err)
		}
		e := DecodeEntry(buf)
		if e.TimeDiff < 0 {
			break
		}
		at := h.BeginTimestamp + int64(e.TimeDiff)*1000
		if e.KeyHash == keyHash && at >= begin && at <= end {
			offsets = append(offsets, e.PhyOffset)
		}
		if at < begin || e.PrevIndex >= next {
			break
		}
		next = e.PrevIndex
	}
	return offsets, nil
}
