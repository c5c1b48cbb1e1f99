package engine

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	prewriteRounds = flag.Int("prewrite-rounds", 6, "BenchmarkPutPrewrite: A/B rounds (each times prewrite off and on once, in ABBA order)")
	prewritePhase  = flag.Duration("prewrite-phase", time.Second, "BenchmarkPutPrewrite: length of one timed phase")
	prewriteSizes  = flag.String("prewrite-sizes", "1024", "BenchmarkPutPrewrite: message body sizes, comma separated")
)

// BenchmarkPutPrewrite compares sync-flush Puts (1 KiB bodies, or
// -prewrite-sizes) into prewritten and
// fallocated CommitLog segments — mmap and transient, 1 and 16 producers —
// A/B interleaved in one process: two stores, one with PrewriteSegments off
// and one on, both open, the allocation service idle in both (the first
// segment and the next one made) before anything is timed; then
// -prewrite-rounds rounds of one -prewrite-phase phase on each store, in
// ABBA order so that a drift of the (shared) machine weighs on both alike.
// A 1 GiB segment (the default) does not fill during the run (checked), so no prewrite
// runs while timing: what is timed is the Put path alone. It reports the
// medians over the phases (msgs/s, Put p50 in µs, measured around each Put)
// and logs every phase's figures, min and max, and the paired view: the
// median over rounds of each round's on/off ratio (two adjacent phases).
//
//	go test -run '^$' -bench PutPrewrite -benchtime 1x ./engine/ -args -prewrite-rounds 6
func BenchmarkPutPrewrite(b *testing.B) {
	var sizes []int
	for _, f := range strings.Split(*prewriteSizes, ",") {
		size, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || size <= 0 {
			b.Fatalf("-prewrite-sizes %q: %q is not a size", *prewriteSizes, f)
		}
		sizes = append(sizes, size)
	}
	for _, size := range sizes {
		for _, backend := range []string{"mmap", "transient"} {
			for _, producers := range []int{1, 16} {
				name := fmt.Sprintf("backend=%s/flush=sync/producers=%d/size=%d", backend, producers, size)
				b.Run(name, func(b *testing.B) { benchPutPrewriteAB(b, backend, producers, size) })
			}
		}
	}
}

type prewritePhaseResult struct {
	msgsPerSecond float64
	p50, p99      time.Duration
}

func benchPutPrewriteAB(b *testing.B, backend string, producers, size int) {
	ctx := context.Background()
	modes := []PrewriteMode{PrewriteOff, PrewriteOn}
	stores := make([]*Store, len(modes))
	msgs := make([]*Message, producers)
	for i := range msgs {
		msgs[i] = testMessage("BenchTopic", int32(i%4), i, size)
	}
	for i, mode := range modes {
		o := Options{Backend: backend, FlushMode: FlushSync, SegmentSizeBytes: DefaultSegmentSizeBytes, PrewriteSegments: mode, Logger: quietLogger}
		s, err := Open(ctx, b.TempDir(), o)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		if got := s.Options().PrewriteSegments; got != mode {
			b.Fatalf("effective PrewriteSegments %v, want %v", got, mode)
		}
		if _, err := s.Put(ctx, msgs[0]); err != nil { // the first segment
			b.Fatal(err)
		}
		stores[i] = s
	}
	for _, s := range stores {
		waitFor(b, "the allocation service to be idle", func() bool { return s.alloc.idle() })
	}
	results := make([][]prewritePhaseResult, len(modes))
	b.ResetTimer()
	for round := range *prewriteRounds {
		if !roomForAPhase(stores) {
			// Stop before a roll: the next segment's creation (and its
			// prewrite) would run while timing.
			b.Logf("stopped after %d of %d rounds: the 1 GiB segment is three quarters full", round, *prewriteRounds)
			if round < 4 {
				b.Fatalf("only %d rounds fit in a segment: shorten -prewrite-phase", round)
			}
			break
		}
		order := []int{0, 1}
		if round%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			results[i] = append(results[i], putPhase(b, stores[i], msgs, *prewritePhase))
		}
	}
	b.StopTimer()
	for i, s := range stores {
		if n := s.Stats().Segments; n != 1 {
			b.Fatalf("prewrite %v: %d segments: a roll (and a prewrite) happened while timing", modes[i], n)
		}
	}
	// The paired view: each round's on/off ratio, from two adjacent phases,
	// which a drift of the machine's load between rounds does not move.
	var rateRatio, p50Ratio []prewritePhaseResult
	for r := range results[0] {
		off, on := results[0][r], results[1][r]
		rateRatio = append(rateRatio, prewritePhaseResult{msgsPerSecond: on.msgsPerSecond / off.msgsPerSecond})
		p50Ratio = append(p50Ratio, prewritePhaseResult{msgsPerSecond: float64(on.p50) / float64(off.p50)})
	}
	ratio := func(rs []prewritePhaseResult) [3]float64 {
		return medianMinMax(rs, func(r prewritePhaseResult) float64 { return r.msgsPerSecond })
	}
	rr, pr := ratio(rateRatio), ratio(p50Ratio)
	b.ReportMetric(rr[0], "on/off-msgs/s")
	b.ReportMetric(pr[0], "on/off-p50")
	b.Logf("paired on/off per round: msgs/s ×%.2f [%.2f–%.2f]  p50 ×%.2f [%.2f–%.2f]", rr[0], rr[1], rr[2], pr[0], pr[1], pr[2])
	for i, mode := range modes {
		rate := medianMinMax(results[i], func(r prewritePhaseResult) float64 { return r.msgsPerSecond })
		p50 := medianMinMax(results[i], func(r prewritePhaseResult) float64 { return float64(r.p50.Microseconds()) })
		p99 := medianMinMax(results[i], func(r prewritePhaseResult) float64 { return float64(r.p99.Microseconds()) })
		b.ReportMetric(rate[0], "msgs/s-prewrite="+mode.String())
		b.ReportMetric(p50[0], "p50-µs-prewrite="+mode.String())
		b.Logf("prewrite=%-3s msgs/s %6.0f [%6.0f–%6.0f]  p50 µs %5.0f [%5.0f–%5.0f]  p99 µs %6.0f [%6.0f–%6.0f]  (%d phases of %v)",
			mode, rate[0], rate[1], rate[2], p50[0], p50[1], p50[2], p99[0], p99[1], p99[2], len(results[i]), *prewritePhase)
	}
}

// roomForAPhase reports whether every store's segment is less than three
// quarters full (a phase writes far less than a quarter of 1 GiB).
func roomForAPhase(stores []*Store) bool {
	for _, s := range stores {
		last := s.log.queue.Last()
		if last == nil || last.WrotePosition() > last.SizeBytes()*3/4 {
			return false
		}
	}
	return true
}

// putPhase runs producers goroutines putting into s for d and returns the
// rate and the latency quantiles of that phase.
func putPhase(b *testing.B, s *Store, msgs []*Message, d time.Duration) prewritePhaseResult {
	ctx := context.Background()
	lat := make([][]time.Duration, len(msgs))
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for w := range msgs {
		lat[w] = make([]time.Duration, 0, 1<<14)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				t := time.Now()
				if _, err := s.Put(ctx, msgs[w]); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		b.Fatal("no Put finished in a phase")
	}
	return prewritePhaseResult{
		msgsPerSecond: float64(len(all)) / elapsed.Seconds(),
		p50:           all[len(all)/2],
		p99:           all[len(all)*99/100],
	}
}

// medianMinMax returns the median, min and max of f over rs.
func medianMinMax(rs []prewritePhaseResult, f func(prewritePhaseResult) float64) [3]float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	median := v[len(v)/2]
	if len(v)%2 == 0 {
		median = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return [3]float64{median, v[0], v[len(v)-1]}
}

// idle reports whether every creation queued in the allocation service has
// finished.
func (a *allocator) idle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, req := range a.requests {
		select {
		case <-req.ready:
		default:
			return false
		}
	}
	return len(a.work) == 0
}
