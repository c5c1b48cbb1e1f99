package engine

import "time"

// LatencyBuckets is a latency histogram's raw counts for an exporter:
// cumulative counts at power-of-two nanosecond bounds (1.024 µs … ≈ 34 s),
// where the store's log-linear buckets have edges, so the counts are exact
// (an observation equal to a bound, to the nanosecond, is counted in the
// next bound). Unlike LatencySummary's percentiles, these aggregate.
type LatencyBuckets struct {
	Count uint64
	Sum   time.Duration
	// Bounds[i] and Cumulative[i]: how many observations were below
	// Bounds[i]. Count includes those above the last bound.
	Bounds     []time.Duration
	Cumulative []uint64
}

// Octave bounds exported: 2^10 … 2^35 ns.
const (
	firstBoundExp = 10
	lastBoundExp  = 35
)

func (h *latencyHistogram) buckets() LatencyBuckets {
	lb := LatencyBuckets{Sum: time.Duration(h.sumNs.Load())}
	var counts [64 * subBuckets]uint64
	for i := range counts {
		counts[i] = h.counts[i].Load()
		lb.Count += counts[i]
	}
	var seen uint64
	next := 0
	for exp := firstBoundExp; exp <= lastBoundExp; exp++ {
		edge := bucketOf(int64(1) << exp) // the first bucket at or above the bound
		for ; next < edge; next++ {
			seen += counts[next]
		}
		lb.Bounds = append(lb.Bounds, time.Duration(int64(1)<<exp))
		lb.Cumulative = append(lb.Cumulative, seen)
	}
	return lb
}

// PutLatencyBuckets is the histogram of successful Puts' latency (the one
// Stats.PutLatency summarizes).
func (s *Store) PutLatencyBuckets() LatencyBuckets { return s.stats.putLatency.buckets() }

// FlushLatencyBuckets is the histogram of CommitLog flushes' latency.
func (s *Store) FlushLatencyBuckets() LatencyBuckets { return s.stats.flushLatency.buckets() }

// CommitLatencyBuckets is the histogram of commits' latency (buffered
// backends).
func (s *Store) CommitLatencyBuckets() LatencyBuckets { return s.stats.commitLatency.buckets() }
