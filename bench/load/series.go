package load

import (
	"sync"
	"time"
)

// SeriesPoint is one interval of a run's latency time series: the requests
// that completed in [StartUnixNs, StartUnixNs+IntervalNs), with their
// latency (open loop: from the intended start; closed loop: service time).
// Wall-clock times, so a series measured in a worker process lines up with
// the system samples its parent took.
type SeriesPoint struct {
	StartUnixNs int64 `json:"startUnixNs"`
	IntervalNs  int64 `json:"intervalNs"`
	Count       int64 `json:"count"`
	P50Ns       int64 `json:"p50Ns"`
	P99Ns       int64 `json:"p99Ns"`
	MaxNs       int64 `json:"maxNs"`
}

// seriesSet is a phase's time series: one histogram per interval, which
// the workers fold their own interval's histogram into as they leave it.
type seriesSet struct {
	start    time.Time
	interval time.Duration
	mu       sync.Mutex
	hs       []*Histogram // by interval; nil: nothing completed in it
}

func newSeriesSet(start time.Time, interval time.Duration) *seriesSet {
	if interval <= 0 {
		return nil
	}
	return &seriesSet{start: start, interval: interval}
}

// series is one worker's part of a seriesSet: the latencies it completed
// in its current interval, held and then recorded into the set's histogram
// for that interval as the worker leaves it (or holds seriesHeld). A
// histogram per worker and interval, allocated inside the measured window,
// cost the process under test about 8 % of its CPU at 256 producers (2,560
// fresh 30 KB arrays a second, each first touched by a record), and folding
// a reused one into the set cost as much (the merge walks every bucket up
// to the highest); a held latency costs an append, and recording it into
// the set's histogram, which every worker keeps warm, little more.
type series struct {
	set  *seriesSet
	idx  int // the interval held; -1 before the first record
	held []time.Duration
}

// seriesHeld is the most latencies a worker holds before recording them.
const seriesHeld = 1024

func (s *seriesSet) worker() *series {
	if s == nil {
		return nil
	}
	return &series{set: s, idx: -1, held: make([]time.Duration, 0, seriesHeld)}
}

// record adds a latency that completed at done.
func (s *series) record(done time.Time, d time.Duration) {
	if s == nil {
		return
	}
	i := max(int(done.Sub(s.set.start)/s.set.interval), 0)
	if i != s.idx || len(s.held) == seriesHeld {
		s.flush()
		s.idx = i
	}
	s.held = append(s.held, d)
}

// flush records the held latencies into the set; the worker calls it as it
// leaves an interval and as its loop returns.
func (s *series) flush() {
	if s == nil || len(s.held) == 0 {
		return
	}
	set := s.set
	set.mu.Lock()
	if s.idx >= len(set.hs) {
		set.hs = append(set.hs, make([]*Histogram, s.idx+1-len(set.hs))...)
	}
	h := set.hs[s.idx]
	if h == nil {
		h = newHistogram(seriesSigFigures)
		set.hs[s.idx] = h
	}
	for _, d := range s.held {
		h.Record(d)
	}
	set.mu.Unlock()
	s.held = s.held[:0]
}

// points is the set as SeriesPoints, every interval up to the last with a
// completion (an empty one with Count 0). The workers must have flushed.
func (s *seriesSet) points() []SeriesPoint {
	if s == nil {
		return nil
	}
	pts := make([]SeriesPoint, 0, len(s.hs))
	for i, h := range s.hs {
		p := SeriesPoint{StartUnixNs: s.start.Add(time.Duration(i) * s.interval).UnixNano(), IntervalNs: int64(s.interval)}
		if h != nil && h.Count() > 0 {
			p.Count = h.Count()
			p.P50Ns, p.P99Ns, p.MaxNs = h.Quantile(0.5), h.Quantile(0.99), h.Max()
		}
		pts = append(pts, p)
	}
	return pts
}
