package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/engine/storefs"
	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
)

// Segment recycling (Options.RecycleSegments): CommitLog segments that
// retention retires are kept, renamed, and taken again by the allocation
// service as new segments, as pebble recycles its WAL files. A durable
// write into a file whose extents are written commits only its data; a
// new file's extents are allocated but unwritten, and a write into them
// also commits an extent change (docs/design.md, "What written extents are
// worth"). What makes a file's old bytes safe to write over:
//
//   - A file joins the pool from retention only: its records' stored
//     offsets (PHYSICALOFFSET) are below the log's start, and it is never
//     taken for the offset it held, so an old record read where a new one
//     was expected has the wrong offset wherever it lies (a file that
//     truncation removed held records at the offsets it would be reused
//     at: it is deleted, never pooled).
//   - Retention renames it into the pool (name: its old offset and
//     .recycle, in the CommitLog's directory, so one directory sync makes
//     each rename durable) and retires it: a reader that found the segment
//     before keeps reading its old bytes, and the file is taken only after
//     the last reader released it.
//   - Before it is taken the end-of-segment blank it holds is zeroed and
//     synced: a blank is the only unit with no stored offset, and one left
//     over would end a segment that did not end there.
//   - Every record the store writes from the marker's offset on carries a
//     whole-record checksum (record.PropRecordCRC) that recovery checks: a
//     torn record over old bytes (a header that reached the device, a
//     tail that did not) fails it, where BODYCRC and the zeros a new file
//     has behind its end would have caught it.
//   - After a clean close the log ends at the checkpoint's flushed offset
//     even when old bytes, not zeros, follow it.
type segmentPool struct {
	dir  string // the CommitLog's directory
	fs   storefs.FS
	size int64 // segment size
	max  int   // Options.RecycleSegments
	// tail is how far before a segment's end its blank can start: the
	// largest record and the blank itself.
	tail int64
	log  *slog.Logger

	// enabled: files may be taken (startRecycling: every record written
	// from now on carries the whole-record checksum).
	enabled atomic.Bool

	mu    sync.Mutex
	files []*pooledSegment // in the order they were retired

	retired, recycled atomic.Uint64
}

// pooledSegment is one file in the pool.
type pooledSegment struct {
	path     string
	oldFrom  int64       // the offset it held
	released atomic.Bool // no reader holds it any more
}

// RecyclingRefusal says why a store refuses Options.RecycleSegments on the
// named backend; nil where it reuses segments (a backend it does not know
// is Open's to refuse). Only writes that bypass the page cache gain from a
// reused file's written extents: through the page cache its pages, no
// longer cached, are read back from the device before they are written,
// and reuse measured slower (mmap, transient) or no faster (uring) than a
// fresh segment (docs/design.md, "Only with O_DIRECT").
func RecyclingRefusal(backend string) error {
	reg, err := lookupBackend(backend)
	switch {
	case err != nil:
		return nil
	case reg.Volatile:
		return fmt.Errorf("its segments are not files on disk, there is nothing to reuse: %w", ErrInvalidOption)
	case !reg.DirectIO:
		return fmt.Errorf("its writes go through the page cache, where a reused file's pages, no longer cached, "+
			"are read back from the device before they are written: reuse measured slower (mmap, transient) or no faster "+
			"(uring) than a fresh segment (sync, 64 producers, docs/design.md); only O_DIRECT writes (uring-direct) gain: %w", ErrInvalidOption)
	}
	return nil
}

// pooledName is the name of the pooled file that held the segment at from.
func pooledName(dir string, from int64) string {
	return filepath.Join(dir, segment.Name(from)+segment.RecycleSuffix)
}

// openSegmentPool loads the pooled files left in dir by an earlier run
// (released: nothing of that run reads them), up to max; the rest, and all
// of them with max 0, are removed.
func openSegmentPool(fsys storefs.FS, dir string, size int64, max int, maxRecord int, log *slog.Logger) (*segmentPool, error) {
	p := &segmentPool{dir: dir, fs: fsys, size: size, max: max, tail: int64(maxRecord) + record.BlankSize, log: log}
	names, err := fsys.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("segment pool: list %s: %w", dir, err)
	}
	for _, name := range names {
		base, ok := strings.CutSuffix(name, segment.RecycleSuffix)
		if !ok {
			continue
		}
		path := filepath.Join(dir, name)
		from, perr := strconv.ParseInt(base, 10, 64)
		if perr != nil || len(base) != segment.NameLength || len(p.files) >= max {
			if err := storefs.RemoveDurably(fsys, path); err != nil {
				return nil, fmt.Errorf("segment pool: remove %s: %w", path, err)
			}
			continue
		}
		ps := &pooledSegment{path: path, oldFrom: from}
		ps.released.Store(true)
		p.files = append(p.files, ps)
	}
	return p, nil
}

// len is the number of pooled files.
func (p *segmentPool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.files)
}

// retire takes mf, a segment retention has just taken out of the queue,
// into the pool: renamed, the directory synced, then retired (its reader
// references run out). It reports false, having done nothing, when the
// pool is full, when the disk is full (the file's space is what retention
// is after), or when the backend's files cannot be retired; the caller then
// deletes mf.
func (p *segmentPool) retire(mf mappedfile.MappedFile, spaceFull bool) (bool, error) {
	r, ok := mf.(mappedfile.Retirer)
	if !ok || spaceFull || mf.SizeBytes() != p.size {
		return false, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.files) >= p.max {
		return false, nil
	}
	ps := &pooledSegment{path: pooledName(p.dir, mf.FromOffset()), oldFrom: mf.FromOffset()}
	if err := p.fs.Rename(mf.Path(), ps.path); err != nil {
		p.log.Warn("could not keep a retired CommitLog segment for reuse; deleting it", slog.String("path", mf.Path()), slog.Any("err", err))
		return false, nil
	}
	if err := p.fs.SyncDir(p.dir); err != nil {
		// The rename may not survive a power loss; the file is out of the
		// queue already: drop it.
		_ = mf.Delete()
		_ = p.fs.Remove(ps.path)
		return true, fmt.Errorf("segment pool: retire %s: %w", mf.Path(), err)
	}
	if err := r.Retire(func() { ps.released.Store(true) }); err != nil {
		_ = storefs.RemoveDurably(p.fs, ps.path)
		return true, fmt.Errorf("segment pool: retire %s: %w", mf.Path(), err)
	}
	p.files = append(p.files, ps)
	p.retired.Add(1)
	return true, nil
}

// take removes from the pool a released file that did not hold the
// segment at from, the oldest first; nil when there is none.
func (p *segmentPool) take(from int64) *pooledSegment {
	if !p.enabled.Load() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, ps := range p.files {
		if ps.released.Load() && ps.oldFrom != from {
			p.files = append(p.files[:i], p.files[i+1:]...)
			return ps
		}
	}
	return nil
}

// empty removes every pooled file that no reader holds (the disk is full:
// retention wants their space).
func (p *segmentPool) empty() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.files[:0]
	removed := 0
	var errs []error
	for _, ps := range p.files {
		if !ps.released.Load() {
			kept = append(kept, ps)
			continue
		}
		if err := p.fs.Remove(ps.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			kept = append(kept, ps)
			continue
		}
		removed++
	}
	clear(p.files[len(kept):])
	p.files = kept
	if removed > 0 {
		errs = append(errs, p.fs.SyncDir(p.dir))
	}
	return removed, errors.Join(errs...)
}

// prepare zeroes and syncs the end-of-segment blank ps holds, if any, so
// that it is a file with no unit that a new segment's recovery could take
// for its own. The blank starts within p.tail bytes of the end and only
// zeros follow it (the blank's append zeroes the rest of its segment), so
// it holds the last bytes that are not zero.
func (p *segmentPool) prepare(ctx context.Context, ps *pooledSegment) error {
	f, err := os.OpenFile(ps.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("segment pool: open %s: %w", ps.path, err)
	}
	defer f.Close()
	last, err := lastNonZero(f, p.size, min(p.tail, p.size))
	if err != nil {
		return fmt.Errorf("segment pool: read %s: %w", ps.path, err)
	}
	if last < 0 {
		return nil
	}
	const block = 4096
	from := max(last+1-record.BlankSize, 0) &^ (block - 1)
	to := min((last+block)&^(block-1), p.size)
	if err := segfile.ZeroRangeContext(ctx, f, from, to-from); err != nil {
		return fmt.Errorf("segment pool: zero the blank of %s: %w", ps.path, err)
	}
	return nil
}

// lastNonZero returns the offset of the last byte of f's first size bytes
// that is not zero, looking at the last n bytes only (-1: all zeros).
func lastNonZero(f *os.File, size, n int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for end := size; end > size-n; {
		start := max(end-int64(len(buf)), size-n)
		chunk := buf[:end-start]
		if _, err := f.ReadAt(chunk, start); err != nil {
			return 0, err
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] != 0 {
				return start + int64(i), nil
			}
		}
		end = start
	}
	return -1, nil
}

// recordCRCFileName is the file that says from which CommitLog offset
// every record carries a whole-record checksum: written once, durably,
// before the first pooled file is taken, and kept (a log that recycled
// holds reused segments until retention has removed them all, and its
// recovery must go on checking).
const recordCRCFileName = "recordcrc"

// loadRecordCRCFrom reads the offset recordCRCFileName holds (-1: the
// file is absent).
func loadRecordCRCFrom(fsys storefs.FS, dir string) (int64, error) {
	path := filepath.Join(dir, recordCRCFileName)
	b, err := fsys.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return -1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	from, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || from < 0 {
		return 0, fmt.Errorf("%s holds %q, not an offset: %w", path, b, ErrCorrupt)
	}
	return from, nil
}

// startRecycling runs after recovery, before the first append. For a
// store with RecycleSegments it records (once) that every record from the
// log's end on carries a whole-record checksum, and lets the allocation
// service take pooled files. A log cut below the recorded offset (by
// recovery or an offline cut) gets it lowered to its end (lowerRecordCRCFrom).
func (s *Store) startRecycling() error {
	end := s.log.queue.WroteOffset()
	if err := s.lowerRecordCRCFrom(end); err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	s.recordCRC = s.log.crcFrom.Load() >= 0
	if s.opts.RecycleSegments == 0 {
		return nil
	}
	if s.opts.Role == Slave && s.log.crcFrom.Load() < 0 {
		// A slave's records are its master's bytes: it starts reusing
		// segments at the first replicated record that carries the
		// checksum (startSlaveRecycling), not before.
		s.opts.Logger.Info("a slave reuses CommitLog segments from the first replicated record that carries a whole-record checksum (its master must recycle too)")
		return nil
	}
	if s.log.crcFrom.Load() < 0 {
		if err := s.writeRecordCRCFrom(end); err != nil {
			return fmt.Errorf("open store: %w", err)
		}
		s.recordCRC = true
	}
	if s.pool != nil {
		s.pool.enabled.Store(true)
	}
	return nil
}

// startSlaveRecycling, on a slave with RecycleSegments that has not
// recycled yet, is called with each replicated record before it is
// appended: at the first that carries a valid whole-record checksum it
// records that every record from there on does (the checks that follow
// hold the master to it) and lets the allocation service take pooled
// files. Every segment made before was a new file. appendMu held.
func (s *Store) startSlaveRecycling(rec []byte, at int64) error {
	if s.pool == nil || s.log.crcFrom.Load() >= 0 || record.CheckRecordCRC(rec, at) != nil {
		return nil
	}
	if err := s.writeRecordCRCFrom(at); err != nil {
		return err
	}
	s.pool.enabled.Store(true)
	s.opts.Logger.Info("the master writes whole-record checksums: reusing CommitLog segments from here on", slog.Int64("offset", at))
	return nil
}

// lowerRecordCRCFrom lowers the offset from which records carry the
// whole-record checksum to end, the end of a log just cut, before anything
// is appended there: every record written from end on carries one, and
// recovery must check them all (segments made there may be pooled files).
func (s *Store) lowerRecordCRCFrom(end int64) error {
	if s.log.crcFrom.Load() <= end {
		return nil
	}
	return s.writeRecordCRCFrom(end)
}

func (s *Store) writeRecordCRCFrom(from int64) error {
	if err := storefs.WriteFileAtomic(s.fs, filepath.Join(s.dir, recordCRCFileName), []byte(strconv.FormatInt(from, 10)+"\n")); err != nil {
		return fmt.Errorf("record where whole-record checksums start: %w", err)
	}
	s.log.crcFrom.Store(from)
	return nil
}
