package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/mqstore/mqstore/engine/consumequeue"
	"github.com/mqstore/mqstore/engine/indexfile"
	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/mappedfile"
)

const (
	consumeQueueDirName = "consumequeue"
	indexDirName        = "index"
)

// logics holds what is derived from the CommitLog: the ConsumeQueues, the
// IndexFiles, and how far dispatch has got.
type logics struct {
	cqConfig consumequeue.Config
	// minPhysical is the CommitLog's first offset: a ConsumeQueue opened
	// later starts its MinOffset at the first unit still in the CommitLog.
	minPhysical func() int64
	// recovering: Open is still repairing the queues; their MinOffset is
	// set once they are consistent (torn units could mislead the search).
	recovering bool
	index      *indexfile.Index

	mu  sync.RWMutex
	cqs map[queueKey]*consumequeue.Queue

	// dispatchedOffset is the CommitLog offset up to which every record has
	// been written to its ConsumeQueue and the index.
	dispatchedOffset atomic.Int64
	// lastDispatchedTimestamp is the STORETIMESTAMP of the newest dispatched record.
	lastDispatchedTimestamp atomic.Int64
	dispatchErr             atomic.Pointer[error]

	pollMu  sync.Mutex
	pollers map[queueKey]chan struct{} // closed when the queue gets a message
}

func openLogics(ctx context.Context, s *Store) (*logics, error) {
	l := &logics{
		cqConfig:    consumequeue.Config{Dir: filepath.Join(s.dir, consumeQueueDirName), Backend: s.aux, FileSizeBytes: s.opts.ConsumeQueueFileSizeBytes},
		cqs:         make(map[queueKey]*consumequeue.Queue),
		pollers:     make(map[queueKey]chan struct{}),
		minPhysical: s.MinOffset,
		recovering:  true,
	}
	idx, err := indexfile.Open(ctx, indexfile.Config{Dir: filepath.Join(s.dir, indexDirName), Backend: s.aux,
		SlotCount: s.opts.IndexSlotCount, MaxEntries: s.opts.IndexMaxEntries, AfterCrash: s.abnormalOpen})
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	l.index = idx
	return l, nil
}

// queue returns the ConsumeQueue of key, opening (and with create, making)
// it on first use; nil when it does not exist and create is false.
func (l *logics) queue(ctx context.Context, key queueKey, create bool) (*consumequeue.Queue, error) {
	l.mu.RLock()
	q := l.cqs[key]
	l.mu.RUnlock()
	if q != nil || !create {
		return q, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if q = l.cqs[key]; q != nil {
		return q, nil
	}
	q, err := consumequeue.Open(ctx, l.cqConfig, key.topic, key.queueID)
	if err != nil {
		return nil, fmt.Errorf("consume queue %s/%d: %w", key.topic, key.queueID, err)
	}
	if !l.recovering {
		if _, err := q.DeleteBefore(ctx, l.minPhysical()); err != nil {
			q.Close()
			return nil, fmt.Errorf("consume queue %s/%d: %w", key.topic, key.queueID, err)
		}
	}
	l.cqs[key] = q
	return q, nil
}

func (l *logics) queues() []*consumequeue.Queue {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]*consumequeue.Queue, 0, len(l.cqs))
	for _, q := range l.cqs {
		out = append(out, q)
	}
	return out
}

// pollChannel returns the channel closed when key next gets a message.
func (l *logics) pollChannel(key queueKey) chan struct{} {
	l.pollMu.Lock()
	defer l.pollMu.Unlock()
	ch := l.pollers[key]
	if ch == nil {
		ch = make(chan struct{})
		l.pollers[key] = ch
	}
	return ch
}

// notify wakes the long polls waiting on the given queues.
func (l *logics) notify(keys map[queueKey]struct{}) {
	l.pollMu.Lock()
	defer l.pollMu.Unlock()
	if len(l.pollers) == 0 {
		return
	}
	for k := range keys {
		if ch := l.pollers[k]; ch != nil {
			close(ch)
			delete(l.pollers, k)
		}
	}
}

// wakeAll wakes every long poll (the store is closing).
func (l *logics) wakeAll() {
	l.pollMu.Lock()
	defer l.pollMu.Unlock()
	for k, ch := range l.pollers {
		close(ch)
		delete(l.pollers, k)
	}
}

func (l *logics) close() error {
	var errs []error
	for _, q := range l.queues() {
		if err := q.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := l.index.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// dispatcher is the reput service: one goroutine that follows the
// CommitLog's readable end and writes ConsumeQueue units and index entries.
// Put and the commit service wake it; it never polls.
type dispatcher struct {
	service
	store *Store
	// mu is held by whoever dispatches: the dispatch service, or a Put the
	// dispatch gate holds back, which dispatches itself instead of waiting
	// for the service to be scheduled (see dispatchGate). It guards the
	// fields below.
	mu      sync.Mutex
	buf     []byte
	touched map[queueKey]struct{}
	topics  record.Interner
	rec     record.Record // the record being dispatched, reused
	fed     fedBatch      // the records the appends fed (dispatchFeed)
	read    uint64        // records read back from the log this pass
	keyBuf  []int32       // the record's index key hashes, reused
	// pending holds each queue's units of the records scanned so far,
	// appended with one AppendUnits per queue when the scan ends (or
	// maxPendingUnits gather): a unit costs a copy, not a file append.
	pending      map[queueKey]*pendingUnits
	pendingCount int
	// index holds the index keys of fed records not yet put, put with one
	// Index.PutBatch (putIndexBatch) when indexBatchRecords gather, before
	// any unit is appended (lastDispatchedTimestamp then covers them), and
	// when dispatchFed returns: one lock and one swap of every slot they
	// point at, whose cache misses then overlap.
	index indexBatch
	// pendingTimestamp is the STORETIMESTAMP of the newest record scanned:
	// lastDispatchedTimestamp takes it once its unit is appended (the
	// logics flush reads it as "every unit up to here is in its queue").
	pendingTimestamp int64
}

// pendingUnits are one queue's units waiting to be appended, from queue
// offset first on.
type pendingUnits struct {
	q     *consumequeue.Queue
	first int64
	units []consumequeue.Unit
}

// maxPendingUnits bounds the units dispatch holds before it appends them.
const maxPendingUnits = 4096

func newDispatcher(s *Store) *dispatcher {
	return &dispatcher{service: newService(), store: s,
		buf: s.log.scanBuffer(), touched: make(map[queueKey]struct{}),
		pending: make(map[queueKey]*pendingUnits)}
}

// maxDispatchRetries bounds how often dispatch retries a transient error at
// one place before it gives up (and the store stops taking writes).
const maxDispatchRetries = 10

func (d *dispatcher) run() {
	defer close(d.done)
	labelService(d.store.opts.ProfileLabels, StageDispatch)
	var retry *time.Timer
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	failures := 0
	for {
		select {
		case <-d.stop:
			return
		case <-d.wake:
		}
		err := d.dispatchAvailable(context.Background())
		switch {
		case err == nil:
			failures = 0
		case errors.Is(err, indexfile.ErrStopped):
			// The index takes no more keys until the store is opened
			// again, whatever the error it stopped on (an ENOSPC too):
			// retrying would get that error forever while the Puts wait
			// on a dispatch that never moves.
			d.store.dispatchFailed(err)
		case resourceError(err), transientDispatchError(err) && failures < maxDispatchRetries:
			// A segment closed under the read (retention deleted it), or
			// a resource the system lacks for now (no space or no
			// descriptor for a new ConsumeQueue file): try again a little
			// later, backing off to a second, rather than stop the
			// store's writes until it is reopened. A resource error is
			// retried for as long as it lasts (the CommitLog's own writes
			// fail loudly if the disk is really full); the log says so at
			// the first attempt and then at every power of two.
			failures++
			if failures&(failures-1) == 0 {
				d.store.opts.Logger.Warn("dispatch will retry", slog.Int("attempt", failures), slog.Any("err", err))
			}
			if retry != nil {
				retry.Stop()
			}
			retry = time.AfterFunc(time.Millisecond<<min(failures, 10), d.Wakeup)
		default:
			d.store.dispatchFailed(err)
		}
	}
}

// transientDispatchError reports whether a dispatch error may go away by
// itself: a file closed under a read.
func transientDispatchError(err error) bool { return errors.Is(err, mappedfile.ErrClosed) }

// resourceError reports whether err is the system lacking a resource for
// now — space, a descriptor, memory — which an operator or the system
// frees without the store being reopened.
func resourceError(err error) bool {
	for _, e := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT, syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.EAGAIN} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// dispatchAvailable dispatches every readable record not yet dispatched.
func (d *dispatcher) dispatchAvailable(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dispatchLocked(ctx)
}

// help is a held-back Put's turn at dispatch: it dispatches what is
// readable unless someone already is, and reports whether the dispatched
// offset moved. An error is left to the service, which retries or stops
// dispatch (it is woken to see it).
func (d *dispatcher) help() bool {
	if !d.mu.TryLock() {
		return false
	}
	defer d.mu.Unlock()
	s := d.store
	if s.labels.on {
		pprof.SetGoroutineLabels(s.labels.dispatch)
		defer pprof.SetGoroutineLabels(s.labels.append)
	}
	before := s.logics.dispatchedOffset.Load()
	if err := d.dispatchLocked(context.Background()); err != nil {
		d.Wakeup()
		return false
	}
	return s.logics.dispatchedOffset.Load() > before
}

// dispatchLocked is dispatchAvailable with mu held.
func (d *dispatcher) dispatchLocked(ctx context.Context) error {
	s := d.store
	l := s.logics
	if l.dispatchErr.Load() != nil {
		return nil
	}
	from := l.dispatchedOffset.Load()
	readable := s.log.dispatchBound(from) // before the feed is taken (dispatchFeed)
	if from >= readable {
		return nil
	}
	to, read, err := d.dispatchFed(ctx, from, readable)
	end := scanEnd{validEnd: to}
	if err == nil && read {
		end, err = s.log.scanWith(ctx, to, d.buf, false, &d.topics, &d.rec, func(offset int64, _ []byte, r *record.Record) error {
			if r == nil {
				return nil
			}
			return d.dispatch(ctx, offset, r)
		})
	}
	s.stats.dispatchFed.Add(d.fed.taken)
	s.stats.dispatchRead.Add(d.read)
	d.fed.taken, d.read = 0, 0
	if ferr := d.appendPending(ctx); ferr != nil {
		// The units not appended are dispatched again from the last
		// dispatched offset; those appended are verified then (Append
		// is idempotent).
		return ferr
	}
	if end.validEnd > from {
		l.dispatchedOffset.Store(end.validEnd)
		s.gate.moved()
		l.notify(d.touched)
		clear(d.touched)
	}
	if err != nil {
		return err
	}
	if end.corrupt != nil && end.validEnd < s.log.queue.ReadableOffset() {
		return fmt.Errorf("dispatch stopped at offset %d: %w", end.validEnd, end.corrupt)
	}
	return nil
}

// dispatch is dispatchRecord for the dispatch service: the record's unit
// joins its queue's pending run (appended by appendPending); its index
// entries are written at once.
func (d *dispatcher) dispatch(ctx context.Context, offset int64, r *record.Record) error {
	props := record.LookupDispatchProperties(r.Properties)
	if err := d.dispatchUnit(ctx, offset, queueKey{topic: r.Topic, queueID: r.QueueID}, r.SysFlag, r.QueueOffset, r.TotalSize, record.TagsCode(view(props.Tags))); err != nil {
		return err
	}
	if offset >= d.store.logics.index.MaxPhysicalOffset() {
		if err := d.store.indexRecord(ctx, offset, r, &props, &d.keyBuf); err != nil {
			return err
		}
	}
	d.pendingTimestamp = r.StoreTimestamp
	d.read++
	return nil
}

// dispatchUnit adds the record's unit to its queue's pending run, when it
// takes a queue offset.
func (d *dispatcher) dispatchUnit(ctx context.Context, offset int64, key queueKey, sysFlag int32, queueOffset int64, size int32, tagsCode int64) error {
	if !takesQueueOffset(sysFlag) {
		return nil
	}
	p := d.pending[key]
	if p == nil || p.q == nil {
		q, err := d.store.logics.queue(ctx, key, true)
		if err != nil {
			return err
		}
		if p == nil {
			p = &pendingUnits{}
			d.pending[key] = p
		}
		p.q = q
	}
	if len(p.units) > 0 && queueOffset != p.first+int64(len(p.units)) {
		if err := d.appendPending(ctx); err != nil { // not a run: append what is there first
			return err
		}
	}
	if len(p.units) == 0 {
		p.first = queueOffset
	}
	p.units = append(p.units, consumequeue.Unit{PhysicalOffset: offset, Size: size, TagsCode: tagsCode})
	d.touched[key] = struct{}{}
	if d.pendingCount++; d.pendingCount >= maxPendingUnits {
		return d.appendPending(ctx)
	}
	return nil
}

// appendPending appends every queue's pending units, after the index keys
// of the records before them. A queue closed since (retention, Close) is
// looked up again on its next unit.
func (d *dispatcher) appendPending(ctx context.Context) error {
	if err := d.putIndexBatch(ctx); err != nil {
		return err
	}
	if d.pendingCount == 0 {
		if d.pendingTimestamp != 0 {
			d.store.logics.lastDispatchedTimestamp.Store(d.pendingTimestamp)
			d.pendingTimestamp = 0
		}
		return nil
	}
	var errs []error
	for key, p := range d.pending {
		if len(p.units) == 0 {
			continue
		}
		if err := p.q.AppendUnits(ctx, p.first, p.units); err != nil {
			errs = append(errs, fmt.Errorf("dispatch %d units from queue offset %d to %s/%d: %w", len(p.units), p.first, key.topic, key.queueID, err))
			p.q = nil
		}
		p.units = p.units[:0]
		if cap(p.units) > maxPendingUnits/4 && len(d.pending) > 64 {
			p.units = nil // with many queues, one busy batch does not keep its memory for each
		}
	}
	d.pendingCount = 0
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if d.pendingTimestamp != 0 {
		d.store.logics.lastDispatchedTimestamp.Store(d.pendingTimestamp)
		d.pendingTimestamp = 0
	}
	return nil
}

// dispatchRecord writes one record's ConsumeQueue unit and index entries.
// Both are idempotent, so recovery may dispatch a record twice.
//
// It does not allocate in steady state: the tags and index keys are hashed
// through transient string views of the record's bytes (keyBuf is reused).
func (s *Store) dispatchRecord(ctx context.Context, offset int64, r *record.Record, touched map[queueKey]struct{}, keyBuf *[]int32) error {
	l := s.logics
	props := record.LookupDispatchProperties(r.Properties)
	if takesQueueOffset(r.SysFlag) {
		key := queueKey{topic: r.Topic, queueID: r.QueueID}
		q, err := l.queue(ctx, key, true)
		if err != nil {
			return err
		}
		if err := q.Append(ctx, r.QueueOffset, consumequeue.Unit{PhysicalOffset: offset, Size: r.TotalSize, TagsCode: record.TagsCode(view(props.Tags))}); err != nil {
			return fmt.Errorf("dispatch record at %d to %s/%d: %w", offset, r.Topic, r.QueueID, err)
		}
		if touched != nil {
			touched[key] = struct{}{}
		}
	}
	if offset >= l.index.MaxPhysicalOffset() {
		if err := s.indexRecord(ctx, offset, r, &props, keyBuf); err != nil {
			return err
		}
	}
	l.lastDispatchedTimestamp.Store(r.StoreTimestamp)
	return nil
}

// indexRecord indexes the record's KEYS and UNIQ_KEY (keyHashes) with one
// Index.PutHashes; hashes is reused scratch.
func (s *Store) indexRecord(ctx context.Context, offset int64, r *record.Record, props *record.DispatchProperties, hashes *[]int32) error {
	// The views need not outlive the call: only their hashes are kept.
	*hashes = keyHashes((*hashes)[:0], r.Topic, view(props.Keys), view(props.UniqKey))
	if len(*hashes) == 0 {
		return nil
	}
	if err := s.logics.index.PutHashes(ctx, *hashes, offset, r.StoreTimestamp); err != nil {
		return fmt.Errorf("index the keys %q and %q of the record at %d: %w", props.Keys, props.UniqKey, offset, err)
	}
	return nil
}

// view is a string over b for a call that does not keep it (hashing).
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// dispatchFailed stops dispatch for good: Put refuses writes (RocketMQ
// marks the store unwritable on a logics queue error), Stats and Close
// report the error, and Close leaves the abort file so that the next Open
// recovers and dispatches again.
func (s *Store) dispatchFailed(err error) {
	if s.logics.dispatchErr.CompareAndSwap(nil, &err) {
		s.opts.Logger.Error("dispatch stopped; the store refuses writes until it is reopened", slog.Any("err", err))
	}
	s.gate.moved() // a Put waiting for dispatch stops waiting
}

// dispatchStopped reports whether dispatch stopped for good.
func (s *Store) dispatchStopped() bool { return s.logics.dispatchErr.Load() != nil }

// logicsFlusher is RocketMQ's FlushConsumeQueueService: every interval it
// flushes ConsumeQueues with at least 2 pages pending, and everything (index
// and checkpoint included) every thorough interval.
type logicsFlusher struct {
	service
	store *Store
}

func (f *logicsFlusher) run() {
	s := f.store
	labelService(s.opts.ProfileLabels, StageDispatch)
	f.periodic(s.opts.ConsumeQueueFlushInterval, s.opts.ConsumeQueueFlushThoroughInterval, consumeQueueFlushLeastPages, s.opts.now,
		func(least int, _ bool) {
			if err := s.flushLogics(context.Background(), least); err != nil {
				s.opts.Logger.Error("flush consume queues", slog.Any("err", err))
			}
		})
}

const consumeQueueFlushLeastPages = 2

// flushLogics flushes the ConsumeQueues (and, fully, the index and the
// checkpoint). The timestamps are read before flushing: every record they
// cover was dispatched before the flush began.
func (s *Store) flushLogics(ctx context.Context, leastPages int) error {
	l := s.logics
	ts := l.lastDispatchedTimestamp.Load()
	dispatched := l.dispatchedOffset.Load() // every record below it is in the queues and the index now
	var errs []error
	for _, q := range l.queues() {
		if err := q.Flush(ctx, leastPages); err != nil {
			errs = append(errs, err)
		}
	}
	// Only a full flush (every queue, whatever is pending) makes every
	// unit up to ts durable.
	if len(errs) == 0 && leastPages == 0 {
		s.checkpoint.setLogics(ts)
	}
	if leastPages == 0 {
		if err := l.index.Flush(ctx); err != nil {
			errs = append(errs, err)
		} else {
			s.checkpoint.setIndex(ts)
			if len(errs) == 0 {
				raise(&s.checkpoint.logicsOffset, dispatched)
			}
		}
		if err := s.checkpoint.write(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DispatchedOffset is the CommitLog offset up to which every record is in
// its ConsumeQueue and the index: what Get and the queries can see.
func (s *Store) DispatchedOffset() int64 { return s.logics.dispatchedOffset.Load() }

// WaitDispatched blocks until every record before offset is in its
// ConsumeQueue and the index, and returns nil; or returns the error that
// stopped dispatch, or ctx's error, or ErrClosed. A Put's record is
// dispatched in the background: a caller that must read its own write waits
// for PhysicalOffset + Size.
func (s *Store) WaitDispatched(ctx context.Context, offset int64) error {
	const poll = 200 * time.Microsecond
	var timer *time.Timer
	for {
		if s.logics.dispatchedOffset.Load() >= offset {
			return nil
		}
		if p := s.logics.dispatchErr.Load(); p != nil {
			return fmt.Errorf("wait for dispatch to %d: %w", offset, *p)
		}
		s.closeMu.RLock()
		closed := s.closed
		s.closeMu.RUnlock()
		if closed {
			return fmt.Errorf("wait for dispatch to %d: %w", offset, ErrClosed)
		}
		s.dispatcher.Wakeup()
		if timer == nil {
			timer = time.NewTimer(poll)
			defer timer.Stop()
		} else {
			timer.Reset(poll)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for dispatch to %d (at %d): %w", offset, s.logics.dispatchedOffset.Load(), ctx.Err())
		case <-timer.C:
		}
	}
}
