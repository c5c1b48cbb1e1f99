// Package segment is the queue of fixed-size segment files under one
// directory (RocketMQ's MappedFileQueue): files named by the 20-digit global
// offset of their first byte, each the same size, contiguous. The CommitLog
// and every ConsumeQueue are one Queue each.
package segment

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mqstore/mqstore/engine/storefs"
	"github.com/mqstore/mqstore/internal/invariants"
	"github.com/mqstore/mqstore/mappedfile"
)

// ErrCorruptDirectory: the directory holds files that are not a contiguous
// run of segments (a bad name, a gap, a wrong size).
var ErrCorruptDirectory = errors.New("segment: directory is not a valid segment sequence")

// ErrCreate wraps every failure to create the next segment (the file
// system is full, an allocation timed out, a buffer pool is empty): the
// append can be retried; nothing already stored is affected.
var ErrCreate = errors.New("segment: cannot create the next segment")

// RecycleSuffix ends the name of a file kept for reuse (the engine's
// segment pool): not a segment of the queue.
const RecycleSuffix = ".recycle"

// NameLength is the number of digits in a segment name.
const NameLength = 20

// Name returns the file name of the segment starting at offset.
func Name(offset int64) string { return fmt.Sprintf("%020d", offset) }

// ParseName parses a segment name strictly: exactly 20 decimal digits.
func ParseName(name string) (int64, error) {
	if len(name) != NameLength {
		return 0, fmt.Errorf("segment name %q: want %d digits: %w", name, NameLength, ErrCorruptDirectory)
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return 0, fmt.Errorf("segment name %q: not all digits: %w", name, ErrCorruptDirectory)
		}
	}
	off, err := strconv.ParseInt(name, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("segment name %q: %v: %w", name, err, ErrCorruptDirectory)
	}
	return off, nil
}

// Allocator provides the next segment file. The queue asks for the file at
// spec and says which one will come after it, so the allocator can prepare
// it in the background.
type Allocator interface {
	Allocate(ctx context.Context, spec, next mappedfile.Spec) (mappedfile.MappedFile, error)
}

// Queue is an ordered run of segments. Methods are safe for concurrent use;
// appends to the last segment are the caller's to serialize.
type Queue struct {
	dir              string
	backend          mappedfile.Backend
	fs               storefs.FS
	allocator        Allocator // nil: open directly
	segmentSizeBytes int64
	hugePages        bool
	smallFolios      bool
	writeAhead       bool

	mu    sync.RWMutex
	files []mappedfile.MappedFile // ascending by FromOffset, contiguous
	// last is files' last entry, stored under mu's write lock whenever
	// files changes: Last, which every append calls, reads it without mu
	// (a read lock is an atomic add on a line every producer shares).
	last atomic.Pointer[lastFile]
}

// lastFile holds a queue's last segment (atomic.Pointer needs a type).
type lastFile struct{ mf mappedfile.MappedFile }

// publishLastLocked stores files' last entry in last; mu is write-locked.
func (q *Queue) publishLastLocked() {
	if len(q.files) == 0 {
		q.last.Store(nil)
		return
	}
	q.last.Store(&lastFile{mf: q.files[len(q.files)-1]})
}

// Config says where a queue lives and how its files are made.
type Config struct {
	Dir              string
	Backend          mappedfile.Backend
	SegmentSizeBytes int64
	Allocator        Allocator
	// HugePages is every segment's mappedfile.Spec.HugePages.
	HugePages bool
	// SmallFolios is every segment's mappedfile.Spec.SmallFolios, and
	// WriteAhead its mappedfile.Spec.WriteAhead.
	SmallFolios, WriteAhead bool
}

// Open loads the segments already in cfg.Dir (creating the directory, and
// its parents, durably when missing). Loaded segments are opened full
// (positions = size): recovery then calls TruncateTo with the end of the
// valid data.
func Open(ctx context.Context, cfg Config) (*Queue, error) {
	if cfg.SegmentSizeBytes <= 0 {
		return nil, fmt.Errorf("segment queue %s: segment size %d: %w", cfg.Dir, cfg.SegmentSizeBytes, mappedfile.ErrInvalidArgument)
	}
	q := &Queue{dir: cfg.Dir, backend: cfg.Backend, fs: storefs.Of(cfg.Backend), allocator: cfg.Allocator, segmentSizeBytes: cfg.SegmentSizeBytes,
		hugePages: cfg.HugePages, smallFolios: cfg.SmallFolios, writeAhead: cfg.WriteAhead}
	if err := q.fs.MkdirAll(cfg.Dir); err != nil {
		return nil, fmt.Errorf("segment queue: create %s: %w", cfg.Dir, err)
	}
	names, err := q.list()
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		off, err := ParseName(name)
		if err != nil {
			q.Close()
			return nil, fmt.Errorf("segment queue %s: %w", cfg.Dir, err)
		}
		if n := len(q.files); n > 0 {
			if prev := q.files[n-1].FromOffset(); off != prev+q.segmentSizeBytes {
				q.Close()
				return nil, fmt.Errorf("segment queue %s: segment %s follows %s: expected %s (a segment is missing): %w",
					cfg.Dir, name, Name(prev), Name(prev+q.segmentSizeBytes), ErrCorruptDirectory)
			}
		}
		mf, err := cfg.Backend.Open(ctx, q.specAt(off))
		if err != nil {
			q.Close()
			return nil, fmt.Errorf("segment queue %s: load %s: %w", cfg.Dir, name, err)
		}
		q.files = append(q.files, mf)
	}
	q.publishLastLocked() // q is not shared yet
	return q, nil
}

// list returns the segment names in the directory, sorted, temporary files
// (a creation cut short) removed.
func (q *Queue) list() ([]string, error) {
	all, err := q.fs.List(q.dir)
	if err != nil {
		return nil, fmt.Errorf("segment queue: list %s: %w", q.dir, err)
	}
	var names []string
	for _, name := range all {
		switch {
		case strings.HasSuffix(name, ".broken"): // cut bytes kept by recovery
		case strings.HasSuffix(name, RecycleSuffix): // a file kept for reuse
		case strings.HasSuffix(name, ".tmp"):
			if err := storefs.RemoveDurably(q.fs, filepath.Join(q.dir, name)); err != nil {
				return nil, fmt.Errorf("segment queue: remove leftover %s: %w", name, err)
			}
		default:
			names = append(names, name)
		}
	}
	return names, nil
}

// Dir returns the queue's directory.
func (q *Queue) Dir() string { return q.dir }

// SegmentSizeBytes returns the size of every segment.
func (q *Queue) SegmentSizeBytes() int64 { return q.segmentSizeBytes }

// Files returns a snapshot of the segments, oldest first.
func (q *Queue) Files() []mappedfile.MappedFile {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return append([]mappedfile.MappedFile(nil), q.files...)
}

// Snapshot returns the segments, oldest first, without copying: the caller
// must not modify the slice. It stays valid however the queue changes — the
// queue only appends past a snapshot's length, and replaces its slice when
// it removes segments — which is what lets a scan or a flush pass run
// without allocating.
func (q *Queue) Snapshot() []mappedfile.MappedFile {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return q.files[:len(q.files):len(q.files)]
}

// Len returns the number of segments.
func (q *Queue) Len() int {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return len(q.files)
}

// First returns the oldest segment or nil.
func (q *Queue) First() mappedfile.MappedFile {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if len(q.files) == 0 {
		return nil
	}
	return q.files[0]
}

// Last returns the newest segment or nil.
func (q *Queue) Last() mappedfile.MappedFile {
	if l := q.last.Load(); l != nil {
		return l.mf
	}
	return nil
}

// Find returns the segment holding the global offset, or nil.
func (q *Queue) Find(offset int64) mappedfile.MappedFile {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if len(q.files) == 0 {
		return nil
	}
	first := q.files[0].FromOffset()
	if offset < first {
		return nil
	}
	i := (offset - first) / q.segmentSizeBytes
	if i >= int64(len(q.files)) {
		return nil
	}
	return q.files[i]
}

// MinOffset is the first offset still stored (-1 when empty).
func (q *Queue) MinOffset() int64 {
	if f := q.First(); f != nil {
		return f.FromOffset()
	}
	return -1
}

// WroteOffset is the global offset after the last written byte.
func (q *Queue) WroteOffset() int64 {
	if f := q.Last(); f != nil {
		return f.FromOffset() + f.WrotePosition()
	}
	return 0
}

// ReadableOffset is the global offset up to which readers may read.
func (q *Queue) ReadableOffset() int64 {
	if f := q.Last(); f != nil {
		return f.FromOffset() + f.ReadablePosition()
	}
	return 0
}

// NextForAppend returns the last segment when it has room, otherwise a new
// segment created at the offset after it (startOffset when the queue is
// empty). The caller holds the append lock.
func (q *Queue) NextForAppend(ctx context.Context, startOffset int64) (mappedfile.MappedFile, error) {
	if last := q.Last(); last != nil && last.WrotePosition() < last.SizeBytes() {
		return last, nil
	}
	return q.nextSegment(ctx, startOffset)
}

// nextSegment is NextForAppend's slow path, apart so that its frame does
// not widen the one every append runs through.
//
//go:noinline
func (q *Queue) nextSegment(ctx context.Context, startOffset int64) (mappedfile.MappedFile, error) {
	last := q.Last()
	from := startOffset - startOffset%q.segmentSizeBytes
	if last != nil {
		from = last.FromOffset() + q.segmentSizeBytes
	}
	spec := q.specAt(from)
	var mf mappedfile.MappedFile
	var err error
	if q.allocator != nil {
		mf, err = q.allocator.Allocate(ctx, spec, q.specAt(from+q.segmentSizeBytes))
	} else {
		mf, err = q.backend.Open(ctx, spec)
	}
	if err != nil {
		return nil, fmt.Errorf("create segment %s: %w: %w", spec.Path, ErrCreate, err)
	}
	if wrote := mf.WrotePosition(); wrote != 0 {
		// A file already there (a creation that failed after the file was
		// made, e.g. a failed warm-up): every file present at Open is in the
		// queue, so one past its end never holds data. Remove it; the next
		// append creates the segment again.
		err := fmt.Errorf("create segment %s: a leftover file is there (write position %d): %w", spec.Path, wrote, ErrCreate)
		if derr := mf.Delete(); derr != nil {
			return nil, fmt.Errorf("%w (and removing it: %v)", err, derr)
		}
		if serr := q.fs.SyncDir(q.dir); serr != nil {
			return nil, fmt.Errorf("%w (and syncing the directory: %v)", err, serr)
		}
		return nil, err
	}
	q.mu.Lock()
	if invariants.Enabled && len(q.files) > 0 {
		prev := q.files[len(q.files)-1]
		invariants.Equal("a new segment starts where the last one ends", mf.FromOffset(), prev.FromOffset()+q.segmentSizeBytes)
	}
	q.files = append(q.files, mf)
	q.publishLastLocked()
	q.mu.Unlock()
	return mf, nil
}

func (q *Queue) specAt(from int64) mappedfile.Spec {
	return mappedfile.Spec{Path: filepath.Join(q.dir, Name(from)), FromOffset: from, SizeBytes: q.segmentSizeBytes, HugePages: q.hugePages, SmallFolios: q.smallFolios, WriteAhead: q.writeAhead}
}

// Commit commits every segment from the one holding committedFrom to the
// last; leastPages applies to the last one (older ones are full and always
// qualify). It returns the global committed offset.
func (q *Queue) Commit(ctx context.Context, committedFrom int64, leastPages int) (int64, error) {
	return q.forPending(ctx, committedFrom, leastPages, mappedfile.MappedFile.Commit)
}

// Flush is Commit's twin for durability: it returns the global flushed offset.
func (q *Queue) Flush(ctx context.Context, flushedFrom int64, leastPages int) (int64, error) {
	return q.forPending(ctx, flushedFrom, leastPages, mappedfile.MappedFile.Flush)
}

func (q *Queue) forPending(ctx context.Context, from int64, leastPages int,
	op func(mappedfile.MappedFile, context.Context, int) (int64, error)) (int64, error) {
	q.mu.RLock()
	files := q.files
	q.mu.RUnlock()
	if len(files) == 0 {
		return from, nil
	}
	i := 0
	if first := files[0].FromOffset(); from > first {
		i = int((from - first) / q.segmentSizeBytes)
	}
	where := from
	for ; i < len(files); i++ {
		f := files[i]
		least := 0
		if i == len(files)-1 {
			least = leastPages
		}
		pos, err := op(f, ctx, least)
		if err != nil {
			return where, err
		}
		// A committed or flushed position only moves forward: the file
		// holding from is committed (flushed) at least up to it.
		next := f.FromOffset() + pos
		invariants.Forward("committed or flushed offset", where, next)
		where = next
		if pos < f.SizeBytes() {
			break
		}
	}
	return where, nil
}

// TruncateTo makes offset the end of the queue: segments starting after it
// are deleted, newest first, each removal synced before the next, so a crash
// at any point leaves a contiguous run; the one holding offset is truncated
// there (its tail zeroed durably). It does not sync the bytes before offset:
// see SyncRange.
func (q *Queue) TruncateTo(ctx context.Context, offset int64) error {
	return q.truncateTo(ctx, offset, true)
}

// EndAt is TruncateTo for a clean reopen: the segment holding offset takes
// it as its end without zeroing its tail (mappedfile.EndSetter, where the
// backend has it; Truncate otherwise). Only for a queue whose bytes past
// offset hold nothing of this log's (see mappedfile.EndSetter); segments
// starting after offset are deleted as by TruncateTo.
func (q *Queue) EndAt(ctx context.Context, offset int64) error {
	return q.truncateTo(ctx, offset, false)
}

func (q *Queue) truncateTo(ctx context.Context, offset int64, zero bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for n := len(q.files); n > 0 && q.files[n-1].FromOffset() > offset; n = len(q.files) {
		f := q.files[n-1]
		if err := f.Delete(); err != nil {
			return fmt.Errorf("delete %s past offset %d: %w", f.Path(), offset, err)
		}
		// A new slice: a flusher may hold a snapshot of the old one.
		q.files = append([]mappedfile.MappedFile(nil), q.files[:n-1]...)
		q.publishLastLocked()
		if err := q.fs.SyncDir(q.dir); err != nil {
			return fmt.Errorf("delete %s past offset %d: %w", f.Path(), offset, err)
		}
	}
	if n := len(q.files); n > 0 {
		if f := q.files[n-1]; f.FromOffset()+f.SizeBytes() > offset {
			var err error
			if es, ok := f.(mappedfile.EndSetter); ok && !zero {
				err = es.SetEnd(ctx, offset-f.FromOffset())
			} else {
				err = f.Truncate(ctx, offset-f.FromOffset())
			}
			if err != nil {
				return fmt.Errorf("truncate %s at %d: %w", f.Path(), offset, err)
			}
		}
	}
	return nil
}

// SyncRange makes durable every segment holding bytes of [from, to), with a
// sync of the whole file (fsync): after a crash, recovery finds bytes the
// dead process wrote into the page cache and never synced — the segment
// before a roll, units of a ConsumeQueue — which a Flush of a segment opened
// full would not touch. Nothing may claim them durable before this.
func (q *Queue) SyncRange(ctx context.Context, from, to int64) error {
	for _, f := range q.Files() {
		if f.FromOffset()+f.SizeBytes() <= from || f.FromOffset() >= to {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := q.fs.SyncFile(f.Path()); err != nil {
			return fmt.Errorf("segment queue: %w", err)
		}
	}
	return nil
}

// DeleteFirst deletes the oldest segment (retention). The segment leaves
// the queue under the lock; its file is removed (and the directory synced)
// after, so Puts and reads never wait for an unlink or an munmap. A reader
// that found the segment before keeps reading it until it releases it.
func (q *Queue) DeleteFirst() error {
	return q.DeleteFirstOr(nil)
}

// DeleteFirstOr is DeleteFirst, except that keep, when not nil, is offered
// the segment first: when it reports true it has taken the file (renamed
// and retired it, say) and the segment is not deleted. An error from keep
// is returned; the segment has left the queue either way.
func (q *Queue) DeleteFirstOr(keep func(mappedfile.MappedFile) (bool, error)) error {
	q.mu.Lock()
	if len(q.files) == 0 {
		q.mu.Unlock()
		return nil
	}
	f := q.files[0]
	q.files = q.files[1:] // a flusher's snapshot of the slice keeps its entries
	q.publishLastLocked()
	q.mu.Unlock()
	if keep != nil {
		if kept, err := keep(f); kept || err != nil {
			return err
		}
	}
	if err := f.Delete(); err != nil {
		return fmt.Errorf("delete %s: %w", f.Path(), err)
	}
	if err := q.fs.SyncDir(q.dir); err != nil {
		return fmt.Errorf("delete %s: %w", f.Path(), err)
	}
	return nil
}

// Close closes every segment (without flushing).
func (q *Queue) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	var errs []error
	for _, f := range q.files {
		if err := f.Close(); err != nil && !errors.Is(err, mappedfile.ErrClosed) {
			errs = append(errs, err)
		}
	}
	q.files = nil
	q.publishLastLocked()
	return errors.Join(errs...)
}
