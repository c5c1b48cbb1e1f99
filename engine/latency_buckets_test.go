package engine

import (
	"testing"
	"time"
)

func TestLatencyBucketsAreExactAtOctaves(t *testing.T) {
	var h latencyHistogram
	for _, d := range []time.Duration{0, 1023, 1024, 2047, 2048, 3 * time.Millisecond, time.Minute} {
		h.record(d)
	}
	want := 0 + 1023 + 1024 + 2047 + 2048 + 3*time.Millisecond + time.Minute
	if s := h.summary(); s.Total != want || s.Count != 7 {
		t.Fatalf("summary: total %v count %d, want %v and 7", s.Total, s.Count, want)
	}
	lb := h.buckets()
	if lb.Count != 7 || lb.Sum != 0+1023+1024+2047+2048+3*time.Millisecond+time.Minute {
		t.Fatalf("count %d sum %v", lb.Count, lb.Sum)
	}
	below := func(bound time.Duration) uint64 {
		for i, b := range lb.Bounds {
			if b == bound {
				return lb.Cumulative[i]
			}
		}
		t.Fatalf("no bound %v", bound)
		return 0
	}
	// 0 and 1023 are below 1024 ns; 1024 and 2047 below 2048; 3 ms below
	// 2^22 ns (4.19 ms) but not 2^21 (2.10 ms); a minute above the last.
	if below(1024) != 2 || below(2048) != 4 || below(4096) != 5 || below(1<<21) != 5 || below(1<<22) != 6 || lb.Cumulative[len(lb.Cumulative)-1] != 6 {
		t.Fatalf("bounds %v cumulative %v", lb.Bounds, lb.Cumulative)
	}
}
