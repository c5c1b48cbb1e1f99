package load

import (
	"testing"
	"time"
)

// TestSeriesHoldsEachWorkersIntervals: workers hold their latencies and
// record them into the phase's interval as they leave it (or hold too many); the
// points hold every request once, in the interval it completed in, an
// interval without a completion included with Count 0.
func TestSeriesHoldsEachWorkersIntervals(t *testing.T) {
	start := time.Unix(1000, 0)
	iv := 100 * time.Millisecond
	set := newSeriesSet(start, iv)
	a, b := set.worker(), set.worker()
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	for i := range 99 {
		a.record(at(10), time.Millisecond) // interval 0
		b.record(at(20+i%50), 2*time.Millisecond)
	}
	a.record(at(50), 50*time.Millisecond)
	b.record(at(250), 7*time.Millisecond) // interval 2; nothing in 1
	a.record(at(260), 3*time.Millisecond)
	a.record(at(270), 3*time.Millisecond)
	a.flush()
	b.flush()
	b.flush() // nothing left: a no-op
	pts := set.points()
	if len(pts) != 3 {
		t.Fatalf("%d points, want 3: %+v", len(pts), pts)
	}
	for i, p := range pts {
		if p.StartUnixNs != at(100*i).UnixNano() || p.IntervalNs != int64(iv) {
			t.Fatalf("point %d: %+v", i, p)
		}
	}
	within := func(got, want int64) bool { return got >= want && got <= want+want/50 } // 2 digits
	if p := pts[0]; p.Count != 199 || !within(p.P50Ns, int64(2*time.Millisecond)) || !within(p.P99Ns, int64(2*time.Millisecond)) || !within(p.MaxNs, int64(50*time.Millisecond)) {
		t.Fatalf("interval 0: %+v", p)
	}
	if p := pts[1]; p.Count != 0 || p.MaxNs != 0 {
		t.Fatalf("interval 1 had no completion: %+v", p)
	}
	if p := pts[2]; p.Count != 3 || !within(p.P50Ns, int64(3*time.Millisecond)) || !within(p.MaxNs, int64(7*time.Millisecond)) {
		t.Fatalf("interval 2: %+v", p)
	}
	if newSeriesSet(start, 0).worker() != nil || newSeriesSet(start, 0).points() != nil {
		t.Fatal("an interval of 0 keeps a series")
	}
}

// TestSeriesAllocatesNothingPerInterval: moving to a new interval
// allocates nothing once the phase has a histogram for it — not a fresh
// 30 KB array per worker and interval that the process under test pays to
// fault in — and a worker holds at most seriesHeld latencies.
func TestSeriesAllocatesNothingPerInterval(t *testing.T) {
	start := time.Unix(1000, 0)
	set := newSeriesSet(start, time.Millisecond)
	other := set.worker()
	for i := range 8 {
		other.record(start.Add(time.Duration(i)*time.Millisecond), time.Millisecond)
	}
	other.flush() // the phase's histograms for intervals 0–7 exist
	w := set.worker()
	i := 0
	allocs := testing.AllocsPerRun(3*seriesHeld, func() {
		w.record(start.Add(time.Duration(i/500%8)*time.Millisecond), time.Millisecond)
		i++
		if len(w.held) > seriesHeld {
			t.Fatalf("a worker holds %d latencies", len(w.held))
		}
	})
	if allocs != 0 {
		t.Fatalf("%.2f allocations per record, want 0", allocs)
	}
	w.flush()
	var n int64
	for _, p := range set.points() {
		n += p.Count
	}
	if want := int64(8 + 3*seriesHeld + 1); n != want { // AllocsPerRun runs the function once more to warm up
		t.Fatalf("%d requests in the series, want %d", n, want)
	}
}
