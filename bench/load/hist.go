package load

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram ranges: nanoseconds from 1 ns to one minute, 3 significant digits
// (every recorded value is within 0.1 % of the value it is counted as).
const (
	HistogramLowestNs   = 1
	HistogramHighestNs  = int64(time.Minute)
	HistogramSigFigures = 3
)

// Histogram is an HdrHistogram of durations in nanoseconds. Each goroutine
// records into its own (hdrhistogram-go is not safe for concurrent writers);
// they are merged when the run ends. In JSON it is the standard V2 compressed,
// base64 encoding that every HdrHistogram implementation decodes.
type Histogram struct {
	h *hdrhistogram.Histogram
}

// NewHistogram returns an empty histogram with the package's range.
func NewHistogram() *Histogram { return newHistogram(HistogramSigFigures) }

func newHistogram(sigFigures int) *Histogram {
	return &Histogram{h: hdrhistogram.New(HistogramLowestNs, HistogramHighestNs, sigFigures)}
}

// seriesSigFigures is the resolution of a time series' per-interval
// histograms: 2 significant digits (within 1 %), which a plot of p50, p99
// and max per interval cannot show finer: 30 KB for each interval of a
// phase, against 216 KB at 3 digits.
const seriesSigFigures = 2

// Record adds one duration, clamped into the histogram's range (a negative
// duration, impossible with a monotonic clock, counts as 1 ns; anything above
// a minute counts as a minute — and a minute-long append fails the run long
// before through the store's own timeouts).
func (h *Histogram) Record(d time.Duration) {
	ns := min(max(int64(d), HistogramLowestNs), HistogramHighestNs)
	_ = h.h.RecordValue(ns) // in range by construction
}

// Merge adds every count of from into h.
func (h *Histogram) Merge(from *Histogram) {
	if from != nil {
		h.h.Merge(from.h)
	}
}

// Count is the number of recorded values.
func (h *Histogram) Count() int64 { return h.h.TotalCount() }

// Quantile returns the value at quantile q (0.5 for the median), in ns: the
// highest value equivalent to the recorded value at that rank, so it never
// understates a latency.
func (h *Histogram) Quantile(q float64) int64 {
	if h.h.TotalCount() == 0 {
		return 0
	}
	return h.h.ValueAtQuantile(q * 100)
}

// Quantiles returns the values at quantiles qs (each as Quantile would),
// in one pass over the counts.
func (h *Histogram) Quantiles(qs []float64) []int64 {
	ps := make([]float64, len(qs))
	for i, q := range qs {
		ps[i] = 100 * q
	}
	return h.h.ValueAtPercentilesSlice(ps)
}

// Max is the largest recorded value (ns, at the histogram's precision).
func (h *Histogram) Max() int64 { return h.h.Max() }

// Mean is the mean of the recorded values in ns.
func (h *Histogram) Mean() float64 { return h.h.Mean() }

// Percentiles are the figures every latency table shows, in ns.
type Percentiles struct {
	Count  int64   `json:"count"`
	MeanNs float64 `json:"meanNs"`
	P50Ns  int64   `json:"p50Ns"`
	P90Ns  int64   `json:"p90Ns"`
	P99Ns  int64   `json:"p99Ns"`
	P999Ns int64   `json:"p999Ns"`
	// P9999Ns is p99.99.
	P9999Ns int64 `json:"p9999Ns"`
	MaxNs   int64 `json:"maxNs"`
}

// Percentiles summarizes the histogram.
func (h *Histogram) Percentiles() Percentiles {
	if h == nil || h.Count() == 0 {
		return Percentiles{}
	}
	return Percentiles{Count: h.Count(), MeanNs: h.Mean(), P50Ns: h.Quantile(0.50), P90Ns: h.Quantile(0.90),
		P99Ns: h.Quantile(0.99), P999Ns: h.Quantile(0.999), P9999Ns: h.Quantile(0.9999), MaxNs: h.Max()}
}

// SpectrumPoint is one point of the percentile spectrum: the latency at a
// percentile, with 1/(1−percentile) for HdrHistogram's log axis.
type SpectrumPoint struct {
	Percentile float64 // 0..100
	ValueNs    int64
}

// Spectrum returns the percentile distribution with ticksPerHalfDistance
// points per halving of the remaining tail (HdrHistogram's iteration).
func (h *Histogram) Spectrum(ticksPerHalfDistance int32) []SpectrumPoint {
	var pts []SpectrumPoint
	for _, b := range h.h.CumulativeDistributionWithTicks(ticksPerHalfDistance) {
		pts = append(pts, SpectrumPoint{Percentile: b.Quantile, ValueNs: b.ValueAt})
	}
	return pts
}

// WriteHgrm writes the percentile distribution in the text format of
// HdrHistogram's outputPercentileDistribution (what its online plotter
// reads), with values in microseconds.
func (h *Histogram) WriteHgrm(w io.Writer) error {
	_, err := h.h.PercentilesPrint(w, 5, 1000)
	return err
}

// MarshalJSON encodes the histogram as V2 compressed base64 text.
func (h *Histogram) MarshalJSON() ([]byte, error) {
	if h == nil || h.h == nil {
		return []byte("null"), nil
	}
	b, err := h.h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		return nil, fmt.Errorf("encode histogram: %w", err)
	}
	return json.Marshal(string(b))
}

// UnmarshalJSON decodes what MarshalJSON wrote.
func (h *Histogram) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("histogram: %w", err)
	}
	d, err := hdrhistogram.Decode([]byte(s))
	if err != nil {
		return fmt.Errorf("decode histogram: %w", err)
	}
	h.h = d
	return nil
}

// Equal reports whether both histograms hold the same counts.
func (h *Histogram) Equal(o *Histogram) bool { return h.h.Equals(o.h) }

// Merged returns a new histogram holding the counts of all of hs.
func Merged(hs ...*Histogram) *Histogram {
	m := NewHistogram()
	for _, h := range hs {
		m.Merge(h)
	}
	return m
}
