package bench

import (
	"testing"
	"time"
)

// TestDeliveredInQuarters: the delivery latency is split by the quarter
// of the window its message was intended in, and a message intended
// outside the window counts nowhere.
func TestDeliveredInQuarters(t *testing.T) {
	const start, end = int64(1000), int64(2000)
	var ds []delivery
	for i := range 4 {
		for j := range 10 {
			ds = append(ds, delivery{stamp: start + int64(i)*250 + int64(j), latencyNs: int64(i+1) * int64(time.Millisecond)})
		}
	}
	ds = append(ds, delivery{stamp: end, latencyNs: int64(time.Hour)}, delivery{stamp: start - 1, latencyNs: int64(time.Hour)})
	h, n, qs := deliveredIn([][]delivery{ds}, start, end)
	if n != 40 || h.Count() != 40 || len(qs) != 4 {
		t.Fatalf("%d delivered, histogram of %d, %d quarters: want 40, 40, 4", n, h.Count(), len(qs))
	}
	for i, q := range qs {
		if got, want := time.Duration(q.P50Ns), time.Duration(i+1)*time.Millisecond; got < want || got > want+want/50 {
			t.Errorf("quarter %d: p50 %v, want %v", i, got, want)
		}
	}
}
