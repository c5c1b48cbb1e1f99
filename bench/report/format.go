package report

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench/runfile"
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

// fmtBytes formats a byte count in kB, MB or GB (10^3, 10^6, 10^9).
func fmtBytes(n float64) string {
	switch a := math.Abs(n); {
	case a >= 1e9:
		return fmt.Sprintf("%.3g GB", n/1e9)
	case a >= 1e6:
		return fmt.Sprintf("%.3g MB", n/1e6)
	case a >= 1e3:
		return fmt.Sprintf("%.3g kB", n/1e3)
	}
	return fmt.Sprintf("%.0f B", n)
}

// ci shows a median with its confidence interval: "412k [398k–420k]"; just
// the median when the interval is a point.
func ci(iv runfile.Interval, f func(float64) string) string {
	return withRange(iv.Median, iv.Lo, iv.Hi, f)
}

func fmtNsF(x float64) string { return fmtNs(int64(x)) }

// figFormat is how a figure is shown: durations, counts, else small floats.
func figFormat(figure string) func(float64) string {
	switch {
	case strings.HasSuffix(figure, "Ns"):
		return fmtNsF
	case figure == "msgsPerSec":
		return fmtCount
	}
	return fmtFloat
}

// ratioRange shows a ratio and the widest the intervals allow: "1.2× [1.1×–1.3×]".
func ratioRange(r runfile.Ratio) string {
	if r.Missing != "" {
		return "—"
	}
	return withRange(r.Median, r.Low, r.High, func(x float64) string { return fmtFloat(x) + "×" })
}

// pctText writes a share that a rule uses as its threshold as a
// percentage: 0.1 is "10 %".
func pctText(share float64) string { return fmt.Sprintf("%.3g %%", 100*share) }

func fmtPct(x float64) string {
	switch a := math.Abs(100 * x); {
	case a == 0:
		return "0"
	case a >= 10:
		return fmt.Sprintf("%.0f%%", 100*x)
	}
	return fmt.Sprintf("%.2g%%", 100*x)
}

// orDash is s when ok, else "—" (no figure).
func orDash(ok bool, s string) string {
	if ok {
		return s
	}
	return "—"
}

func shortCommit(c string) string {
	if len(c) >= 12 && !strings.Contains(c, " ") {
		return c[:12]
	}
	return c
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// table is a markdown table being written: newTable writes the header —
// a column whose name ends in ">" holds numbers and is right-aligned —
// and row one row; a row with another number of cells is a programming
// error (it would render as a broken table) and panics.
type table struct {
	b *strings.Builder
	n int
}

func newTable(b *strings.Builder, heads ...string) table {
	head, sep := "|", "|"
	for _, h := range heads {
		name, right := strings.CutSuffix(h, ">")
		head += " " + name + " |"
		sep += map[bool]string{true: "---:|", false: "---|"}[right]
	}
	b.WriteString(head + "\n" + sep + "\n")
	return table{b: b, n: len(heads)}
}

func (t table) row(cells ...string) {
	if len(cells) != t.n {
		panic(fmt.Sprintf("report: a table row of %d cells in a table of %d columns", len(cells), t.n))
	}
	t.b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
}
