package report

import (
	"fmt"
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
// figure, by the Mann-Whitney U test over their measured repeats
// (benchmath.AssumeNothing, as benchstat): Different when p < aaAlpha.
func aaComparisons(f *runfile.RunFile) []runfile.Comparison {
	out := []runfile.Comparison{}
	cells := allCells(f)
	thresholds := benchmath.Thresholds{CompareAlpha: aaAlpha}
	values := func(c *runfile.Cell, fig string) []float64 {
		return mapped(c.MeasuredRepeats(), func(r *runfile.Repeat) float64 { return r.Figures.Figure(fig) })
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
				out = append(out, runfile.Comparison{A: a.Name, B: twin.Name, Figure: fig, AInterval: a.Interval(fig), BInterval: twin.Interval(fig),
					P: cmp.P, N: min(len(xa), len(xb)), Different: cmp.P < aaAlpha})
			}
		}
	}
	return out
}

// uTestMinP is the smallest p the U test can reach with n repeats on
// each side (both samples entirely apart): 2 / C(2n, n).
func uTestMinP(n int) float64 {
	c := 1.0
	for i := 1; i <= n; i++ {
		c = c * float64(n+i) / float64(i)
	}
	return 2 / c
}

func writeAA(b *strings.Builder, f *runfile.RunFile) {
	if len(f.AA) == 0 {
		return
	}
	b.WriteString("## A/A check (one cell measured twice, as if two systems)\n\n")
	t := newTable(b, "cell", "figure", "A>", "A again>", "U test>", "verdict")
	different, n := 0, 0
	for _, c := range f.AA {
		verdict := "no significant difference ✓"
		if c.Different {
			verdict = "**called different ✗**"
			different++
		}
		n = max(n, c.N)
		t.row(c.A, c.Figure, ci(c.AInterval, figFormat(c.Figure)), ci(c.BInterval, figFormat(c.Figure)), fmt.Sprintf("p = %.2f (n = %d)", c.P, c.N), verdict)
	}
	if different > 0 {
		fmt.Fprintf(b, "\n**The harness called an identical cell different in %d of %d figure(s)**: this run's differences of that size are not to be trusted (a noisy machine, or drift across the run).\n\n", different, len(f.AA))
		return
	}
	fmt.Fprintf(b, "\nThe U test (α = %.2f) does not call the twin different in any of %d figures. With %d repeats a side the smallest p it can reach is %.3f: it calls a difference only when the two sets of repeats barely overlap. This shows the harness did not invent a difference of that size in this run; it says nothing about smaller ones, and each figure had a %.0f %% chance of a false call by chance alone.\n\n",
		aaAlpha, len(f.AA), n, uTestMinP(n), 100*aaAlpha)
}
