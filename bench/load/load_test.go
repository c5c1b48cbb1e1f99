package load

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

func TestWorkerSchedulesShareTheSchedule(t *testing.T) {
	// Constant arrivals: the workers' shares interleave into the single
	// schedule exactly.
	const workers = 4
	var all []time.Duration
	for w := range workers {
		s, err := NewWorkerSchedule(Constant, 1000, 1, w, workers)
		if err != nil {
			t.Fatal(err)
		}
		for range 25 {
			all = append(all, s.Next())
		}
	}
	slices.Sort(all)
	for i, at := range all {
		if at != time.Duration(i)*time.Millisecond {
			t.Fatalf("arrival %d at %v, want %d ms", i, at, i)
		}
	}
	// Poisson: four streams of rate/4 superpose to the rate; one seed gives
	// the same streams again, and the streams differ from each other.
	const rate, horizon = 20_000.0, 10 * time.Second
	count := 0
	firsts := map[time.Duration]bool{}
	for w := range workers {
		a, _ := NewWorkerSchedule(Poisson, rate, 9, w, workers)
		b, _ := NewWorkerSchedule(Poisson, rate, 9, w, workers)
		first := a.Next()
		if first != b.Next() {
			t.Fatalf("worker %d: the same seed gave another schedule", w)
		}
		firsts[first] = true
		for at := first; at < horizon; at = a.Next() {
			count++
		}
	}
	if len(firsts) != workers {
		t.Error("two workers' Poisson streams start at the same instant: they are not independent")
	}
	// 200 000 expected arrivals, standard deviation 447: 1 % is 4.5 sd.
	if want := rate * horizon.Seconds(); math.Abs(float64(count)-want) > 0.01*want {
		t.Errorf("%d arrivals in %v, want %.0f ±1%%", count, horizon, want)
	}
	if _, err := NewWorkerSchedule(Constant, 10, 1, 4, 4); err == nil {
		t.Error("worker 4 of 4 accepted")
	}
}

// TestOpenLoopSlowOpIsRecordedNotDropped: one worker, 1000 arrivals/s for
// 10 ms, each request takes 3 ms of fake time — three times too slow.
// Arrival i (intended at i ms) starts at 3i ms: latency 2i+3 ms. The
// deadline is 11 ms (window + a tenth): arrivals 0–3 start before it
// (latencies 3, 5, 7, 9 ms), arrivals 4–9 never start and are recorded at
// 11 − i ms (7, 6, 5, 4, 3, 2 ms). Nothing is dropped, and the run is
// saturated.
func TestOpenLoopSlowOpIsRecordedNotDropped(t *testing.T) {
	start := time.Unix(2000, 0)
	clock := &fakeClock{now: start}
	spec := Spec{Workload: Latency, SizeBytes: 100, InFlight: 1, Duration: 10 * time.Millisecond, RatePerSec: 1000, Arrival: Constant}
	res := Run(context.Background(), spec, clock, nil, func(int) Op {
		return func(context.Context) error { clock.advance(3 * time.Millisecond); return nil }
	})
	if res.Error != "" {
		t.Fatal(res.Error)
	}
	if res.Arrivals != 10 || res.Messages != 4 || res.Unstarted != 6 {
		t.Fatalf("arrivals %d messages %d unstarted %d, want 10, 4, 6", res.Arrivals, res.Messages, res.Unstarted)
	}
	if res.Latency.Count() != 10 || res.Service.Count() != 4 {
		t.Fatalf("latency has %d values, service %d: every arrival must be in latency, only served ones in service", res.Latency.Count(), res.Service.Count())
	}
	want := NewHistogram()
	for _, ms := range []int{3, 5, 7, 9, 7, 6, 5, 4, 3, 2} {
		want.Record(time.Duration(ms) * time.Millisecond)
	}
	if !res.Latency.Equal(want) {
		t.Errorf("latency %+v, want %+v", res.Latency.Percentiles(), want.Percentiles())
	}
	if s := res.Service.Percentiles(); !within(s.P50Ns, 3e6, 0.001) || !within(s.MaxNs, 3e6, 0.001) {
		t.Errorf("service %+v, want 3 ms", s)
	}
	if res.ElapsedNs != int64(12*time.Millisecond) {
		t.Errorf("elapsed %v, want 12 ms (the last completion)", time.Duration(res.ElapsedNs))
	}
	sat, why := res.Saturation()
	// Kept: 4 of 10 started, the last (intended at 3 ms) at 9 ms: 0.4 × 3/9.
	if k := res.KeptShare(); math.Abs(k-0.4/3) > 1e-9 || res.LastIntendedNs != 3e6 || res.LastStartNs != 9e6 {
		t.Errorf("kept share %v (last intended %d, last start %d), want 0.133", k, res.LastIntendedNs, res.LastStartNs)
	}
	if !sat || len(why) < 2 || !strings.Contains(why[0], "6 of 10 arrivals") || !strings.Contains(why[1], "kept 13.3% of its schedule") {
		t.Errorf("saturation %v %q: want unstarted and kept-schedule reasons", sat, why)
	}
}

// TestOpenLoopSlowOpRealClock: the same overload on the real clock, with the
// per-worker timerfd sleepers: an op of 1 ms at 2000/s on one worker.
func TestOpenLoopSlowOpRealClock(t *testing.T) {
	spec := Spec{Workload: Latency, SizeBytes: 64, InFlight: 1, Duration: 200 * time.Millisecond, RatePerSec: 2000, Arrival: Constant}
	res := Run(context.Background(), spec, nil, nil, func(int) Op {
		return func(context.Context) error { time.Sleep(time.Millisecond); return nil }
	})
	if res.Error != "" {
		t.Fatal(res.Error)
	}
	if res.Arrivals != 400 || res.Messages+res.Unstarted != res.Arrivals || res.Unstarted == 0 {
		t.Fatalf("arrivals %d messages %d unstarted %d: want 400, every one served or unstarted, some unstarted", res.Arrivals, res.Messages, res.Unstarted)
	}
	if sat, why := res.Saturation(); !sat {
		t.Errorf("a 2× overload is not saturated: %q", why)
	}
	// The worst arrival waited at least from its intended start to the
	// deadline: the first arrival after the last one served.
	if res.Latency.Max() < int64(spec.Grace()) {
		t.Errorf("latency max %v below the grace %v", time.Duration(res.Latency.Max()), spec.Grace())
	}
}

// TestOpenLoopNoOp is the harness's floor: against an operation that
// takes no time, on a clock that wakes each arrival exactly when it is due,
// every arrival starts on time — nothing unstarted, the whole schedule
// kept, no saturation, every latency nil.
func TestOpenLoopNoOp(t *testing.T) {
	start := time.Unix(4000, 0)
	clock := &fakeClock{now: start}
	spec := Spec{Workload: Latency, SizeBytes: 64, InFlight: 1, Duration: 300 * time.Millisecond, RatePerSec: 2000, Arrival: Poisson, Seed: 7}
	res := Run(context.Background(), spec, clock, nil, func(int) Op { return func(context.Context) error { return nil } })
	if res.Failed() {
		t.Fatalf("failed: %+v", res.Error)
	}
	if res.Unstarted != 0 || res.Messages != res.Arrivals || res.KeptShare() != 1 {
		t.Errorf("unstarted %d, messages %d of %d arrivals, kept %v", res.Unstarted, res.Messages, res.Arrivals, res.KeptShare())
	}
	// 600 expected arrivals (sd 24.5): ±150 is 6 sd.
	if math.Abs(float64(res.Arrivals)-600) > 150 {
		t.Errorf("%d arrivals in 300 ms at 2000/s", res.Arrivals)
	}
	if sat, why := res.Saturation(); sat {
		t.Errorf("a no-op is saturated: %q", why)
	}
	if res.Latency.Max() > 1 || res.Latency.Count() != res.Messages || res.Service.Count() != res.Messages || len(res.Quarters) != 4 {
		t.Errorf("latency max %d ns, counts %d/%d of %d, %d quarters", res.Latency.Max(), res.Latency.Count(), res.Service.Count(), res.Messages, len(res.Quarters))
	}
}

// TestOpenLoopNoOpRealClock: the same on the real clock, with four workers
// on their timerfds: every arrival is accounted for (how late they start
// depends on the machine, and is what the floor measures).
func TestOpenLoopNoOpRealClock(t *testing.T) {
	spec := Spec{Workload: Latency, SizeBytes: 64, InFlight: 4, Duration: 300 * time.Millisecond, RatePerSec: 2000, Arrival: Poisson, Seed: 7}
	res := Run(context.Background(), spec, nil, nil, func(int) Op { return func(context.Context) error { return nil } })
	if res.Failed() {
		t.Fatalf("failed: %+v", res.Error)
	}
	if res.Messages+res.Unstarted != res.Arrivals || res.Latency.Count() != res.Arrivals || res.Service.Count() != res.Messages {
		t.Errorf("arrivals %d = messages %d + unstarted %d? latency %d, service %d", res.Arrivals, res.Messages, res.Unstarted, res.Latency.Count(), res.Service.Count())
	}
	if res.DispatchLag.Count() == 0 || len(res.Quarters) != 4 {
		t.Errorf("no dispatch lag recorded (%d) or quarters (%d)", res.DispatchLag.Count(), len(res.Quarters))
	}
}

func TestRising(t *testing.T) {
	q := func(ms ...float64) []Percentiles {
		var out []Percentiles
		for _, v := range ms {
			out = append(out, Percentiles{P50Ns: int64(v * 1e6)})
		}
		return out
	}
	for _, c := range []struct {
		q    []Percentiles
		want bool
	}{
		{q(1, 2, 3, 4), true},
		{q(1, 1.2, 1.5, 2), true},
		{q(1, 2, 2, 4), false},       // flat once: not a growing queue
		{q(1, 1.2, 1.4, 1.6), false}, // rising but below 2×
		{q(4, 3, 2, 1), false},
		{q(0, 1, 2, 3), false}, // no first-quarter figure
		{nil, false},
	} {
		if got, _ := Rising(c.q); got != c.want {
			t.Errorf("Rising(%v) = %v, want %v", c.q, got, c.want)
		}
	}
}

// fakeStore is a system under test with a flush four times slower than its
// appends: each Put accepts 100 bytes, and 25 bytes become durable; Drain
// makes the rest durable at 100 bytes per ms of (fake) time. honest=false
// makes a Drain that returns before it is done.
type fakeStore struct {
	clock            *fakeClock
	written, durable int64
	durablePerPut    int64
	honest           bool
}

func (s *fakeStore) put(context.Context) error {
	s.clock.advance(time.Millisecond)
	s.written += 100
	s.durable += s.durablePerPut
	return nil
}

func (s *fakeStore) Positions() (int64, int64) { return s.written, s.durable }

func (s *fakeStore) Drain(context.Context) error {
	left := s.written - s.durable
	s.clock.advance(time.Duration(left) * time.Millisecond / 100)
	if s.honest {
		s.durable = s.written
	}
	return nil
}

func TestDurabilityOfASlowFlush(t *testing.T) {
	spec := Spec{Workload: Throughput, SizeBytes: 90, Producers: 1, Duration: 10 * time.Millisecond}
	for _, c := range []struct {
		name          string
		durablePerPut int64
		honest        bool
		sustained     bool
		backlog       int64
		drain         time.Duration
		err           string
	}{
		{"slow flush", 25, true, false, 750, 7500 * time.Microsecond, ""},
		{"flush keeps up", 100, true, true, 0, 0, ""},
		{"a tenth behind", 90, true, true, 100, time.Millisecond, ""},
		{"drain that does not drain", 25, false, false, 750, 7500 * time.Microsecond, "drain returned with 250 of the 1000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Unix(3000, 0)}
			s := &fakeStore{clock: clock, durablePerPut: c.durablePerPut, honest: c.honest}
			res := Run(context.Background(), spec, clock, s, func(int) Op { return s.put })
			if c.err != "" {
				if !strings.Contains(res.Error, c.err) {
					t.Fatalf("error %q, want %q", res.Error, c.err)
				}
				return
			}
			if res.Error != "" {
				t.Fatal(res.Error)
			}
			d := res.Durability
			if res.Messages != 10 || d.WrittenBytes() != 1000 || d.DurableBytes() != 10*c.durablePerPut || d.BacklogBytes() != c.backlog {
				t.Fatalf("messages %d written %d durable %d backlog %d", res.Messages, d.WrittenBytes(), d.DurableBytes(), d.BacklogBytes())
			}
			if d.Sustained() != c.sustained || time.Duration(d.DrainNs) != c.drain || d.DurableAfterDrainBytes != 1000 {
				t.Errorf("sustained %v drain %v durable after drain %d; want %v, %v, 1000", d.Sustained(), time.Duration(d.DrainNs), d.DurableAfterDrainBytes, c.sustained, c.drain)
			}
		})
	}
}

func TestClosedLoopCountsAndFigures(t *testing.T) {
	spec := Spec{Workload: Throughput, SizeBytes: 1024, Producers: 3, Duration: 100 * time.Millisecond, Warmup: 20 * time.Millisecond,
		SeriesInterval: 10 * time.Millisecond}
	var mu sync.Mutex
	calls := 0
	res := Run(context.Background(), spec, nil, nil, func(int) Op {
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
	// Each worker records its service times in batches: the last, partial
	// one too, in the histogram and in the time series.
	var inSeries int64
	for _, p := range res.Series {
		inSeries += p.Count
	}
	if inSeries != res.Messages {
		t.Errorf("the time series holds %d requests, the window %d", inSeries, res.Messages)
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
	res := Run(context.Background(), spec, nil, nil, func(int) Op {
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
	res = Run(ctx, spec, nil, nil, func(int) Op {
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

// TestDurableCountsOnlyTheWindowsBytes: a backlog accepted before the
// window and flushed inside it is not durable throughput of the window.
func TestDurableCountsOnlyTheWindowsBytes(t *testing.T) {
	// 400 bytes accepted before the window, 100 of them durable; in the
	// window 1000 more accepted and the durable position reaches 1200.
	d := DurabilityResult{WrittenStartBytes: 400, DurableStartBytes: 100, WrittenEndBytes: 1400, DurableEndBytes: 1200}
	if got := d.DurableBytes(); got != 800 {
		t.Errorf("durable bytes %d, want 800 (1200 − the window's first byte at 400)", got)
	}
	if d.DurableBytes() > d.WrittenBytes() {
		t.Errorf("durable %d exceeds written %d", d.DurableBytes(), d.WrittenBytes())
	}
	// Nothing of the window's own bytes durable yet: 0, not the warm-up's.
	d = DurabilityResult{WrittenStartBytes: 400, DurableStartBytes: 100, WrittenEndBytes: 1400, DurableEndBytes: 350}
	if got := d.DurableBytes(); got != 0 {
		t.Errorf("durable bytes %d, want 0", got)
	}
	// No backlog at the start: the durable position's progress.
	d = DurabilityResult{WrittenStartBytes: 400, DurableStartBytes: 400, WrittenEndBytes: 1400, DurableEndBytes: 1300}
	if got := d.DurableBytes(); got != 900 {
		t.Errorf("durable bytes %d, want 900", got)
	}
}

// TestCPUIsTheWindowsWork: the CPU of a phase is read when its last worker
// ends — merging the workers' histograms afterwards (with hundreds of
// workers, about as costly as the messages) is not the store's CPU.
func TestCPUIsTheWindowsWork(t *testing.T) {
	var fakeCPU atomic.Int64 // ns of "user CPU": 1 ms per op, 1 h per merge
	cpuNow = func() (time.Duration, time.Duration) { return time.Duration(fakeCPU.Load()), 0 }
	mergeWorkers = func(ws []*worker, set *seriesSet, start, end time.Time) phase {
		fakeCPU.Add(int64(time.Hour))
		return merge(ws, set, start, end)
	}
	t.Cleanup(func() { cpuNow, mergeWorkers = cpuTimes, merge })
	for _, spec := range []Spec{
		{Workload: Throughput, SizeBytes: 64, Producers: 2, Duration: 30 * time.Millisecond, Warmup: 10 * time.Millisecond},
		{Workload: Latency, SizeBytes: 64, RatePerSec: 2000, InFlight: 4, Arrival: Constant, Duration: 30 * time.Millisecond, Warmup: 10 * time.Millisecond},
	} {
		var ops atomic.Int64
		res := Run(context.Background(), spec, nil, nil, func(int) Op {
			return func(context.Context) error {
				ops.Add(1)
				fakeCPU.Add(int64(time.Millisecond))
				return nil
			}
		})
		if res.Failed() {
			t.Fatalf("%s: %s", spec.Workload, res.Error)
		}
		// Every op of the measured phase counts, the warm-up's and the merges' do not.
		if res.CPUUserNs >= int64(time.Hour) || res.CPUUserNs < res.Messages*int64(time.Millisecond) {
			t.Errorf("%s: CPU %v for %d messages (%d ops in all): the merge is counted, or ops are not", spec.Workload,
				time.Duration(res.CPUUserNs), res.Messages, ops.Load())
		}
	}
}

// TestWindowBracketsTheCPUReadings: Spec.Window opens once per Run, after
// the warm-up, before the window's first CPU reading and before any op of
// the window; its end runs after the last op and the last CPU reading and
// before the workers are merged — a profiler there sees what the Result's
// CPU counts, no more.
func TestWindowBracketsTheCPUReadings(t *testing.T) {
	var (
		mu     sync.Mutex
		events []string
	)
	note := func(e string) { // a run of ops is one event
		mu.Lock()
		defer mu.Unlock()
		if n := len(events); e != "op" || n == 0 || events[n-1] != e {
			events = append(events, e)
		}
	}
	cpuNow = func() (time.Duration, time.Duration) { note("cpu"); return 0, 0 }
	mergeWorkers = func(ws []*worker, set *seriesSet, start, end time.Time) phase {
		note("merge")
		return merge(ws, set, start, end)
	}
	t.Cleanup(func() { cpuNow, mergeWorkers = cpuTimes, merge })
	for _, spec := range []Spec{
		{Workload: Throughput, SizeBytes: 64, Producers: 2, Duration: 20 * time.Millisecond, Warmup: 10 * time.Millisecond},
		{Workload: Latency, SizeBytes: 64, RatePerSec: 2000, InFlight: 2, Arrival: Constant, Duration: 20 * time.Millisecond, Warmup: 10 * time.Millisecond},
	} {
		events = nil
		spec.Window = func() func() {
			note("open")
			return func() { note("end") }
		}
		res := Run(context.Background(), spec, nil, notingDurability{note}, func(int) Op {
			return func(context.Context) error { note("op"); return nil }
		})
		if res.Failed() {
			t.Fatalf("%s: %s", spec.Workload, res.Error)
		}
		// The warm-up: ops between its CPU readings and its merge, no window.
		// (On a loaded machine a phase may end before its workers ran an
		// op: the ops are checked only where they fall.) The system's
		// positions are read at the window's edges, outside the caller's
		// window and before the merge (a flusher goes on during it), and
		// once more after the drain.
		want := []string{"cpu", "op", "cpu", "merge", "positions", "open", "cpu", "op", "cpu", "end", "positions", "merge", "drain", "positions"}
		got := slices.DeleteFunc(slices.Clone(events), func(e string) bool { return e == "op" })
		if !slices.Equal(got, slices.DeleteFunc(slices.Clone(want), func(e string) bool { return e == "op" })) {
			t.Errorf("%s: events %v, want %v", spec.Workload, events, want)
		}
		cpus := 0
		for _, e := range events {
			switch {
			case e == "cpu":
				cpus++
			case e == "op" && cpus != 1 && cpus != 3:
				t.Errorf("%s: an op outside a phase's CPU readings: %v", spec.Workload, events)
			}
		}
	}
}

// notingDurability notes its calls: what TestWindowBracketsTheCPUReadings
// orders against the CPU readings and the merge.
type notingDurability struct{ note func(string) }

func (d notingDurability) Positions() (int64, int64)       { d.note("positions"); return 0, 0 }
func (d notingDurability) Drain(ctx context.Context) error { d.note("drain"); return nil }

// TestWorkersAreMadeBeforeTheWindow: the workers' histograms are made
// before the window opens, so a window of ops that allocate nothing
// counts none of their allocations (hundreds of workers made inside it
// started late, and their first arrivals' waits counted as latency).
func TestWorkersAreMadeBeforeTheWindow(t *testing.T) {
	const workers = 64
	for _, spec := range []Spec{
		{Workload: Throughput, SizeBytes: 64, Producers: workers, Duration: 20 * time.Millisecond},
		{Workload: Latency, SizeBytes: 64, RatePerSec: 2000, InFlight: workers, Arrival: Constant, Duration: 20 * time.Millisecond},
	} {
		res := Run(context.Background(), spec, nil, nil, func(int) Op {
			return func(context.Context) error { return nil }
		})
		if res.Failed() {
			t.Fatalf("%s: %s", spec.Workload, res.Error)
		}
		// An open-loop worker's seven histograms and its sleeper made in the
		// window are about 30 allocations a worker; what stays is the
		// goroutines' own few.
		if res.Mallocs >= 8*workers {
			t.Errorf("%s: %d allocations in a window of ops that allocate nothing, %d workers", spec.Workload, res.Mallocs, workers)
		}
	}
}

// TestRealClockNow: RealClock's reading agrees with time.Now on both
// clocks, and readings subtract by the monotonic clock.
func TestRealClockNow(t *testing.T) {
	before := time.Now()
	now := RealClock{}.Now()
	after := time.Now()
	if now.Before(before) || now.After(after) {
		t.Fatalf("RealClock.Now %v outside [%v, %v]", now, before, after)
	}
	if d := now.Sub(before); d < 0 || d > after.Sub(before) {
		t.Fatalf("monotonic difference %v outside [0, %v]", d, after.Sub(before))
	}
	if wall := now.Round(0); wall.Before(before.Round(0).Add(-time.Millisecond)) || wall.After(after.Round(0).Add(time.Millisecond)) {
		t.Fatalf("wall reading %v far from time.Now's [%v, %v]", wall, before.Round(0), after.Round(0))
	}
}

// BenchmarkClockNow: RealClock.Now against time.Now.
func BenchmarkClockNow(b *testing.B) {
	var sink time.Time
	b.Run("RealClock", func(b *testing.B) {
		for b.Loop() {
			sink = RealClock{}.Now()
		}
	})
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			sink = time.Now()
		}
	})
	_ = sink
}

// TestDeliveryRisingSaturates: an e2e result whose delivery latency rises
// quarter after quarter is saturated (its consumers fell further behind
// all window long), though its producers kept their schedule.
func TestDeliveryRisingSaturates(t *testing.T) {
	q := func(p50s ...int64) []Percentiles {
		var out []Percentiles
		for _, p := range p50s {
			out = append(out, Percentiles{P50Ns: p})
		}
		return out
	}
	r := Result{Arrivals: 1000, Messages: 1000, Quarters: q(100, 110, 100, 105)}
	if sat, why := r.Saturation(); sat {
		t.Fatalf("a steady run is saturated: %v", why)
	}
	r.DeliveryQuarters = q(1e6, 3e6, 9e6, 27e6)
	sat, why := r.Saturation()
	if !sat || len(why) != 1 || !strings.Contains(why[0], "delivery latency p50 rose") {
		t.Errorf("delivery rising 27×: saturated %v, %v", sat, why)
	}
}
