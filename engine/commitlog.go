package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/internal/invariants"
	"github.com/mqstore/mqstore/mappedfile"
)

// queueKey names one (topic, queue id) pair. A map keyed by it does not
// allocate on lookup.
type queueKey struct {
	topic   string
	queueID int32
}

// commitLog is the one CommitLog of a store: a segment queue, the append
// lock, and the per-queue offset table assigned under it.
type commitLog struct {
	queue            *segment.Queue
	maxRecordBytes   int
	segmentSizeBytes int64
	// crcFrom is the offset from which every record carries a whole-record
	// checksum (record.PropRecordCRC) that scans with CRC checks verify;
	// -1: none (the store never recycled segments). See recycle.go.
	crcFrom atomic.Int64

	// appendMu serializes appends (RocketMQ's putMessageLock). Everything
	// below it is guarded by it.
	appendMu appendLock
	// queueOffsets is the next queue offset of each queue. The map is
	// copied on write (a new queue, under appendMu) and read without a lock
	// through queueTable, so Put finds its queue's counter before it takes
	// the lock; the counters themselves are guarded by appendMu.
	queueOffsets map[queueKey]*queueCounter
	queueTable   atomic.Pointer[map[queueKey]*queueCounter]
	// feed hands each appended record to dispatch (dispatchFeed).
	feed  *dispatchFeed
	blank blankEncoder

	// lockedSince is when the current holder took appendMu (unix ns, 0 when
	// free): Put refuses with OSPageCacheBusy when it is too old.
	lockedSince atomic.Int64
	// lastStoreTimestamp is the STORETIMESTAMP of the newest appended record.
	lastStoreTimestamp atomic.Int64

	// commitMu serializes Commit calls on the queue and flushMu Flush calls
	// (the commit service, the flusher and a sync flush's own commit). A
	// commit and a flush may run at once — a backend's Commit and Flush are
	// safe together (mappedfile.MappedFile) — so a long commit pass over a
	// large backlog never holds the flusher back: it syncs what is committed
	// so far, segment by segment. Take commitMu before flushMu when both are
	// needed (lockSync).
	commitMu        sync.Mutex
	flushMu         sync.Mutex
	committedOffset atomic.Int64
	flushedOffset   atomic.Int64
}

// queueCounter is the next queue offset of one queue (guarded by appendMu),
// and the queue's topic as its first record named it: the string a fed
// record names its topic by, which lives as long as the queue (a Put's own
// topic string may be garbage once it returns; see fedBatch.next).
type queueCounter struct {
	next  int64
	topic string
}

// counter returns the counter of key without a lock; nil when the queue
// has none yet.
func (c *commitLog) counter(key queueKey) *queueCounter {
	if t := c.queueTable.Load(); t != nil {
		return (*t)[key]
	}
	return nil
}

// counterLocked returns the counter of key, making it when the queue has
// none; appendMu held (or the log not yet shared).
func (c *commitLog) counterLocked(key queueKey) *queueCounter {
	if qc := c.queueOffsets[key]; qc != nil {
		return qc
	}
	qc := &queueCounter{topic: key.topic}
	if c.queueTable.Load() == nil { // not shared yet (recovery): no copy
		c.queueOffsets[key] = qc
		return qc
	}
	t := make(map[queueKey]*queueCounter, len(c.queueOffsets)+1)
	for k, v := range c.queueOffsets {
		t[k] = v
	}
	t[key] = qc
	c.queueOffsets = t
	c.queueTable.Store(&t)
	return qc
}

// shareQueueOffsets publishes the counters to Put's lock-free lookup;
// from then on a new queue copies the map.
func (c *commitLog) shareQueueOffsets() {
	t := c.queueOffsets
	c.queueTable.Store(&t)
}

// nextQueueOffset is the next queue offset of key (0 and false for a queue
// with no record); appendMu held or the log not yet shared.
func (c *commitLog) nextQueueOffset(key queueKey) (int64, bool) {
	if qc := c.queueOffsets[key]; qc != nil {
		return qc.next, true
	}
	return 0, false
}

// nextQueueOffsetOf is nextQueueOffset without the flag.
func (c *commitLog) nextQueueOffsetOf(key queueKey) int64 {
	next, _ := c.nextQueueOffset(key)
	return next
}

// setNextQueueOffset sets the next queue offset of key; appendMu held or
// the log not yet shared.
func (c *commitLog) setNextQueueOffset(key queueKey, next int64) {
	c.counterLocked(key).next = next
}

// encodeBuffer holds one encoded record between encoding (outside the lock)
// and the append (inside it); it is the Encoder handed to the segment, so
// the record goes from here straight into segment memory, where the three
// fields known only under the lock are patched.
type encodeBuffer struct {
	buf            []byte
	props          []byte
	size           int
	queueOffset    int64
	storeTimestamp int64
	fromOffset     int64 // of the segment being appended to
	recordCRC      bool  // props end with record.AppendRecordCRC's property

	// What the dispatch feed takes (dispatchFeed): set by encode, but for
	// before (the append's).
	feed   *dispatchFeed
	fed    fedRecord
	hashes []int32
	before int64
}

// EncodeAt writes the record's TOTALSIZE last, in one store. The space it
// writes into is zeros (a new or truncated segment) and a zero TOTALSIZE is
// where recovery sees the data end: so a process killed in the middle of
// the copy (its stores stay in the page cache, in program order) leaves no
// record, rather than a valid-looking one whose
// STORETIMESTAMP or tail was never written — BODYCRC covers only the body.
// (The likely cause of a CI SIGKILL trial whose last record, otherwise
// valid, the index could not find at its time.)
//
// The three fields known only under the lock are patched in the encode
// buffer, before the copy: every byte of dst is written once, with its
// final value. (Patching dst after the copy let the kernel write a page back
// between the two: after a power loss a record that was never acknowledged
// could come back, valid, with STORETIMESTAMP 0, when it spans two pages
// and the one holding TOTALSIZE was written back last.)
func (e *encodeBuffer) EncodeAt(dst []byte, filePos int64) error {
	const sizeEnd = record.OffTotalSize + 4
	rec := e.buf[:e.size]
	record.Patch(rec, e.queueOffset, e.fromOffset+filePos, e.storeTimestamp)
	if e.recordCRC {
		record.PutRecordCRC(rec)
	}
	copy(dst[sizeEnd:], rec[sizeEnd:])
	if e.feed != nil {
		// Before the backend publishes the record (dispatchFeed's order).
		// Completed in place and passed by pointer: one copy of it, into
		// the feed, not two.
		r := &e.fed
		r.before, r.offset = e.before, e.fromOffset+filePos
		r.queueOffset, r.storeTimestamp, r.size = e.queueOffset, e.storeTimestamp, int32(e.size)
		e.feed.push(r, e.hashes)
	}
	// One 32-bit store (unaligned stores are single instructions on the
	// architectures Go's mmap backends run on).
	*(*uint32)(unsafe.Pointer(&dst[record.OffTotalSize])) = *(*uint32)(unsafe.Pointer(&rec[record.OffTotalSize]))
	return nil
}

var encodeBuffers = sync.Pool{New: func() any { return &encodeBuffer{} }}

type blankEncoder struct{}

// EncodeAt writes the BLANK and zeros the rest of dst (an Encoder fills
// dst: a backend's staging ring holds older bytes there). It writes only
// where dst is not zero already, so a fresh mapping's pages are not dirtied.
func (blankEncoder) EncodeAt(dst []byte, _ int64) error {
	record.PutBlank(dst, int32(len(dst)))
	mappedfile.ZeroDirty(dst[record.BlankSize:])
	return nil
}

// appendResult is where a record went.
type appendResult struct {
	physicalOffset int64
	size           int
	queueOffset    int64
	storeTimestamp int64
	rolled         bool
}

// appendRecord appends an encoded record; it takes the append lock. now is
// the Put's clock reading, taken before the lock: a Put that got the lock at
// once reads no clock under it. One that had to wait reads clock once it has
// the lock, so lockedSince (Put's OSPageCacheBusy check) and the store
// timestamp say when the lock was taken, not when the wait began — a
// producer overtaken for a while on a loaded machine must not make the lock
// look stuck.
func (c *commitLog) appendRecord(ctx context.Context, e *encodeBuffer, key queueKey, sysFlag int32, now time.Time, clock func() time.Time) (appendResult, error) {
	qc := c.counter(key) // before the lock: no map lookup by a hashed topic under it
	if c.appendMu.lock() {
		now = clock()
	}
	c.lockedSince.Store(now.UnixNano())
	defer c.unlockAppend()
	if qc == nil {
		qc = c.counterLocked(key) // the queue's first record
	}
	return c.appendLocked(ctx, e, qc, sysFlag, now)
}

// unlockAppend releases the append lock appendRecord took.
func (c *commitLog) unlockAppend() {
	c.lockedSince.Store(0)
	c.appendMu.Unlock()
}

// transactionPrepared and transactionRollback records do not take a queue
// offset: they are not dispatched to a ConsumeQueue (RocketMQ's rule).
func takesQueueOffset(sysFlag int32) bool {
	t := sysFlag & 0xC
	return t != 0x4 && t != 0xC
}

func (c *commitLog) appendLocked(ctx context.Context, e *encodeBuffer, qc *queueCounter, sysFlag int32, now time.Time) (appendResult, error) {
	var res appendResult
	mf, err := c.queue.NextForAppend(ctx, 0)
	if err != nil {
		return res, err
	}
	e.before = mf.FromOffset() + mf.WrotePosition()
	if remaining := mf.SizeBytes() - mf.WrotePosition(); int64(e.size)+record.BlankSize > remaining {
		if mf, err = c.roll(ctx, mf, remaining); err != nil {
			return res, err
		}
		res.rolled = true
	}
	queueOffset := int64(0)
	if takesQueueOffset(sysFlag) {
		queueOffset = qc.next
	}
	e.queueOffset = queueOffset
	e.fed.topic = qc.topic
	// The clock was read before the lock: keep store timestamps in log
	// order, as a reading under the lock kept them.
	e.storeTimestamp = max(now.UnixMilli(), c.lastStoreTimestamp.Load())
	e.fromOffset = mf.FromOffset()
	pos, err := mf.Append(e.size, e)
	if err != nil {
		return res, appendFailed(e.size, mf, err)
	}
	if takesQueueOffset(sysFlag) {
		qc.next = queueOffset + 1
	}
	c.lastStoreTimestamp.Store(e.storeTimestamp)
	res.physicalOffset = mf.FromOffset() + pos
	res.size = e.size
	res.queueOffset = queueOffset
	res.storeTimestamp = e.storeTimestamp
	return res, nil
}

// roll ends mf, which has remaining bytes left and no room for the next
// record with a blank after it, with RocketMQ's END_FILE blank over the
// rest, and returns the next segment. Out of line, as the other slow paths
// of an append: with hundreds of producers an append's stack lines are
// cold, and a wider frame touches more of them.
//
//go:noinline
func (c *commitLog) roll(ctx context.Context, mf mappedfile.MappedFile, remaining int64) (mappedfile.MappedFile, error) {
	if remaining < record.BlankSize {
		// Every append leaves room for the blank: the segment is not
		// what this log wrote.
		return nil, fmt.Errorf("segment %s has %d bytes left, too few for the end-of-segment blank: %w", mf.Path(), remaining, mappedfile.ErrInvalidArgument)
	}
	if _, err := mf.Append(int(remaining), c.blank); err != nil {
		return nil, fmt.Errorf("write blank at the end of %s: %w", mf.Path(), err)
	}
	invariants.Equal("an end-of-segment blank ends at its segment's end", mf.WrotePosition(), mf.SizeBytes())
	return c.queue.NextForAppend(ctx, 0)
}

//go:noinline
func appendFailed(n int, mf mappedfile.MappedFile, err error) error {
	return fmt.Errorf("append %d bytes to %s: %w", n, mf.Path(), err)
}

// commit moves written bytes toward the files (buffered backends).
func (c *commitLog) commit(ctx context.Context, leastPages int) (int64, error) {
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	return c.commitLocked(ctx, leastPages)
}

// lockSync stops every commit and flush of the queue until unlock is called
// (for changes of the segment list itself, such as dropping an empty
// segment before replicated bytes arrive).
func (c *commitLog) lockSync() (unlock func()) {
	c.commitMu.Lock()
	c.flushMu.Lock()
	return func() {
		c.flushMu.Unlock()
		c.commitMu.Unlock()
	}
}

func (c *commitLog) commitLocked(ctx context.Context, leastPages int) (int64, error) {
	off, err := c.queue.Commit(ctx, c.committedOffset.Load(), leastPages)
	raise(&c.committedOffset, off)
	return off, err
}

// flush makes committed bytes durable; for buffered backends it commits
// first when commitFirst is set (sync flush must not wait for the commit
// interval). It returns the global flushed offset.
func (c *commitLog) flush(ctx context.Context, leastPages int, commitFirst bool) (int64, error) {
	if commitFirst {
		if _, err := c.commit(ctx, 0); err != nil {
			return c.flushedOffset.Load(), err
		}
	}
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	off, err := c.queue.Flush(ctx, c.flushedOffset.Load(), leastPages)
	if off > c.flushedOffset.Load() { // flushMu held: the only writer
		// A commit pass still running publishes its offset when it ends;
		// what is flushed was committed, so the committed offset is at
		// least here already (wrote ≥ committed ≥ flushed for readers).
		raise(&c.committedOffset, off)
		c.flushedOffset.Store(off)
	}
	return off, err
}

// readAt copies CommitLog bytes at a global offset. The bytes must lie in
// one segment.
func (c *commitLog) readAt(dst []byte, offset int64) error {
	mf := c.queue.Find(offset)
	if mf == nil {
		return fmt.Errorf("offset %d: no segment holds it (store has [%d, %d)): %w",
			offset, c.queue.MinOffset(), c.queue.ReadableOffset(), ErrNotFound)
	}
	n, err := mf.ReadAt(dst, offset-mf.FromOffset())
	if n == len(dst) {
		return nil
	}
	if err == nil {
		err = errors.New("short read")
	}
	return fmt.Errorf("read %d bytes at offset %d: %w", len(dst), offset, err)
}

// scanFunc receives each valid record found by a scan, and each blank with
// r == nil; rec aliases the scanner's buffer and is valid only for the call.
type scanFunc func(offset int64, rec []byte, r *record.Record) error

// ErrStopScan, returned by a Scan callback, ends the scan early without an error.
var ErrStopScan = errors.New("stop scan")

// scanEnd tells why a scan stopped.
type scanEnd struct {
	// validEnd is the global offset after the last valid record (or blank).
	validEnd int64
	// corrupt is the decode error at validEnd when the data there is not a
	// clean end (TOTALSIZE 0 or the end of the last segment).
	corrupt error
}

// scanWindowBytes is how much of a segment a scan reads at a time (at
// least a record of the largest size and a blank).
const scanWindowBytes = 1 << 20

// scanBuffer returns a scan's window buffer for c's records.
func (c *commitLog) scanBuffer() []byte {
	return make([]byte, max(c.maxRecordBytes+record.BlankSize, scanWindowBytes))
}

// scan reads records from the global offset from (which must be a record
// boundary) to the end of the log, following blanks into the next segment,
// checking every CRC. It stops at the end of the data or the first invalid
// record and says where.
func (c *commitLog) scan(ctx context.Context, from int64, fn scanFunc) (scanEnd, error) {
	return c.scanWith(ctx, from, c.scanBuffer(), true, nil, nil, fn)
}

// scanWith is scan with the caller's buffer (at least maxRecordBytes+8) and
// a choice of CRC checks (dispatch reads what was just appended and skips
// them, as RocketMQ's reput does). topics and rec, when not nil, are the
// caller's reusable interner and record (fn gets rec): with them a scan
// does not allocate — dispatch runs one per batch of Puts.
func (c *commitLog) scanWith(ctx context.Context, from int64, buf []byte, checkCRC bool, topics *record.Interner, rec *record.Record, fn scanFunc) (scanEnd, error) {
	if rec == nil {
		rec = new(record.Record)
	}
	files := c.queue.Snapshot()
	end := scanEnd{validEnd: from}
	for _, mf := range files {
		if mf.FromOffset()+mf.SizeBytes() <= from {
			continue
		}
		start := max(from-mf.FromOffset(), 0)
		segEnd, full, err := c.scanSegment(ctx, mf, start, buf, checkCRC, topics, rec, fn)
		end.validEnd = mf.FromOffset() + segEnd
		if err != nil {
			if errors.Is(err, ErrStopScan) {
				return end, nil
			}
			var de *record.DecodeError
			if errors.As(err, &de) {
				end.corrupt = err
				return end, nil
			}
			return end, err
		}
		if !full {
			return end, nil
		}
	}
	return end, nil
}

// scanBound is where scans of a segment stop: its readable bytes that are
// also committed. A backend may serve reads of bytes not yet committed
// (a buffered backend's staging ring), but a process crash loses those: a consumer that
// saw one would hold a queue offset that a different message takes after the
// restart. So dispatch (and so Get, queries and replication) covers only
// what a process crash keeps; recovery and Verify open files whose positions
// are all equal, where this is the readable end.
func scanBound(mf mappedfile.MappedFile) int64 {
	return min(mf.ReadablePosition(), mf.CommittedPosition())
}

// dispatchBound is where a scan from from would stop for want of bytes:
// every byte from from up to it is readable and committed (scanBound).
func (c *commitLog) dispatchBound(from int64) int64 {
	bound := from
	for _, mf := range c.queue.Snapshot() {
		if mf.FromOffset()+mf.SizeBytes() <= from {
			continue
		}
		b := scanBound(mf)
		bound = mf.FromOffset() + b
		if b < mf.SizeBytes() {
			break
		}
	}
	return bound
}

// scanSegment scans one segment from start. full reports that the segment
// ended with a blank or exactly at its end, so the log continues in the next.
func (c *commitLog) scanSegment(ctx context.Context, mf mappedfile.MappedFile, start int64, buf []byte, checkCRC bool,
	topics *record.Interner, r *record.Record, fn scanFunc) (int64, bool, error) {
	size := mf.SizeBytes()
	readable := scanBound(mf)
	pos := start
	winStart, winEnd := int64(0), int64(0) // buf holds [winStart, winEnd) of the segment
	for {
		if pos == size {
			return pos, true, nil
		}
		if pos+record.BlankSize > readable {
			if pos < readable && readable == size {
				return pos, false, fmt.Errorf("segment %s: %d bytes at the end, too few for a record or blank: %w",
					mf.Path(), size-pos, &record.DecodeError{Offset: mf.FromOffset() + pos, Field: record.FieldTotalSize, Reason: "segment tail shorter than a blank", Err: record.ErrCorrupt})
			}
			return pos, false, nil
		}
		if pos+record.BlankSize > winEnd || pos < winStart {
			var err error
			if winStart, winEnd, err = fill(mf, buf, pos, readable); err != nil {
				return pos, false, err
			}
		}
		at := mf.FromOffset() + pos
		kind, total, err := record.Peek(buf[pos-winStart:winEnd-winStart], at, c.maxRecordBytes)
		if err != nil {
			return pos, false, err
		}
		switch kind {
		case record.KindEnd:
			return pos, false, nil
		case record.KindBlank:
			if pos+int64(total) != size {
				return pos, false, &record.DecodeError{Offset: at, Field: record.FieldTotalSize,
					Reason: fmt.Sprintf("blank of %d bytes does not reach the segment end (%d bytes left)", total, size-pos), Err: record.ErrCorrupt}
			}
			if fn != nil {
				if err := fn(at, buf[pos-winStart:pos-winStart+record.BlankSize], nil); err != nil {
					return pos, false, err
				}
			}
			return size, true, nil
		}
		if pos+int64(total) > readable {
			if readable < size {
				// A buffered backend may commit in chunks: the rest of the
				// record is not readable yet. Stop here; a later scan goes on.
				return pos, false, nil
			}
			return pos, false, &record.DecodeError{Offset: at, Field: record.FieldTotalSize,
				Reason: fmt.Sprintf("record of %d bytes runs past the end of the segment (%d bytes left)", total, readable-pos), Err: record.ErrTooShort}
		}
		if pos+int64(total) > winEnd {
			if winStart, winEnd, err = fill(mf, buf, pos, readable); err != nil {
				return pos, false, err
			}
		}
		rec := buf[pos-winStart : pos-winStart+int64(total)]
		if *r, err = record.DecodeInterned(rec, at, checkCRC, topics); err != nil {
			return pos, false, err
		}
		if checkCRC {
			if err := checkTail(rec, r, at); err != nil {
				return pos, false, err
			}
			if from := c.crcFrom.Load(); from >= 0 && at >= from {
				if err := record.CheckRecordCRC(rec, at); err != nil {
					return pos, false, err
				}
			}
		}
		if err := checkStoredOffset(r, at); err != nil {
			return pos, false, err
		}
		if fn != nil {
			if err := fn(at, rec, r); err != nil {
				return pos, false, err
			}
		}
		pos += int64(total)
		if err := ctx.Err(); err != nil {
			return pos, false, err
		}
	}
}

// checkTail catches a record whose end was torn off: BODYCRC covers only
// the body, and a write cut short leaves zeros where the topic or properties
// end. Properties are written "name 0x01 value 0x02" with a final 0x02 (as
// RocketMQ writes them), and a topic never holds a zero byte.
func checkTail(rec []byte, r *record.Record, at int64) error {
	last := rec[len(rec)-1]
	switch {
	case len(r.Properties) > 0 && last != 0x02:
		return &record.DecodeError{Offset: at, Field: record.FieldPropertiesLength,
			Reason: fmt.Sprintf("properties end with 0x%02x, not the 0x02 separator (a torn write?)", last), Err: record.ErrCorrupt}
	case len(r.Properties) == 0 && strings.IndexByte(r.Topic, 0) >= 0:
		return &record.DecodeError{Offset: at, Field: record.FieldTopicLength,
			Reason: "topic holds a zero byte (a torn write?)", Err: record.ErrCorrupt}
	}
	return nil
}

// fill reads as much of the segment from pos as fits in buf.
func fill(mf mappedfile.MappedFile, buf []byte, pos, readable int64) (int64, int64, error) {
	n := min(int64(len(buf)), readable-pos)
	m, err := mf.ReadAt(buf[:n], pos)
	if int64(m) != n {
		return 0, 0, fmt.Errorf("read %s at %d: %w", mf.Path(), pos, err)
	}
	return pos, pos + n, nil
}
