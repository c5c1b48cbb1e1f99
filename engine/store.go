// Package engine is mqstore's store: one CommitLog shared by every topic, in
// RocketMQ's on-disk format, written through a pluggable MappedFile backend,
// with RocketMQ's flush policies (async, and sync with group commit).
package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

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
	lock       *dirLock
	checkpoint *checkpoint
	log        *commitLog
	alloc      *allocator

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
	if s.backend, err = newBackend(o); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
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
	if err != nil {
		return nil, fmt.Errorf("open store: commitlog: %w", err)
	}
	s.log = &commitLog{queue: queue, segmentSizeBytes: o.SegmentSizeBytes,
		maxRecordBytes: max(o.MaxMessageSizeBytes, params.MaxMessageSizeBytes), queueOffsets: make(map[queueKey]int64)}
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
	s.committer = &committer{service: newService(), store: s}
	go s.committer.run()
	if s.opts.FlushMode == FlushSync {
		s.group = &groupCommitter{service: newService(), store: s, limit: s.opts.GroupCommitQueueSize}
		s.flusher = s.group
		go s.group.run()
	} else {
		s.async = &asyncFlusher{service: newService(), store: s}
		s.flusher = s.async
		go s.async.run()
	}
}

// abandon releases what a failed Open took.
func (s *Store) abandon() {
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
// it and rebuilds the queue offset table. It scans the whole log (the
// ConsumeQueues will make this incremental).
func (s *Store) recover(ctx context.Context) error {
	q := s.log.queue
	if q.Len() == 0 {
		return nil
	}
	from := q.MinOffset()
	end, err := s.log.scan(ctx, from, func(offset int64, rec []byte, r *record.Record) error {
		if r == nil { // a blank
			return nil
		}
		if takesQueueOffset(r.SysFlag) {
			key := queueKey{topic: r.Topic, queueID: r.QueueID}
			if next := r.QueueOffset + 1; next > s.log.queueOffsets[key] {
				s.log.queueOffsets[key] = next
			}
		}
		s.log.lastStoreTimestamp.Store(r.StoreTimestamp)
		return nil
	})
	if err != nil {
		return err
	}
	if end.corrupt != nil {
		if later := s.validDataAfter(end.validEnd); later >= 0 {
			return fmt.Errorf("corrupt record at offset %d in the middle of the log (valid data follows at %d): %v: %w",
				end.validEnd, later, end.corrupt, ErrCorrupt)
		}
		s.opts.Logger.Warn("truncating a torn CommitLog tail", slog.Int64("offset", end.validEnd), slog.Any("reason", end.corrupt))
	}
	if err := q.TruncateTo(ctx, end.validEnd); err != nil {
		return err
	}
	s.log.committedOffset.Store(end.validEnd)
	s.log.flushedOffset.Store(end.validEnd)
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
		if errors.Is(err, errAllocationTimeout) || errors.Is(err, mappedfile.ErrSizeMismatch) || errors.Is(err, context.Canceled) {
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
		Segments: s.log.queue.Len(),
	}
	st.BytesBehindFlush = st.WroteOffset - st.FlushedOffset
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

	s.committer.shutdown()
	if s.group != nil {
		s.group.shutdown()
	} else {
		s.async.shutdown()
	}
	var errs []error
	ctx := context.Background()
	_, flushErr := s.log.flush(ctx, 0, true)
	if flushErr != nil {
		errs = append(errs, fmt.Errorf("final flush: %w", flushErr))
	} else {
		s.checkpoint.setPhysic(s.log.lastStoreTimestamp.Load())
		if err := s.checkpoint.write(); err != nil {
			errs = append(errs, err)
		}
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
