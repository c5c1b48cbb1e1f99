package runfile

import (
	"math"
	"slices"
	"sort"
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
	s := slices.Clone(xs)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	n := len(s)
	return (s[n/2-1] + s[n/2]) / 2
}

// MedianCI returns the median of xs and a distribution-free confidence
// interval of it: the order statistics [x(k), x(n+1−k)] with the largest k
// whose coverage 1 − 2·P(Binomial(n, ½) ≤ k−1) is at least CILevel (the
// interval benchstat reports), or min–max when even that falls short. level
// is the interval's true coverage. It assumes independent repeats — which
// is why the repeats are interleaved and shuffled rather than back to back.
func MedianCI(xs []float64) (median, lo, hi, level float64) {
	n := len(xs)
	if n == 0 {
		return 0, 0, 0, 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	median = Median(s)
	if n == 1 {
		return median, s[0], s[0], 0
	}
	k := 1
	for cand := 2; cand <= n/2; cand++ {
		if coverage(n, cand) >= CILevel {
			k = cand
		} else {
			break
		}
	}
	return median, s[k-1], s[n-k], coverage(n, k)
}

// coverage is the probability that [x(k), x(n+1−k)] holds the median of the
// distribution: 1 − 2·P(Bin(n, ½) ≤ k−1).
func coverage(n, k int) float64 {
	var tail float64
	for i := 0; i < k; i++ {
		tail += binom(n, i)
	}
	return 1 - 2*tail/math.Pow(2, float64(n))
}

func binom(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
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
