package indexfile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/engine/storefs"
	"github.com/mqstore/mqstore/mappedfile"
)

// Config says where the index files live and how big they are.
type Config struct {
	// Dir is the index/ directory.
	Dir     string
	Backend mappedfile.Backend
	// SlotCount and MaxEntries size every file; 0 means the defaults.
	// A file holds MaxEntries − 1 entries (entry 0 is "none").
	SlotCount  int
	MaxEntries int
	// Now gives the creation time that names a new file; nil means time.Now.
	Now func() time.Time
	// AfterCrash says the last process did not close the index: the newest
	// file's header may be torn (it is written only on Flush and roll), so an
	// invalid one there restarts the file instead of failing Open.
	AfterCrash bool
}

// FileInfo describes one index file.
type FileInfo struct {
	Name string
	Path string
	Header
}

// file is one open index file. Its header lives in memory, guarded by
// Index.mu, and is written into the file by Flush, Close and recovery.
type file struct {
	name string
	mf   mappedfile.MappedFile
	ow   mappedfile.Overwriter // nil when the backend cannot overwrite

	header Header
	// generation counts changes; flushedGeneration is the last one a Flush
	// made durable. Both guarded by Index.mu.
	generation        uint64
	flushedGeneration uint64
	// ready: the write position sits at the next entry and no slot points
	// at or past IndexCount (a new file, or the newest after recovery).
	ready   bool
	removed bool
	// flushMu serializes the file's Flush calls: Index.Flush runs them
	// outside Index.mu while a Put that rolls flushes the full file under
	// it (a MappedFile takes one flusher at a time).
	flushMu sync.Mutex
}

// flush makes the file durable (one flusher at a time).
func (f *file) flush(ctx context.Context) error {
	f.flushMu.Lock()
	defer f.flushMu.Unlock()
	if _, err := f.mf.Flush(ctx, 0); err != nil {
		return fmt.Errorf("indexfile: %s: flush: %w", f.mf.Path(), err)
	}
	return nil
}

// Index manages the index files of a store, oldest first.
//
// Put, Flush's header writes, TruncateByPhysical, DeleteBefore and Close hold
// the write lock; Query and the getters the read lock, so a reader never sees
// a slot being overwritten. Flush makes files durable outside the lock.
type Index struct {
	dir        string
	backend    mappedfile.Backend
	fs         storefs.FS
	slotCount  int64
	maxEntries int32
	sizeBytes  int64
	now        func() time.Time

	mu     sync.RWMutex
	files  []*file
	closed bool
	// writeErr is sticky: after a failed write the state of the newest file
	// is unknown, so every later Put returns it.
	writeErr error
	// Reusable buffers of Put, guarded by mu (write lock).
	entries   entriesEncoder
	run       []runKey // PutBatch's run of keys
	slotPos   []int64  // a run's slot positions,
	slotNew   []byte   // the heads it writes there,
	slotOld   []byte   // and the heads they replace
	slot      [SlotSize]byte
	headerBuf [HeaderSize]byte
	entryBuf  [EntrySize]byte
}

// nameLength is the length of a file name: yyyyMMddHHmmssSSS.
const nameLength = 17

// Open loads the index files in cfg.Dir (creating the directory when
// missing). Every file must be named by 17 digits and have the size the
// configuration gives, and a header with 1 ≤ IndexCount ≤ MaxEntries and
// 0 ≤ HashSlotCount ≤ IndexCount; otherwise Open fails with an error
// wrapping ErrCorrupt (or the backend's ErrSizeMismatch) that names the file.
// A header of zeros (created, never flushed) starts the file again.
//
// Files roll only when full, so every file but the newest is full. After a
// crash the first file that is not (its header lagged its entries) becomes
// the newest and the files after it are deleted: the engine re-dispatches
// from MaxPhysicalOffset. The newest file, unless full, is then made ready
// for appends: slots that point at or past IndexCount (written back before
// the header was) are walked back along their chain, and the entry area
// after the last entry is truncated (zeroed).
func Open(ctx context.Context, cfg Config) (*Index, error) {
	x, err := newIndex(cfg)
	if err != nil {
		return nil, err
	}
	names, err := x.list()
	if err != nil {
		return nil, err
	}
	for i, name := range names {
		// After a crash any file's header may be found torn (the model says
		// only the newest's, but a torn older one must not stop Open either):
		// that file starts again and the files after it go — the engine
		// rebuilds their entries from the CommitLog.
		f, err := x.load(ctx, name, cfg.AfterCrash)
		if err != nil {
			x.closeFiles()
			return nil, err
		}
		if f.header.IndexCount < x.maxEntries && i < len(names)-1 {
			if err := x.removeNames(names[i+1:]); err != nil {
				x.closeFiles()
				return nil, err
			}
			slog.Warn("indexfile: a file before the newest is not full; deleted the files after it",
				"file", f.mf.Path(), "indexCount", f.header.IndexCount, "deleted", names[i+1:])
			break
		}
	}
	if n := len(x.files); n > 0 {
		if err := x.settleLocked(ctx, x.files[n-1]); err != nil {
			x.closeFiles()
			return nil, err
		}
	}
	return x, nil
}

// removeNames removes files that were never opened, durably.
func (x *Index) removeNames(names []string) error {
	for _, name := range names {
		path := filepath.Join(x.dir, name)
		if err := x.fs.Remove(path); err != nil {
			return fmt.Errorf("indexfile: remove %s: %w", path, err)
		}
	}
	if err := x.fs.SyncDir(x.dir); err != nil {
		return fmt.Errorf("indexfile: %w", err)
	}
	return nil
}

func newIndex(cfg Config) (*Index, error) {
	slots, maxEntries := cfg.SlotCount, cfg.MaxEntries
	if slots == 0 {
		slots = DefaultSlotCount
	}
	if maxEntries == 0 {
		maxEntries = DefaultMaxEntries
	}
	if slots < 1 || maxEntries < 2 || maxEntries > math.MaxInt32 || slots > math.MaxInt32/SlotSize {
		return nil, fmt.Errorf("indexfile: %d slots, %d entries: %w", slots, maxEntries, mappedfile.ErrInvalidArgument)
	}
	if cfg.Backend == nil {
		return nil, fmt.Errorf("indexfile: no backend: %w", mappedfile.ErrInvalidArgument)
	}
	x := &Index{dir: cfg.Dir, backend: cfg.Backend, slotCount: int64(slots), maxEntries: int32(maxEntries),
		sizeBytes: HeaderSize + int64(slots)*SlotSize + int64(maxEntries)*EntrySize, now: cfg.Now}
	if x.now == nil {
		x.now = time.Now
	}
	x.fs = storefs.Of(cfg.Backend)
	if err := x.fs.MkdirAll(cfg.Dir); err != nil {
		return nil, fmt.Errorf("indexfile: create %s: %w", cfg.Dir, err)
	}
	return x, nil
}

// SizeBytes returns the size of every index file.
func (x *Index) SizeBytes() int64 { return x.sizeBytes }

// Dir returns the index directory.
func (x *Index) Dir() string { return x.dir }

func (x *Index) slotPosition(slot int64) int64 { return HeaderSize + slot*SlotSize }

func (x *Index) entryPosition(n int32) int64 {
	return HeaderSize + x.slotCount*SlotSize + int64(n)*EntrySize
}

// list returns the file names in the directory, sorted (= by creation
// time), leftover temporary files (a creation cut short) removed.
func (x *Index) list() ([]string, error) {
	all, err := x.fs.List(x.dir)
	if err != nil {
		return nil, fmt.Errorf("indexfile: list %s: %w", x.dir, err)
	}
	var names []string
	for _, name := range all {
		if strings.HasSuffix(name, ".tmp") {
			if err := storefs.RemoveDurably(x.fs, filepath.Join(x.dir, name)); err != nil {
				return nil, fmt.Errorf("indexfile: remove leftover %s: %w", name, err)
			}
			continue
		}
		if !isFileName(name) {
			return nil, fmt.Errorf("indexfile: %s: name is not yyyyMMddHHmmssSSS: %w", filepath.Join(x.dir, name), ErrCorrupt)
		}
		names = append(names, name)
	}
	return names, nil
}

func isFileName(name string) bool {
	if len(name) != nameLength {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return false
		}
	}
	return true
}

// spec is the spec of the index file at path. Not in huge pages
// (mappedfile.Spec.HugePages): its keys land in random hash slots, and a
// slot written into a clean 2 MiB folio dirties all of it at once — under
// writeback pressure (mqbench's dirty neighbour, vm.dirty_bytes 32 MiB) the
// dispatch that writes them was throttled for it, and uring-direct async's
// p99.9 at 1000 msgs/s went from 18–19 ms to 28–104 ms, with no gain in
// throughput (748k–779k against 720k–758k msgs/s). And accessed at random
// (Spec.RandomAccess): without the hint the kernel's readahead gave the
// entries, written in order, 2 MiB folios all the same, and zeroing them
// was 10 % of the CPU of async RocketMQ-shaped Puts (docs/backends.md).
func (x *Index) spec(path string) mappedfile.Spec {
	return mappedfile.Spec{Path: path, SizeBytes: x.sizeBytes, RandomAccess: true}
}

// load opens one existing file and checks its header.
//
// mayBeTorn says the last process crashed: a header is written only on
// Flush and roll, so an invalid one means it was never made durable, and the
// file starts again (the engine rebuilds its entries from the CommitLog).
// Without a crash it is corruption.
func (x *Index) load(ctx context.Context, name string, mayBeTorn bool) (*file, error) {
	path := filepath.Join(x.dir, name)
	mf, err := x.backend.Open(ctx, x.spec(path))
	if err != nil {
		return nil, fmt.Errorf("indexfile: load %s: %w", path, err)
	}
	f := &file{name: name, mf: mf}
	f.ow, _ = mf.(mappedfile.Overwriter)
	x.files = append(x.files, f)
	if _, err := mf.ReadAt(x.headerBuf[:], 0); err != nil {
		return nil, fmt.Errorf("indexfile: load %s: read header: %w", path, err)
	}
	h := DecodeHeader(x.headerBuf[:])
	if mayBeTorn && h != (Header{}) && !x.headerValid(h) {
		slog.Warn("indexfile: a header is torn (never flushed); starting the file again", slog.String("path", path))
		h = Header{}
	}
	if h == (Header{}) || h.IndexCount == 0 {
		// Created, never flushed (the header a file starts with may be
		// torn by a crash; a flushed header has indexCount ≥ 1): start it
		// again after the previous file.
		h.IndexCount = 1
		if n := len(x.files); n > 1 {
			h = freshHeader(x.files[n-2].header)
		}
		f.generation++
	}
	if !x.headerValid(h) {
		return nil, fmt.Errorf("indexfile: load %s: header has indexCount %d, hashSlotCount %d (max entries %d): %w",
			path, h.IndexCount, h.HashSlotCount, x.maxEntries, ErrCorrupt)
	}
	f.header = h
	return f, nil
}

// headerValid checks the counts of a loaded header.
func (x *Index) headerValid(h Header) bool {
	return h.IndexCount >= 1 && h.IndexCount <= x.maxEntries && h.HashSlotCount >= 0 && h.HashSlotCount <= h.IndexCount
}

// freshHeader is the header of a new file after one whose header is prev:
// it starts where prev ended (RocketMQ passes the last end offset and time).
func freshHeader(prev Header) Header {
	h := Header{IndexCount: 1}
	if prev.EndPhyOffset > 0 {
		h.BeginPhyOffset, h.EndPhyOffset = prev.EndPhyOffset, prev.EndPhyOffset
	}
	if prev.EndTimestamp > 0 {
		h.BeginTimestamp, h.EndTimestamp = prev.EndTimestamp, prev.EndTimestamp
	}
	return h
}

func (x *Index) overwriter(f *file) (mappedfile.Overwriter, error) {
	if f.ow == nil {
		return nil, fmt.Errorf("indexfile: %s: backend %s cannot overwrite slots and header: %w",
			f.mf.Path(), x.backend.Name(), mappedfile.ErrUnsupported)
	}
	return f.ow, nil
}

// Put indexes key (the caller passes "topic#key") for the record at
// physicalOffset stored at storeTimestamp (ms). It starts a new file when
// the newest holds MaxEntries − 1 entries.
//
// As RocketMQ's IndexService.buildIndex, Put ignores a record older than
// the last one indexed (physicalOffset < MaxPhysicalOffset()): a re-dispatch
// after recovery. Records must be put in CommitLog order.
//
// After a failed write Put returns that error forever (sticky).
// Put does not keep key after it returns (the engine passes a view of a reused buffer).
func (x *Index) Put(ctx context.Context, key string, physicalOffset int64, storeTimestamp int64) error {
	keys := [1]string{key}
	return x.PutKeys(ctx, keys[:], physicalOffset, storeTimestamp)
}

// maxDedupKeys bounds the keys of one record PutKeys tells apart in memory;
// past it a key is looked up in the file, as Put does.
const maxDedupKeys = 16

// PutKeys is Put for each of a record's keys, in order, under one lock.
// keys are not kept.
func (x *Index) PutKeys(ctx context.Context, keys []string, physicalOffset int64, storeTimestamp int64) error {
	var buf [maxDedupKeys]int32
	hashes := buf[:0]
	for _, key := range keys {
		hashes = append(hashes, record.IndexKeyHash(key))
	}
	return x.PutHashes(ctx, hashes, physicalOffset, storeTimestamp)
}

// PutHashes is PutKeys for keys already hashed (record.IndexKeyHash), in
// order: what dispatch has when the append hashed the record's keys. When the
// record is newer than every indexed one — dispatch, in steady state — no key
// of it can be in the files yet, so a key is compared with the record's
// earlier keys in memory (by hash, as the file would compare them) instead
// of searching the file's chain; a re-dispatch of the newest indexed record
// searches the files as Put does. hashes are not kept.
func (x *Index) PutHashes(ctx context.Context, hashes []int32, physicalOffset int64, storeTimestamp int64) error {
	recs := [1]RecordKeys{{Hashes: hashes, PhysicalOffset: physicalOffset, StoreTimestamp: storeTimestamp}}
	return x.PutBatch(ctx, recs[:])
}

// RecordKeys is one record's index key hashes, for PutBatch.
type RecordKeys struct {
	Hashes         []int32
	PhysicalOffset int64
	StoreTimestamp int64
}

// runKey is one key of a run of entries: its hash and the record (an index
// into the batch) it points at.
type runKey struct {
	hash int32
	rec  int32
}

// PutBatch is PutHashes for each of recs, in order, under one lock. The
// keys of records newer than every indexed one go in as one run of entries
// — one swap of all their slots (mappedfile.Overwriter.SwapEach, so the
// CPU fetches the random slots' lines together) and one append — per file
// they fill. recs and their hashes are not kept.
func (x *Index) PutBatch(ctx context.Context, recs []RecordKeys) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return fmt.Errorf("indexfile %s: put: %w", x.dir, mappedfile.ErrClosed)
	}
	if x.writeErr != nil {
		return x.writeErr
	}
	run := x.run[:0]
	defer func() { x.run = run[:0] }()
	for ri := range recs {
		r := &recs[ri]
		if len(r.Hashes) == 0 {
			continue
		}
		if len(run) > 0 && (r.PhysicalOffset <= recs[run[len(run)-1].rec].PhysicalOffset || len(r.Hashes) > maxDedupKeys) {
			// Not newer than the run's last record, or too many keys to
			// tell apart in memory: the run goes in first.
			if err := x.putRunLocked(ctx, run, recs); err != nil {
				return err
			}
			run = run[:0]
		}
		if len(run) == 0 && (len(r.Hashes) > maxDedupKeys || x.newestLocked() >= r.PhysicalOffset) {
			if err := x.putRecordLocked(ctx, recs[ri:ri+1]); err != nil {
				return err
			}
			continue
		}
		for i, hash := range r.Hashes {
			if !slices.Contains(r.Hashes[:i], hash) { // this record's keys put so far
				run = append(run, runKey{hash: hash, rec: int32(ri)})
			}
		}
	}
	return x.putRunLocked(ctx, run, recs)
}

// newestLocked returns the physical offset of the newest record indexed,
// -1 when there is none.
func (x *Index) newestLocked() int64 {
	if n := len(x.files); n > 0 {
		return x.files[n-1].header.EndPhyOffset
	}
	return -1
}

// putRecordLocked puts the keys of one record (rec[0]) that may be the
// newest indexed (a re-dispatch after a crash starts at that record, whose
// keys may be only partly there) or older (ignored, as RocketMQ does), or
// has more keys than maxDedupKeys.
func (x *Index) putRecordLocked(ctx context.Context, rec []RecordKeys) error {
	r := &rec[0]
	newest := x.newestLocked()
	if r.PhysicalOffset < newest {
		return nil
	}
	redispatch := r.PhysicalOffset == newest
	// keep collects the keys to put, which go in as one run of entries.
	// A key that must be looked up in the files puts what keep holds first:
	// the search must see the record's earlier keys.
	var keepBuf [maxDedupKeys]runKey
	keep := keepBuf[:0]
	for i, hash := range r.Hashes {
		if redispatch || i >= maxDedupKeys {
			if err := x.putRunLocked(ctx, keep, rec); err != nil {
				return err
			}
			keep = keep[:0]
			if has, err := x.hasEntryLocked(hash, r.PhysicalOffset); err != nil || has {
				if err != nil {
					return err
				}
				continue
			}
		} else if slices.ContainsFunc(keep, func(k runKey) bool { return k.hash == hash }) {
			continue // this record's keys put so far
		}
		keep = append(keep, runKey{hash: hash})
	}
	return x.putRunLocked(ctx, keep, rec)
}

// putRunLocked puts the entries of run (the distinct keys of each record
// of recs it names, records in CommitLog order) as runs of entries, one per
// file they fill.
func (x *Index) putRunLocked(ctx context.Context, run []runKey, recs []RecordKeys) error {
	for len(run) > 0 {
		f, err := x.writableLocked(ctx)
		if err != nil {
			return err
		}
		k := min(len(run), int(x.maxEntries-f.header.IndexCount))
		if err := x.putEntriesLocked(ctx, f, run[:k], recs); err != nil {
			return x.stop(err)
		}
		run = run[k:]
	}
	return nil
}

// hasEntryLocked reports whether a key of keyHash is already indexed for
// the record at physicalOffset, when that is the newest record indexed: a
// re-dispatch after a crash starts at that record (its keys may be only
// partly there), and a record may list a key twice. Only the files ending at
// that record are searched, each chain only down to older records.
func (x *Index) hasEntryLocked(keyHash int32, physicalOffset int64) (bool, error) {
	for i := len(x.files) - 1; i >= 0; i-- {
		f := x.files[i]
		if f.header.EndPhyOffset != physicalOffset {
			break
		}
		if f.header.IndexCount <= 1 {
			continue
		}
		if _, err := f.mf.ReadAt(x.slot[:], x.slotPosition(int64(keyHash)%x.slotCount)); err != nil {
			return false, fmt.Errorf("indexfile: %s: read slot: %w", f.mf.Path(), err)
		}
		for n := int32(be32(x.slot[:])); n > 0 && n < f.header.IndexCount; {
			if _, err := f.mf.ReadAt(x.entryBuf[:], x.entryPosition(n)); err != nil {
				return false, fmt.Errorf("indexfile: %s: read entry %d: %w", f.mf.Path(), n, err)
			}
			e := DecodeEntry(x.entryBuf[:])
			if e.PhyOffset < physicalOffset {
				break
			}
			if e.KeyHash == keyHash && e.PhyOffset == physicalOffset {
				return true, nil
			}
			if e.PrevIndex >= n {
				break // a broken chain
			}
			n = e.PrevIndex
		}
	}
	return false, nil
}

// writableLocked returns the newest file when it has room, else a new one.
func (x *Index) writableLocked(ctx context.Context) (*file, error) {
	if n := len(x.files); n > 0 && x.files[n-1].header.IndexCount < x.maxEntries {
		return x.files[n-1], nil
	}
	return x.createLocked(ctx)
}

// putEntriesLocked appends one entry for each key of run (room for all in
// f) and points each key's slot at its entry. The slots are swapped for
// their new heads (in order, so two keys of the run that share a slot
// chain: the second's previous head is the first's entry) before the run
// is appended, since an entry holds the head it replaces: a failed append
// puts the old heads back (the index is stopped by the error either way;
// readers under the read lock never see the in-between state). A swap that
// fails part way (a fault in the mapping) is not undone: the file has
// failed for good, and the slots it left point past the entries written,
// which queries stop at and recovery repairs.
func (x *Index) putEntriesLocked(ctx context.Context, f *file, run []runKey, recs []RecordKeys) error {
	ow, err := x.overwriter(f)
	if err != nil {
		return err
	}
	h := &f.header
	if h.IndexCount <= 1 {
		// The first entry fixes the file's begin; its timeDiff is 0.
		first := &recs[run[0].rec]
		h.BeginPhyOffset, h.BeginTimestamp = first.PhysicalOffset, first.StoreTimestamp
	}
	k := len(run)
	x.slotPos = x.slotPos[:0]
	x.slotNew = slices.Grow(x.slotNew[:0], k*SlotSize)[:k*SlotSize]
	x.slotOld = slices.Grow(x.slotOld[:0], k*SlotSize)[:k*SlotSize]
	for i, key := range run {
		x.slotPos = append(x.slotPos, x.slotPosition(int64(key.hash)%x.slotCount))
		putBE32(x.slotNew[i*SlotSize:], uint32(h.IndexCount+int32(i)))
	}
	undo := func() {
		for i := k - 1; i >= 0; i-- {
			_, _ = ow.WriteAt(x.slotOld[i*SlotSize:(i+1)*SlotSize], x.slotPos[i])
		}
	}
	if err := ow.SwapEach(x.slotNew, x.slotOld, SlotSize, x.slotPos); err != nil {
		return fmt.Errorf("indexfile: %s: swap %d slots: %w", f.mf.Path(), k, err)
	}
	x.entries.buf = slices.Grow(x.entries.buf[:0], k*EntrySize)[:k*EntrySize]
	for i, key := range run {
		n := h.IndexCount + int32(i)
		previous := int32(be32(x.slotOld[i*SlotSize:]))
		if previous <= 0 || previous >= n {
			previous = 0
		}
		r := &recs[key.rec]
		EncodeEntry(x.entries.buf[i*EntrySize:], Entry{KeyHash: key.hash, PhyOffset: r.PhysicalOffset, TimeDiff: timeDiff(r.StoreTimestamp, h.BeginTimestamp), PrevIndex: previous})
	}
	want := x.entryPosition(h.IndexCount)
	at, err := f.mf.Append(k*EntrySize, &x.entries)
	if err != nil {
		undo()
		return fmt.Errorf("indexfile: %s: append entries %d–%d: %w", f.mf.Path(), h.IndexCount, h.IndexCount+int32(k)-1, err)
	}
	if at != want {
		return fmt.Errorf("indexfile: %s: entry %d appended at %d, want %d: %w", f.mf.Path(), h.IndexCount, at, want, ErrCorrupt)
	}
	if f.mf.ReadablePosition() < f.mf.WrotePosition() {
		if _, err := f.mf.Commit(ctx, 0); err != nil {
			return fmt.Errorf("indexfile: %s: commit: %w", f.mf.Path(), err)
		}
	}
	last := &recs[run[k-1].rec]
	h.HashSlotCount += int32(k)
	h.IndexCount += int32(k)
	h.EndPhyOffset, h.EndTimestamp = last.PhysicalOffset, last.StoreTimestamp
	f.generation++
	return nil
}

// timeDiff is RocketMQ's: whole seconds since begin, 0 when begin ≤ 0,
// clamped to [0, MaxInt32].
func timeDiff(storeTimestamp, beginTimestamp int64) int32 {
	if beginTimestamp <= 0 {
		return 0
	}
	diff := (storeTimestamp - beginTimestamp) / 1000
	switch {
	case diff < 0:
		return 0
	case diff > math.MaxInt32:
		return math.MaxInt32
	}
	return int32(diff)
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func putBE32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

// createLocked creates a new newest file: header, zeroed slots and entry 0
// appended, so the write position is at entry 1.
//
// Before that it flushes the previous file (now full) and after it the new
// file's header: so after a crash every file but the newest is durably full
// and the newest has a valid header, which says where indexing must resume.
// This stalls Put once per MaxEntries − 1 entries (RocketMQ flushes the
// previous file in a background thread instead).
func (x *Index) createLocked(ctx context.Context) (*file, error) {
	var h Header
	if n := len(x.files); n > 0 {
		prev := x.files[n-1]
		if err := x.flushFileLocked(ctx, prev); err != nil {
			return nil, x.stop(err)
		}
		h = freshHeader(prev.header)
	} else {
		h.IndexCount = 1
	}
	name := x.nextName()
	path := filepath.Join(x.dir, name)
	mf, err := x.backend.Open(ctx, x.spec(path))
	if err != nil {
		return nil, fmt.Errorf("indexfile: create %s: %w", path, err)
	}
	f := &file{name: name, mf: mf, header: h, generation: 1, ready: true}
	f.ow, _ = mf.(mappedfile.Overwriter)
	if err := x.layOut(ctx, f); err != nil {
		if derr := mf.Delete(); derr != nil {
			return nil, x.stop(fmt.Errorf("indexfile: create %s: %w (and delete: %v)", path, err, derr))
		}
		return nil, fmt.Errorf("indexfile: create %s: %w", path, err)
	}
	x.files = append(x.files, f)
	if err := x.flushFileLocked(ctx, f); err != nil {
		return nil, x.stop(err)
	}
	return f, nil
}

// ErrStopped marks the error of a write after which the index takes no
// more keys until it is opened again (recovery repairs what the write
// left): whatever the cause, a retry would get the same error, even one
// that names a shortage (ENOSPC) that has since passed.
var ErrStopped = errors.New("indexfile: stopped by a failed write")

// stop makes err the index's sticky write error, marked ErrStopped, and
// returns it.
func (x *Index) stop(err error) error {
	x.writeErr = fmt.Errorf("%w: %w", ErrStopped, err)
	return x.writeErr
}

// flushFileLocked writes f's header and makes the file durable.
func (x *Index) flushFileLocked(ctx context.Context, f *file) error {
	if f.generation == f.flushedGeneration {
		return nil
	}
	if err := x.writeHeaderLocked(f); err != nil {
		return err
	}
	if err := f.flush(ctx); err != nil {
		return err
	}
	f.flushedGeneration = f.generation
	return nil
}

// layOutChunk is how much of the slot area one Append reserves.
const layOutChunk = 1 << 20

func (x *Index) layOut(ctx context.Context, f *file) error {
	if _, err := x.overwriter(f); err != nil {
		return err
	}
	EncodeHeader(x.headerBuf[:], f.header)
	if _, err := f.mf.Append(HeaderSize, mappedfile.Bytes(x.headerBuf[:])); err != nil {
		return err
	}
	for left := x.slotCount*SlotSize + EntrySize; left > 0; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(left, layOutChunk)
		if _, err := f.mf.Append(int(n), zeroEncoder{}); err != nil {
			return err
		}
		left -= n
	}
	if _, err := f.mf.Commit(ctx, 0); err != nil {
		return err
	}
	return nil
}

// nextName names a new file by the current local time in milliseconds,
// always after the newest file's name (bumped by 1 ms when equal or older).
func (x *Index) nextName() string {
	name := formatName(x.now())
	n := len(x.files)
	if n == 0 || name > x.files[n-1].name {
		return name
	}
	last := x.files[n-1].name
	if t, err := parseName(last); err == nil {
		if bumped := formatName(t.Add(time.Millisecond)); bumped > last {
			return bumped
		}
	}
	v, _ := strconv.ParseInt(last, 10, 64) // 17 digits: checked at load
	return fmt.Sprintf("%017d", v+1)
}

func formatName(t time.Time) string {
	t = t.In(time.Local)
	return fmt.Sprintf("%s%03d", t.Format("20060102150405"), t.Nanosecond()/int(time.Millisecond))
}

func parseName(name string) (time.Time, error) {
	if !isFileName(name) {
		return time.Time{}, fmt.Errorf("indexfile: name %q: %w", name, ErrCorrupt)
	}
	t, err := time.ParseInLocation("20060102150405", name[:14], time.Local)
	if err != nil {
		return time.Time{}, fmt.Errorf("indexfile: name %q: %v: %w", name, err, ErrCorrupt)
	}
	ms, _ := strconv.Atoi(name[14:])
	return t.Add(time.Duration(ms) * time.Millisecond), nil
}

// MaxPhysicalOffset is the EndPhyOffset of the newest file: how far
// indexing has got (0 with no file).
func (x *Index) MaxPhysicalOffset() int64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if n := len(x.files); n > 0 {
		return x.files[n-1].header.EndPhyOffset
	}
	return 0
}

// Covers reports whether the record at physicalOffset has been indexed:
// some entry exists and the newest is at or after physicalOffset. (The
// keys of that newest record may be only partly indexed after a crash;
// re-putting them duplicates entries, which queries tolerate.)
func (x *Index) Covers(physicalOffset int64) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := len(x.files)
	if n == 0 || (n == 1 && x.files[0].header.IndexCount <= 1) {
		return false
	}
	return x.files[n-1].header.EndPhyOffset >= physicalOffset
}

// LastTimestamp is the EndTimestamp of the newest file (0 with no file).
func (x *Index) LastTimestamp() int64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if n := len(x.files); n > 0 {
		return x.files[n-1].header.EndTimestamp
	}
	return 0
}

// Files describes the files, oldest first, with their current headers.
func (x *Index) Files() []FileInfo {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]FileInfo, len(x.files))
	for i, f := range x.files {
		out[i] = FileInfo{Name: f.name, Path: f.mf.Path(), Header: f.header}
	}
	return out
}

// Close writes the headers into the files and closes them; it does not
// flush (call Flush first for a clean shutdown).
func (x *Index) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return fmt.Errorf("indexfile %s: close: %w", x.dir, mappedfile.ErrClosed)
	}
	var errs []error
	for _, f := range x.files {
		if f.generation != f.flushedGeneration && f.ow != nil && f.mf.Err() == nil {
			if err := x.writeHeaderLocked(f); err != nil {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, x.closeFiles())
	return errors.Join(errs...)
}

func (x *Index) closeFiles() error {
	x.closed = true
	var errs []error
	for _, f := range x.files {
		if err := f.mf.Close(); err != nil && !errors.Is(err, mappedfile.ErrClosed) {
			errs = append(errs, err)
		}
	}
	x.files = nil
	return errors.Join(errs...)
}

func (x *Index) writeHeaderLocked(f *file) error {
	ow, err := x.overwriter(f)
	if err != nil {
		return err
	}
	EncodeHeader(x.headerBuf[:], f.header)
	if _, err := ow.WriteAt(x.headerBuf[:], 0); err != nil {
		return fmt.Errorf("indexfile: %s: write header: %w", f.mf.Path(), err)
	}
	return nil
}
