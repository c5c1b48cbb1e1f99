package load

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// Run runs spec: the warm-up, then the measured window. newOp builds each
// worker's Op. When d is not nil, its positions are read at the window's
// start and end and Drain is timed after the window (Result.Durability). A
// failing Op stops the run; Result.Error says why. When ctx is cancelled
// the run stops and Result.Interrupted is set.
func Run(ctx context.Context, spec Spec, clock Clock, d Durability, newOp func(worker int) Op) Result {
	return RunTimed(ctx, spec, clock, d, func(worker int) TimedOp {
		op := newOp(worker)
		return func(ctx context.Context, _ time.Time) error { return op(ctx) }
	})
}

// RunTimed is Run with ops that are told each request's intended start.
func RunTimed(ctx context.Context, spec Spec, clock Clock, d Durability, newOp func(worker int) TimedOp) Result {
	res := Result{Workload: spec.Workload, TargetRatePerSec: spec.RatePerSec, WindowNs: spec.Duration.Nanoseconds()}
	if err := spec.Validate(); err != nil {
		res.Error = err.Error()
		return res
	}
	if clock == nil {
		clock = RealClock{}
	}
	ops := make([]TimedOp, spec.Workers())
	for i := range ops {
		ops[i] = newOp(i)
	}
	if spec.Warmup > 0 {
		warm := spec
		warm.SeriesInterval = 0
		warm.Duration = spec.Warmup
		warm.Window = nil
		if _, err := runPhase(ctx, warm, clock, ops); err != nil {
			res.setError(ctx, fmt.Errorf("warm-up: %w", err))
			return res
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	var dur *DurabilityResult
	if d != nil {
		dur = &DurabilityResult{}
	}
	// The system's positions and the allocation count are read at the
	// window's edges, beside the CPU: as it opens (the workers and their
	// histograms already made) and as the last worker returns, before the
	// workers' histograms are merged — not around the merge, during which
	// a flusher goes on making bytes durable that the window's time does
	// not cover. The caller's Window brackets the CPU readings innermost.
	inner := spec.Window
	spec.Window = func() func() {
		if d != nil {
			dur.WrittenStartBytes, dur.DurableStartBytes = d.Positions()
		}
		runtime.ReadMemStats(&before)
		var innerEnd func()
		if inner != nil {
			innerEnd = inner()
		}
		return func() {
			if innerEnd != nil {
				innerEnd()
			}
			if d != nil {
				dur.WrittenEndBytes, dur.DurableEndBytes = d.Positions()
			}
			runtime.ReadMemStats(&after)
		}
	}
	ph, err := runPhase(ctx, spec, clock, ops)
	res.Messages, res.ElapsedNs, res.StartUnixNs = ph.messages, ph.elapsed.Nanoseconds(), ph.start.UnixNano()
	res.PayloadBytes = ph.messages * int64(spec.SizeBytes)
	res.CPUUserNs, res.CPUSysNs = int64(ph.cpuUser), int64(ph.cpuSys)
	res.Mallocs = after.Mallocs - before.Mallocs
	res.Service, res.Latency, res.DispatchLag = ph.service, ph.latency, ph.lag
	res.Arrivals, res.Unstarted, res.Quarters = ph.arrivals, ph.unstarted, ph.quarters
	res.LastIntendedNs, res.LastStartNs = ph.lastIntended.Nanoseconds(), ph.lastStart.Nanoseconds()
	res.Series = ph.series
	if err != nil {
		res.setError(ctx, err)
		return res
	}
	if d != nil && ctx.Err() == nil {
		begin := clock.Now()
		derr := d.Drain(ctx)
		dur.DrainNs = clock.Now().Sub(begin).Nanoseconds()
		dur.WrittenAfterDrainBytes, dur.DurableAfterDrainBytes = d.Positions()
		if derr != nil {
			dur.DrainError = derr.Error()
			res.setError(ctx, fmt.Errorf("drain: %w", derr))
		} else if cerr := dur.Check(); cerr != nil {
			res.setError(ctx, cerr)
		}
		res.Durability = dur
	}
	return res
}

func (r *Result) setError(ctx context.Context, err error) {
	if ctx.Err() != nil {
		r.Interrupted = true
		r.Error = "interrupted"
		return
	}
	r.Error = err.Error()
}

type phase struct {
	start                         time.Time
	messages, arrivals, unstarted int64
	elapsed                       time.Duration
	// open loop, from the start: the latest intended start of an arrival
	// that was started, and the latest actual start
	lastIntended, lastStart time.Duration
	service, latency, lag   *Histogram
	quarters                []Percentiles
	series                  []SeriesPoint
	// cpuUser and cpuSys are the process's CPU from the phase's start to
	// its last worker's end — the store's and the generator's work, not
	// the merging of the workers' histograms after it (with hundreds of
	// workers that merge costs about as much CPU as the messages).
	cpuUser, cpuSys time.Duration
}

// cpuNow and mergeWorkers are cpuTimes and merge; tests replace them.
var (
	cpuNow       = cpuTimes
	mergeWorkers = merge
)

// firstError keeps the first error of a phase and cancels it.
type firstError struct {
	once   sync.Once
	err    error
	cancel context.CancelFunc
}

func (f *firstError) set(err error) {
	f.once.Do(func() { f.err = err; f.cancel() })
}

func runPhase(ctx context.Context, spec Spec, clock Clock, ops []TimedOp) (phase, error) {
	if spec.Workload == Latency {
		return openPhase(ctx, spec, clock, ops)
	}
	return closedPhase(ctx, clock, ops, spec.Duration, spec.SeriesInterval, spec.Window)
}

// quarters is how many parts of the window Result.Quarters splits.
const quarters = 4

// worker is one goroutine's private counters and histograms.
type worker struct {
	messages, arrivals, unstarted     int64
	lastDone, lastIntended, lastStart time.Time
	service, latency, lag             *Histogram
	quarter                           [quarters]*Histogram
	series                            *series
	// pending holds the closed loop's last service times, recorded into
	// the histograms pendingBatch at a time: a producer that was parked in
	// the system under test finds its histograms' lines evicted, and one
	// batch pays for them once rather than twice per request.
	pending []completion
}

// completion is one request's service time and when it completed.
type completion struct {
	done time.Time
	d    time.Duration
}

// pendingBatch is how many service times a closed-loop worker holds
// before it records them.
const pendingBatch = 64

// complete notes a closed-loop request's service time d, completed at done.
func (w *worker) complete(done time.Time, d time.Duration) {
	if w.pending == nil {
		w.pending = make([]completion, 0, pendingBatch)
	}
	w.pending = append(w.pending, completion{done, d})
	if len(w.pending) == pendingBatch {
		w.recordPending()
	}
}

// recordPending records the held service times: the worker's loop calls it
// as it returns, so the histograms are whole before they are merged.
func (w *worker) recordPending() {
	for _, c := range w.pending {
		w.service.Record(c.d)
	}
	for _, c := range w.pending {
		w.series.record(c.done, c.d)
	}
	w.pending = w.pending[:0]
}

func newWorker(open bool, set *seriesSet) *worker {
	w := &worker{service: NewHistogram(), series: set.worker()}
	if open {
		w.latency, w.lag = NewHistogram(), NewHistogram()
		for i := range w.quarter {
			w.quarter[i] = NewHistogram()
		}
	}
	return w
}

// merge folds the workers into a phase: histograms merged, the window ending
// at the last completion (or at end, whichever is later).
func merge(ws []*worker, set *seriesSet, start, end time.Time) phase {
	// all is an unstarted worker that collects the others' histograms.
	all := newWorker(len(ws) > 0 && ws[0].latency != nil, nil)
	p := phase{start: start, service: all.service, latency: all.latency, lag: all.lag}
	last := end
	for _, w := range ws {
		w.series.flush()
		p.messages += w.messages
		p.arrivals += w.arrivals
		p.unstarted += w.unstarted
		p.service.Merge(w.service)
		if p.latency != nil {
			p.latency.Merge(w.latency)
			p.lag.Merge(w.lag)
			for i, q := range all.quarter {
				q.Merge(w.quarter[i])
			}
		}
		if w.lastDone.After(last) {
			last = w.lastDone
		}
		if !w.lastStart.IsZero() {
			p.lastIntended = max(p.lastIntended, w.lastIntended.Sub(start))
			p.lastStart = max(p.lastStart, w.lastStart.Sub(start))
		}
	}
	if p.latency != nil {
		for _, q := range all.quarter {
			p.quarters = append(p.quarters, q.Percentiles())
		}
	}
	p.elapsed = last.Sub(start)
	p.series = set.points()
	return p
}

// runWorkers runs loop on one goroutine per worker, all from one start
// with the window ending d later, until every loop has returned; the first
// error a loop sets cancels the others. The phase's CPU is the difference
// of the process's CPU at the start and when the last loop returned, read
// before the workers are merged. window (Spec.Window), when set, brackets
// the two CPU readings.
func runWorkers(parent context.Context, clock Clock, n int, open bool, d, interval time.Duration, window func() func(),
	loop func(ctx context.Context, i int, w *worker, start, end time.Time, fail *firstError)) (phase, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	fail := &firstError{cancel: cancel}
	// The workers and their histograms are made before the window opens:
	// made inside it, the last ones started late (at hundreds of workers,
	// megabytes to zero one after another), and their first arrivals'
	// waits counted as the system's latency.
	ws := make([]*worker, n)
	set := newSeriesSet(time.Time{}, interval)
	for i := range ws {
		ws[i] = newWorker(open, set)
	}
	endWindow := func() {}
	if window != nil {
		endWindow = window()
	}
	user0, sys0 := cpuNow()
	start := clock.Now()
	end := start.Add(d)
	if set != nil {
		set.start = start
	}
	var wg sync.WaitGroup
	for i := range ws {
		wg.Go(func() { loop(ctx, i, ws[i], start, end, fail) })
	}
	wg.Wait()
	user, sys := cpuNow()
	endWindow()
	p := mergeWorkers(ws, set, start, end)
	p.cpuUser, p.cpuSys = user-user0, sys-sys0
	if fail.err == nil && parent.Err() != nil {
		fail.err = parent.Err()
	}
	return p, fail.err
}

func closedPhase(parent context.Context, clock Clock, ops []TimedOp, d, interval time.Duration, window func() func()) (phase, error) {
	loop := func(ctx context.Context, i int, w *worker, _, end time.Time, fail *firstError) {
		defer w.recordPending()
		for ctx.Err() == nil {
			begin := clock.Now()
			if !begin.Before(end) {
				return
			}
			if err := ops[i](ctx, begin); err != nil {
				fail.set(err)
				return
			}
			done := clock.Now()
			w.complete(done, done.Sub(begin))
			w.messages++
			w.lastDone = done
		}
	}
	return runWorkers(parent, clock, len(ops), false, d, interval, window, loop)
}

// openPhase is the open loop, wrk2's design: worker w owns its own share of
// the schedule (NewWorkerSchedule), sleeps until each of its intended
// times and runs the request itself — no queue and no hand-off between
// goroutines per request. A worker still busy when its next arrival is due
// starts it late, and the wait counts in that arrival's latency (no
// coordinated omission). Arrivals not started by the deadline (the window's
// end + spec.Grace) are recorded at (deadline − intended): every arrival of
// the window is either served or recorded.
func openPhase(parent context.Context, spec Spec, clock Clock, ops []TimedOp) (phase, error) {
	scheds := make([]*Schedule, len(ops))
	for i := range ops {
		var err error
		if scheds[i], err = NewWorkerSchedule(spec.Arrival, spec.RatePerSec, spec.Seed, i, len(ops)); err != nil {
			return phase{}, err
		}
	}
	// Each worker's sleeper is made before the window opens, as the
	// workers are (runWorkers).
	sleeps := make([]func(context.Context, time.Time), len(ops))
	for i := range sleeps {
		sleeps[i] = clock.SleepUntil
		if _, real := clock.(RealClock); real {
			if s, err := newPreciseSleeper(); err == nil {
				defer s.Close()
				sleeps[i] = s.SleepUntil
			}
		}
	}
	loop := func(ctx context.Context, i int, w *worker, start, end time.Time, fail *firstError) {
		w.runOpen(ctx, clock, sleeps[i], scheds[i], ops[i], start, end, end.Add(spec.Grace()), fail)
	}
	return runWorkers(parent, clock, len(ops), true, spec.Duration, spec.SeriesInterval, spec.Window, loop)
}

// runOpen is one open-loop worker.
func (w *worker) runOpen(ctx context.Context, clock Clock, sleep func(context.Context, time.Time), sched *Schedule, op TimedOp,
	start, end, deadline time.Time, fail *firstError) {
	window := end.Sub(start)
	quarterOf := func(intended time.Time) int {
		return min(int(int64(quarters)*int64(intended.Sub(start))/int64(window)), quarters-1)
	}
	for ctx.Err() == nil {
		intended := start.Add(sched.Next())
		if !intended.Before(end) {
			return
		}
		w.arrivals++
		now := clock.Now()
		if now.Before(intended) {
			sleep(ctx, intended)
			if ctx.Err() != nil {
				return
			}
			now = clock.Now()
			w.lag.Record(now.Sub(intended))
		}
		if !now.Before(deadline) {
			// Too late to start: this arrival and every later one of this
			// worker's share are recorded at the deadline.
			for {
				w.recordUnstarted(deadline.Sub(intended), quarterOf(intended))
				if intended = start.Add(sched.Next()); !intended.Before(end) {
					return
				}
				w.arrivals++
			}
		}
		w.lastIntended, w.lastStart = intended, now
		if err := op(ctx, intended); err != nil {
			fail.set(err)
			return
		}
		done := clock.Now()
		w.service.Record(done.Sub(now))
		w.latency.Record(done.Sub(intended))
		w.quarter[quarterOf(intended)].Record(done.Sub(intended))
		w.series.record(done, done.Sub(intended))
		w.messages++
		w.lastDone = done
	}
}

func (w *worker) recordUnstarted(d time.Duration, q int) {
	w.unstarted++
	w.latency.Record(d)
	w.quarter[q].Record(d)
}
