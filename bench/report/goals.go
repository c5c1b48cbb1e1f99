package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mqstore/mqstore/bench/runfile"
)

// Issue 15's goals, evaluated from the run's own figures: each is "met"
// when the intervals clear the bar, "not met" when they miss it, and "not
// determined" when the intervals straddle it or the run lacks the cells.

// Verdicts.
const (
	GoalMet           = "met"
	GoalNotMet        = "not met"
	GoalNotDetermined = "not determined"
)

// goalSize is the body size the goals are stated at.
const goalSize = 1024

// Goal is one evaluated goal (or part of one).
type Goal struct {
	Goal    string
	Bar     string
	Figures string
	Verdict string
}

// atMost is the verdict of "x ≤ bar" for an interval [lo, hi] of x.
func atMost(lo, hi, bar float64) string {
	switch {
	case hi <= bar:
		return GoalMet
	case lo > bar:
		return GoalNotMet
	}
	return GoalNotDetermined
}

// atLeast is the verdict of "x ≥ bar" for an interval [lo, hi] of x.
func atLeast(lo, hi, bar float64) string {
	switch {
	case lo >= bar:
		return GoalMet
	case hi < bar:
		return GoalNotMet
	}
	return GoalNotDetermined
}

// all combines verdicts: not met when one is, met when every one is.
func all(vs ...string) string {
	if len(vs) == 0 {
		return GoalNotDetermined
	}
	out := GoalMet
	for _, v := range vs {
		switch v {
		case GoalNotMet:
			return GoalNotMet
		case GoalNotDetermined:
			out = GoalNotDetermined
		}
	}
	return out
}

// ratioRange is a ÷ b with the widest ratio the intervals allow.
func ratioRange(a, b runfile.Interval) (med, lo, hi float64) {
	if b.Median <= 0 || b.Lo <= 0 || b.Hi <= 0 {
		return 0, 0, 0
	}
	return a.Median / b.Median, a.Lo / b.Hi, a.Hi / b.Lo
}

func fmtRatio(med, lo, hi float64) string {
	return withRange(med, lo, hi, func(x float64) string { return fmtFloat(x) + "×" })
}

// goalCell finds mqstore's (or a peer's) unreplicated, unpressured 1 KiB
// cell of a workload, flush and producer count (or rate) on target.
func goalCell(f *runfile.RunFile, peer bool, backend, workload, flush, target string, producers int, rate float64) *runfile.Cell {
	for _, c := range allCells(f) {
		if c.Peer == peer && c.Backend == backend && c.Workload == workload && c.Flush == flush && c.Target == target && c.SizeBytes == goalSize &&
			c.Producers == producers && c.RatePerSec == rate && c.Pressure == "none" && c.Replication == "" && c.Policy == "" && c.TwinOf == "" {
			return c
		}
	}
	return nil
}

func goalLimit(f *runfile.RunFile, name, target string) *runfile.Limit {
	for i := range f.Limits {
		if l := &f.Limits[i]; l.Name == name && l.Target == target && l.Status == runfile.StatusOK {
			return l
		}
	}
	return nil
}

// Goals evaluates issue 15's goals on each target of the run.
func Goals(f *runfile.RunFile) []Goal {
	var out []Goal
	targets := []string{}
	for _, c := range f.Cells {
		if c.SizeBytes == goalSize && !slices.Contains(targets, c.Target) {
			targets = append(targets, c.Target)
		}
	}
	backends := f.Config.Backends
	for _, t := range targets {
		at := ""
		if len(targets) > 1 {
			at = " @" + t
		}
		// 1. sync, 1 producer: p50 ≤ 1.3 × the pre-written probe's p50.
		probe := goalLimit(f, runfile.LimitDeviceSyncPrewritten, t)
		for _, b := range backends {
			g := Goal{Goal: "sync, 1 producer: " + b + at, Bar: "p50 ≤ 1.3 × device-fdatasync-4k-prewritten p50"}
			c := goalCell(f, false, b, "throughput", "sync", t, 1, 0)
			switch {
			case c == nil || !c.Measured():
				g.Figures, g.Verdict = "no measured 1 KiB sync cell at 1 producer in this run", GoalNotDetermined
			case probe == nil:
				g.Figures, g.Verdict = "no device-fdatasync-4k-prewritten probe in this run", GoalNotDetermined
			default:
				m, lo, hi := ratioRange(c.Interval("p50Ns"), probe.Interval("p50Ns"))
				g.Figures = fmt.Sprintf("p50 %s; probe %s; ratio %s", ci(c.Interval("p50Ns"), fmtNsF), ci(probe.Interval("p50Ns"), fmtNsF), fmtRatio(m, lo, hi))
				g.Verdict = atMost(lo, hi, 1.3)
			}
			out = append(out, g)
		}
		// 2. sync, 16/64/256 producers: uring-direct ≥ every other backend,
		// ≥ 1.2 × pebble-wal, p99 ≤ pebble-wal's.
		var counts []int
		for _, p := range []int{16, 64, 256} {
			if slices.Contains(f.Config.Producers, p) {
				counts = append(counts, p)
			}
		}
		if len(counts) == 0 {
			out = append(out, Goal{Goal: "sync, 16 / 64 / 256 producers: uring-direct" + at, Bar: "msgs/s ≥ every other backend's and ≥ 1.2 × pebble-wal's; p99 ≤ pebble-wal's",
				Figures: "none of these producer counts in this run (--producers)", Verdict: GoalNotDetermined})
		}
		for _, p := range counts {
			g := Goal{Goal: fmt.Sprintf("sync, %d producers: uring-direct%s", p, at), Bar: "msgs/s ≥ every other backend's and ≥ 1.2 × pebble-wal's; p99 ≤ pebble-wal's"}
			ud := goalCell(f, false, "uring-direct", "throughput", "sync", t, p, 0)
			pw := goalCell(f, true, refPeer, "throughput", "sync", t, p, 0)
			if ud == nil || !ud.Measured() {
				g.Figures, g.Verdict = fmt.Sprintf("no measured uring-direct sync cell at %d producers", p), GoalNotDetermined
				out = append(out, g)
				continue
			}
			var parts, verdicts []string
			udT := ud.Interval("msgsPerSec")
			for _, b := range backends {
				if b == "uring-direct" || b == "mem" {
					continue
				}
				o := goalCell(f, false, b, "throughput", "sync", t, p, 0)
				if o == nil || !o.Measured() {
					parts, verdicts = append(parts, b+": not measured"), append(verdicts, GoalNotDetermined)
					continue
				}
				oT := o.Interval("msgsPerSec")
				v := GoalNotDetermined // the intervals overlap
				switch {
				case udT.Lo >= oT.Hi:
					v = GoalMet
				case udT.Hi < oT.Lo:
					v = GoalNotMet
				}
				parts, verdicts = append(parts, fmt.Sprintf("%s %s (%s)", b, ci(oT, fmtCount), v)), append(verdicts, v)
			}
			if pw == nil || !pw.Measured() {
				parts, verdicts = append(parts, "pebble-wal: not measured"), append(verdicts, GoalNotDetermined)
			} else {
				m, lo, hi := ratioRange(udT, pw.Interval("msgsPerSec"))
				v1 := atLeast(lo, hi, 1.2)
				udP, pwP := ud.Interval("p99Ns"), pw.Interval("p99Ns")
				v2 := GoalNotDetermined
				switch {
				case udP.Hi <= pwP.Lo:
					v2 = GoalMet
				case udP.Lo > pwP.Hi:
					v2 = GoalNotMet
				}
				parts = append(parts, fmt.Sprintf("÷ pebble-wal %s (%s)", fmtRatio(m, lo, hi), v1),
					fmt.Sprintf("p99 %s vs pebble-wal's %s (%s)", ci(udP, fmtNsF), ci(pwP, fmtNsF), v2))
				verdicts = append(verdicts, v1, v2)
			}
			g.Figures = fmt.Sprintf("uring-direct %s msgs/s; %s", ci(udT, fmtCount), strings.Join(parts, "; "))
			g.Verdict = all(verdicts...)
			out = append(out, g)
		}
		// 3. async: uring-direct durable MB/s ≥ 0.9 × the O_DIRECT probe.
		{
			g := Goal{Goal: "async: uring-direct durable MB/s" + at, Bar: "≥ 0.9 × device-seq-write MB/s"}
			var best *runfile.Cell
			for _, c := range allCells(f) {
				if c.Backend == "uring-direct" && !c.Peer && c.Workload == "throughput" && c.Flush == "async" && c.Target == t && c.SizeBytes == goalSize &&
					c.Pressure == "none" && c.Replication == "" && c.Policy == "" && c.TwinOf == "" && c.Measured() && (best == nil || c.DurableMBps > best.DurableMBps) {
					best = c
				}
			}
			seq := goalLimit(f, runfile.LimitDeviceSeq, t)
			switch {
			case best == nil:
				g.Figures, g.Verdict = "no measured 1 KiB uring-direct async throughput cell", GoalNotDetermined
			case seq == nil:
				g.Figures, g.Verdict = "no device-seq-write probe in this run", GoalNotDetermined
			default:
				m, lo, hi := ratioRange(best.Interval("durableMBps"), seq.Interval("mbPerSec"))
				g.Figures = fmt.Sprintf("%s MB/s at %d producers (the best); probe %s MB/s; ratio %s", ci(best.Interval("durableMBps"), fmtFloat), best.Producers,
					ci(seq.Interval("mbPerSec"), fmtFloat), fmtRatio(m, lo, hi))
				g.Verdict = atLeast(lo, hi, 0.9)
			}
			out = append(out, g)
		}
		// 4. async end to end: p50 ≤ 1 ms for every backend at the same rate.
		var rates []float64
		for _, c := range f.Cells {
			if c.Workload == "e2e" && c.Flush == "async" && c.Target == t && c.SizeBytes == goalSize && c.Pressure == "none" && !slices.Contains(rates, c.RatePerSec) {
				rates = append(rates, c.RatePerSec)
			}
		}
		slices.Sort(rates)
		if len(rates) == 0 {
			out = append(out, Goal{Goal: "async end to end" + at, Bar: "p50 ≤ 1 ms for every backend at the same offered rate",
				Figures: "no 1 KiB async e2e cells in this run (--workloads e2e)", Verdict: GoalNotDetermined})
		}
		for _, rate := range rates {
			g := Goal{Goal: fmt.Sprintf("async end to end at %s msgs/s%s", fmtCount(rate), at), Bar: "p50 ≤ 1 ms for every backend"}
			var parts, verdicts []string
			for _, b := range backends {
				c := goalCell(f, false, b, "e2e", "async", t, 0, rate)
				if c == nil || !c.Measured() {
					parts, verdicts = append(parts, b+": not measured"), append(verdicts, GoalNotDetermined)
					continue
				}
				iv := c.Interval("p50Ns")
				v := atMost(iv.Lo, iv.Hi, 1e6)
				prefix := ""
				if c.Status == runfile.StatusSaturated {
					prefix = "≥ " // a lower bound: only "not met" can be concluded
					if v == GoalMet {
						v = GoalNotDetermined
					}
				}
				parts, verdicts = append(parts, fmt.Sprintf("%s %s%s (%s)", b, prefix, ci(iv, fmtNsF), v)), append(verdicts, v)
			}
			g.Figures, g.Verdict = strings.Join(parts, "; "), all(verdicts...)
			out = append(out, g)
		}
	}
	return out
}

func writeGoals(b *strings.Builder, f *runfile.RunFile) {
	goals := Goals(f)
	if len(goals) == 0 {
		return
	}
	b.WriteString("## Goals (issue 15: io_uring/O_DIRECT as the fastest durable path; 1 KiB)\n\n")
	b.WriteString("Each goal from this run's own figures (median [interval]): **met** when the interval clears the bar, **not met** when it misses it, **not determined** when the interval straddles the bar or the run lacks the cells (`make bench-durable` runs the sync table; async end to end needs `--workloads e2e`). Ratios carry the widest range the two intervals allow.\n\n")
	b.WriteString("| goal | bar | figures | verdict |\n|---|---|---|---|\n")
	for _, g := range goals {
		v := g.Verdict
		if v == GoalMet || v == GoalNotMet {
			v = "**" + v + "**"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", g.Goal, g.Bar, g.Figures, v)
	}
	b.WriteString("\n")
}
