package runfile

import (
	"math"
	"slices"

	"golang.org/x/perf/benchmath"
)

// CILevel is the confidence level the intervals aim for. With fewer than
// six samples no order-statistic interval reaches it, and the interval is
// the whole range (min–max) at the level it has (93.75 % for five).
const CILevel = 0.95

// Median returns the median of xs (the mean of the middle two when even).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// MedianCI returns the median of xs and a distribution-free confidence
// interval of it at CILevel — benchmath's (the order statistics benchstat
// reports) — or, when too few samples give one, the whole range min–max
// at the coverage it has (1 − 2^(1−n): 93.75 % for five). level is the
// interval's true coverage. It assumes independent repeats — which is why
// the repeats are interleaved and shuffled rather than back to back.
func MedianCI(xs []float64) (median, lo, hi, level float64) {
	n := len(xs)
	if n == 0 {
		return 0, 0, 0, 0
	}
	s := benchmath.NewSample(slices.Clone(xs), &benchmath.DefaultThresholds)
	if n == 1 {
		return s.Values[0], s.Values[0], s.Values[0], 0
	}
	sum := benchmath.AssumeNothing.Summary(s, CILevel)
	if math.IsInf(sum.Lo, 0) || math.IsInf(sum.Hi, 0) {
		return sum.Center, s.Values[0], s.Values[n-1], 1 - math.Pow(2, float64(1-n))
	}
	return sum.Center, sum.Lo, sum.Hi, sum.Confidence
}

// Interval is a median with its confidence interval and the interval's
// coverage (0: a single measurement, no interval at all).
type Interval struct {
	Median, Lo, Hi float64
	Level          float64 `json:",omitempty"`
}

// Separated reports whether two intervals do not overlap: only then is a
// difference between the two medians called (otherwise: "no significant
// difference"). A single measurement has no interval and separates from
// nothing.
func Separated(a, b Interval) bool {
	if a.Level == 0 || b.Level == 0 {
		return false
	}
	return a.Hi < b.Lo || b.Hi < a.Lo
}
