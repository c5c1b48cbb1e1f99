package controller

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/mqstore/mqstore/engine/storefs"
	"github.com/mqstore/mqstore/mappedfile"
)

// The log store keeps Raft's log in fixed-size segment files opened through
// a mappedfile.Backend (the engine's seam: mmap on a disk, MemFS in the
// crash tests) and its directory through storefs, so the same crash model
// that tests the CommitLog tests it.
//
// A segment is named "<first index, 20 digits>-<size in bytes>.rlog" and
// holds entries back to back from position 0, each framed as
//
//	len u32 | crc32c u32 | payload (len bytes)
//	payload: index u64 | term u64 | type u8 | appendedAt unix ns i64 |
//	         dataLen u32 | data | extensions
//
// (little-endian; the CRC covers the length word and the payload). A zero
// length word ends a segment's entries. StoreLogs appends a batch and
// flushes it (fdatasync / msync) before it returns. Open rebuilds the index
// (each entry's segment and position) by scanning: in the last segment the
// first entry whose frame does not check — a torn write of a batch that
// was never acknowledged — and everything after it is cut durably
// (MappedFile.Truncate zeroes and syncs the rest); anywhere else a bad
// frame is corruption and Open fails naming the file.

const (
	logSuffix      = ".rlog"
	frameHeader    = 8
	payloadFixed   = 8 + 8 + 1 + 8 + 4
	maxEntryBytes  = 64 << 20
	stableFileName = "raft-stable.json"
	logFirstFile   = "raft-first.json"
	// DefaultLogSegmentBytes is the size of a log segment file.
	DefaultLogSegmentBytes = 4 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrLogCorrupt: a log segment holds a bad frame where no torn write can be.
var ErrLogCorrupt = errors.New("controller: raft log corrupt")

// ErrStoreFailed: an earlier write or sync of the log store failed; the
// store refuses further changes (its state on disk is unknown until it is
// reopened).
var ErrStoreFailed = errors.New("controller: raft log store failed earlier")

// errKeyNotFound is what hashicorp/raft expects from a StableStore for a
// missing key: it compares the error's text with "not found".
var errKeyNotFound = errors.New("not found")

type segment struct {
	first int64 // index of the first entry the file may hold
	file  mappedfile.MappedFile
	pos   []int64 // position of each entry; entry first+i is at pos[i]
	end   int64   // where the next entry goes
}

func (s *segment) last() int64 { return s.first + int64(len(s.pos)) - 1 }

// LogStore is a raft.LogStore on segment files. Safe for concurrent use.
type LogStore struct {
	dir     string
	backend mappedfile.Backend
	fs      storefs.FS
	segSize int64

	mu    sync.Mutex
	segs  []*segment
	first int64 // lowest live index (entries below it in segs[0] are deleted); 0 when empty
	err   error // sticky
}

// LogStoreOptions configure OpenLogStore.
type LogStoreOptions struct {
	// Backend opens the segment files (nil: the mmap backend).
	Backend mappedfile.Backend
	// SegmentBytes is the size of a new segment (DefaultLogSegmentBytes);
	// a larger entry gets a segment of its own size.
	SegmentBytes int64
}

func segName(first, size int64) string {
	return fmt.Sprintf("%020d-%d%s", first, size, logSuffix)
}

func parseSegName(name string) (first, size int64, ok bool) {
	base, found := strings.CutSuffix(name, logSuffix)
	if !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(base, "-")
	if !found || len(a) != 20 {
		return 0, 0, false
	}
	first, err1 := strconv.ParseInt(a, 10, 64)
	size, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || first < 1 || size <= 0 {
		return 0, 0, false
	}
	return first, size, true
}

// OpenLogStore opens (creating) the log store in dir and rebuilds its index.
func OpenLogStore(ctx context.Context, dir string, opts LogStoreOptions) (*LogStore, error) {
	if opts.Backend == nil {
		opts.Backend = defaultBackend()
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = DefaultLogSegmentBytes
	}
	if opts.SegmentBytes < frameHeader+payloadFixed {
		return nil, fmt.Errorf("controller: log segment size %d is smaller than one entry", opts.SegmentBytes)
	}
	s := &LogStore{dir: filepath.Clean(dir), backend: opts.Backend, fs: storefs.Of(opts.Backend), segSize: opts.SegmentBytes}
	if err := s.fs.MkdirAll(s.dir); err != nil {
		return nil, fmt.Errorf("controller: open log store: %w", err)
	}
	if err := s.load(ctx); err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("controller: open log store %s: %w", s.dir, err)
	}
	return s, nil
}

type firstRecord struct {
	First int64 `json:"first"`
}

func (s *LogStore) load(ctx context.Context) error {
	names, err := s.fs.List(s.dir)
	if err != nil {
		return err
	}
	type found struct{ first, size int64 }
	var files []found
	for _, n := range names {
		if first, size, ok := parseSegName(n); ok {
			files = append(files, found{first, size})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].first < files[j].first })
	for i, f := range files {
		isLast := i == len(files)-1
		path := filepath.Join(s.dir, segName(f.first, f.size))
		mf, err := s.backend.Open(ctx, mappedfile.Spec{Path: path, FromOffset: 0, SizeBytes: f.size})
		if err != nil {
			return err
		}
		seg := &segment{first: f.first, file: mf}
		s.segs = append(s.segs, seg)
		torn, err := scanSegment(seg)
		if err != nil {
			return err
		}
		if torn && !isLast {
			return fmt.Errorf("%s: a bad frame at position %d before the last segment: %w", path, seg.end, ErrLogCorrupt)
		}
		if i > 0 {
			prev := s.segs[i-1]
			if prev.last()+1 != seg.first {
				return fmt.Errorf("%s starts at index %d but the segment before it ends at %d: %w",
					path, seg.first, prev.last(), ErrLogCorrupt)
			}
		}
	}
	// Drop empty trailing segments but the first (a roll cut short).
	for len(s.segs) > 1 && len(s.segs[len(s.segs)-1].pos) == 0 {
		if err := s.deleteSegment(len(s.segs) - 1); err != nil {
			return err
		}
	}
	if len(s.segs) == 1 && len(s.segs[0].pos) == 0 {
		if err := s.deleteSegment(0); err != nil {
			return err
		}
	}
	if len(s.segs) == 0 {
		return storefs.RemoveDurably(s.fs, filepath.Join(s.dir, logFirstFile))
	}
	// Zero (durably) whatever follows the last good entry of the segment
	// appends go to: a torn batch, or nothing.
	last := s.segs[len(s.segs)-1]
	if err := last.file.Truncate(ctx, last.end); err != nil {
		return fmt.Errorf("cut the tail of %s at %d: %w", last.file.Path(), last.end, err)
	}
	s.first = s.segs[0].first
	data, err := s.fs.ReadFile(filepath.Join(s.dir, logFirstFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		var fr firstRecord
		if err := json.Unmarshal(data, &fr); err != nil {
			return fmt.Errorf("%s: %v: %w", logFirstFile, err, ErrLogCorrupt)
		}
		if fr.First > s.first {
			s.first = min(fr.First, s.segs[len(s.segs)-1].last()+1)
		}
	}
	if s.first > s.segs[len(s.segs)-1].last() {
		// Every entry was deleted and the removal of the files did not
		// complete: finish it.
		return s.deleteAllLocked()
	}
	return nil
}

// scanSegment indexes the entries of seg from position 0; torn reports a
// frame that does not check (as opposed to a clean end: a zero length word
// or the end of the file).
func scanSegment(seg *segment) (torn bool, err error) {
	size := seg.file.SizeBytes()
	var hdr [frameHeader]byte
	pos := int64(0)
	for {
		seg.end = pos
		if pos+frameHeader > size {
			return false, nil
		}
		if _, err := seg.file.ReadAt(hdr[:], pos); err != nil {
			return false, fmt.Errorf("%s: read at %d: %w", seg.file.Path(), pos, err)
		}
		n := int64(binary.LittleEndian.Uint32(hdr[0:4]))
		if n == 0 {
			return false, nil
		}
		if n < payloadFixed || pos+frameHeader+n > size {
			return true, nil
		}
		frame := make([]byte, frameHeader+n)
		if _, err := seg.file.ReadAt(frame, pos); err != nil {
			return false, fmt.Errorf("%s: read at %d: %w", seg.file.Path(), pos, err)
		}
		if !frameOK(frame) {
			return true, nil
		}
		if idx := int64(binary.LittleEndian.Uint64(frame[frameHeader:])); idx != seg.first+int64(len(seg.pos)) {
			return true, nil
		}
		seg.pos = append(seg.pos, pos)
		pos += frameHeader + n
	}
}

func frameOK(frame []byte) bool {
	want := binary.LittleEndian.Uint32(frame[4:8])
	c := crc32.Update(0, crcTable, frame[0:4])
	c = crc32.Update(c, crcTable, frame[frameHeader:])
	return c == want
}

func encodeFrame(l *raft.Log) []byte {
	n := payloadFixed + len(l.Data) + len(l.Extensions)
	b := make([]byte, frameHeader+n)
	binary.LittleEndian.PutUint32(b[0:4], uint32(n))
	p := b[frameHeader:]
	binary.LittleEndian.PutUint64(p[0:], l.Index)
	binary.LittleEndian.PutUint64(p[8:], l.Term)
	p[16] = byte(l.Type)
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	binary.LittleEndian.PutUint64(p[17:], uint64(at))
	binary.LittleEndian.PutUint32(p[25:], uint32(len(l.Data)))
	copy(p[payloadFixed:], l.Data)
	copy(p[payloadFixed+len(l.Data):], l.Extensions)
	c := crc32.Update(0, crcTable, b[0:4])
	c = crc32.Update(c, crcTable, p)
	binary.LittleEndian.PutUint32(b[4:8], c)
	return b
}

func decodeFrame(frame []byte, l *raft.Log) error {
	if len(frame) < frameHeader+payloadFixed || !frameOK(frame) {
		return ErrLogCorrupt
	}
	p := frame[frameHeader:]
	dataLen := int(binary.LittleEndian.Uint32(p[25:]))
	if payloadFixed+dataLen > len(p) {
		return ErrLogCorrupt
	}
	l.Index = binary.LittleEndian.Uint64(p[0:])
	l.Term = binary.LittleEndian.Uint64(p[8:])
	l.Type = raft.LogType(p[16])
	l.AppendedAt = time.Time{}
	if at := int64(binary.LittleEndian.Uint64(p[17:])); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	l.Data = append([]byte(nil), p[payloadFixed:payloadFixed+dataLen]...)
	l.Extensions = nil
	if ext := p[payloadFixed+dataLen:]; len(ext) > 0 {
		l.Extensions = append([]byte(nil), ext...)
	}
	return nil
}

// IsMonotonic implements raft.MonotonicLogStore: the store keeps its log
// contiguous, so raft removes the old entries itself after it restores or
// installs a snapshot.
func (s *LogStore) IsMonotonic() bool { return true }

// FirstIndex implements raft.LogStore: the lowest index stored, 0 when none.
func (s *LogStore) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint64(s.first), nil
}

// LastIndex implements raft.LogStore: the highest index stored, 0 when none.
func (s *LogStore) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint64(s.lastLocked()), nil
}

func (s *LogStore) lastLocked() int64 {
	if len(s.segs) == 0 || s.first == 0 {
		return 0
	}
	return s.segs[len(s.segs)-1].last()
}

// GetLog implements raft.LogStore; raft.ErrLogNotFound for an index not stored.
func (s *LogStore) GetLog(index uint64, log *raft.Log) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	idx := int64(index)
	if s.first == 0 || idx < s.first || idx > s.lastLocked() {
		return raft.ErrLogNotFound
	}
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].last() >= idx })
	seg := s.segs[i]
	k := idx - seg.first
	start := seg.pos[k]
	end := seg.end
	if k+1 < int64(len(seg.pos)) {
		end = seg.pos[k+1]
	}
	frame := make([]byte, end-start)
	if _, err := seg.file.ReadAt(frame, start); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("controller: read raft log %d from %s: %w", index, seg.file.Path(), err)
	}
	if err := decodeFrame(frame, log); err != nil || log.Index != index {
		return fmt.Errorf("controller: raft log %d in %s at %d: %w", index, seg.file.Path(), start, ErrLogCorrupt)
	}
	return nil
}

// StoreLog implements raft.LogStore.
func (s *LogStore) StoreLog(log *raft.Log) error { return s.StoreLogs([]*raft.Log{log}) }

// StoreLogs implements raft.LogStore: the entries must be consecutive and
// start at LastIndex+1 or later (any index ≥ 1 when the store is empty);
// they are durable when it returns nil. Raft writes past the end of its
// log only after a snapshot covers the gap (raft.LogStore allows it): the
// store then drops its older entries first, durably, so its log stays
// contiguous — what raft does itself for a MonotonicLogStore.
func (s *LogStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	start := int64(logs[0].Index)
	if start < 1 {
		return fmt.Errorf("controller: store raft log at index 0: indexes start at 1")
	}
	for i, l := range logs {
		if int64(l.Index) != start+int64(i) {
			return fmt.Errorf("controller: store raft log %d: want index %d (a batch must be consecutive)", l.Index, start+int64(i))
		}
		if n := payloadFixed + len(l.Data) + len(l.Extensions); n > maxEntryBytes {
			return fmt.Errorf("controller: store raft log %d: %d bytes exceed the %d-byte entry limit", l.Index, n, maxEntryBytes)
		}
	}
	if s.first != 0 {
		switch next := s.lastLocked() + 1; {
		case start < next:
			return fmt.Errorf("controller: store raft log %d: the log already holds %d-%d (delete the conflicting suffix first)",
				start, s.first, next-1)
		case start > next:
			if err := s.deleteAllLocked(); err != nil {
				s.err = fmt.Errorf("%w: %w", ErrStoreFailed, err)
				return fmt.Errorf("controller: store raft logs from %d past the end %d: drop the older entries: %w", start, next-1, err)
			}
		}
	}
	if err := s.appendLocked(logs); err != nil {
		s.err = fmt.Errorf("%w: %w", ErrStoreFailed, err)
		return fmt.Errorf("controller: store raft logs %d-%d: %w", logs[0].Index, logs[len(logs)-1].Index, err)
	}
	return nil
}

func (s *LogStore) appendLocked(logs []*raft.Log) error {
	ctx := context.Background()
	wasEmpty := s.first == 0
	if wasEmpty {
		// A leftover record of a deleted prefix must not hide the new entries.
		if err := storefs.RemoveDurably(s.fs, filepath.Join(s.dir, logFirstFile)); err != nil {
			return err
		}
	}
	var dirty []*segment
	for _, l := range logs {
		frame := encodeFrame(l)
		var seg *segment
		if len(s.segs) > 0 {
			seg = s.segs[len(s.segs)-1]
		}
		if seg == nil || seg.end+int64(len(frame)) > seg.file.SizeBytes() {
			if seg != nil && len(dirty) > 0 && dirty[len(dirty)-1] == seg {
				if _, err := seg.file.Flush(ctx, 0); err != nil {
					return err
				}
				dirty = dirty[:len(dirty)-1]
			}
			size := max(s.segSize, int64(len(frame)))
			path := filepath.Join(s.dir, segName(int64(l.Index), size))
			mf, err := s.backend.Open(ctx, mappedfile.Spec{Path: path, SizeBytes: size})
			if err != nil {
				return err
			}
			seg = &segment{first: int64(l.Index), file: mf}
			s.segs = append(s.segs, seg)
		}
		pos, err := seg.file.Append(len(frame), mappedfile.Bytes(frame))
		if err != nil {
			return err
		}
		seg.pos = append(seg.pos, pos)
		seg.end = pos + int64(len(frame))
		if len(dirty) == 0 || dirty[len(dirty)-1] != seg {
			dirty = append(dirty, seg)
		}
		if s.first == 0 {
			s.first = int64(l.Index)
		}
	}
	for _, seg := range dirty {
		if _, err := seg.file.Commit(ctx, 0); err != nil {
			return err
		}
		if _, err := seg.file.Flush(ctx, 0); err != nil {
			return err
		}
	}
	return nil
}

// DeleteRange implements raft.LogStore. Raft deletes a prefix (compaction)
// or a suffix (a conflicting tail); a range that is neither is refused.
// A suffix goes durably (later segments removed, the segment holding min
// truncated and synced) before DeleteRange returns; a prefix removes the
// segments it covers whole and records the new first index atomically.
func (s *LogStore) DeleteRange(minIdx, maxIdx uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if minIdx > maxIdx || s.first == 0 {
		return nil
	}
	lo, hi := max(int64(minIdx), s.first), min(int64(maxIdx), s.lastLocked())
	if lo > hi {
		return nil
	}
	var err error
	switch {
	case lo == s.first && hi == s.lastLocked():
		err = s.deleteAllLocked()
	case hi == s.lastLocked():
		err = s.deleteSuffixLocked(lo)
	case lo == s.first:
		err = s.deletePrefixLocked(hi)
	default:
		return fmt.Errorf("controller: delete raft logs %d-%d: only a prefix or a suffix of %d-%d can be deleted",
			minIdx, maxIdx, s.first, s.lastLocked())
	}
	if err != nil {
		s.err = fmt.Errorf("%w: %w", ErrStoreFailed, err)
		return fmt.Errorf("controller: delete raft logs %d-%d: %w", minIdx, maxIdx, err)
	}
	return nil
}

func (s *LogStore) deleteSegment(i int) error {
	seg := s.segs[i]
	if err := seg.file.Delete(); err != nil {
		return err
	}
	s.segs = append(s.segs[:i], s.segs[i+1:]...)
	return s.fs.SyncDir(s.dir)
}

func (s *LogStore) deleteAllLocked() error {
	for len(s.segs) > 0 {
		if err := s.deleteSegment(len(s.segs) - 1); err != nil {
			return err
		}
	}
	s.first = 0
	return storefs.RemoveDurably(s.fs, filepath.Join(s.dir, logFirstFile))
}

// deleteSuffixLocked removes the entries from lo on, the newest segment first,
// so a crash in the middle leaves a shorter suffix deleted, never a hole.
func (s *LogStore) deleteSuffixLocked(lo int64) error {
	for len(s.segs) > 1 && s.segs[len(s.segs)-1].first >= lo {
		if err := s.deleteSegment(len(s.segs) - 1); err != nil {
			return err
		}
	}
	// Truncate the segment that is now the last even when the cut is at
	// its end: one opened before the last at Open still has its write
	// position at its size, and appends go to it from now on.
	seg := s.segs[len(s.segs)-1]
	k := min(lo-seg.first, int64(len(seg.pos)))
	cut := seg.end
	if k < int64(len(seg.pos)) {
		cut = seg.pos[k]
	}
	if err := seg.file.Truncate(context.Background(), cut); err != nil {
		return err
	}
	seg.pos = seg.pos[:k]
	seg.end = cut
	return nil
}

// deletePrefixLocked removes the entries up to hi (not the last one).
func (s *LogStore) deletePrefixLocked(hi int64) error {
	if err := storefs.WriteFileAtomic(s.fs, filepath.Join(s.dir, logFirstFile), mustJSON(firstRecord{First: hi + 1})); err != nil {
		return err
	}
	s.first = hi + 1
	for len(s.segs) > 1 && s.segs[0].last() <= hi {
		if err := s.deleteSegment(0); err != nil {
			return err
		}
	}
	return nil
}

func (s *LogStore) closeFiles() {
	for _, seg := range s.segs {
		seg.file.Close()
	}
	s.segs = nil
}

// Close closes the segment files.
func (s *LogStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeFiles()
	if s.err == nil {
		s.err = fmt.Errorf("controller: raft log store closed: %w", mappedfile.ErrClosed)
	}
	return nil
}

// StableStore is a raft.StableStore kept in one small JSON file replaced
// atomically (storefs.WriteFileAtomic) on every change. Raft writes it on a
// new term and a vote only.
type StableStore struct {
	fs   storefs.FS
	path string

	mu sync.Mutex
	kv map[string][]byte
}

type stableFile struct {
	Version int               `json:"version"`
	KV      map[string][]byte `json:"kv"`
}

// OpenStableStore opens (creating) the stable store in dir; fsys is the
// directory's FS (storefs.Of(backend)).
func OpenStableStore(fsys storefs.FS, dir string) (*StableStore, error) {
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("controller: open stable store: %w", err)
	}
	s := &StableStore{fs: fsys, path: filepath.Join(filepath.Clean(dir), stableFileName), kv: map[string][]byte{}}
	data, err := fsys.ReadFile(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("controller: open stable store: %w", err)
	}
	var f stableFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("controller: stable store %s is not valid JSON (%v): %w", s.path, err, ErrLogCorrupt)
	}
	if f.Version != 1 {
		return nil, fmt.Errorf("controller: stable store %s has version %d, want 1", s.path, f.Version)
	}
	if f.KV != nil {
		s.kv = f.KV
	}
	return s, nil
}

// Set implements raft.StableStore.
func (s *StableStore) Set(key, val []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[string][]byte, len(s.kv)+1)
	for k, v := range s.kv {
		next[k] = v
	}
	next[string(key)] = append([]byte{}, val...)
	if err := storefs.WriteFileAtomic(s.fs, s.path, mustJSON(stableFile{Version: 1, KV: next})); err != nil {
		return fmt.Errorf("controller: stable store set %q: %w", key, err)
	}
	s.kv = next
	return nil
}

// Get implements raft.StableStore; an error reading "not found" (what raft
// tests for) when the key is absent.
func (s *StableStore) Get(key []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.kv[string(key)]
	if !ok {
		return nil, errKeyNotFound
	}
	return append([]byte{}, v...), nil
}

// SetUint64 implements raft.StableStore.
func (s *StableStore) SetUint64(key []byte, val uint64) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], val)
	return s.Set(key, b[:])
}

// GetUint64 implements raft.StableStore.
func (s *StableStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("controller: stable store key %q holds %d bytes, not a uint64", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("controller: marshal %T: %v", v, err))
	}
	return b
}
