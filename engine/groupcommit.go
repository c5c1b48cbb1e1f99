package engine

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mqstore/mqstore/internal/invariants"
)

// groupCommit is the sync flush service (RocketMQ's GroupCommitService):
// producers queue a waiter for the end of their record, and one owner
// goroutine makes every durable write of sync mode — it takes the queued
// waiters, commits and flushes once, and hands every waiter it took the
// same answer. No other party writes durably on a sync Put's behalf: Puts
// do not wake the commit service, so an owner's flush never queues behind
// another durable commit.
//
// The cost per Put is what the device cannot batch away, so the owner keeps
// batches full and waiters cheap:
//
//   - Linger. After a flush the producers it released append again, one
//     after another as they get a CPU. Taking whoever has queued at once
//     splits them into two alternating convoys of half the producers each.
//     With N producers that each take g of wall time to append again and a
//     flush of L, the convoys carry N/2 per max(L, N·g/2), one merged batch
//     N per L + N·g: merging wins exactly when N·g < L, when every producer
//     appends again within one flush. So before it takes a batch, the owner
//     parks, leaving both CPUs to the producers, until every sync Put in
//     progress has queued — the producer that completes the count wakes it
//     (Puts count themselves in and out: a producer released but not yet
//     back, or appending, counts; one between Puts does not) — for at most
//     the last flush's duration; a linger that ran out with fewer
//     than half of them there (N·g ≫ L: many producers, few CPUs) switches
//     lingering off for lingerBackoff flushes, and the convoys keep the
//     device and the CPUs busy at once. A lone producer is never held.
//   - Merge or convoys, measured. That rule takes a flush's time as fixed,
//     but a flush of N records costs a + b·N: when b is a large part of it
//     (on this virtio disk ~2 µs per KiB against a 115–170 µs base), two
//     convoys of N/2 each keep the device busy with a flush always in
//     flight, at (N/2)/L(N/2), while the merged batch leaves it idle for
//     N·g every cycle, at N/(L(N) + N·g). Which one wins depends on the
//     device, the CPUs and GOMAXPROCS, so the owner does not model it:
//     batchPolicy runs each for a few flushes, measures the records each
//     flushes per second, keeps the faster for the next couple of hundred
//     flushes, then measures again (Options.GroupCommitBatching auto; merge
//     or convoys fix the mode).
//     The count is live, not the last batch's size: when the owner's
//     flushes hold the only P (GOMAXPROCS 1: the runtime's monitor hands a
//     P on in a system call only once it sees the same call twice, and
//     back-to-back flushes change it every time), the producers run only
//     while the owner yields, so a batch sized by the last one stayed as
//     small as it once was (docs/design.md has the figures).
//   - A waiter costs one channel receive: no timer, and no select on ctx's
//     channel (producers usually share a ctx, and a select on one channel
//     by hundreds of them made its lock the hottest in the process). The
//     owner's watchdog, a goroutine of its own, answers every waiter whose
//     deadline has passed with FlushDiskTimeout and every waiter whose ctx
//     has ended with ctx's error, queued or in a flush that has not
//     returned, within watchPeriod.
//   - Only the first waiter of a batch wakes the owner.
//   - After a flush that answered many waiters the owner yields once,
//     before it takes the next batch (yieldAfter).
//
// Every waiter is answered exactly once: the owner, the watchdog and a
// producer whose ctx ended race for the waiter's answered flag, and only the
// winner answers (or, for the producer, leaves). A waiter goes back to the
// pool from whoever touches it last: the producer after an answer from the
// owner, the owner when another party won the flag.
type groupCommit struct {
	service
	// flushed is the position the waiters wait on; advance moves it (two
	// passes of commit and flush, as RocketMQ does: a waiter whose record
	// rolled into a new segment may need a second one) and returns where it
	// got. On a successful advance that did not reach a waiter, the waiter
	// is answered errFlushBehind.
	flushed    func() int64
	advance    func(target int64) (int64, error)
	timeout    time.Duration
	timeoutErr error
	limit      int           // waiters queued or in a flush, at most
	maxLinger  time.Duration // bounds a linger, whatever the last flush took

	mu       sync.Mutex
	queued   []*groupWaiter // not yet taken by the owner
	flushing []*groupWaiter // taken, the flush not returned: the watchdog may answer them
	count    int            // len(queued) + len(flushing)
	// queuedLen is len(queued), read by the lingering owner without mu.
	queuedLen atomic.Int32

	// inPut counts the sync Puts in progress, from before their append to
	// their return (enter, leave): the producers whose records a batch can
	// still gain. The owner lingers until as many waiters have queued.
	inPut atomic.Int32

	// parked is set while the owner is parked in a linger: the producer
	// whose waiter completes the count (or a Put that leaves and so
	// completes it) sends on lingerWake.
	parked     atomic.Bool
	lingerWake chan struct{} // capacity 1

	// Owned by the owner goroutine.
	lastFlush time.Duration // how long the last flush took
	noLinger  int           // flushes left before the owner lingers again
	policy    batchPolicy   // whether the owner lingers at all
	lingerEnd *time.Timer   // a parked linger's deadline
	// gomaxprocs, when set, stands in for runtime.GOMAXPROCS(0) (tests).
	gomaxprocs func() int
}

// procs is how many Ps the runtime runs goroutines on.
func (q *groupCommit) procs() int {
	if q.gomaxprocs != nil {
		return q.gomaxprocs()
	}
	return runtime.GOMAXPROCS(0)
}

// groupWaiter is one producer waiting until the flushed position reaches offset.
type groupWaiter struct {
	offset   int64
	deadline int64           // unix ns: the watchdog answers timeoutErr after it
	ctx      context.Context // nil when it cannot end; the watchdog answers its error
	answered atomic.Bool
	// byWatchdog is set by the watchdog before it answers: the producer
	// then leaves the waiter to the owner, which still holds it.
	byWatchdog bool
	done       chan error // capacity 1: an answer never blocks
}

var groupWaiterPool = sync.Pool{New: func() any { return &groupWaiter{done: make(chan error, 1)} }}

// yieldAfter is how many waiters a flush must have answered for the owner
// to yield before it takes the next batch. Answering made those producers
// runnable on the owner's P, and the next flush blocks that P's thread in a
// system call for the device's whole round trip: a P in a system call is
// handed on only when the runtime's monitor notices (20 µs or more), so
// the producers waited in its run queue through much of the next flush —
// 128–256 µs from the answer to the producer running, at the median, with
// 256 producers on two CPUs. Yielding lets them run first (the owner goes
// on at once on an idle P, if there is one) and append into the next
// batch. Measured (docs/design.md, "Yield before the next flush"): at 256
// producers with one P it made 1.2× the messages in 4 of 4 pairs, with
// two no clear difference; answering 16, it cost the auto batching's
// choice up to a tenth, hence the threshold.
const yieldAfter = 64

// watchPeriod is how often the watchdog looks at the waiters (at most: an
// eighth of SyncFlushTimeout when that is shorter).
const watchPeriod = 10 * time.Millisecond

// lingerBackoff is how many flushes the owner takes without lingering
// after a linger ran out of time, before it tries again.
const lingerBackoff = 16

// maxLinger bounds the linger in time, whatever the last flush took (one
// stalled flush must not make the next batch wait as long).
const maxLinger = 10 * time.Millisecond

func newGroupCommit(s *Store) *groupCommit {
	return &groupCommit{
		service: newService(),
		flushed: s.log.flushedOffset.Load,
		advance: func(target int64) (int64, error) {
			var flushed int64
			var err error
			for pass := 0; pass < 2; pass++ {
				flushed, err = s.flushOnce(context.Background(), 0, true)
				if err != nil || flushed >= target {
					break
				}
			}
			return flushed, err
		},
		timeout:    s.opts.SyncFlushTimeout,
		timeoutErr: fmt.Errorf("not flushed after %v: %w", s.opts.SyncFlushTimeout, ErrFlushDiskTimeout),
		limit:      s.opts.GroupCommitQueueSize,
		maxLinger:  maxLinger,
		policy:     newBatchPolicy(s.opts.GroupCommitBatching),
		lingerWake: make(chan struct{}, 1),
	}
}

// begin queues a waiter for offset; now is the Put's start, from which its
// deadline runs, and ctx ends its wait early. It returns nil (and no error)
// when the position is already there, and errGroupCommitQueueFull when the
// queue is full.
func (q *groupCommit) begin(ctx context.Context, offset int64, now time.Time) (*groupWaiter, error) {
	if q.flushed() >= offset {
		return nil, nil
	}
	w := groupWaiterPool.Get().(*groupWaiter)
	w.offset = offset
	w.deadline = now.UnixNano() + int64(q.timeout)
	w.ctx = nil
	if ctx.Done() != nil {
		w.ctx = ctx
	}
	w.byWatchdog = false
	w.answered.Store(false)
	q.mu.Lock()
	if q.count >= q.limit {
		q.mu.Unlock()
		groupWaiterPool.Put(w)
		return nil, errGroupCommitQueueFull
	}
	q.queued = append(q.queued, w)
	q.count++
	n := len(q.queued)
	q.queuedLen.Store(int32(n))
	q.mu.Unlock()
	if n == 1 {
		q.Wakeup()
	}
	if q.parked.Load() && int32(n) >= q.wanted() {
		q.wakeLinger()
	}
	return w, nil
}

// end waits for w's answer: nil when the flushed position reached its
// offset, timeoutErr at its deadline, the error of begin's ctx when that
// ended first. A nil w (begin found the position there) returns nil.
func (q *groupCommit) end(w *groupWaiter) error {
	if w == nil {
		return nil
	}
	err := <-w.done
	if !w.byWatchdog { // the watchdog's answer leaves w with the owner
		w.ctx = nil
		groupWaiterPool.Put(w)
	}
	return err
}

// run is the owner loop.
//
// Why one flush serves every waiter taken before it: a producer queues its
// waiter only after its append returned, so its record ends at or below the
// CommitLog's write position at that moment. The owner takes the waiters
// first (under mu, after lingering), and only then commits and flushes, and
// the flush covers everything written up to the moment it reads the write
// position — which is after the waiters were taken, hence after every taken
// producer's append. Positions only move forward, so flushed ≥ every taken
// waiter's offset when the flush succeeds; each waiter is still checked
// against the position the flush returned before it is released. Waiters
// that queue while a flush runs wait for the next one: they are never
// acknowledged by a flush that may have read the position before their
// append. Lingering changes none of this: it only delays the taking.
func (q *groupCommit) run() {
	watching := make(chan struct{})
	go q.watch(watching)
	defer func() {
		<-watching
		close(q.done)
	}()
	var taken []*groupWaiter
	for {
		select {
		case <-q.stop:
			q.failAll(ErrClosed)
			return
		case <-q.wake:
		}
		for {
			if q.policy.merge {
				q.linger()
			}
			q.mu.Lock()
			taken, q.queued = q.queued, taken[:0]
			q.queuedLen.Store(0)
			q.flushing = taken
			q.mu.Unlock()
			if len(taken) == 0 {
				break
			}
			target := int64(0)
			for _, w := range taken {
				target = max(target, w.offset)
			}
			start := time.Now()
			reached, err := q.advance(target)
			end := time.Now()
			q.lastFlush = end.Sub(start)
			q.answer(taken, reached, err)
			q.policy.flushed(len(taken), end)
			clear(taken)
			// Hand the released producers the P before the next flush
			// blocks on it (see yieldAfter).
			if len(taken) >= yieldAfter {
				runtime.Gosched()
			}
		}
	}
}

// watch is the watchdog: a goroutine of its own, since the owner may be
// blocked in a flush that does not return. It ticks every watchPeriod, so a
// waiter is answered within a tick of its deadline or of its ctx's end.
func (q *groupCommit) watch(done chan<- struct{}) {
	defer close(done)
	ticker := time.NewTicker(max(min(q.timeout/8, watchPeriod), time.Millisecond))
	defer ticker.Stop()
	for {
		select {
		case <-q.stop:
			return
		case now := <-ticker.C:
			q.expire(now.UnixNano())
		}
	}
}

// enter and leave bracket a sync Put, from before its append to its return.
func (q *groupCommit) enter() { q.inPut.Add(1) }
func (q *groupCommit) leave() {
	if n := q.inPut.Add(-1); q.parked.Load() && q.queuedLen.Load() >= q.wantedOf(n) {
		q.wakeLinger()
	}
}

// wakeLinger ends a parked linger (at most one wake-up is pending).
func (q *groupCommit) wakeLinger() {
	select {
	case q.lingerWake <- struct{}{}:
	default:
	}
}

// linger parks the owner until every sync Put in progress has
// queued its waiter: those the last flush released (they append again) and
// those that queued while it ran — two convoys that merge into one batch.
// It lingers at most the last flush's duration (and maxLinger): when the
// producers need longer than a flush to append again, a flush of part of
// them while the rest append keeps the device busy better than waiting, so
// a linger that runs out turns lingering off for lingerBackoff flushes.
func (q *groupCommit) linger() {
	if q.noLinger > 0 {
		q.noLinger--
		return
	}
	if want := q.wanted(); want <= 1 || q.queuedLen.Load() >= want {
		return
	}
	q.lingerFor()
}

// wanted is how many waiters a linger waits for: every sync Put in
// progress, at most as many as can queue (a Put past the queue's limit
// gets errGroupCommitQueueFull and never queues).
func (q *groupCommit) wanted() int32 { return q.wantedOf(q.inPut.Load()) }

// wantedOf is wanted with inPut sync Puts in progress.
func (q *groupCommit) wantedOf(inPut int32) int32 {
	return min(inPut, int32(min(q.limit, 1<<30)))
}

// lingerFor parks the owner until every sync Put in progress has queued,
// or the linger runs out. The producer whose waiter completes the count
// wakes it (begin), as does a Put that leaves and so completes it (leave):
// the owner then runs on that producer's P right after it parks, and
// while it lingers both CPUs run producers. (It yielded in a loop before,
// which kept the producers mostly on one P — likely because the other P,
// its own run queue empty, kept taking the yielding owner from the global
// one: docs/design.md, "The closed-loop ceiling".)
//
// The flag is set before the count is looked at, and a producer looks at
// the flag after its waiter is counted, so one of the two sees the other:
// a batch completed meanwhile is never slept through.
func (q *groupCommit) lingerFor() {
	select {
	case <-q.lingerWake: // a stale wake-up, from after the last linger ended
	default:
	}
	q.parked.Store(true)
	defer q.parked.Store(false)
	if q.queuedLen.Load() >= q.wanted() {
		return
	}
	// With one P the owner's flush holds the only P until the runtime's
	// monitor hands it on, so a flush of part of the producers does not let
	// the rest append meanwhile: the linger waits for all of them (at most
	// maxLinger) and never gives up on lingering.
	onlyP := q.procs() == 1
	d := min(q.lastFlush, q.maxLinger)
	if onlyP {
		d = q.maxLinger
	}
	if q.lingerEnd == nil {
		q.lingerEnd = time.NewTimer(d)
	} else {
		q.lingerEnd.Reset(d)
	}
	select {
	case <-q.lingerWake:
		q.lingerEnd.Stop()
	case <-q.lingerEnd.C:
		// Fewer than half came within a flush's time: N·g is well above
		// L, and the convoys do better. More than half: a producer was
		// held up (the machine is shared); go on.
		if queued, want := q.queuedLen.Load(), q.wanted(); 2*queued < want && !onlyP {
			q.noLinger = lingerBackoff
		}
	case <-q.stop:
		q.lingerEnd.Stop()
	}
}

// answer answers the waiters of one flush.
func (q *groupCommit) answer(taken []*groupWaiter, reached int64, err error) {
	q.mu.Lock()
	q.flushing = nil // the watchdog no longer sees them
	q.count -= len(taken)
	q.mu.Unlock()
	for _, w := range taken {
		res := err
		if res == nil && reached < w.offset {
			res = errFlushBehind
		}
		if w.answered.CompareAndSwap(false, true) {
			invariants.Equal("a waiter is answered once", int64(len(w.done)), 0)
			w.done <- res
		} else {
			w.ctx = nil
			groupWaiterPool.Put(w) // the watchdog answered it: its producer has left
		}
	}
}

// expire answers timeoutErr to every waiter whose deadline has passed and
// its ctx's error to every waiter whose ctx has ended, whether queued or in
// a flush that has not returned (a device that hangs must not hang its
// producers past SyncFlushTimeout). The owner still takes or finishes them,
// and pools them.
func (q *groupCommit) expire(now int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, ws := range [2][]*groupWaiter{q.queued, q.flushing} {
		for _, w := range ws {
			var err error
			switch {
			case now > w.deadline:
				err = q.timeoutErr
			case w.ctx != nil:
				err = w.ctx.Err()
			}
			if err != nil && w.answered.CompareAndSwap(false, true) {
				w.byWatchdog = true
				invariants.Equal("a waiter is answered once", int64(len(w.done)), 0)
				w.done <- err
			}
		}
	}
}

// failAll answers every waiter left with err (the store is closing).
func (q *groupCommit) failAll(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, w := range q.queued {
		if w.answered.CompareAndSwap(false, true) {
			invariants.Equal("a waiter is answered once", int64(len(w.done)), 0)
			w.done <- err
		}
	}
	q.queued = nil
	q.queuedLen.Store(0)
	q.count = 0
}

// batchPolicy chooses, for the owner, between lingering until every sync
// Put in progress has queued (one merged batch) and taking whoever has
// queued when the last flush returned (two alternating convoys), by
// measuring both: a cycle probes the mode it did not choose last for
// probeFlushes flushes, then the one it chose for as many, and runs the
// faster for exploitFlushes — twice as long after each cycle where the same
// mode won by decisiveRatio or more, up to maxExploitFlushes, so a choice
// that is never close costs its probes less and less. A probe's first
// settleFlushes flushes are not measured (the convoys form, or merge, in
// them); the rest give records flushed per second of wall time. The two
// probes of a cycle run back to back, on the same load, and only they are
// compared: a rate from an earlier cycle may be of another load. Owned by
// the owner goroutine.
type batchPolicy struct {
	fixed   bool // Options.GroupCommitBatching named the mode: no probes
	merge   bool // linger before the next take
	best    bool // the mode the last probes chose: merge or not
	phase   int  // policyProbeOther, policyProbeBest or policyExploit
	left    int  // flushes left in the phase
	settle  int  // flushes of the probe still unmeasured
	from    time.Time
	records int64
	rate    [2]float64 // this cycle's records per second, [0] convoys, [1] merged; 0: not measured
	exploit int        // flushes of the next exploit phase
}

// The phases of a batchPolicy's cycle.
const (
	policyProbeOther = iota
	policyProbeBest
	policyExploit
)

const (
	probeFlushes      = 16
	settleFlushes     = 3
	exploitFlushes    = 240
	maxExploitFlushes = 16 * exploitFlushes
	decisiveRatio     = 1.25
)

// newBatchPolicy returns the policy of mode: BatchingAuto starts with a
// probe of the convoys, then of the merged batch (the mode it keeps while
// nothing is measured); the others stay in their mode.
func newBatchPolicy(mode BatchingMode) batchPolicy {
	p := batchPolicy{best: true, exploit: exploitFlushes}
	switch mode {
	case BatchingMerge, BatchingConvoys:
		p.fixed, p.merge = true, mode == BatchingMerge
	default:
		p.start(policyProbeOther)
	}
	return p
}

func (p *batchPolicy) start(phase int) {
	p.phase, p.records = phase, 0
	switch phase {
	case policyProbeOther, policyProbeBest:
		p.merge = p.best == (phase == policyProbeBest)
		p.left, p.settle = probeFlushes, settleFlushes
	default:
		p.merge, p.left, p.settle = p.best, p.exploit, 0
	}
}

// flushed counts a flush of records waiters that returned at end.
func (p *batchPolicy) flushed(records int, end time.Time) {
	if p.fixed {
		return
	}
	switch {
	case p.phase == policyExploit:
	case p.settle > 0:
		if p.settle--; p.settle == 0 {
			p.from = end
		}
	default:
		p.records += int64(records)
	}
	if p.left--; p.left > 0 {
		return
	}
	if p.phase != policyExploit {
		mode := 0
		if p.merge {
			mode = 1
		}
		p.rate[mode] = 0
		if el := end.Sub(p.from); el > 0 {
			p.rate[mode] = float64(p.records) / el.Seconds()
		}
	}
	switch p.phase {
	case policyProbeOther:
		p.start(policyProbeBest)
	case policyProbeBest:
		best := p.rate[1] >= p.rate[0] // a tie, or nothing measured: merge
		lo, hi := min(p.rate[0], p.rate[1]), max(p.rate[0], p.rate[1])
		if best == p.best && lo > 0 && hi >= decisiveRatio*lo {
			p.exploit = min(2*p.exploit, maxExploitFlushes)
		} else {
			p.exploit = exploitFlushes
		}
		p.best = best
		p.start(policyExploit)
	default:
		p.start(policyProbeOther)
	}
}
