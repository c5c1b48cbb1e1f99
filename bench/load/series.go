package load

import "time"

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

// series is one worker's per-interval histograms.
type series struct {
	start    time.Time
	interval time.Duration
	hs       []*Histogram
}

func newSeries(start time.Time, interval time.Duration) *series {
	if interval <= 0 {
		return nil
	}
	return &series{start: start, interval: interval}
}

// record adds a latency that completed at done.
func (s *series) record(done time.Time, d time.Duration) {
	if s == nil {
		return
	}
	i := max(int(done.Sub(s.start)/s.interval), 0)
	if i >= len(s.hs) {
		s.hs = append(s.hs, make([]*Histogram, i+1-len(s.hs))...)
	}
	if s.hs[i] == nil {
		s.hs[i] = newHistogram(seriesSigFigures)
	}
	s.hs[i].Record(d)
}

// mergeSeries folds the workers' series into points.
func mergeSeries(ss []*series) []SeriesPoint {
	var merged []*Histogram
	var start time.Time
	var interval time.Duration
	for _, s := range ss {
		if s == nil {
			continue
		}
		start, interval = s.start, s.interval
		for i, h := range s.hs {
			for len(merged) <= i {
				merged = append(merged, newHistogram(seriesSigFigures))
			}
			merged[i].Merge(h)
		}
	}
	pts := make([]SeriesPoint, 0, len(merged))
	for i, h := range merged {
		p := SeriesPoint{StartUnixNs: start.Add(time.Duration(i) * interval).UnixNano(), IntervalNs: int64(interval), Count: h.Count()}
		if p.Count > 0 {
			p.P50Ns, p.P99Ns, p.MaxNs = h.Quantile(0.5), h.Quantile(0.99), h.Max()
		}
		pts = append(pts, p)
	}
	return pts
}
