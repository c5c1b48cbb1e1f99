package consumequeue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/engine/storefs"
	"github.com/mqstore/mqstore/internal/invariants"
	"github.com/mqstore/mqstore/mappedfile"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrNotFound: the queue offset is outside [MinOffset, MaxOffset).
	ErrNotFound = errors.New("consumequeue: queue offset not in the queue")
	// ErrConflict: Append of a queue offset that already holds a different unit.
	ErrConflict = errors.New("consumequeue: a different unit is already at this queue offset")
	// ErrGap: Append of a queue offset past MaxOffset on a non-empty queue.
	ErrGap = errors.New("consumequeue: queue offset leaves a gap after the end of the queue")
	// ErrCorrupt: the queue's files do not hold what the queue expects.
	ErrCorrupt = errors.New("consumequeue: queue files are inconsistent")
)

// Config says where the ConsumeQueues of a store live and how their files are made.
type Config struct {
	// Dir is the consumequeue/ root; a queue lives in Dir/<topic>/<queueId>/.
	Dir     string
	Backend mappedfile.Backend
	// FileSizeBytes is the size of every file; 0 means DefaultFileSizeBytes.
	// It must be a positive multiple of UnitSize.
	FileSizeBytes int64
}

// Queue is the ConsumeQueue of one (topic, queue id).
//
// Append, TruncateByPhysical, DeleteBefore, Destroy and Close are serialized
// by the queue's own lock (dispatch is the one appender). Get, Read and the
// offset getters run lock-free and concurrently with all of them: the
// offsets are atomics, published after the bytes they cover are readable.
// Flush may run concurrently with Append (one flusher at a time).
//
// Files are meant for write-through backends (mmap, mem), as in RocketMQ.
// With a buffered backend Append commits each unit itself so that it is
// readable at once.
type Queue struct {
	topic         string
	queueID       int32
	dir           string
	backend       mappedfile.Backend
	fileSizeBytes int64

	// mu serializes the writers. enc is guarded by it.
	mu    sync.Mutex
	enc   unitEncoder
	batch unitsEncoder

	// files is nil until the queue's directory exists (OS backends create it
	// on the first Append).
	files             atomic.Pointer[segment.Queue]
	minOffset         atomic.Int64 // first valid queue offset
	maxOffset         atomic.Int64 // next queue offset to be written
	maxPhysicalOffset atomic.Int64 // end of the last unit's record; 0 when none
	flushedWhere      atomic.Int64 // global byte offset known durable
	closed            atomic.Bool
}

// Open opens the queue of (topic, queueID) under cfg.Dir, loading the files
// already there and recovering the end of the valid units the way RocketMQ's
// ConsumeQueue.recover does: from the third-last file on, units are valid
// while offset ≥ 0 and size > 0; mqstore also requires physical offsets to
// increase (a torn tail of random bytes rarely passes both) and allows
// pre-blank units only at the head of the first file. Files and bytes after
// the valid end are removed (zeroed on disk).
//
// MinOffset after Open is the first non-blank unit of the first file: the
// engine then calls DeleteBefore with the CommitLog's min offset to skip the
// units whose records retention deleted (RocketMQ's correctMinOffset), and
// TruncateByPhysical with the CommitLog's valid end.
//
// Nothing is created on disk until the first Append.
func Open(ctx context.Context, cfg Config, topic string, queueID int32) (*Queue, error) {
	if err := checkName(topic); err != nil {
		return nil, err
	}
	if queueID < 0 {
		return nil, fmt.Errorf("consumequeue: queue id %d: %w", queueID, mappedfile.ErrInvalidArgument)
	}
	if cfg.Backend == nil {
		return nil, fmt.Errorf("consumequeue: no backend: %w", mappedfile.ErrInvalidArgument)
	}
	size := cfg.FileSizeBytes
	if size == 0 {
		size = DefaultFileSizeBytes
	}
	if size <= 0 || size%UnitSize != 0 {
		return nil, fmt.Errorf("consumequeue: file size %d is not a positive multiple of %d: %w", size, UnitSize, mappedfile.ErrInvalidArgument)
	}
	q := &Queue{topic: topic, queueID: queueID, backend: cfg.Backend, fileSizeBytes: size,
		dir: filepath.Join(cfg.Dir, topic, strconv.Itoa(int(queueID)))}
	if exists, err := storefs.Of(cfg.Backend).Exists(q.dir); err != nil {
		return nil, fmt.Errorf("consumequeue %s: %w", q.dir, err)
	} else if !exists {
		return q, nil
	}
	files, err := q.openFiles(ctx)
	if err != nil {
		return nil, err
	}
	if err := q.recover(ctx, files); err != nil {
		files.Close()
		return nil, fmt.Errorf("consumequeue %s: recover: %w", q.dir, err)
	}
	return q, nil
}

// checkName rejects topics that cannot be a single directory name.
func checkName(topic string) error {
	if topic == "" || topic == "." || topic == ".." || strings.ContainsAny(topic, "/\\\x00") {
		return fmt.Errorf("consumequeue: topic %q is not a valid directory name: %w", topic, mappedfile.ErrInvalidArgument)
	}
	return nil
}

func (q *Queue) openFiles(ctx context.Context) (*segment.Queue, error) {
	files, err := segment.Open(ctx, segment.Config{Dir: q.dir, Backend: q.backend, SegmentSizeBytes: q.fileSizeBytes})
	if err != nil {
		return nil, fmt.Errorf("consumequeue: %w", err)
	}
	q.files.Store(files)
	return files, nil
}

// Topic returns the queue's topic.
func (q *Queue) Topic() string { return q.topic }

// QueueID returns the queue's id.
func (q *Queue) QueueID() int32 { return q.queueID }

// Dir returns the queue's directory.
func (q *Queue) Dir() string { return q.dir }

// MinOffset is the first valid queue offset: it skips pre-blank units and
// units whose records retention deleted.
func (q *Queue) MinOffset() int64 { return q.minOffset.Load() }

// MaxOffset is the next queue offset to be written.
func (q *Queue) MaxOffset() int64 { return q.maxOffset.Load() }

// MaxPhysicalOffset is PhysicalOffset + Size of the last unit (0 when the
// queue is empty): how far in the CommitLog this queue has been dispatched.
func (q *Queue) MaxPhysicalOffset() int64 { return q.maxPhysicalOffset.Load() }

// FlushedOffset is the queue offset below which units are durable.
func (q *Queue) FlushedOffset() int64 { return q.flushedWhere.Load() / UnitSize }

// isEmpty: no file holds any unit (nor pre-blank).
func isEmpty(files *segment.Queue) bool { return files == nil || files.Len() == 0 }

// Append writes the unit for queueOffset.
//
//   - queueOffset < MaxOffset: the unit is already there (a re-dispatch after
//     recovery). Append returns nil when it holds the same unit, an error
//     wrapping ErrConflict otherwise (TruncateAt, then Append, repairs it). Offsets below MinOffset
//     (pre-blanks, units of deleted records) cannot be checked: nil.
//   - an empty queue and queueOffset > 0: the first file is the one holding
//     queueOffset and the units before it in that file are pre-blanks;
//     MinOffset becomes queueOffset.
//   - queueOffset > MaxOffset on a non-empty queue: an error wrapping ErrGap.
//
// Append does not allocate in steady state.
func (q *Queue) Append(ctx context.Context, queueOffset int64, u Unit) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return fmt.Errorf("consumequeue %s: append: %w", q.dir, mappedfile.ErrClosed)
	}
	if queueOffset < 0 || u.PhysicalOffset < 0 || u.Size <= 0 {
		return fmt.Errorf("consumequeue %s: append of %+v at queue offset %d: %w", q.dir, u, queueOffset, mappedfile.ErrInvalidArgument)
	}
	files := q.files.Load()
	empty := isEmpty(files)
	maxOffset := q.maxOffset.Load()
	switch {
	case !empty && queueOffset < maxOffset:
		return q.verifyLocked(queueOffset, u)
	case !empty && queueOffset > maxOffset:
		return fmt.Errorf("consumequeue %s: append at queue offset %d, queue ends at %d: %w", q.dir, queueOffset, maxOffset, ErrGap)
	case empty:
		var err error
		if files, err = q.startLocked(ctx, files, queueOffset); err != nil {
			return err
		}
	}
	return q.appendLocked(ctx, files, queueOffset, u)
}

// startLocked creates the first file of an empty queue, the one holding
// queueOffset, and fills the units before queueOffset with pre-blanks.
func (q *Queue) startLocked(ctx context.Context, files *segment.Queue, queueOffset int64) (*segment.Queue, error) {
	if files == nil {
		var err error
		if files, err = q.openFiles(ctx); err != nil {
			return nil, err
		}
	}
	pos := queueOffset * UnitSize
	f, err := files.NextForAppend(ctx, pos)
	if err != nil {
		return nil, fmt.Errorf("consumequeue %s: %w", q.dir, err)
	}
	if blanks := pos - f.FromOffset(); blanks > 0 {
		if _, err := f.Append(int(blanks), blankEncoder{}); err != nil {
			return nil, fmt.Errorf("consumequeue %s: pre-blank fill before queue offset %d: %w", q.dir, queueOffset, err)
		}
	}
	q.minOffset.Store(queueOffset)
	q.maxOffset.Store(queueOffset)
	q.maxPhysicalOffset.Store(0)
	q.flushedWhere.Store(f.FromOffset())
	return files, nil
}

func (q *Queue) appendLocked(ctx context.Context, files *segment.Queue, queueOffset int64, u Unit) error {
	pos := queueOffset * UnitSize
	f, err := files.NextForAppend(ctx, pos)
	if err != nil {
		return fmt.Errorf("consumequeue %s: %w", q.dir, err)
	}
	if wrote := f.FromOffset() + f.WrotePosition(); wrote != pos {
		return fmt.Errorf("consumequeue %s: queue offset %d but the write position is byte %d: %w", q.dir, queueOffset, wrote, ErrCorrupt)
	}
	EncodeUnit(q.enc.unit[:], u)
	if _, err := f.Append(UnitSize, &q.enc); err != nil {
		return fmt.Errorf("consumequeue %s: append at queue offset %d: %w", q.dir, queueOffset, err)
	}
	if f.ReadablePosition() < f.WrotePosition() {
		if _, err := f.Commit(ctx, 0); err != nil {
			return fmt.Errorf("consumequeue %s: commit at queue offset %d: %w", q.dir, queueOffset, err)
		}
	}
	q.maxPhysicalOffset.Store(u.End())
	q.maxOffset.Store(queueOffset + 1)
	q.checkContiguous(f)
	return nil
}

// checkContiguous asserts, after an append to f (the queue's last file),
// that the queue's offsets are contiguous: unit q.maxOffset−1 is the last
// one written, so the file's write position is MaxOffset units. q.mu held.
func (q *Queue) checkContiguous(f mappedfile.MappedFile) {
	if invariants.Enabled {
		invariants.Equal("consume queue: write position is MaxOffset units (queue offsets contiguous)",
			f.FromOffset()+f.WrotePosition(), q.maxOffset.Load()*UnitSize)
	}
}

// verifyLocked checks a re-dispatched unit against the one stored.
func (q *Queue) verifyLocked(queueOffset int64, u Unit) error {
	if queueOffset < q.minOffset.Load() {
		return nil
	}
	have, err := q.readUnit(queueOffset)
	if err != nil {
		return fmt.Errorf("consumequeue %s: verify queue offset %d: %w", q.dir, queueOffset, err)
	}
	if have != u {
		return fmt.Errorf("consumequeue %s: queue offset %d holds %+v, re-dispatch brings %+v: %w",
			q.dir, queueOffset, have, u, ErrConflict)
	}
	return nil
}

// Get returns the unit at queueOffset; an error wrapping ErrNotFound when
// it is outside [MinOffset, MaxOffset).
func (q *Queue) Get(queueOffset int64) (Unit, error) {
	if err := q.checkRange(queueOffset); err != nil {
		return Unit{}, err
	}
	u, err := q.readUnit(queueOffset)
	if err != nil {
		return Unit{}, q.readError(queueOffset, err)
	}
	return u, nil
}

// Read reads up to len(dst) consecutive units from queueOffset into dst and
// returns how many it read. It stops at MaxOffset and at the end of the file
// holding queueOffset (call again from the next offset to go on).
func (q *Queue) Read(queueOffset int64, dst []Unit) (int, error) {
	if err := q.checkRange(queueOffset); err != nil {
		return 0, err
	}
	files := q.files.Load()
	pos := queueOffset * UnitSize
	f := files.Find(pos)
	if f == nil {
		return 0, q.readError(queueOffset, ErrNotFound)
	}
	n := min(int64(len(dst)), q.maxOffset.Load()-queueOffset, (f.FromOffset()+f.SizeBytes()-pos)/UnitSize)
	buf := chunkPool.Get().(*[readChunkUnits * UnitSize]byte)
	defer chunkPool.Put(buf)
	filePos := pos - f.FromOffset()
	for done := int64(0); done < n; {
		c := min(n-done, readChunkUnits)
		chunk := buf[:c*UnitSize]
		if m, err := f.ReadAt(chunk, filePos+done*UnitSize); int64(m) < c*UnitSize {
			return int(done), q.readError(queueOffset+done, err)
		}
		for i := int64(0); i < c; i++ {
			dst[done+i] = DecodeUnit(chunk[i*UnitSize:])
		}
		done += c
	}
	return int(n), nil
}

const readChunkUnits = 64

var (
	unitPool  = sync.Pool{New: func() any { return new([UnitSize]byte) }}
	chunkPool = sync.Pool{New: func() any { return new([readChunkUnits * UnitSize]byte) }}
)

func (q *Queue) checkRange(queueOffset int64) error {
	if q.closed.Load() {
		return fmt.Errorf("consumequeue %s: read: %w", q.dir, mappedfile.ErrClosed)
	}
	maxOffset := q.maxOffset.Load()
	if minOffset := q.minOffset.Load(); queueOffset < minOffset || queueOffset >= maxOffset {
		return fmt.Errorf("consumequeue %s: queue offset %d outside [%d, %d): %w", q.dir, queueOffset, minOffset, maxOffset, ErrNotFound)
	}
	return nil
}

// readError turns a failed read of a unit that retention deleted meanwhile
// into ErrNotFound.
func (q *Queue) readError(queueOffset int64, err error) error {
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	if queueOffset < q.minOffset.Load() {
		return fmt.Errorf("consumequeue %s: queue offset %d was deleted: %w", q.dir, queueOffset, ErrNotFound)
	}
	return fmt.Errorf("consumequeue %s: read queue offset %d: %w", q.dir, queueOffset, err)
}

// readUnit reads the unit at queueOffset with no range check.
func (q *Queue) readUnit(queueOffset int64) (Unit, error) {
	files := q.files.Load()
	if files == nil {
		return Unit{}, ErrNotFound
	}
	pos := queueOffset * UnitSize
	f := files.Find(pos)
	if f == nil {
		return Unit{}, ErrNotFound
	}
	buf := unitPool.Get().(*[UnitSize]byte)
	defer unitPool.Put(buf)
	if _, err := f.ReadAt(buf[:], pos-f.FromOffset()); err != nil {
		if errors.Is(err, io.EOF) {
			return Unit{}, fmt.Errorf("queue offset %d not readable yet: %w", queueOffset, ErrNotFound)
		}
		return Unit{}, err
	}
	return DecodeUnit(buf[:]), nil
}

// Flush makes the appended units durable (RocketMQ's least-pages rule
// applies to the last file). One flusher at a time; it may run concurrently
// with Append and DeleteBefore.
func (q *Queue) Flush(ctx context.Context, leastPages int) error {
	if q.closed.Load() {
		return fmt.Errorf("consumequeue %s: flush: %w", q.dir, mappedfile.ErrClosed)
	}
	files := q.files.Load()
	if files == nil {
		return nil
	}
	from := q.flushedWhere.Load()
	where, err := files.Flush(ctx, from, leastPages)
	if err != nil && errors.Is(err, mappedfile.ErrClosed) && !q.closed.Load() {
		// Retention deleted a file under the flush; what it held no longer
		// matters. Start again from the first file left.
		if first := files.First(); first != nil && first.FromOffset() > from {
			where, err = files.Flush(ctx, first.FromOffset(), leastPages)
		}
	}
	if err != nil {
		return fmt.Errorf("consumequeue %s: flush: %w", q.dir, err)
	}
	q.flushedWhere.Store(where)
	return nil
}

// Close closes the queue's files without flushing them.
func (q *Queue) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Swap(true) {
		return fmt.Errorf("consumequeue %s: close: %w", q.dir, mappedfile.ErrClosed)
	}
	if files := q.files.Load(); files != nil {
		if err := files.Close(); err != nil {
			return fmt.Errorf("consumequeue %s: close: %w", q.dir, err)
		}
	}
	return nil
}

// maxBatchUnits bounds the units AppendUnits writes with one append.
const maxBatchUnits = 512

// unitsEncoder writes a run of encoded units (AppendUnits).
type unitsEncoder struct {
	buf [maxBatchUnits * UnitSize]byte
	n   int // bytes of buf in use
}

// EncodeAt implements mappedfile.Encoder.
func (e *unitsEncoder) EncodeAt(dst []byte, _ int64) error {
	if len(dst) != e.n {
		return errEncodeLength
	}
	copy(dst, e.buf[:e.n])
	return nil
}

// AppendUnits appends units at queueOffset, queueOffset+1, … — what Append
// does for each, in order, with one append to the file (one lock, one copy)
// for every run that extends the queue within one file. Dispatch hands a
// batch of records' units to each queue this way. A unit it cannot append
// in a run (re-dispatch, a new queue, a file boundary) goes through Append.
// On an error the units before the failing one are appended.
func (q *Queue) AppendUnits(ctx context.Context, queueOffset int64, units []Unit) error {
	for len(units) > 0 {
		n, err := q.appendRun(ctx, queueOffset, units)
		if err != nil {
			return err
		}
		if n == 0 {
			if err := q.Append(ctx, queueOffset, units[0]); err != nil {
				return err
			}
			n = 1
		}
		queueOffset += int64(n)
		units = units[n:]
	}
	return nil
}

// appendRun appends the longest prefix of units that extends the queue at
// its end inside its current file, and returns its length: 0 when the first
// unit needs Append's other cases.
func (q *Queue) appendRun(ctx context.Context, queueOffset int64, units []Unit) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	files := q.files.Load()
	if q.closed.Load() || isEmpty(files) || queueOffset != q.maxOffset.Load() {
		return 0, nil
	}
	pos := queueOffset * UnitSize
	f := files.Last()
	if f == nil || f.FromOffset()+f.WrotePosition() != pos {
		return 0, nil
	}
	n := min(len(units), maxBatchUnits, int((f.SizeBytes()-f.WrotePosition())/UnitSize))
	for i, u := range units[:n] {
		if u.PhysicalOffset < 0 || u.Size <= 0 {
			n = i
			break
		}
		EncodeUnit(q.batch.buf[i*UnitSize:], u)
	}
	if n == 0 {
		return 0, nil
	}
	q.batch.n = n * UnitSize
	if _, err := f.Append(q.batch.n, &q.batch); err != nil {
		return 0, fmt.Errorf("consumequeue %s: append %d units at queue offset %d: %w", q.dir, n, queueOffset, err)
	}
	if f.ReadablePosition() < f.WrotePosition() {
		if _, err := f.Commit(ctx, 0); err != nil {
			return 0, fmt.Errorf("consumequeue %s: commit at queue offset %d: %w", q.dir, queueOffset, err)
		}
	}
	q.maxPhysicalOffset.Store(units[n-1].End())
	q.maxOffset.Store(queueOffset + int64(n))
	q.checkContiguous(f)
	return n, nil
}
