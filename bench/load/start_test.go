package load

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestStartIsTheMeasuredWindows: Result.StartUnixNs is when the measured
// window began — after a warm-up that overran its nominal length (its last
// request held it), not the nominal start + warm-up that a caller could
// compute beforehand; the intended starts of the window's arrivals count
// from it.
func TestStartIsTheMeasuredWindows(t *testing.T) {
	spec := Spec{Workload: Latency, SizeBytes: 64, InFlight: 1, Duration: 100 * time.Millisecond, Warmup: 50 * time.Millisecond, RatePerSec: 200,
		Arrival: Constant, Seed: 1}
	before := time.Now()
	var first sync.Once
	var intended []int64
	res := RunTimed(context.Background(), spec, nil, nil, func(int) TimedOp {
		return func(ctx context.Context, at time.Time) error {
			held := false
			first.Do(func() { held = true })
			if held { // the warm-up's first request holds it for 300 ms
				select {
				case <-time.After(300 * time.Millisecond):
				case <-ctx.Done():
				}
			}
			intended = append(intended, at.UnixNano())
			return nil
		}
	})
	if res.Failed() {
		t.Fatalf("failed: %s", res.Error)
	}
	nominal := before.Add(spec.Warmup).UnixNano()
	if res.StartUnixNs < nominal+int64(200*time.Millisecond) || res.StartUnixNs > time.Now().UnixNano() {
		t.Fatalf("start %d, nominal %d: the window began after the held warm-up", res.StartUnixNs, nominal)
	}
	in := 0
	for _, at := range intended {
		if at >= res.StartUnixNs && at < res.StartUnixNs+res.WindowNs {
			in++
		}
	}
	if int64(in) != res.Messages {
		t.Errorf("%d intended starts inside [start, start + window), %d messages measured", in, res.Messages)
	}
}
