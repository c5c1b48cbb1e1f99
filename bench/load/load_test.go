package load

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// within reports whether got is within rel of want (HdrHistogram's 3
// significant digits: 0.1 %).
func within(got, want int64, rel float64) bool {
	return math.Abs(float64(got-want)) <= rel*float64(want)+1
}

func TestHistogramQuantilesKnownInput(t *testing.T) {
	h := NewHistogram()
	for v := int64(1); v <= 10000; v++ {
		h.Record(time.Duration(v) * time.Microsecond)
	}
	p := h.Percentiles()
	cases := []struct {
		name      string
		got, want int64
	}{
		{"p50", p.P50Ns, 5000_000}, {"p90", p.P90Ns, 9000_000}, {"p99", p.P99Ns, 9900_000},
		{"p99.9", p.P999Ns, 9990_000}, {"p99.99", p.P9999Ns, 9999_000}, {"max", p.MaxNs, 10000_000},
	}
	for _, c := range cases {
		if !within(c.got, c.want, 0.001) {
			t.Errorf("%s = %d ns, want %d ±0.1%%", c.name, c.got, c.want)
		}
	}
	if p.Count != 10000 {
		t.Errorf("count = %d, want 10000", p.Count)
	}
	if !within(int64(p.MeanNs), 5000_500, 0.001) {
		t.Errorf("mean = %v, want 5000500 ±0.1%%", p.MeanNs)
	}
}

func TestHistogramMergeEqualsSingle(t *testing.T) {
	// Four "goroutines" record disjoint parts of 1..4000 µs; the merge must
	// hold exactly what one histogram fed everything holds.
	parts := make([]*Histogram, 4)
	all := NewHistogram()
	for i := range parts {
		parts[i] = NewHistogram()
	}
	for v := 1; v <= 4000; v++ {
		d := time.Duration(v) * time.Microsecond
		parts[v%4].Record(d)
		all.Record(d)
	}
	m := Merged(parts...)
	if !m.Equal(all) {
		t.Fatal("merged histogram differs from the single one")
	}
	if m.Count() != 4000 || !within(m.Quantile(0.5), 2000_000, 0.001) || !within(m.Quantile(0.75), 3000_000, 0.001) {
		t.Fatalf("merged: count %d p50 %d p75 %d", m.Count(), m.Quantile(0.5), m.Quantile(0.75))
	}
}

func TestHistogramTailAndClamp(t *testing.T) {
	// 999 fast values and one slow one: p99.9 is still fast, max is slow.
	h := NewHistogram()
	for range 999 {
		h.Record(100 * time.Microsecond)
	}
	h.Record(2 * time.Hour) // clamped to a minute
	h.Record(-5)            // clamped to 1 ns
	if got := h.Quantile(0.99); !within(got, 100_000, 0.001) {
		t.Errorf("p99 = %d", got)
	}
	if got := h.Max(); !within(got, int64(time.Minute), 0.001) {
		t.Errorf("max = %d, want a minute", got)
	}
	if NewHistogram().Percentiles() != (Percentiles{}) {
		t.Error("empty histogram has figures")
	}
}

func TestHistogramJSONRoundTrip(t *testing.T) {
	h := NewHistogram()
	for v := 1; v < 5000; v += 7 {
		h.Record(time.Duration(v*v) * time.Nanosecond)
	}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), `"HISTF`) {
		t.Errorf("not the standard base64 V2 encoding: %.20s", b)
	}
	var back Histogram
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !back.Equal(h) {
		t.Fatal("histogram changed in a JSON round trip")
	}
	var sb strings.Builder
	if err := back.WriteHgrm(&sb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "1/(1-Percentile)") || !strings.Contains(sb.String(), "#[Max") {
		t.Errorf("hgrm output lacks HdrHistogram's header or footer:\n%s", sb.String())
	}
}

func TestScheduleConstant(t *testing.T) {
	s, err := NewSchedule(Constant, 4000, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100_000 {
		want := time.Duration(float64(i) * 250_000)
		if got := s.Next(); got != want {
			t.Fatalf("arrival %d at %v, want %v", i, got, want)
		}
	}
}

func TestSchedulePoisson(t *testing.T) {
	const rate, n = 10_000.0, 200_000
	a, _ := NewSchedule(Poisson, rate, 42)
	b, _ := NewSchedule(Poisson, rate, 42)
	c, _ := NewSchedule(Poisson, rate, 43)
	var prev, last time.Duration
	var sumSq float64
	differs := false
	for i := range n {
		at := a.Next()
		if at != b.Next() {
			t.Fatalf("arrival %d differs between two schedules with the same seed", i)
		}
		if at != c.Next() {
			differs = true
		}
		if at < prev {
			t.Fatalf("arrival %d goes back in time", i)
		}
		gap := float64(at-prev) / 1e3 // µs
		sumSq += gap * gap
		prev, last = at, at
	}
	if !differs {
		t.Error("different seeds gave the same arrivals")
	}
	// Mean gap 100 µs; for an exponential, E[gap²] = 2·mean². With 200k
	// samples the relative standard error of the mean is 0.22 %: 2 % is
	// ~9 standard errors.
	mean := float64(last) / 1e3 / n
	if math.Abs(mean-100) > 2 {
		t.Errorf("mean gap %.2f µs, want 100 ±2", mean)
	}
	if second := sumSq / n; math.Abs(second-20000) > 0.05*20000 {
		t.Errorf("E[gap²] = %.0f µs², want 20000 ±5%% (exponential)", second)
	}
	if _, err := NewSchedule(Poisson, 0, 1); err == nil {
		t.Error("rate 0 accepted")
	}
	if _, err := NewSchedule("burst", 10, 1); err == nil {
		t.Error("unknown arrival accepted")
	}
}

// fakeClock is a manual clock: SleepUntil jumps to the target time.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) SleepUntil(_ context.Context, t time.Time) { c.advanceTo(t) }

func (c *fakeClock) advanceTo(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestDispatchReleasesAtIntendedTimes(t *testing.T) {
	start := time.Unix(1000, 0)
	clock := &fakeClock{now: start}
	sched, _ := NewSchedule(Constant, 1000, 1) // every ms
	lag := NewHistogram()
	var released []time.Duration
	n := 0
	arrivals, refused := Dispatch(context.Background(), clock, sched, start, start.Add(10*time.Millisecond), lag,
		func(intended time.Time) bool {
			if now := clock.Now(); now.Before(intended) {
				t.Errorf("released at %v, before its intended %v", now.Sub(start), intended.Sub(start))
			}
			released = append(released, intended.Sub(start))
			n++
			if n == 3 {
				clock.advance(5500 * time.Microsecond) // the consumer stalls: dispatch falls behind
			}
			return n%4 != 0 // every 4th finds the queue full
		})
	if arrivals != 10 || refused != 2 {
		t.Fatalf("arrivals %d refused %d, want 10 and 2", arrivals, refused)
	}
	for i, at := range released {
		if at != time.Duration(i)*time.Millisecond {
			t.Errorf("arrival %d intended at %v, want %d ms: a stall must not shift the schedule", i, at, i)
		}
	}
	// Arrivals 3..8 were released late by the stall (at 7.5 ms): lags of
	// 4.5, 3.5, 2.5, 1.5, 0.5 ms and 0; the others on time.
	if got := lag.Max(); !within(got, 4_500_000, 0.001) {
		t.Errorf("max dispatch lag %d ns, want 4.5 ms", got)
	}
	if lag.Count() != 10 {
		t.Errorf("lag count %d", lag.Count())
	}
}

func TestOpenLoopLatencyCountsQueueing(t *testing.T) {
	// One worker, 1000 arrivals/s, each request takes 3 ms of fake time: the
	// system is three times overloaded. Arrival i is intended at i ms but
	// starts at 3i ms: latency 2i+3 ms while service stays 3 ms.
	start := time.Unix(2000, 0)
	clock := &fakeClock{now: start}
	spec := Spec{Workload: Latency, SizeBytes: 100, InFlight: 1, Duration: 10 * time.Millisecond,
		RatePerSec: 1000, Arrival: Constant}
	res := Run(context.Background(), spec, clock, func(int) Op {
		return func(context.Context) error { clock.advance(3 * time.Millisecond); return nil }
	})
	if res.Error != "" {
		t.Fatal(res.Error)
	}
	// The dispatcher and the worker share the fake clock, so which arrivals
	// start before 10 ms depends on scheduling; what cannot change: service
	// is exactly 3 ms, latency ≥ service, and every arrival is either
	// completed or dropped.
	if res.Arrivals != 10 || res.Messages+res.Dropped != res.Arrivals {
		t.Fatalf("arrivals %d messages %d dropped %d", res.Arrivals, res.Messages, res.Dropped)
	}
	if res.Dropped == 0 {
		t.Error("a 3× overload dropped nothing")
	}
	if s := res.Service.Percentiles(); !within(s.P50Ns, 3e6, 0.001) || !within(s.MaxNs, 3e6, 0.001) {
		t.Errorf("service %+v, want 3 ms", s)
	}
	if res.Latency.Max() <= res.Service.Max() {
		t.Errorf("latency max %d ≤ service max %d: queueing is hidden", res.Latency.Max(), res.Service.Max())
	}
}

func TestOpenLoopRealClock(t *testing.T) {
	// 2000 arrivals/s for 300 ms against a fast op: nothing dropped, the
	// achieved rate is the target, latency ≈ service.
	spec := Spec{Workload: Latency, SizeBytes: 64, InFlight: 4, Duration: 300 * time.Millisecond,
		RatePerSec: 2000, Arrival: Poisson, Seed: 7}
	res := Run(context.Background(), spec, nil, func(int) Op { return func(context.Context) error { return nil } })
	if res.Failed() {
		t.Fatalf("failed: %+v", res.Error)
	}
	if res.Dropped != 0 {
		t.Errorf("dropped %d of %d", res.Dropped, res.Arrivals)
	}
	if got := res.MsgsPerSec(); math.Abs(got-2000) > 300 {
		t.Errorf("achieved %.0f/s, want ~2000 (Poisson over 300 ms)", got)
	}
	if res.Latency.Count() != res.Messages || res.Service.Count() != res.Messages {
		t.Error("histogram counts differ from messages")
	}
}

func TestClosedLoopCountsAndFigures(t *testing.T) {
	spec := Spec{Workload: Throughput, SizeBytes: 1024, Producers: 3, Duration: 100 * time.Millisecond, Warmup: 20 * time.Millisecond}
	var mu sync.Mutex
	calls := 0
	res := Run(context.Background(), spec, nil, func(int) Op {
		return func(context.Context) error {
			mu.Lock()
			calls++
			mu.Unlock()
			time.Sleep(100 * time.Microsecond)
			return nil
		}
	})
	if res.Failed() {
		t.Fatalf("failed: %s", res.Error)
	}
	if res.Messages == 0 || res.Messages >= int64(calls) {
		t.Errorf("messages %d of %d calls: the warm-up must be excluded", res.Messages, calls)
	}
	if res.PayloadBytes != res.Messages*1024 || res.Service.Count() != res.Messages {
		t.Errorf("bytes %d, histogram %d, messages %d", res.PayloadBytes, res.Service.Count(), res.Messages)
	}
	if res.ElapsedNs < int64(100*time.Millisecond) {
		t.Errorf("elapsed %v shorter than the window", time.Duration(res.ElapsedNs))
	}
	if res.Service.Quantile(0.5) < int64(100*time.Microsecond) {
		t.Errorf("p50 service %d ns below the op's sleep", res.Service.Quantile(0.5))
	}
}

func TestRunStopsOnErrorAndInterrupt(t *testing.T) {
	boom := errors.New("disk on fire")
	spec := Spec{Workload: Throughput, SizeBytes: 10, Producers: 2, Duration: time.Minute}
	n := 0
	var mu sync.Mutex
	res := Run(context.Background(), spec, nil, func(int) Op {
		return func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			if n++; n > 100 {
				return boom
			}
			return nil
		}
	})
	if !strings.Contains(res.Error, "disk on fire") || res.Interrupted || !res.Failed() {
		t.Errorf("error %q interrupted %v", res.Error, res.Interrupted)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	res = Run(ctx, spec, nil, func(int) Op {
		return func(ctx context.Context) error { return ctx.Err() }
	})
	if !res.Interrupted || !res.Failed() {
		t.Errorf("cancelled run: %+v", res.Error)
	}
}

func TestCPUAndAllocFigures(t *testing.T) {
	r := Result{Messages: 1000, PayloadBytes: 1 << 30, CPUUserNs: 1.5e9, CPUSysNs: 0.5e9, Mallocs: 2500, ElapsedNs: 2e9}
	if r.CPUSecPerGiB() != 2 || r.AllocsPerMsg() != 2.5 || r.MsgsPerSec() != 500 || math.Abs(r.MBPerSec()-536.870912) > 1e-9 {
		t.Errorf("cpu %v allocs %v msgs %v MB %v", r.CPUSecPerGiB(), r.AllocsPerMsg(), r.MsgsPerSec(), r.MBPerSec())
	}
}
