package report

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"golang.org/x/perf/benchmath"

	"github.com/mqstore/mqstore/bench/runfile"
)

var aaFigures = map[string][]string{
	"throughput": {"msgsPerSec", "durableMBps", "p99Ns"},
	"latency":    {"p50Ns", "p99Ns", "p999Ns"},
	"e2e":        {"p50Ns", "p99Ns", "p999Ns"},
}

const aaAlpha = 0.05

// aaComparisons compares each A/A twin with the cell it repeats, figure by
// figure: their intervals of the median, summarized from their measured
// repeats as the harness summarizes every cell (runfile.Summarize: the
// tables' figures) — the A/A verdict is the rule of the summary's
// verdicts (the ÷ pebble-wal tables, compare, the recommendation),
// runfile.Separated, applied by writeAA to AInterval and BInterval — and,
// for information, the Mann-Whitney U test over the same repeats
// (benchmath.AssumeNothing, as benchstat): P, and Different when
// p < aaAlpha, the field's documented meaning.
func aaComparisons(f *runfile.RunFile) []runfile.Comparison {
	out := []runfile.Comparison{}
	cells := allCells(f)
	thresholds := benchmath.Thresholds{CompareAlpha: aaAlpha}
	values := func(c *runfile.Cell, fig string) []float64 {
		return mapped(c.MeasuredRepeats(), func(r *runfile.Repeat) float64 { return r.Figures.Figure(fig) })
	}
	interval := func(c *runfile.Cell, fig string) runfile.Interval {
		s := runfile.Summarize(mapped(c.MeasuredRepeats(), func(r *runfile.Repeat) runfile.Figures { return r.Figures }))
		summarized := runfile.Cell{Figures: s.Median, CILow: s.CILow, CIHigh: s.CIHigh, CILevel: s.CILevel}
		return summarized.Interval(fig)
	}
	for _, twin := range cells {
		if twin.TwinOf == "" || !twin.Measured() {
			continue
		}
		for _, a := range cells {
			if a.Name != twin.TwinOf || !a.Measured() {
				continue
			}
			for _, fig := range aaFigures[a.Workload] {
				if a.Figures.Figure(fig) == 0 && twin.Figures.Figure(fig) == 0 {
					continue
				}
				xa, xb := values(a, fig), values(twin, fig)
				cmp := benchmath.AssumeNothing.Compare(benchmath.NewSample(xa, &thresholds), benchmath.NewSample(xb, &thresholds))
				out = append(out, runfile.Comparison{A: a.Name, B: twin.Name, Figure: fig, AInterval: interval(a, fig), BInterval: interval(twin, fig),
					P: cmp.P, N: min(len(xa), len(xb)), Different: cmp.P < aaAlpha})
			}
		}
	}
	return out
}

// binomial is C(n, k) as a float64.
func binomial(n, k int) float64 {
	if k < 0 || k > n {
		return 0
	}
	c := 1.0
	for i := 1; i <= k; i++ {
		c = c * float64(n-k+i) / float64(i)
	}
	return c
}

// uTestMinP is the smallest p the two-sided U test can reach with na and
// nb repeats (the two sets of repeats entirely apart): 2 / C(na+nb, na).
func uTestMinP(na, nb int) float64 { return min(1, 2/binomial(na+nb, na)) }

// medianCIOrders are the 1-based order statistics runfile.MedianCI takes
// as the interval of the median of n values (0, 0 when n < 2: no
// interval).
func medianCIOrders(n int) (lo, hi int) {
	if n < 2 {
		return 0, 0
	}
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	_, l, h, _ := runfile.MedianCI(xs)
	return int(math.Round(l)), int(math.Round(h))
}

// separateByChance is the probability that the intervals of the median of
// na and nb repeats of one and the same figure separate (runfile.
// Separated), for independent, identically distributed repeats of a
// continuous figure: every order of the na+nb values is equally likely,
// and A's interval lies below B's when the hiA-th smallest of A comes
// before the loB-th smallest of B — when at least hiA of the first
// hiA+loB−1 values are A's. Ties only make separation rarer (Separated
// wants a strict gap), so it is an upper bound for any such repeats.
func separateByChance(na, nb int) float64 {
	loA, hiA := medianCIOrders(na)
	loB, hiB := medianCIOrders(nb)
	if hiA == 0 || hiB == 0 {
		return 0 // a single repeat has no interval and separates from nothing
	}
	below := func(n1, hi1, n2, lo2 int) float64 { // P(the hi1-th of n1 before the lo2-th of n2)
		m, p := hi1+lo2-1, 0.0
		for j := hi1; j <= min(n1, m); j++ {
			p += binomial(m, j) * binomial(n1+n2-m, n1-j)
		}
		return p / binomial(n1+n2, n1)
	}
	return below(na, hiA, nb, loB) + below(nb, hiB, na, loA)
}

// aaSides are the measured repeats of the two cells a comparison relates
// (its N for both when a cell is not in the run).
func aaSides(f *runfile.RunFile, c runfile.Comparison) (na, nb int) {
	na, nb = c.N, c.N
	for _, cell := range allCells(f) {
		switch cell.Name {
		case c.A:
			na = len(cell.MeasuredRepeats())
		case c.B:
			nb = len(cell.MeasuredRepeats())
		}
	}
	return na, nb
}

// repeatsText is "With n repeats a side" or "With na and nb repeats".
func repeatsText(na, nb int) string {
	if na == nb {
		return fmt.Sprintf("With %d %s a side", na, plural(na, "repeat", "repeats"))
	}
	return fmt.Sprintf("With %d and %d repeats", na, nb)
}

// writeAA is the A/A check: the twin judged by the rule of the summary's
// verdicts (a difference only where the two intervals of the median
// separate), the chance that this rule calls two identical cells different
// at the run's repeats, and the U test's p for information — saying so
// when at that number of repeats it cannot reach α at all.
func writeAA(b *strings.Builder, f *runfile.RunFile) {
	if len(f.AA) == 0 {
		return
	}
	b.WriteString("## A/A check (one cell measured twice, as if two systems)\n\n")
	t := newTable(b, "cell", "figure", "A>", "A again>", "U test>", "verdict")
	type sides struct{ na, nb int }
	var ns []sides
	separated, noInterval, uCalls := 0, 0, 0
	for _, c := range f.AA {
		na, nb := aaSides(f, c)
		if !slices.Contains(ns, sides{na, nb}) {
			ns = append(ns, sides{na, nb})
		}
		verdict := "no significant difference ✓"
		switch {
		case c.AInterval.Level == 0 || c.BInterval.Level == 0:
			verdict = "— (one measured repeat: no interval, nothing can be called)"
			noInterval++
		case runfile.Separated(c.AInterval, c.BInterval):
			verdict = "**called different ✗** (intervals separate)"
			separated++
		}
		u := fmt.Sprintf("p = %.2f (n = %d)", c.P, c.N)
		if uTestMinP(na, nb) >= aaAlpha {
			u += "; cannot reach α"
		}
		if c.Different {
			uCalls++
		}
		t.row(c.A, c.Figure, ci(c.AInterval, figFormat(c.Figure)), ci(c.BInterval, figFormat(c.Figure)), u, verdict)
	}
	b.WriteString("\n")
	var chance []string
	for _, s := range ns {
		chance = append(chance, fmt.Sprintf("%s, two intervals of one and the same figure separate by chance alone with a probability of at most %s (independent, identically distributed repeats)",
			repeatsText(s.na, s.nb), probText(separateByChance(s.na, s.nb))))
	}
	rule := "a difference is called only where the two confidence intervals of the median over the repeats separate, as in the ÷ pebble-wal tables, `mqbench compare` and the recommendation"
	switch {
	case separated > 0:
		fmt.Fprintf(b, "**The harness called an identical cell different in %d of %d figure(s)** (%s): this run's differences of that size are not to be trusted (a noisy machine, or drift across the run). %s per figure.",
			separated, len(f.AA), rule, strings.Join(chance, "; "))
	case noInterval == len(f.AA):
		fmt.Fprintf(b, "With one measured repeat there is no interval: this check cannot call anything, identical or not.")
	default:
		fmt.Fprintf(b, "No difference is called in any of the %d figures (%s). %s per figure: this shows the harness did not invent a difference large enough to separate the intervals in this run; it says nothing about smaller ones.",
			len(f.AA)-noInterval, rule, strings.Join(chance, "; "))
	}
	b.WriteString(" " + uTestText(ns[0].na, ns[0].nb, uCalls, len(f.AA)))
	for _, s := range ns[1:] {
		b.WriteString(" " + uTestText(s.na, s.nb, -1, 0))
	}
	b.WriteString("\n\n")
}

// uTestText says what the U test's column is: information beside the
// verdict, how small its p can get at the run's repeats, and how many
// figures it would call different (calls < 0: not said).
func uTestText(na, nb, calls, figures int) string {
	minP := uTestMinP(na, nb)
	s := fmt.Sprintf("The U test column is the Mann-Whitney U test over the repeats (α = %.2f), for information. %s the smallest p it can reach is %.3f (the two sets of repeats entirely apart)",
		aaAlpha, repeatsText(na, nb), minP)
	if minP >= aaAlpha {
		return s + ", not below α: with so few repeats it cannot call any difference."
	}
	if calls < 0 {
		return s + "."
	}
	return s + fmt.Sprintf("; it gives p < α in %d of %d figures.", calls, figures)
}

// probText writes a probability as a percentage with two significant
// digits ("0" for none).
func probText(p float64) string {
	if p == 0 {
		return "0"
	}
	return fmt.Sprintf("%.2g %%", 100*p)
}
