package load

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Workload names.
type Workload string

const (
	// Throughput is the closed loop: Producers goroutines, each starting its
	// next request when the previous one returns.
	Throughput Workload = "throughput"
	// Latency is the open loop: requests start at scheduled times whatever
	// happened to the previous ones.
	Latency Workload = "latency"
)

// QueueBound is how many open-loop arrivals may wait for a free worker; an
// arrival that finds the queue full is dropped (counted, never sent).
const QueueBound = 1 << 16

// Spec is a workload definition. The store, every backend and every peer run
// the same Spec.
type Spec struct {
	Workload  Workload `json:"workload"`
	SizeBytes int      `json:"sizeBytes"`
	// Producers is the closed loop's goroutine count.
	Producers int `json:"producers"`
	// InFlight is the open loop's worker count: at most this many requests
	// are outstanding; later arrivals wait in a queue (their wait counts in
	// their latency).
	InFlight int           `json:"inFlight,omitempty"`
	Duration time.Duration `json:"durationNs"`
	// Warmup runs the same load first, unmeasured.
	Warmup     time.Duration `json:"warmupNs"`
	RatePerSec float64       `json:"ratePerSec,omitempty"`
	Arrival    Arrival       `json:"arrival,omitempty"`
	Seed       uint64        `json:"seed"`
	// SeriesInterval, when > 0, also keeps a latency time series of the
	// measured window at this interval (Result.Series).
	SeriesInterval time.Duration `json:"seriesIntervalNs,omitempty"`
}

// Validate checks the spec.
func (s Spec) Validate() error {
	switch {
	case s.SizeBytes <= 0:
		return fmt.Errorf("spec: size %d bytes: want > 0", s.SizeBytes)
	case s.Duration <= 0:
		return fmt.Errorf("spec: duration %v: want > 0", s.Duration)
	case s.Warmup < 0:
		return fmt.Errorf("spec: warmup %v is negative", s.Warmup)
	}
	switch s.Workload {
	case Throughput:
		if s.Producers <= 0 {
			return fmt.Errorf("spec: %d producers: want > 0", s.Producers)
		}
	case Latency:
		if s.InFlight <= 0 {
			return fmt.Errorf("spec: %d in flight: want > 0", s.InFlight)
		}
		if _, err := NewSchedule(s.Arrival, s.RatePerSec, s.Seed); err != nil {
			return fmt.Errorf("spec: %w", err)
		}
	default:
		return fmt.Errorf("spec: workload %q: want throughput or latency", s.Workload)
	}
	return nil
}

// Workers is the number of goroutines (and so of prepared ops) the spec uses.
func (s Spec) Workers() int {
	if s.Workload == Latency {
		return s.InFlight
	}
	return s.Producers
}

// Op performs one request (one message append). Each worker has its own Op,
// built once before the run, so an Op may reuse its message.
type Op func(ctx context.Context) error

// Result is what one run of a Spec measured (the warm-up excluded).
type Result struct {
	Workload     Workload `json:"workload"`
	Messages     int64    `json:"messages"`
	PayloadBytes int64    `json:"payloadBytes"`
	ElapsedNs    int64    `json:"elapsedNs"`
	CPUUserNs    int64    `json:"cpuUserNs"`
	CPUSysNs     int64    `json:"cpuSysNs"`
	Mallocs      uint64   `json:"mallocs"`
	// Open loop: arrivals scheduled in the window, and those dropped (queue
	// full, or not started within a tenth of the window after it closed).
	TargetRatePerSec float64 `json:"targetRatePerSec,omitempty"`
	Arrivals         int64   `json:"arrivals,omitempty"`
	Dropped          int64   `json:"dropped,omitempty"`
	// Service is completion − actual start, per request.
	Service *Histogram `json:"service"`
	// Latency is completion − intended start (open loop only).
	Latency *Histogram `json:"latency,omitempty"`
	// DispatchLag is actual dispatch − intended start: the load generator's
	// own timing error (open loop only).
	DispatchLag *Histogram `json:"dispatchLag,omitempty"`
	// Series is the latency per Spec.SeriesInterval of the window.
	Series []SeriesPoint `json:"series,omitempty"`
	// Delivery is the e2e workload's store-to-delivery latency (delivery −
	// the start of the message's Put); Delivered counts those deliveries.
	Delivery    *Histogram `json:"delivery,omitempty"`
	Delivered   int64      `json:"delivered,omitempty"`
	Error       string     `json:"error,omitempty"`
	Interrupted bool       `json:"interrupted,omitempty"`
}

// Failed reports whether the run produced no trustworthy figure.
func (r *Result) Failed() bool { return r.Error != "" || r.Interrupted || r.Messages == 0 }

// MsgsPerSec is the completed messages per second of the window.
func (r *Result) MsgsPerSec() float64 { return perSec(float64(r.Messages), r.ElapsedNs) }

// MBPerSec is payload megabytes (10^6) per second.
func (r *Result) MBPerSec() float64 { return perSec(float64(r.PayloadBytes)/1e6, r.ElapsedNs) }

// CPUSecPerGiB is process CPU seconds (user+system) per GiB of payload.
func (r *Result) CPUSecPerGiB() float64 {
	if r.PayloadBytes == 0 {
		return 0
	}
	return float64(r.CPUUserNs+r.CPUSysNs) / 1e9 / (float64(r.PayloadBytes) / (1 << 30))
}

// AllocsPerMsg is heap allocations (the whole process's) per message.
func (r *Result) AllocsPerMsg() float64 {
	if r.Messages == 0 {
		return 0
	}
	return float64(r.Mallocs) / float64(r.Messages)
}

func perSec(v float64, ns int64) float64 {
	if ns <= 0 {
		return 0
	}
	return v / (float64(ns) / 1e9)
}

// Run runs spec: the warm-up, then the measured window. newOp builds each
// worker's Op. A failing Op stops the run; Result.Error says why. When ctx
// is cancelled the run stops and Result.Interrupted is set.
func Run(ctx context.Context, spec Spec, clock Clock, newOp func(worker int) Op) Result {
	res := Result{Workload: spec.Workload, TargetRatePerSec: spec.RatePerSec}
	if err := spec.Validate(); err != nil {
		res.Error = err.Error()
		return res
	}
	if clock == nil {
		clock = RealClock{}
	}
	ops := make([]Op, spec.Workers())
	for i := range ops {
		ops[i] = newOp(i)
	}
	if spec.Warmup > 0 {
		warm := spec
		warm.SeriesInterval = 0
		if _, err := runPhase(ctx, warm, clock, ops, spec.Warmup); err != nil {
			res.setError(ctx, fmt.Errorf("warm-up: %w", err))
			return res
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	userBefore, sysBefore := cpuTimes()
	ph, err := runPhase(ctx, spec, clock, ops, spec.Duration)
	userAfter, sysAfter := cpuTimes()
	runtime.ReadMemStats(&after)
	res.Messages, res.ElapsedNs = ph.messages, ph.elapsed.Nanoseconds()
	res.PayloadBytes = ph.messages * int64(spec.SizeBytes)
	res.CPUUserNs, res.CPUSysNs = int64(userAfter-userBefore), int64(sysAfter-sysBefore)
	res.Mallocs = after.Mallocs - before.Mallocs
	res.Service, res.Latency, res.DispatchLag = ph.service, ph.latency, ph.lag
	res.Arrivals, res.Dropped = ph.arrivals, ph.dropped
	res.Series = ph.series
	if err != nil {
		res.setError(ctx, err)
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
	messages          int64
	elapsed           time.Duration
	service, latency  *Histogram
	lag               *Histogram
	arrivals, dropped int64
	series            []SeriesPoint
}

// firstError keeps the first error of a phase and cancels it.
type firstError struct {
	once   sync.Once
	err    error
	cancel context.CancelFunc
}

func (f *firstError) set(err error) {
	f.once.Do(func() { f.err = err; f.cancel() })
}

func runPhase(ctx context.Context, spec Spec, clock Clock, ops []Op, d time.Duration) (phase, error) {
	if spec.Workload == Latency {
		return openPhase(ctx, spec, clock, ops, d)
	}
	return closedPhase(ctx, clock, ops, d, spec.SeriesInterval)
}

// worker is one goroutine's private counters and histograms.
type worker struct {
	messages int64
	lastDone time.Time
	service  *Histogram
	latency  *Histogram
	series   *series
}

func newWorkers(n int, open bool, start time.Time, interval time.Duration) []*worker {
	ws := make([]*worker, n)
	for i := range ws {
		ws[i] = &worker{service: NewHistogram(), series: newSeries(start, interval)}
		if open {
			ws[i].latency = NewHistogram()
		}
	}
	return ws
}

// merge folds the workers into a phase: histograms merged, the window ending
// at the last completion (or at end, whichever is later).
func merge(ws []*worker, start, end time.Time) phase {
	p := phase{service: NewHistogram()}
	last := end
	ss := make([]*series, 0, len(ws))
	for _, w := range ws {
		ss = append(ss, w.series)
		p.messages += w.messages
		p.service.Merge(w.service)
		if w.latency != nil {
			if p.latency == nil {
				p.latency = NewHistogram()
			}
			p.latency.Merge(w.latency)
		}
		if w.lastDone.After(last) {
			last = w.lastDone
		}
	}
	p.elapsed = last.Sub(start)
	if len(ss) > 0 && ss[0] != nil {
		p.series = mergeSeries(ss)
	}
	return p
}

func closedPhase(parent context.Context, clock Clock, ops []Op, d, interval time.Duration) (phase, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	fail := &firstError{cancel: cancel}
	start := clock.Now()
	ws := newWorkers(len(ops), false, start, interval)
	end := start.Add(d)
	var wg sync.WaitGroup
	for i, op := range ops {
		wg.Add(1)
		go func(w *worker) {
			defer wg.Done()
			for ctx.Err() == nil {
				begin := clock.Now()
				if !begin.Before(end) {
					return
				}
				if err := op(ctx); err != nil {
					fail.set(err)
					return
				}
				done := clock.Now()
				w.service.Record(done.Sub(begin))
				w.series.record(done, done.Sub(begin))
				w.messages++
				w.lastDone = done
			}
		}(ws[i])
	}
	wg.Wait()
	p := merge(ws, start, end)
	if fail.err == nil && parent.Err() != nil {
		fail.err = parent.Err()
	}
	return p, fail.err
}

func openPhase(parent context.Context, spec Spec, clock Clock, ops []Op, d time.Duration) (phase, error) {
	sched, err := NewSchedule(spec.Arrival, spec.RatePerSec, spec.Seed)
	if err != nil {
		return phase{}, err
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	fail := &firstError{cancel: cancel}
	queue := make(chan time.Time, QueueBound)
	start := clock.Now()
	ws := newWorkers(len(ops), true, start, spec.SeriesInterval)
	end := start.Add(d)
	// Arrivals released before end may start up to d/10 after it
	// (the last ones are released a few microseconds before end); later
	// than that they count as dropped: the store was not keeping up.
	startBy := end.Add(d / 10)
	var late atomic.Int64 // arrivals not started by startBy
	var wg sync.WaitGroup
	for i, op := range ops {
		wg.Add(1)
		go func(w *worker) {
			defer wg.Done()
			for intended := range queue {
				if ctx.Err() != nil {
					continue // drain
				}
				begin := clock.Now()
				if !begin.Before(startBy) {
					late.Add(1)
					continue
				}
				if err := op(ctx); err != nil {
					fail.set(err)
					continue
				}
				done := clock.Now()
				w.service.Record(done.Sub(begin))
				w.latency.Record(done.Sub(intended))
				w.series.record(done, done.Sub(intended))
				w.messages++
				w.lastDone = done
			}
		}(ws[i])
	}
	lag := NewHistogram()
	dispatchClock := clock
	if _, real := clock.(RealClock); real {
		if s, err := newPreciseSleeper(); err == nil {
			defer s.Close()
			dispatchClock = preciseClock{s}
		}
	}
	arrivals, full := Dispatch(ctx, dispatchClock, sched, start, end, lag, func(intended time.Time) bool {
		select {
		case queue <- intended:
			return true
		default:
			return false
		}
	})
	close(queue)
	wg.Wait()
	p := merge(ws, start, end)
	p.lag, p.arrivals, p.dropped = lag, arrivals, full+late.Load()
	if fail.err == nil && parent.Err() != nil {
		fail.err = parent.Err()
	}
	return p, fail.err
}

// Dispatch releases the arrivals of sched whose intended start falls in
// [start, end): it waits for each intended time, records how late it
// released it in lag, and hands it to send. It returns the arrivals
// released and how many send refused (a full queue). It stops early when
// ctx is done.
func Dispatch(ctx context.Context, clock Clock, sched *Schedule, start, end time.Time, lag *Histogram,
	send func(intended time.Time) bool) (arrivals, refused int64) {
	for ctx.Err() == nil {
		intended := start.Add(sched.Next())
		if !intended.Before(end) {
			break
		}
		clock.SleepUntil(ctx, intended)
		if ctx.Err() != nil {
			break
		}
		lag.Record(clock.Now().Sub(intended))
		arrivals++
		if !send(intended) {
			refused++
		}
	}
	return arrivals, refused
}

// preciseClock is RealClock with a precise sleeper.
type preciseClock struct{ sleeper }

func (preciseClock) Now() time.Time { return time.Now() }
