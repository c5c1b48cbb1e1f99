package bench

import (
	"fmt"
	"math"
	"time"
)

// fmtCount formats a rate or count with a k/M suffix and 3–4 significant digits.
func fmtCount(x float64) string {
	switch a := math.Abs(x); {
	case a >= 1e6:
		return fmt.Sprintf("%.3gM", x/1e6)
	case a >= 1e3:
		return fmt.Sprintf("%.3gk", x/1e3)
	case a >= 10 || a == 0:
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.2g", x)
}

// fmtNs formats nanoseconds as a duration with 3 significant digits.
func fmtNs(ns int64) string {
	d := time.Duration(ns)
	switch {
	case ns == 0:
		return "0"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", ns)
	case d < time.Millisecond:
		return fmt.Sprintf("%.3gµs", float64(ns)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.3gms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.3gs", float64(ns)/1e9)
}

// fmtFloat formats a small figure (CPU s/GiB, allocs/msg, ratios).
func fmtFloat(x float64) string {
	switch a := math.Abs(x); {
	case a == 0:
		return "0"
	case a >= 100:
		return fmt.Sprintf("%.0f", x)
	case a >= 0.01:
		return fmt.Sprintf("%.3g", x)
	}
	return fmt.Sprintf("%.2g", x)
}

// withRange shows a median and its repeats' spread: "412k [398k–420k]";
// just the median when there was one repeat or no spread.
func withRange(med, lo, hi float64, f func(float64) string) string {
	if lo == hi {
		return f(med)
	}
	return fmt.Sprintf("%s [%s–%s]", f(med), f(lo), f(hi))
}

func nsRange(med, lo, hi int64) string {
	return withRange(float64(med), float64(lo), float64(hi), func(x float64) string { return fmtNs(int64(x)) })
}

func sizeLabel(b int) string {
	switch {
	case b == 0:
		return ""
	case b%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", b>>20)
	case b%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}
