package load

import (
	"context"
	"fmt"
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

// Spec is a workload definition. The store, every backend and every peer run
// the same Spec.
type Spec struct {
	Workload  Workload `json:"workload"`
	SizeBytes int      `json:"sizeBytes"`
	// Producers is the closed loop's goroutine count.
	Producers int `json:"producers"`
	// InFlight is the open loop's worker count: each worker owns 1/InFlight
	// of the schedule, so at most this many requests are outstanding; an
	// arrival whose worker is still busy starts late, and its wait counts
	// in its latency.
	InFlight int           `json:"inFlight,omitempty"`
	Duration time.Duration `json:"durationNs"`
	// Warmup runs the same load first, unmeasured.
	Warmup     time.Duration `json:"warmupNs"`
	RatePerSec float64       `json:"ratePerSec,omitempty"`
	Arrival    Arrival       `json:"arrival,omitempty"`
	// Seed seeds the Poisson arrivals (worker w uses the stream (Seed, w)).
	// The harness derives it from the run's seed and the repeat index, so
	// every backend and peer sees the same arrivals in the same repeat.
	Seed uint64 `json:"seed"`
	// SeriesInterval, when > 0, also keeps a latency time series of the
	// measured window at this interval (Result.Series).
	SeriesInterval time.Duration `json:"seriesIntervalNs,omitempty"`
	// Window, when set, is called as the measured window opens — after the
	// warm-up and the GC before the window, just before the window's CPU is
	// first read — and the function it returns when the last worker has
	// returned, just after the CPU is read again and before the workers'
	// histograms are merged: a profiler started and stopped there sees
	// exactly the CPU the Result counts. The warm-up does not call it.
	Window func() (end func()) `json:"-"`
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
	case s.SeriesInterval < 0:
		return fmt.Errorf("spec: series interval %v is negative", s.SeriesInterval)
	case s.Workload != Throughput && s.Workload != Latency:
		return fmt.Errorf("spec: workload %q: want throughput or latency", s.Workload)
	case s.Workload == Throughput && s.Producers <= 0:
		return fmt.Errorf("spec: %d producers: want > 0", s.Producers)
	case s.Workload == Latency && s.InFlight <= 0:
		return fmt.Errorf("spec: %d in flight: want > 0", s.InFlight)
	}
	if s.Workload == Latency {
		if _, err := NewSchedule(s.Arrival, s.RatePerSec, s.Seed); err != nil {
			return fmt.Errorf("spec: %w", err)
		}
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

// Grace is how long after the window's end the open loop still starts
// arrivals scheduled inside the window: a tenth of the window. An arrival
// not started by then is recorded as unstarted, at (deadline − intended).
func (s Spec) Grace() time.Duration { return s.Duration / 10 }

// Op performs one request (one message append). Each worker has its own Op,
// built once before the run, so an Op may reuse its message.
type Op func(ctx context.Context) error

// TimedOp is an Op that is told the request's intended start (the open
// loop's scheduled time; the actual start in the closed loop), for
// workloads that carry it in the message (e2e stamps it in the body).
type TimedOp func(ctx context.Context, intended time.Time) error

// Durability is implemented by a system under test that can tell how many
// record bytes it has accepted and how many of them are durable.
type Durability interface {
	// Positions returns monotonic byte counts since open: written (accepted)
	// and durable (synced/flushed). durable <= written.
	Positions() (writtenBytes, durableBytes int64)
	// Drain makes every written byte durable and returns when it is.
	Drain(ctx context.Context) error
}
