package consumequeue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/engine/storefs"
	"github.com/mqstore/mqstore/mappedfile"
)

// recoverFiles is how many of the newest files recovery scans; the older
// ones are taken as full and valid (RocketMQ starts at the third-last file).
const recoverFiles = 3

// recover finds the end of the valid units in the loaded files, truncates
// the files there and sets the offsets.
func (q *Queue) recover(ctx context.Context, files *segment.Queue) error {
	list := files.Files()
	if len(list) == 0 {
		return nil
	}
	end, err := scanValidEnd(list, firstSuspect(list))
	if err != nil {
		return err
	}
	if err := q.truncateLocked(ctx, end); err != nil {
		return err
	}
	if isEmpty(files) {
		return nil
	}
	q.flushedWhere.Store(end)
	first := files.First().FromOffset() / UnitSize
	minOffset, err := q.search(first, q.maxOffset.Load(), func(u Unit) bool { return !u.IsBlank() })
	if err != nil {
		return err
	}
	q.minOffset.Store(minOffset)
	return nil
}

// firstSuspect returns the index of the file recovery must scan from: the
// third-last, or an older one whose last unit is not a plausible unit (a
// full file that never got flushed before a crash: files are flushed in
// order, so every file after it is suspect too). Checking one unit per
// older file keeps recovery cheap without trusting unflushed files.
func firstSuspect(list []mappedfile.MappedFile) int {
	start := max(0, len(list)-recoverFiles)
	var b [UnitSize]byte
	for i := 0; i < start; i++ {
		f := list[i]
		n, _ := f.ReadAt(b[:], f.SizeBytes()-UnitSize)
		if u := DecodeUnit(b[:]); n != UnitSize || !(u.plausible() || u.IsBlank()) {
			return i
		}
	}
	return start
}

// scanValidEnd returns the global byte offset after the last valid unit,
// scanning list from index start. Pre-blank units are valid only at the head
// of the queue's first file (start 0); a real unit must start at or after
// the end of the previous one.
func scanValidEnd(list []mappedfile.MappedFile, start int) (int64, error) {
	buf := make([]byte, 1024*UnitSize)
	previousEnd := int64(0)
	blanksAllowed := start == 0
	for i := start; i < len(list); i++ {
		f := list[i]
		for pos := int64(0); pos < f.SizeBytes(); {
			want := min(int64(len(buf)), f.SizeBytes()-pos)
			n, err := f.ReadAt(buf[:want], pos)
			if err != nil && !errors.Is(err, io.EOF) {
				return 0, fmt.Errorf("scan %s at %d: %w", f.Path(), pos, err)
			}
			for j := 0; j+UnitSize <= n; j += UnitSize {
				u := DecodeUnit(buf[j:])
				switch {
				case u.IsBlank() && blanksAllowed:
				case u.IsBlank() || !u.plausible() || u.PhysicalOffset < previousEnd:
					return f.FromOffset() + pos + int64(j), nil
				default:
					blanksAllowed = false
					previousEnd = u.End()
				}
			}
			pos += int64(n) - int64(n)%UnitSize
			if int64(n) < want {
				return f.FromOffset() + pos, nil
			}
		}
	}
	last := list[len(list)-1]
	return last.FromOffset() + last.SizeBytes(), nil
}

// truncateLocked makes the byte offset end the end of the queue. When no
// byte is left, every file is deleted and the queue is empty (offsets 0), as
// RocketMQ deletes a last file whose first unit is past the truncation point.
func (q *Queue) truncateLocked(ctx context.Context, end int64) error {
	files := q.files.Load()
	if isEmpty(files) {
		return nil
	}
	if first := files.First().FromOffset(); end <= first {
		q.maxOffset.Store(0)
		q.minOffset.Store(0)
		q.maxPhysicalOffset.Store(0)
		q.flushedWhere.Store(0)
		// Newest first, each removal synced: a crash in between leaves a
		// prefix of the files, which recovery handles (units missing at the
		// end are dispatched again); the oldest gone first would leave later
		// units with no way to find the ones before them.
		if err := files.TruncateTo(ctx, first); err != nil {
			return fmt.Errorf("consumequeue %s: %w", q.dir, err)
		}
		if err := files.DeleteFirst(); err != nil {
			return fmt.Errorf("consumequeue %s: %w", q.dir, err)
		}
		return nil
	}
	q.maxOffset.Store(end / UnitSize)
	if q.minOffset.Load() > end/UnitSize {
		q.minOffset.Store(end / UnitSize)
	}
	if err := files.TruncateTo(ctx, end); err != nil {
		return fmt.Errorf("consumequeue %s: %w", q.dir, err)
	}
	if q.flushedWhere.Load() > end {
		q.flushedWhere.Store(end)
	}
	last, err := q.readUnit(end/UnitSize - 1)
	if err != nil {
		return fmt.Errorf("consumequeue %s: read the last unit: %w", q.dir, err)
	}
	q.maxPhysicalOffset.Store(0)
	if !last.IsBlank() {
		q.maxPhysicalOffset.Store(last.End())
	}
	return nil
}

// search returns the smallest queue offset in [lo, hi) whose unit satisfies
// pred, or hi. pred must be false then true along the queue (physical
// offsets increase, pre-blanks come first).
func (q *Queue) search(lo, hi int64, pred func(Unit) bool) (int64, error) {
	for lo < hi {
		mid := lo + (hi-lo)/2
		u, err := q.readUnit(mid)
		if err != nil {
			return 0, fmt.Errorf("consumequeue %s: read queue offset %d: %w", q.dir, mid, err)
		}
		if pred(u) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// TruncateByPhysical drops every unit whose PhysicalOffset ≥ physicalOffset
// (recovery: the CommitLog ends there), zeroing them on disk. Not to be
// called concurrently with readers of the dropped units.
func (q *Queue) TruncateByPhysical(ctx context.Context, physicalOffset int64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return fmt.Errorf("consumequeue %s: truncate: %w", q.dir, mappedfile.ErrClosed)
	}
	files := q.files.Load()
	if isEmpty(files) {
		return nil
	}
	first := files.First().FromOffset() / UnitSize
	maxOffset := q.maxOffset.Load()
	keep, err := q.search(first, maxOffset, func(u Unit) bool { return !u.IsBlank() && u.PhysicalOffset >= physicalOffset })
	if err != nil {
		return err
	}
	if keep == maxOffset {
		return nil
	}
	return q.truncateLocked(ctx, keep*UnitSize)
}

// TruncateAt drops the units at and after queueOffset, zeroing them on
// disk: the repair for an Append that returned ErrConflict after a crash
// (a torn unit), before appending the right unit again.
func (q *Queue) TruncateAt(ctx context.Context, queueOffset int64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return fmt.Errorf("consumequeue %s: truncate: %w", q.dir, mappedfile.ErrClosed)
	}
	if queueOffset < 0 {
		return fmt.Errorf("consumequeue %s: truncate at %d: %w", q.dir, queueOffset, mappedfile.ErrInvalidArgument)
	}
	if isEmpty(q.files.Load()) || queueOffset >= q.maxOffset.Load() {
		return nil
	}
	return q.truncateLocked(ctx, queueOffset*UnitSize)
}

// DeleteBefore applies retention: it deletes, oldest first, whole files
// (never the last one) whose last unit's record ends at or before
// minPhysicalOffset, and moves MinOffset to the first unit whose
// PhysicalOffset ≥ minPhysicalOffset (MaxOffset when there is none). It
// returns how many files it deleted.
func (q *Queue) DeleteBefore(ctx context.Context, minPhysicalOffset int64) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return 0, fmt.Errorf("consumequeue %s: delete: %w", q.dir, mappedfile.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("consumequeue %s: delete: %w", q.dir, err)
	}
	files := q.files.Load()
	if isEmpty(files) {
		return 0, nil
	}
	list := files.Files()
	deletable := 0
	for ; deletable < len(list)-1; deletable++ {
		f := list[deletable]
		last, err := q.readUnit((f.FromOffset()+f.SizeBytes())/UnitSize - 1)
		if err != nil {
			return 0, fmt.Errorf("consumequeue %s: read the last unit of %s: %w", q.dir, f.Path(), err)
		}
		if !last.IsBlank() && last.End() > minPhysicalOffset {
			break
		}
	}
	from := list[deletable].FromOffset() / UnitSize
	maxOffset := q.maxOffset.Load()
	newMin, err := q.search(from, maxOffset, func(u Unit) bool { return !u.IsBlank() && u.PhysicalOffset >= minPhysicalOffset })
	if err != nil {
		return 0, err
	}
	// Publish the new minimum before the files go, so readers see
	// ErrNotFound rather than a closed file.
	q.minOffset.Store(max(newMin, q.minOffset.Load()))
	for i := 0; i < deletable; i++ {
		if err := files.DeleteFirst(); err != nil {
			return i, fmt.Errorf("consumequeue %s: %w", q.dir, err)
		}
	}
	return deletable, nil
}

// Destroy deletes every file of the queue (the topic was deleted, or the
// queue is to be rebuilt from the CommitLog); the queue is then empty and
// the next Append starts it again.
func (q *Queue) Destroy(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return fmt.Errorf("consumequeue %s: destroy: %w", q.dir, mappedfile.ErrClosed)
	}
	files := q.files.Load()
	if isEmpty(files) {
		return nil
	}
	return q.truncateLocked(ctx, files.First().FromOffset())
}

// List returns the topics and queue ids that have a directory under dir
// (the consumequeue/ root) in the file system of backend (storefs.Of), queue
// ids ascending; an empty map when dir does not exist. A directory under a
// topic whose name is not a queue id is an error wrapping ErrCorrupt.
func List(dir string, backend mappedfile.Backend) (map[string][]int32, error) {
	fsys := storefs.Of(backend)
	out := make(map[string][]int32)
	topics, err := fsys.ListDirs(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("consumequeue: list %s: %w", dir, err)
	}
	for _, topic := range topics {
		names, err := fsys.ListDirs(filepath.Join(dir, topic))
		if err != nil {
			return nil, fmt.Errorf("consumequeue: list %s: %w", filepath.Join(dir, topic), err)
		}
		var ids []int32
		for _, name := range names {
			id, err := parseQueueID(name)
			if err != nil {
				return nil, fmt.Errorf("consumequeue: %s: %w", filepath.Join(dir, topic, name), err)
			}
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		if len(ids) > 0 {
			out[topic] = ids
		}
	}
	return out, nil
}

// parseQueueID parses a queue directory name strictly: decimal digits, no
// sign, no leading zero, fits an int32.
func parseQueueID(name string) (int32, error) {
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return 0, fmt.Errorf("directory name %q is not a queue id: %w", name, ErrCorrupt)
		}
	}
	id, err := strconv.ParseInt(name, 10, 32)
	if err != nil || name == "" || (len(name) > 1 && name[0] == '0') {
		return 0, fmt.Errorf("directory name %q is not a queue id: %w", name, ErrCorrupt)
	}
	return int32(id), nil
}

// SyncFrom makes durable (fsync, whole files) every file of the queue that
// may hold a unit of a record at or after physicalOffset — all of them when
// physicalOffset ≤ 0. After a crash the units a dead process appended may
// sit in the page cache, never synced, while the files were opened full: a
// Flush would not reach them. Recovery calls it before anything may claim
// those units durable (the checkpoint's dispatched offset).
func (q *Queue) SyncFrom(ctx context.Context, physicalOffset int64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return fmt.Errorf("consumequeue %s: sync: %w", q.dir, mappedfile.ErrClosed)
	}
	files := q.files.Load()
	if isEmpty(files) {
		return nil
	}
	list := files.Files()
	for i := len(list) - 1; i >= 0; i-- {
		f := list[i]
		if err := files.SyncRange(ctx, f.FromOffset(), f.FromOffset()+1); err != nil {
			return fmt.Errorf("consumequeue %s: %w", q.dir, err)
		}
		// Files fill in CommitLog order: once one begins with a unit of an
		// older record, the files before it hold only older ones.
		if u, err := q.readUnit(f.FromOffset() / UnitSize); physicalOffset > 0 && err == nil && !u.IsBlank() && u.PhysicalOffset < physicalOffset {
			break
		}
	}
	return nil
}
