// Package engine is mqstore's store: one CommitLog shared by every topic, in
// RocketMQ's on-disk format, written through a pluggable MappedFile backend,
// with RocketMQ's flush policies (async, and sync with group commit).
package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mqstore/mqstore/engine/consumequeue"
	"github.com/mqstore/mqstore/engine/mappedfile"
	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/engine/segment"
)

// Message is what a producer stores; see record.Message. The store sets
// STOREHOSTADDRESS and, when BornTimestamp is 0, the born time.
type Message = record.Message

// Property is a message property.
type Property = record.Property

// PutResult says where a message went.
type PutResult struct {
	Status         PutStatus
	PhysicalOffset int64 // CommitLog offset of the record
	Size           int   // TOTALSIZE
	QueueOffset    int64 // index in its ConsumeQueue
	StoreTimestamp int64 // ms
}

// Store is an open message store. All methods are safe for concurrent use.
type Store struct {
	dir        string
	opts       Options
	backend    mappedfile.Backend
	aux        mappedfile.Backend // ConsumeQueue and IndexFile files
	lock       *dirLock
	checkpoint *checkpoint
	log        *commitLog
	logics     *logics
	alloc      *allocator

	dispatcher    *dispatcher
	logicsFlusher *logicsFlusher
	cleaner       *cleaner
	deleteHours   map[int]bool

	committer *committer
	flusher   interface{ Wakeup() } // asyncFlusher or groupCommitter
	async     *asyncFlusher
	group     *groupCommitter

	stats    storeStats
	writeErr atomic.Pointer[error]

	// closeMu: Put holds it shared, Close exclusively, so Close waits for
	// Puts in flight and no Put starts on a closed store.
	closeMu sync.RWMutex
	closed  bool

	abnormalOpen bool
	// rebuildLogics: the consumequeue or index directory was missing at
	// Open, so recovery scans (and dispatches) the whole log.
	rebuildLogics bool
	// recoveredFrom is the offset Open's recovery scan started at.
	recoveredFrom int64
}

// Open opens the store in dir, creating it when empty. It takes the lock
// file, recovers the CommitLog (scanning with CRC checks and truncating a
// torn tail) and starts the background services.
func Open(ctx context.Context, dir string, opts Options) (*Store, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open store: create %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	s := &Store{dir: dir, lock: lock}
	ok := false
	defer func() {
		if !ok {
			s.abandon()
		}
	}()
	params, err := reconcileParams(dir, &o)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if opts.MaxMessageSizeBytes == 0 {
		// The default shrinks to fit small segments (tests, tools).
		o.MaxMessageSizeBytes = min(o.MaxMessageSizeBytes, int(o.SegmentSizeBytes)-2*record.BlankSize)
	}
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if params.isNew {
		params.MaxMessageSizeBytes = o.MaxMessageSizeBytes
		if err := writeParams(dir, params); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
	}
	s.opts = o
	if s.deleteHours, err = parseDeleteWhen(o.DeleteWhen); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if s.backend, err = newBackend(o); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	s.aux = auxBackend(o, s.backend)
	if s.checkpoint, err = loadCheckpoint(dir); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	abortPath := filepath.Join(dir, abortFileName)
	if _, err := os.Stat(abortPath); err == nil {
		s.abnormalOpen = true
		o.Logger.Warn("store was not closed cleanly; recovering", slog.String("dir", dir))
	}
	if !o.NoPreallocate {
		s.alloc = newAllocator(s.backend, o)
	}
	var alloc segment.Allocator
	if s.alloc != nil {
		alloc = s.alloc
	}
	queue, err := segment.Open(ctx, segment.Config{Dir: filepath.Join(dir, commitLogDirName), Backend: s.backend,
		SegmentSizeBytes: o.SegmentSizeBytes, Allocator: alloc})
	if errors.Is(err, segment.ErrCorruptDirectory) {
		return nil, fmt.Errorf("open store: commitlog: %w: %w", ErrCorrupt, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open store: commitlog: %w", err)
	}
	s.log = &commitLog{queue: queue, segmentSizeBytes: o.SegmentSizeBytes,
		maxRecordBytes: max(o.MaxMessageSizeBytes, params.MaxMessageSizeBytes), queueOffsets: make(map[queueKey]int64)}
	if s.rebuildLogics, err = s.logicsMissing(); err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	if s.logics, err = openLogics(ctx, s); err != nil {
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	if err := s.recover(ctx); err != nil {
		return nil, fmt.Errorf("open store %s: recovery: %w", dir, err)
	}
	if err := writeFileDurably(abortPath, nil); err != nil {
		return nil, fmt.Errorf("open store: create abort file: %w", err)
	}
	s.startServices()
	ok = true
	return s, nil
}

func (s *Store) startServices() {
	s.dispatcher = newDispatcher(s)
	s.logicsFlusher = &logicsFlusher{service: newService(), store: s}
	s.committer = &committer{service: newService(), store: s}
	s.cleaner = &cleaner{service: newService(), store: s}
	if s.opts.FlushMode == FlushSync {
		s.group = &groupCommitter{service: newService(), store: s, limit: s.opts.GroupCommitQueueSize}
		s.flusher = s.group
		go s.group.run()
	} else {
		s.async = &asyncFlusher{service: newService(), store: s}
		s.flusher = s.async
		go s.async.run()
	}
	go s.dispatcher.run()
	go s.logicsFlusher.run()
	go s.committer.run()
	go s.cleaner.run()
}

// abandon releases what a failed Open took.
func (s *Store) abandon() {
	if s.logics != nil {
		s.logics.close()
	}
	if s.log != nil {
		s.log.queue.Close()
	}
	if s.alloc != nil {
		s.alloc.Close()
	}
	if c, ok := s.backend.(io.Closer); ok {
		c.Close()
	}
	s.lock.unlock()
}

// recover finds the end of the valid CommitLog data, truncates what follows
// it (in the CommitLog, the ConsumeQueues and the index), rebuilds the queue
// offset table, and dispatches whatever the ConsumeQueues or the index lack.
// It scans with CRC checks from the segment recoveryStart picks.
func (s *Store) recover(ctx context.Context) error {
	q := s.log.queue
	logStart := max(q.MinOffset(), 0)
	from := s.recoveryStart(logStart)
	s.recoveredFrom = from
	lastKeyed := int64(-1)
	// After a crash, ConsumeQueue and index data newer than the checkpoint
	// may be torn: every record stored since the checkpoint (less 3 s for
	// clock steps, as RocketMQ does) is dispatched again and its units
	// checked and repaired.
	redispatchFrom := int64(-1)
	safeMs := min(s.checkpoint.logics.Load(), s.checkpoint.index.Load()) - 3000
	if q.Len() > 0 {
		end, err := s.log.scan(ctx, from, func(offset int64, rec []byte, r *record.Record) error {
			if r == nil { // a blank
				return nil
			}
			if redispatchFrom < 0 && r.StoreTimestamp >= safeMs {
				redispatchFrom = offset
			}
			if takesQueueOffset(r.SysFlag) {
				key := queueKey{topic: r.Topic, queueID: r.QueueID}
				if next := r.QueueOffset + 1; next > s.log.queueOffsets[key] {
					s.log.queueOffsets[key] = next
				}
			}
			if _, ok := record.LookupProperty(r.Properties, record.PropKeys); ok {
				lastKeyed = offset
			} else if _, ok := r.UniqKey(); ok {
				lastKeyed = offset
			}
			s.log.lastStoreTimestamp.Store(r.StoreTimestamp)
			return nil
		})
		if err != nil {
			return err
		}
		if err := s.judgeEnd(end); err != nil {
			return err
		}
		if err := q.TruncateTo(ctx, end.validEnd); err != nil {
			return err
		}
	}
	if off := s.checkpoint.logicsOffset.Load(); off > 0 && (redispatchFrom < 0 || off < redispatchFrom) {
		redispatchFrom = max(off, from) // what the checkpoint knew dispatched, whatever the clock did
	}
	validEnd := q.ReadableOffset()
	s.log.committedOffset.Store(validEnd)
	s.log.flushedOffset.Store(validEnd)
	if !s.abnormalOpen {
		redispatchFrom = -1 // a clean close flushed every ConsumeQueue and the index
	} else if redispatchFrom < 0 || redispatchFrom > validEnd {
		redispatchFrom = validEnd
	}
	if s.checkpoint.logicsOffset.Load() > validEnd {
		s.checkpoint.logicsOffset.Store(validEnd) // the log was cut below it
	}
	return s.recoverLogics(ctx, logStart, validEnd, lastKeyed, redispatchFrom)
}

// logicsMissing reports whether the consumequeue or the index directory is
// missing (or, in memory, holds no file): deleted to be rebuilt.
func (s *Store) logicsMissing() (bool, error) {
	cqDir, indexDir := filepath.Join(s.dir, consumeQueueDirName), filepath.Join(s.dir, indexDirName)
	if l, ok := s.aux.(mappedfile.Lister); ok {
		if _, err := l.List(indexDir); !errors.Is(err, mappedfile.ErrUnsupported) {
			queues, err := consumequeue.List(cqDir, s.aux)
			if err != nil {
				return false, err
			}
			return len(queues) == 0, nil // an in-memory index has files only once keys came
		}
	}
	for _, d := range []string{cqDir, indexDir} {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			return true, nil
		} else if err != nil {
			return false, fmt.Errorf("stat %s: %w", d, err)
		}
	}
	return false, nil
}

// recoveryStart picks the offset recovery scans from (a segment's first
// offset), as RocketMQ does: after a clean close, the third-newest segment
// holding data;
// after a crash, the newest segment whose first record is older than
// min(physic, logics, index) − 3 s in the checkpoint, and no later than the
// segment holding the offsets the checkpoint knew flushed and dispatched
// (mqstore's extension: right even when the clock stepped back). Everything
// before it was durable and dispatched. With no ConsumeQueues or no index
// directory on disk (deleted to be rebuilt) it is the log's start.
func (s *Store) recoveryStart(logStart int64) int64 {
	files := s.log.queue.Files()
	if len(files) == 0 || s.rebuildLogics || s.opts.FullRecoveryScan {
		return logStart
	}
	segStart := func(i int) int64 { return max(files[i].FromOffset(), logStart) }
	if !s.abnormalOpen {
		// The third-newest segment holding data: preallocated empty ones
		// after the last do not count.
		n := len(files)
		for n > 1 {
			if _, ok := firstStoreTimestamp(files[n-1]); ok {
				break
			}
			n--
		}
		return segStart(max(n-3, 0))
	}
	cp := s.checkpoint
	known := min(cp.logicsOffset.Load(), cp.flushedOffset.Load())
	if known <= 0 {
		// No offset known (no checkpoint yet, or one RocketMQ wrote): do
		// not trust the clock alone.
		return logStart
	}
	safeMs := min(cp.physic.Load(), cp.logics.Load(), cp.index.Load()) - 3000
	i := len(files) - 1
	for ; i > 0; i-- {
		if ts, ok := firstStoreTimestamp(files[i]); ok && ts <= safeMs {
			break
		}
	}
	for i > 0 && files[i].FromOffset() > known {
		i-- // no later than the segment holding what the checkpoint knew
	}
	return segStart(i)
}

// firstStoreTimestamp reads the STORETIMESTAMP of a segment's first record
// (false when it does not start with a record).
func firstStoreTimestamp(mf mappedfile.MappedFile) (int64, bool) {
	head := make([]byte, 128)
	n, _ := mf.ReadAt(head, 0)
	if n < record.MinRecordSize {
		return 0, false
	}
	magic := int32(binary.BigEndian.Uint32(head[record.OffMagic:]))
	if magic != record.MagicV1 && magic != record.MagicV2 {
		return 0, false
	}
	off := record.StoreTimestampOffset(int32(binary.BigEndian.Uint32(head[record.OffSysFlag:])))
	if off+8 > n {
		return 0, false
	}
	ts := int64(binary.BigEndian.Uint64(head[off:]))
	return ts, ts > 0
}

// recoverLogics truncates the ConsumeQueues and the index to the valid
// CommitLog end and re-dispatches from the earliest point one of them lacks.
func (s *Store) recoverLogics(ctx context.Context, logStart, validEnd, lastKeyed, redispatchFrom int64) error {
	l := s.logics
	indexCut := validEnd
	reputFrom := validEnd
	if redispatchFrom >= 0 {
		reputFrom = redispatchFrom
		// Index files not known durable by the checkpoint are dropped
		// whole and rebuilt (RocketMQ's rule): a torn entry cannot be undone.
		for _, f := range l.index.Files() {
			if f.EndTimestamp > s.checkpoint.index.Load() {
				indexCut = min(indexCut, f.BeginPhyOffset)
				break
			}
		}
		reputFrom = min(reputFrom, max(indexCut, logStart))
	}
	if err := l.index.TruncateByPhysical(ctx, indexCut); err != nil {
		return fmt.Errorf("truncate index: %w", err)
	}
	if lastKeyed >= 0 && !l.index.Covers(lastKeyed) {
		reputFrom = min(reputFrom, max(l.index.MaxPhysicalOffset(), logStart))
	}
	keys, err := s.knownQueues()
	if err != nil {
		return err
	}
	for _, key := range keys {
		cq, err := l.queue(ctx, key, true)
		if err != nil {
			return err
		}
		if err := cq.TruncateByPhysical(ctx, validEnd); err != nil {
			return fmt.Errorf("truncate consume queue %s/%d: %w", key.topic, key.queueID, err)
		}
		// A torn page can leave a last unit that points at the right record
		// with a wrong size or tags code: check it against the record.
		if n := cq.MaxOffset(); n > cq.MinOffset() {
			if u, err := cq.Get(n - 1); err != nil || !s.unitMatches(ctx, key, n-1, u) {
				if err := cq.TruncateAt(ctx, n-1); err != nil {
					return fmt.Errorf("drop the damaged last unit of %s/%d: %w", key.topic, key.queueID, err)
				}
			}
		}
		if cq.MaxOffset() < s.log.queueOffsets[key] { // units missing: dispatch from the last one it has
			start := logStart
			if n := cq.MaxOffset(); n > cq.MinOffset() {
				if u, err := cq.Get(n - 1); err == nil {
					start = max(u.PhysicalOffset, logStart)
				}
			}
			reputFrom = min(reputFrom, start)
		}
	}
	if reputFrom < validEnd {
		s.opts.Logger.Info("rebuilding consume queues and index", slog.Int64("from", reputFrom), slog.Int64("to", validEnd))
		var keyBuf []byte
		end, err := s.log.scan(ctx, reputFrom, func(offset int64, _ []byte, r *record.Record) error {
			if r == nil {
				return nil
			}
			err := s.dispatchRecord(ctx, offset, r, nil, &keyBuf)
			if errors.Is(err, consumequeue.ErrConflict) {
				// A torn unit: replace it and everything after it.
				cq, qerr := l.queue(ctx, queueKey{topic: r.Topic, queueID: r.QueueID}, false)
				if qerr != nil || cq == nil {
					return err
				}
				if terr := cq.TruncateAt(ctx, r.QueueOffset); terr != nil {
					return fmt.Errorf("repair %s/%d at %d: %w", r.Topic, r.QueueID, r.QueueOffset, terr)
				}
				s.opts.Logger.Warn("repaired a torn consume queue unit", slog.String("topic", r.Topic),
					slog.Int("queueId", int(r.QueueID)), slog.Int64("queueOffset", r.QueueOffset))
				err = s.dispatchRecord(ctx, offset, r, nil, &keyBuf)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("re-dispatch from %d: %w", reputFrom, err)
		}
		if end.validEnd != validEnd {
			return fmt.Errorf("re-dispatch stopped at %d before the valid end %d: %v: %w", end.validEnd, validEnd, end.corrupt, ErrCorrupt)
		}
	}
	l.dispatchedOffset.Store(validEnd)
	// A queue whose newest record precedes the scan continues after its
	// ConsumeQueue's last unit (RocketMQ's recoverTopicQueueTable).
	for _, q := range l.queues() {
		key := queueKey{topic: q.Topic(), queueID: q.QueueID()}
		if n := q.MaxOffset(); n > s.log.queueOffsets[key] {
			s.log.queueOffsets[key] = n
		}
	}
	// The queues are consistent now: move their minimum past what retention
	// deleted from the CommitLog.
	for _, q := range l.queues() {
		if _, err := q.DeleteBefore(ctx, max(logStart, 0)); err != nil {
			return fmt.Errorf("consume queue %s/%d: %w", q.Topic(), q.QueueID(), err)
		}
	}
	l.recovering = false
	return nil
}

// unitMatches reports whether u is the right unit for queue offset n of key.
func (s *Store) unitMatches(ctx context.Context, key queueKey, n int64, u consumequeue.Unit) bool {
	r, err := s.ReadMessage(ctx, u.PhysicalOffset)
	if err != nil {
		return false
	}
	tags, _ := r.Tags()
	return r.Topic == key.topic && r.QueueID == key.queueID && r.QueueOffset == n &&
		r.TotalSize == u.Size && record.TagsCode(tags) == u.TagsCode
}

// knownQueues lists the queues of the CommitLog and those with ConsumeQueue
// files on disk.
func (s *Store) knownQueues() ([]queueKey, error) {
	seen := make(map[queueKey]struct{}, len(s.log.queueOffsets))
	for k := range s.log.queueOffsets {
		seen[k] = struct{}{}
	}
	onDisk, err := consumequeue.List(s.logics.cqConfig.Dir, s.aux)
	if err != nil {
		return nil, fmt.Errorf("list consume queues: %w", err)
	}
	for topic, ids := range onDisk {
		for _, id := range ids {
			seen[queueKey{topic: topic, queueID: id}] = struct{}{}
		}
	}
	keys := make([]queueKey, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	return keys, nil
}

// judgeEnd decides what the end of the valid data means. Past the offset
// the checkpoint knew durable, an invalid record or a zero is a torn tail
// after a crash: it is cut (RocketMQ's rule). Before it, durable data was
// lost or damaged: Open stops (CorruptionStop) or cuts and keeps the cut
// bytes in .broken files (CorruptionTruncate).
func (s *Store) judgeEnd(end scanEnd) error {
	durable := s.checkpoint.flushedOffset.Load()
	if !s.abnormalOpen && end.corrupt != nil {
		// After a clean close nothing is torn: a bad record is corruption
		// wherever it is (the checkpoint of a store closed by an older
		// version may not know the last flush).
		durable = max(durable, end.validEnd+1)
	}
	if end.validEnd >= durable {
		if end.corrupt != nil {
			s.opts.Logger.Warn("truncating a torn CommitLog tail", slog.Int64("offset", end.validEnd), slog.Any("reason", end.corrupt))
		}
		return nil
	}
	reason := "the data ends there (zeros or a missing segment)"
	if end.corrupt != nil {
		reason = end.corrupt.Error()
	}
	msg := fmt.Sprintf("CommitLog invalid at offset %d although the checkpoint says it was durable up to %d: %s", end.validEnd, durable, reason)
	if later := s.validDataAfter(end.validEnd); later >= 0 {
		msg += fmt.Sprintf(" (valid records follow at %d)", later)
	}
	if s.opts.OnCorruption != CorruptionTruncate {
		return fmt.Errorf("%s; open with OnCorruption: CorruptionTruncate to cut the log there and keep the rest in .broken files: %w", msg, ErrCorrupt)
	}
	if err := s.saveBroken(end.validEnd); err != nil {
		return fmt.Errorf("%s: keeping the cut bytes: %w", msg, err)
	}
	s.opts.Logger.Error("cutting the CommitLog at a corrupt record", slog.String("what", msg))
	s.checkpoint.flushedOffset.Store(end.validEnd)
	return nil
}

// saveBroken copies the CommitLog bytes from offset on into
// commitlog/<segment>.broken files (trailing zeros dropped).
func (s *Store) saveBroken(offset int64) error {
	if _, ok := s.backend.(mappedfile.Lister); ok {
		return nil // in memory: nothing to keep on disk
	}
	for _, mf := range s.log.queue.Files() {
		if mf.FromOffset()+mf.SizeBytes() <= offset {
			continue
		}
		start := max(offset-mf.FromOffset(), 0)
		buf := make([]byte, mf.ReadablePosition()-start)
		n, _ := mf.ReadAt(buf, start)
		buf = buf[:n]
		for len(buf) > 0 && buf[len(buf)-1] == 0 {
			buf = buf[:len(buf)-1]
		}
		if len(buf) == 0 {
			continue
		}
		if err := writeFileDurably(mf.Path()+".broken", buf); err != nil {
			return err
		}
	}
	return nil
}

// validDataAfter returns the offset of a valid record at the start of a
// segment after offset, or -1: a sign that a corruption is not a torn tail.
func (s *Store) validDataAfter(offset int64) int64 {
	for _, mf := range s.log.queue.Files() {
		if mf.FromOffset() <= offset {
			continue
		}
		head := make([]byte, record.BlankSize)
		if n, _ := mf.ReadAt(head, 0); n != len(head) {
			continue
		}
		kind, total, err := record.Peek(head, mf.FromOffset(), s.log.maxRecordBytes)
		if err != nil || kind != record.KindRecord {
			continue
		}
		rec := make([]byte, total)
		if n, _ := mf.ReadAt(rec, 0); n != len(rec) {
			continue
		}
		if _, err := record.Decode(rec, mf.FromOffset(), true); err == nil {
			return mf.FromOffset()
		}
	}
	return -1
}

// Put appends a message to the CommitLog. It returns PutOK, or another
// status with an error wrapping the status's sentinel (ErrMessageIllegal,
// ErrFlushDiskTimeout, …). With FlushDiskTimeout the message was appended but
// not confirmed durable; the result's offsets are valid.
func (s *Store) Put(ctx context.Context, m *Message) (PutResult, error) {
	start := time.Now()
	s.closeMu.RLock()
	res, err := s.put(ctx, m)
	s.closeMu.RUnlock()
	if res.Status == PutOK {
		s.stats.puts.Add(1)
		s.stats.putBytes.Add(uint64(res.Size))
		s.stats.putLatency.record(time.Since(start))
	} else {
		s.stats.putFailures.Add(1)
	}
	return res, err
}

func (s *Store) put(ctx context.Context, m *Message) (PutResult, error) {
	fail := func(st PutStatus, err error) (PutResult, error) {
		return PutResult{Status: st}, fmt.Errorf("put to %s/%d: %w: %w", m.Topic, m.QueueID, statusError(st), err)
	}
	if s.closed {
		return fail(ServiceNotAvailable, ErrClosed)
	}
	if p := s.writeErr.Load(); p != nil {
		return fail(ServiceNotAvailable, *p)
	}
	if err := record.ValidateTopic(m.Topic, true); err != nil {
		return fail(MessageIllegal, err)
	}
	if m.QueueID < 0 {
		return fail(MessageIllegal, fmt.Errorf("queue id %d is negative", m.QueueID))
	}
	if len(m.Body) > s.opts.MaxMessageSizeBytes {
		return fail(MessageIllegal, fmt.Errorf("body of %d bytes exceeds the maximum message size %d", len(m.Body), s.opts.MaxMessageSizeBytes))
	}
	e := encodeBuffers.Get().(*encodeBuffer)
	defer encodeBuffers.Put(e)
	props, err := record.EncodeProperties(e.props[:0], m.Properties)
	e.props = props
	if err != nil {
		return fail(MessageIllegal, err)
	}
	if len(props) > record.MaxPropertiesBytes {
		return fail(PropertiesSizeExceeded, fmt.Errorf("properties are %d bytes, at most %d", len(props), record.MaxPropertiesBytes))
	}
	stored := *m
	stored.StoreHost = s.opts.StoreHost
	if stored.BornTimestamp == 0 {
		stored.BornTimestamp = s.opts.now().UnixMilli()
	}
	size := record.Size(&stored, len(props))
	if size > s.opts.MaxMessageSizeBytes {
		return fail(MessageIllegal, fmt.Errorf("record of %d bytes exceeds the maximum message size %d", size, s.opts.MaxMessageSizeBytes))
	}
	if cap(e.buf) < size {
		e.buf = make([]byte, size+size/4)
	}
	e.size = size
	if err := record.Encode(e.buf[:size], &stored, props); err != nil {
		return fail(MessageIllegal, err)
	}
	if since := s.log.lockedSince.Load(); since != 0 && s.opts.now().UnixNano()-since > int64(s.opts.OSPageCacheBusyTimeout) {
		s.stats.osPageCacheBusy.Add(1)
		return fail(OSPageCacheBusy, fmt.Errorf("append lock held for %v", time.Duration(s.opts.now().UnixNano()-since)))
	}
	ar, err := s.log.appendRecord(ctx, e, queueKey{topic: m.Topic, queueID: m.QueueID}, stored.SysFlag, s.opts.now)
	if err != nil {
		if errors.Is(err, segment.ErrCreate) || errors.Is(err, context.Canceled) {
			return fail(CreateMappedFileFailed, err)
		}
		s.writeFailed("append", err)
		return fail(ServiceNotAvailable, err)
	}
	if ar.rolled {
		s.stats.rolls.Add(1)
	}
	res := PutResult{Status: PutOK, PhysicalOffset: ar.physicalOffset, Size: ar.size, QueueOffset: ar.queueOffset, StoreTimestamp: ar.storeTimestamp}
	s.committer.Wakeup()
	s.dispatcher.Wakeup()
	if s.group == nil {
		s.flusher.Wakeup()
		return res, nil
	}
	if err := s.waitFlushed(ctx, ar.physicalOffset+int64(ar.size)); err != nil {
		res.Status = FlushDiskTimeout
		s.stats.flushDiskTimeouts.Add(1)
		if errors.Is(err, ErrFlushDiskTimeout) {
			return res, fmt.Errorf("put to %s/%d at offset %d: %w", m.Topic, m.QueueID, res.PhysicalOffset, err)
		}
		return res, fmt.Errorf("put to %s/%d at offset %d: %w: %w", m.Topic, m.QueueID, res.PhysicalOffset, ErrFlushDiskTimeout, err)
	}
	return res, nil
}

// waitFlushed queues a group-commit waiter for offset and waits for it, at
// most SyncFlushTimeout.
func (s *Store) waitFlushed(ctx context.Context, offset int64) error {
	if s.log.flushedOffset.Load() >= offset {
		return nil
	}
	w := flushWaiters.Get().(*flushWaiter)
	w.offset = offset
	if !s.group.enqueue(w) {
		flushWaiters.Put(w)
		return errGroupCommitQueueFull
	}
	timer := time.NewTimer(s.opts.SyncFlushTimeout)
	defer timer.Stop()
	select {
	case err := <-w.done:
		flushWaiters.Put(w) // answered: safe to reuse
		return err
	case <-timer.C:
		// w stays with the owner, which will still answer it: not reused.
		return fmt.Errorf("not flushed after %v: %w", s.opts.SyncFlushTimeout, ErrFlushDiskTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ReadMessage reads and validates the record at a CommitLog offset.
func (s *Store) ReadMessage(ctx context.Context, physicalOffset int64) (record.Record, error) {
	if err := ctx.Err(); err != nil {
		return record.Record{}, err
	}
	head := make([]byte, record.BlankSize)
	if err := s.log.readAt(head, physicalOffset); err != nil {
		return record.Record{}, err
	}
	kind, total, err := record.Peek(head, physicalOffset, s.log.maxRecordBytes)
	if err != nil {
		return record.Record{}, fmt.Errorf("read message at %d: %w", physicalOffset, err)
	}
	if kind != record.KindRecord {
		return record.Record{}, fmt.Errorf("read message at %d: a %v, not a record: %w", physicalOffset, kind, ErrNotFound)
	}
	buf := make([]byte, total)
	if err := s.log.readAt(buf, physicalOffset); err != nil {
		return record.Record{}, err
	}
	r, err := record.Decode(buf, physicalOffset, true)
	if err != nil {
		return record.Record{}, fmt.Errorf("read message at %d: %w", physicalOffset, err)
	}
	return r, nil
}

// Scan calls fn for every valid record from the CommitLog offset from (a
// record boundary; MinOffset for all) to the readable end, in order, and for
// every end-of-segment blank with r == nil. rec is the raw record (or the
// 8-byte blank), valid during the call. It returns the offset where it
// stopped, and an error wrapping ErrCorrupt when it stopped at a bad record.
func (s *Store) Scan(ctx context.Context, from int64, fn func(offset int64, rec []byte, r *record.Record) error) (int64, error) {
	end, err := s.log.scan(ctx, from, fn)
	if err != nil {
		return end.validEnd, err
	}
	if end.corrupt != nil {
		return end.validEnd, fmt.Errorf("%w: %w", ErrCorrupt, end.corrupt)
	}
	return end.validEnd, nil
}

// MinOffset is the first CommitLog offset still stored.
func (s *Store) MinOffset() int64 { return max(s.log.queue.MinOffset(), 0) }

// MaxOffset is the CommitLog offset readers can read up to.
func (s *Store) MaxOffset() int64 { return s.log.queue.ReadableOffset() }

// FlushedOffset is the CommitLog offset known durable.
func (s *Store) FlushedOffset() int64 { return s.log.flushedOffset.Load() }

// Dir returns the store directory.
func (s *Store) Dir() string { return s.dir }

// Options returns the effective options.
func (s *Store) Options() Options { return s.opts }

// RecoveredFrom is the CommitLog offset Open's recovery scan started at:
// MaxOffset − RecoveredFrom bytes were read and CRC-checked.
func (s *Store) RecoveredFrom() int64 { return s.recoveredFrom }

// RecoveredAfterCrash reports whether Open found the abort file.
func (s *Store) RecoveredAfterCrash() bool { return s.abnormalOpen }

// Stats returns a snapshot of the store's counters.
func (s *Store) Stats() Stats {
	st := Stats{
		Backend: s.backend.Name(), FlushMode: s.opts.FlushMode.String(),
		Puts: s.stats.puts.Load(), PutBytes: s.stats.putBytes.Load(), PutFailures: s.stats.putFailures.Load(),
		PutLatency: s.stats.putLatency.summary(), FlushDiskTimeouts: s.stats.flushDiskTimeouts.Load(),
		OSPageCacheBusy: s.stats.osPageCacheBusy.Load(), Rolls: s.stats.rolls.Load(),
		Flushes: s.stats.flushes.Load(), FlushLatency: s.stats.flushLatency.summary(),
		Commits: s.stats.commits.Load(), CommitLatency: s.stats.commitLatency.summary(),
		MinOffset: s.MinOffset(), WroteOffset: s.log.queue.WroteOffset(),
		CommittedOffset: s.log.committedOffset.Load(), FlushedOffset: s.log.flushedOffset.Load(),
		Segments: s.log.queue.Len(), Gets: s.stats.gets.Load(), GotMessages: s.stats.gotMessages.Load(),
		DispatchedOffset: s.logics.dispatchedOffset.Load(),
	}
	st.BytesBehindFlush = st.WroteOffset - st.FlushedOffset
	if r, ok := s.backend.(mappedfile.LockReporter); ok {
		st.LockedBytes = r.LockedBytes()
	}
	if r, ok := s.aux.(mappedfile.LockReporter); ok && s.aux != s.backend {
		st.LockedBytes += r.LockedBytes()
	}
	st.PagesLocked = st.LockedBytes / mappedfile.PageSize
	return st
}

// Close stops the services, flushes everything, writes the checkpoint,
// removes the abort file and releases the lock.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return ErrClosed
	}
	s.closed = true
	s.closeMu.Unlock()
	s.logics.wakeAll()

	s.cleaner.shutdown()
	s.committer.shutdown()
	if s.group != nil {
		s.group.shutdown()
	} else {
		s.async.shutdown()
	}
	var errs []error
	ctx := context.Background()
	flushed, flushErr := s.log.flush(ctx, 0, true)
	if flushErr != nil {
		errs = append(errs, fmt.Errorf("final flush: %w", flushErr))
	} else {
		s.checkpoint.setPhysic(s.log.lastStoreTimestamp.Load())
		// The checkpoint written below must know all of it durable: a bad
		// record before this offset is then corruption, never a torn tail.
		raise(&s.checkpoint.flushedOffset, flushed)
	}
	// Dispatch what the final commit made readable, then flush the logics
	// (which writes the checkpoint).
	s.dispatcher.shutdown()
	if err := s.dispatcher.dispatchAvailable(ctx); err != nil {
		errs = append(errs, fmt.Errorf("final dispatch: %w", err))
	}
	s.logicsFlusher.shutdown()
	if err := s.flushLogics(ctx, 0); err != nil {
		errs = append(errs, fmt.Errorf("final consume queue flush: %w", err))
	}
	if err := s.logics.close(); err != nil {
		errs = append(errs, err)
	}
	if s.alloc != nil {
		if err := s.alloc.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.log.queue.Close(); err != nil {
		errs = append(errs, err)
	}
	if c, ok := s.backend.(io.Closer); ok {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if flushErr == nil && s.writeErr.Load() == nil {
		// Only a clean, fully flushed close removes the abort file.
		if err := os.Remove(filepath.Join(s.dir, abortFileName)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := s.lock.unlock(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
