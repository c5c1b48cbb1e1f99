package load

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"time"
)

// Arrival is how open-loop requests are spaced.
type Arrival string

const (
	// Constant: one request every 1/rate.
	Constant Arrival = "constant"
	// Poisson: exponentially distributed gaps with mean 1/rate (a seeded
	// generator, so a run is reproducible).
	Poisson Arrival = "poisson"
)

// ParseArrival parses "constant" or "poisson".
func ParseArrival(s string) (Arrival, error) {
	switch Arrival(s) {
	case Constant, Poisson:
		return Arrival(s), nil
	}
	return "", fmt.Errorf("arrival %q: want constant or poisson", s)
}

// Schedule yields the intended start of each request as an offset from the
// start of the run. It is a pure function of (arrival, rate, seed, stream).
type Schedule struct {
	arrival  Arrival
	gapNs    float64 // mean gap
	phaseNs  float64 // constant arrivals: the first one's offset
	rng      *rand.Rand
	sum      float64 // ns, kept in float so constant gaps do not drift
	sequence int64
}

// NewSchedule returns the schedule of requests at ratePerSec (one stream).
func NewSchedule(arrival Arrival, ratePerSec float64, seed uint64) (*Schedule, error) {
	return NewWorkerSchedule(arrival, ratePerSec, seed, 0, 1)
}

// NewWorkerSchedule returns worker's share of the schedule of requests at
// ratePerSec split among workers: constant arrivals are interleaved (worker
// w takes arrivals w, w+workers, w+2·workers, … of the single constant
// schedule), Poisson arrivals are independent Poisson streams of
// ratePerSec/workers each, seeded (seed, w) — their superposition is a
// Poisson process of ratePerSec.
func NewWorkerSchedule(arrival Arrival, ratePerSec float64, seed uint64, worker, workers int) (*Schedule, error) {
	if !(ratePerSec > 0) || math.IsInf(ratePerSec, 0) {
		return nil, fmt.Errorf("schedule: rate %v per second: want a positive rate", ratePerSec)
	}
	if _, err := ParseArrival(string(arrival)); err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	if workers <= 0 || worker < 0 || worker >= workers {
		return nil, fmt.Errorf("schedule: worker %d of %d", worker, workers)
	}
	return &Schedule{arrival: arrival, gapNs: float64(workers) * 1e9 / ratePerSec, phaseNs: float64(worker) * 1e9 / ratePerSec,
		rng: rand.New(rand.NewPCG(seed, 0x6d7162656e6368+uint64(worker)))}, nil
}

// Next returns the intended start of the next request. Constant arrivals are
// at phase + i·gap exactly (worker 0's first at 0); Poisson arrivals start
// after a first exponential gap.
func (s *Schedule) Next() time.Duration {
	if s.arrival == Poisson {
		s.sum += s.rng.ExpFloat64() * s.gapNs
	} else {
		s.sum = s.phaseNs + float64(s.sequence)*s.gapNs
	}
	s.sequence++
	return time.Duration(s.sum)
}

// Clock is the time source of a run; tests inject a fake one.
type Clock interface {
	Now() time.Time
	// SleepUntil returns when Now() ≥ t or ctx is done.
	SleepUntil(ctx context.Context, t time.Time)
}

// spinBelow: waits shorter than this spin (yielding) instead of sleeping:
// putting a goroutine to sleep and waking it costs about this much.
const spinBelow = 20 * time.Microsecond

// sleeper is a Clock's sleeping half with resources to release.
type sleeper interface {
	SleepUntil(ctx context.Context, t time.Time)
	Close() error
}

// RealClock is the wall clock (monotonic). Its own SleepUntil uses Go's
// timers; each open-loop worker sleeps on its own timerfd instead where the
// platform has one (see timerfdSleeper), because Go's timers can wake a
// millisecond late and that lateness would count in every latency.
type RealClock struct{}

// Now returns the time now, with its monotonic reading. It reads one
// clock where time.Now reads two (the wall clock and the monotonic one): a
// closed loop reads it twice a message, and on the reference VM
// (kvm-clock) time.Now takes 56 ns against 38 here. The wall part is the
// process's first reading plus the monotonic time since — the same as
// time.Now's unless the wall clock was stepped meanwhile; the loop only
// subtracts readings, which use the monotonic part either way.
func (RealClock) Now() time.Time { return clockBase.Add(time.Since(clockBase)) }

// clockBase is RealClock's first reading.
var clockBase = time.Now()

// SleepUntil sleeps until t.
func (RealClock) SleepUntil(ctx context.Context, t time.Time) {
	sleepUntil(ctx, t, func(left time.Duration) {
		timer := time.NewTimer(left)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
		}
	})
}

// sleepUntil returns when t has come or ctx is done: it waits with wait
// (which may return early) while more than spinBelow is left, then spins,
// yielding, for the last few microseconds.
func sleepUntil(ctx context.Context, t time.Time, wait func(left time.Duration)) {
	for ctx.Err() == nil {
		left := time.Until(t)
		if left <= 0 {
			return
		}
		if left < spinBelow {
			for time.Now().Before(t) {
				runtime.Gosched()
			}
			return
		}
		wait(left)
	}
}
