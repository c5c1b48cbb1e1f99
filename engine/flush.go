package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// The engine owns flush policy; backends only offer synchronous Commit and
// Flush. Each service below is one goroutine that owns its work.

// service is a goroutine with a stop signal and a wake-up channel.
type service struct {
	wake chan struct{} // capacity 1: a pending wake-up is never lost, never piles up
	stop chan struct{}
	done chan struct{}
}

func newService() service {
	return service{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// Wakeup asks the service to run soon; it never blocks.
func (s *service) Wakeup() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *service) shutdown() {
	close(s.stop)
	<-s.done
}

// periodic runs act every interval and on every wake-up, with leastPages
// normally and 0 ("everything pending") when thorough has passed since the
// last full pass — the shape of RocketMQ's flush, commit and ConsumeQueue
// flush services. woken tells act whether a wake-up (rather than the ticker)
// started it. It returns when the service is stopped.
func (s *service) periodic(interval, thorough time.Duration, leastPages int, now func() time.Time, act func(leastPages int, woken bool)) {
	defer close(s.done)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	lastThorough := now()
	for {
		woken := false
		select {
		case <-s.stop:
			return
		case <-ticker.C:
		case <-s.wake:
			woken = true
		}
		least := leastPages
		if t := now(); t.Sub(lastThorough) >= thorough {
			least = 0
			lastThorough = t
		}
		act(least, woken)
	}
}

// asyncFlusher is RocketMQ's FlushRealTimeService: every FlushInterval (and
// when a Put wakes it) it flushes when at least FlushLeastPages pages are
// pending, and fully at least every FlushThoroughInterval.
type asyncFlusher struct {
	service
	store *Store
}

func (f *asyncFlusher) run() {
	s := f.store
	labelService(s.opts.ProfileLabels, StageFlush)
	f.periodic(s.opts.FlushInterval, s.opts.FlushThoroughInterval, s.opts.FlushLeastPages, s.opts.now, func(least int, _ bool) {
		s.flushOnce(context.Background(), least, false)
	})
}

// committer is RocketMQ's CommitRealTimeService for buffered backends: every
// CommitInterval it commits when at least CommitLeastPages are pending (all
// of it every CommitThoroughInterval), then wakes the flusher and dispatch.
//
// One departure from RocketMQ: when a Put wakes it, it commits everything
// pending, whatever CommitLeastPages says. Consumers see a buffered backend's
// records only once committed (dispatch stops at the committed position: a
// process crash loses what is not), so the least-pages rule on wake-ups would
// hold a record back until 4 pages had gathered — 16 ms at 1000 msgs/s of
// 1 KiB, and up to CommitThoroughInterval when traffic is light. A commit of
// a little is one pwrite on this goroutine, never on a Put; under load the
// commits batch by themselves, since Puts arriving while one runs are committed
// together by the next.
//
// With sync flush the group commit's owner is the one durable writer: it
// commits and syncs everything appended before each batch's end, the
// records no Put waits for among them. So the committer stands aside while
// a sync Put is in progress (a commit of its own would be a second durable
// writer for uring and uring-direct, whose commits are durable, queued on
// the commit lock against the owner's) and commits only what is left when
// none is: a record whose Put gave up before it queued a waiter, a slave's
// replicated bytes.
type committer struct {
	service
	store *Store
}

func (c *committer) run() {
	s := c.store
	labelService(s.opts.ProfileLabels, StageCommit)
	c.periodic(s.opts.CommitInterval, s.opts.CommitThoroughInterval, s.opts.CommitLeastPages, s.opts.now, func(least int, woken bool) {
		if woken {
			least = 0
		}
		if g := s.group; g != nil && g.inPut.Load() > 0 {
			return // the owner commits it, with the batch
		}
		before := s.log.committedOffset.Load()
		start := time.Now()
		after, err := s.log.commit(context.Background(), least)
		if err != nil {
			s.writeFailed("commit", err)
			return
		}
		if after > before {
			s.stats.recordCommit(time.Since(start))
			s.flusher.Wakeup()
			s.dispatcher.Wakeup() // committed bytes are readable now
			s.repl.growth.notify()
		}
	})
}

// offsetWaiters waits until the replicated position reaches an offset
// (SYNC_MASTER, RocketMQ's GroupTransferService): a bounded queue of
// waiting producers and one owner goroutine that answers each of them
// exactly once. The owner is passive — the position moves when a slave
// acknowledges bytes (see Store.ReportSlaves), and the owner releases every
// waiter the position has passed, keeping the others until it passes them
// or their deadline. (The flushed position has its own, active owner: the
// group commit, groupcommit.go.)
//
// A producer queues a waiter with begin and collects the answer with end;
// between the two it may queue a waiter on the flushed position, so a Put on
// a SYNC_MASTER with sync flush waits for both at once, as RocketMQ's does.
type offsetWaiters struct {
	service
	// position is the offset the waiters wait on (it only moves forward).
	position func() int64
	// The position moves by itself and moved is signalled when it does.
	// nudge, when set, is called with the largest offset
	// of newly taken waiters before the owner waits (the replication waiter
	// commits buffered bytes so the HA sender can read them).
	nudge func(target int64)
	moved chan struct{} // capacity 1, like wake
	// timeout is how long a producer waits; timeoutErr what it gets then.
	timeout    time.Duration
	timeoutErr error
	fullErr    error // the queue is full

	mu       sync.Mutex
	queued   []*offsetWaiter // queued, not yet taken by the owner
	inFlight int             // queued plus taken and not yet answered
	limit    int
}

// offsetWaiter is one producer waiting until the position reaches offset.
type offsetWaiter struct {
	offset   int64
	deadline time.Time  // a passive owner answers timeoutErr after it
	done     chan error // capacity 1: the owner never blocks on a waiter
	// timer is the producer's deadline, made once per pooled waiter and
	// Reset for each wait (since Go 1.23 a stopped or fired timer can be
	// Reset without draining): a sync Put allocates no timer.
	timer *time.Timer
}

var offsetWaiterPool = sync.Pool{New: func() any { return &offsetWaiter{done: make(chan error, 1)} }}

// passiveRecheck is how often a passive owner with waiters answers those
// whose deadline passed (their producers stopped listening at the deadline;
// this only keeps the queue bounded).
const passiveRecheck = 100 * time.Millisecond

// begin queues a waiter for offset and returns it; nil (and no error) when
// the position is already there; fullErr when the queue is full.
func (q *offsetWaiters) begin(offset int64) (*offsetWaiter, error) {
	if q.position() >= offset {
		return nil, nil
	}
	w := offsetWaiterPool.Get().(*offsetWaiter)
	w.offset = offset
	w.deadline = time.Now().Add(q.timeout)
	q.mu.Lock()
	if q.inFlight >= q.limit {
		q.mu.Unlock()
		offsetWaiterPool.Put(w)
		return nil, q.fullErr
	}
	q.queued = append(q.queued, w)
	q.inFlight++
	q.mu.Unlock()
	q.Wakeup()
	return w, nil
}

// end waits for w's answer: nil when the position reached its offset,
// timeoutErr at its deadline, ctx's error when ctx ends first. A nil w
// (begin found the position there) returns nil.
func (q *offsetWaiters) end(ctx context.Context, w *offsetWaiter) error {
	if w == nil {
		return nil
	}
	if w.timer == nil {
		w.timer = time.NewTimer(time.Until(w.deadline))
	} else {
		w.timer.Reset(time.Until(w.deadline))
	}
	select {
	case err := <-w.done:
		w.timer.Stop()
		offsetWaiterPool.Put(w) // answered: safe to reuse
		return err
	case <-w.timer.C:
		// w stays with the owner, which will still answer it: not reused.
		return q.timeoutErr
	case <-ctx.Done():
		w.timer.Stop() // w stays with the owner, as above
		return ctx.Err()
	}
}

// signalMoved tells a passive owner that the position moved; it never blocks.
func (q *offsetWaiters) signalMoved() {
	select {
	case q.moved <- struct{}{}:
	default:
	}
}

// run is the owner loop. It compares each waiter with a position that is
// itself a fact (an offset a slave acknowledged), read after the waiter was
// taken.
func (q *offsetWaiters) run() {
	defer close(q.done)
	var taken []*offsetWaiter
	ticker := time.NewTicker(passiveRecheck)
	defer ticker.Stop()
	for {
		var tick <-chan time.Time
		if len(taken) > 0 {
			tick = ticker.C
		}
		select {
		case <-q.stop:
			q.failAll(taken, ErrClosed)
			return
		case <-q.wake:
		case <-q.moved:
		case <-tick:
		}
		fresh := int64(-1) // the largest offset among newly taken waiters
		q.mu.Lock()
		for _, w := range q.queued {
			fresh = max(fresh, w.offset)
		}
		if len(taken) == 0 {
			taken, q.queued = q.queued, taken[:0]
		} else {
			taken = append(taken, q.queued...)
			clear(q.queued)
			q.queued = q.queued[:0]
		}
		q.mu.Unlock()
		if len(taken) == 0 {
			continue
		}
		if fresh >= 0 && q.nudge != nil {
			q.nudge(fresh)
		}
		taken = q.answer(taken, q.position())
	}
}

// answer answers every waiter it can and returns those left waiting.
func (q *offsetWaiters) answer(taken []*offsetWaiter, reached int64) []*offsetWaiter {
	now := time.Now()
	keep := taken[:0]
	answered := 0
	for _, w := range taken {
		switch {
		case reached >= w.offset:
			w.done <- nil
		case !now.Before(w.deadline):
			w.done <- q.timeoutErr
		default:
			keep = append(keep, w)
			continue
		}
		answered++
	}
	clear(taken[len(keep):])
	q.mu.Lock()
	q.inFlight -= answered
	q.mu.Unlock()
	return keep
}

func (q *offsetWaiters) failAll(taken []*offsetWaiter, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, w := range taken {
		w.done <- err
	}
	for _, w := range q.queued {
		w.done <- err
	}
	q.queued = nil
	q.inFlight = 0
}

// errFlushBehind: a flush succeeded but did not reach the waiter's record
// (it cannot happen while the argument above holds; kept as a check).
var errFlushBehind = errors.New("engine: group commit flushed less than a waiter needed")

// flushOnce flushes the CommitLog (committing first when asked), records the
// timing and the checkpoint's physic timestamp, and returns the flushed offset.
func (s *Store) flushOnce(ctx context.Context, leastPages int, commitFirst bool) (int64, error) {
	before := s.log.flushedOffset.Load()
	ts := s.log.lastStoreTimestamp.Load() // read before the flush: every record with it is below the flushed end
	start := time.Now()
	flushed, err := s.log.flush(ctx, leastPages, commitFirst)
	if commitFirst {
		s.dispatcher.Wakeup() // the commit may have made records readable
		s.repl.growth.notify()
	}
	if err != nil {
		s.writeFailed("flush", err)
		return flushed, err
	}
	if flushed > before {
		s.stats.recordFlush(time.Since(start))
		s.checkpoint.setPhysic(ts)
		raise(&s.checkpoint.flushedOffset, flushed)
	}
	return flushed, nil
}

// writeFailed stops writes after an I/O error (the segment's error is
// sticky; RocketMQ marks the store unwritable).
func (s *Store) writeFailed(what string, err error) {
	if s.writeErr.CompareAndSwap(nil, &err) {
		s.opts.Logger.Error("store stops accepting writes", slog.String("after", what), slog.Any("err", err))
	}
}

// prewriteDecision is PrewriteAuto's state, owned by the allocation
// service: the store's flush count (Stats.Flushes: the syncs that moved
// the flushed offset) and flushed offset at its last decision, and that
// decision. The bytes per sync since then are derived from the two.
type prewriteDecision struct {
	flushes, flushed int64
	prewrite         bool
}

// prewriteNext says whether the allocation service prewrites the segment
// it makes now (Options.PrewriteSegments; PrewriteAuto: the bytes per sync
// since its last decision against PrewriteBelowSyncBytes — with no sync
// since, the last decision again). Before the store's first syncs there is
// nothing to go by: a segment made ahead (canWait not nil) waits for
// prewriteEvidence syncs, at most prewriteEvidenceWait and only while
// canWait says nobody needs it yet — under load they come within
// milliseconds, and a store that starts under the load of hundreds of
// producers must not spend its device on zeros for its second segment —
// and a segment a roll waits for is prewritten (a store that has not
// synced yet is not known to be under load). Called by the allocation
// service only.
func (s *Store) prewriteNext(ctx context.Context, canWait func() bool) bool {
	switch s.opts.PrewriteSegments {
	case PrewriteOn:
		return true
	case PrewriteAuto:
	default:
		return false
	}
	d := &s.prewrite
	if d.flushes == 0 && canWait != nil {
		deadline := time.Now().Add(prewriteEvidenceWait)
		for s.stats.flushes.Load() < prewriteEvidence && canWait() && ctx.Err() == nil && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	flushes, flushed := int64(s.stats.flushes.Load()), s.log.flushedOffset.Load()
	if flushes == d.flushes {
		if d.flushes == 0 {
			d.flushed = flushed // what recovery found durable is no sync of this store's
			d.prewrite = true
		}
		return d.prewrite
	}
	perSync := (flushed - d.flushed) / (flushes - d.flushes)
	d.flushes, d.flushed = flushes, flushed
	d.prewrite = perSync < s.opts.PrewriteBelowSyncBytes
	return d.prewrite
}

// prewriteEvidence and prewriteEvidenceWait: how many syncs PrewriteAuto
// waits for before it decides about the first segment made ahead, and how
// long at most.
const (
	prewriteEvidence     = 16
	prewriteEvidenceWait = 100 * time.Millisecond
)
