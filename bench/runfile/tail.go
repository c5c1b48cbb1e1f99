package runfile

import (
	"math"
	"slices"

	"github.com/aclements/go-moremath/stats"

	"github.com/mqstore/mqstore/bench/load"
)

// MinSamplesAbove: a percentile of a merged histogram with fewer samples
// above it than this is a bound ("≥"): shown as such, never a figure a
// rule decides on.
const MinSamplesAbove = 10

// TailQuantiles are the percentiles a tail reports, by figure name.
var TailQuantiles = []struct {
	Name string
	Q    float64
}{{"p50Ns", 0.50}, {"p90Ns", 0.90}, {"p99Ns", 0.99}, {"p999Ns", 0.999}, {"p9999Ns", 0.9999}, {"maxNs", 1}}

// Tail is a latency distribution's percentiles taken from the merged
// histogram of all measured repeats (not the median of per-repeat
// percentiles, which hides a stall seen in one repeat), each with the
// number of samples above it, a distribution-free confidence interval
// from the merged sample's order statistics (assuming independent
// samples), and the spread of the same percentile over the repeats.
type Tail struct {
	Count  int64       `json:"count"`
	Points []TailPoint `json:"points"`
}

// TailPoint is one percentile of a Tail.
type TailPoint struct {
	Name     string  `json:"name"`
	Quantile float64 `json:"quantile"`
	ValueNs  int64   `json:"valueNs"`
	// LoNs and HiNs bound ValueNs at CILevel; HiNs is the largest sample
	// when the interval's upper order statistic lies beyond the sample.
	LoNs int64 `json:"loNs"`
	HiNs int64 `json:"hiNs"`
	// Above is how many samples lie above the percentile; Bound is set
	// when they are fewer than MinSamplesAbove.
	Above int64 `json:"above"`
	Bound bool  `json:"bound,omitempty"`
	// RepeatMinNs and RepeatMaxNs are the lowest and highest of this
	// percentile over the measured repeats.
	RepeatMinNs int64 `json:"repeatMinNs"`
	RepeatMaxNs int64 `json:"repeatMaxNs"`
}

// TailOf merges the histograms (one per measured repeat; nil ones are
// skipped) and summarizes the merged distribution. It returns nil when
// nothing was recorded.
func TailOf(hs []*load.Histogram) *Tail {
	kept := slices.DeleteFunc(slices.Clone(hs), func(h *load.Histogram) bool { return h == nil || h.Count() == 0 })
	if len(kept) == 0 {
		return nil
	}
	m := load.Merged(kept...)
	n := m.Count()
	t := &Tail{Count: n}
	// Every rank the points need, resolved in one pass over the merged
	// counts: the value of the rank-th smallest sample (1-based) is the
	// value at quantile rank/n.
	var ranks, qs []float64
	rank := func(r int64) float64 { return float64(min(max(r, 1), n)) / float64(n) }
	cis := make([]stats.QuantileCIResult, len(TailQuantiles))
	for i, tq := range TailQuantiles {
		cis[i] = stats.QuantileCI(int(n), tq.Q, CILevel)
		ranks = append(ranks, rank(int64(math.Ceil(tq.Q*float64(n)))), rank(int64(cis[i].LoOrder)), rank(int64(cis[i].HiOrder)))
		qs = append(qs, tq.Q)
	}
	values := m.Quantiles(ranks)
	// perPoint[i] is point i's value in each repeat.
	perPoint := make([][]int64, len(TailQuantiles))
	for _, h := range kept {
		for i, v := range h.Quantiles(qs) {
			perPoint[i] = append(perPoint[i], v)
		}
	}
	mx := m.Max()
	for i, tq := range TailQuantiles {
		p := TailPoint{Name: tq.Name, Quantile: tq.Q}
		if tq.Q >= 1 {
			p.ValueNs, p.LoNs, p.HiNs, p.Bound = mx, mx, mx, true
		} else {
			p.ValueNs, p.LoNs, p.HiNs = values[3*i], values[3*i+1], values[3*i+2]
			p.Above = n - int64(math.Ceil(tq.Q*float64(n)))
			// Bound: too few samples above, or the interval reaches past
			// the largest sample.
			p.Bound = p.Above < MinSamplesAbove || int64(cis[i].HiOrder) > n
		}
		p.RepeatMinNs, p.RepeatMaxNs = slices.Min(perPoint[i]), slices.Max(perPoint[i])
		t.Points = append(t.Points, p)
	}
	return t
}

// Point returns the named percentile (nil: no tail or no such point).
func (t *Tail) Point(name string) *TailPoint {
	if t == nil {
		return nil
	}
	for i := range t.Points {
		if t.Points[i].Name == name {
			return &t.Points[i]
		}
	}
	return nil
}

// Interval is the point's value with its order-statistic interval.
func (p *TailPoint) Interval() Interval {
	return Interval{Median: float64(p.ValueNs), Lo: float64(p.LoNs), Hi: float64(p.HiNs), Level: CILevel}
}

// tailHistograms returns, for each measured repeat, the histogram a
// workload's percentiles come from (open loop: latency; e2e: delivery;
// closed loop: service time) and the service-time histogram.
func tailHistograms(workload string, reps []*Repeat) (lat, svc []*load.Histogram) {
	for _, r := range reps {
		res := &r.Result
		switch workload {
		case "latency", "floor":
			lat = append(lat, res.Latency)
		case "e2e":
			lat = append(lat, res.Delivery)
		default:
			lat = append(lat, res.Service)
		}
		svc = append(svc, res.Service)
	}
	return lat, svc
}

// SetTails computes the cell's Tail and ServiceTail from its measured
// repeats' histograms.
func (c *Cell) SetTails() {
	c.Tail, c.ServiceTail = nil, nil
	if !c.Measured() {
		return
	}
	lat, svc := tailHistograms(c.Workload, c.MeasuredRepeats())
	c.Tail = TailOf(lat)
	if c.Workload == "latency" || c.Workload == "e2e" {
		c.ServiceTail = TailOf(svc)
	}
}

// SetTail computes the floor's Tail from its measured repeats' latency.
func (fl *Floor) SetTail() {
	lat, _ := tailHistograms("floor", measuredRepeats(fl.Repeats))
	fl.Tail = TailOf(lat)
}

// MergedHistogram merges the histograms the cell's percentiles come from
// (as Tail's) over its measured repeats; nil when it has none.
func (c *Cell) MergedHistogram() *load.Histogram {
	lat, _ := tailHistograms(c.Workload, c.MeasuredRepeats())
	hs := slices.DeleteFunc(lat, func(h *load.Histogram) bool { return h == nil })
	if len(hs) == 0 {
		return nil
	}
	return load.Merged(hs...)
}
