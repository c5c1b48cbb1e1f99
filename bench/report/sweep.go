package report

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/mqstore/mqstore/bench/runfile"
)

// ParetoPoint is one policy's throughput and tail latency, with intervals.
type ParetoPoint struct {
	Label string
	// Thr: durable msgs/s (higher is better); P999: open-loop p99.9 at the
	// sweep's rate (lower is better).
	Thr, P999 runfile.Interval
}

// dominates reports whether q is at least as good as p on both figures and
// better on one, and their intervals separate on at least one: a policy is
// only dropped from the front by one that is measurably better.
func dominates(q, p ParetoPoint) bool {
	if !(q.Thr.Median >= p.Thr.Median && q.P999.Median <= p.P999.Median && (q.Thr.Median > p.Thr.Median || q.P999.Median < p.P999.Median)) {
		return false
	}
	return runfile.Separated(q.Thr, p.Thr) || runfile.Separated(q.P999, p.P999)
}

// ParetoFront returns the indices of the points no other point dominates,
// by increasing throughput.
func ParetoFront(pts []ParetoPoint) []int {
	var front []int
	for i, p := range pts {
		// No point dominates itself: it is better than itself on neither figure.
		if !slices.ContainsFunc(pts, func(q ParetoPoint) bool { return dominates(q, p) }) {
			front = append(front, i)
		}
	}
	sort.SliceStable(front, func(a, b int) bool { return pts[front[a]].Thr.Median < pts[front[b]].Thr.Median })
	return front
}

// sweepSeries is one backend × size × target × pressure of a sweep: each
// policy's throughput cell and its latency cell at the lowest rate; tail
// says which p99.9 every point of the series carries.
type sweepSeries struct {
	key    string
	cell   *runfile.Cell // the series' first cell: its backend, size, target, pressure
	points []ParetoPoint
	front  []int
	tail   string
}

// Which p99.9 a sweep series compares. One figure for every point of a
// series, so the front compares like with like: the open loop's latency
// when every policy's latency cell measured the store (none generator-
// bound); else the open loop's service time at the same rate, which the
// generator's late starts do not enter; else, with no latency cell for
// every policy, the closed loop's tail.
const (
	sweepTailLatency = "open-loop latency p99.9 at %s msgs/s"
	sweepTailService = "open-loop service-time p99.9 at %s msgs/s (the latency cells are generator-bound)"
	sweepTailClosed  = "closed-loop p99.9 at %d producers"
)

func sweepOf(f *runfile.RunFile) []sweepSeries {
	if len(f.Config.Policies) == 0 {
		return nil
	}
	key := func(c *runfile.Cell) string {
		return fmt.Sprintf("%s %s %s pressure=%s", c.Backend, runfile.SizeLabel(c.SizeBytes), c.Target, c.Pressure)
	}
	swept := slices.DeleteFunc(slices.Collect(ptrs(f.Cells)), func(c *runfile.Cell) bool {
		return c.Policy == "" || c.Status != runfile.StatusOK || c.TwinOf != "" || (c.Workload != "throughput" && c.Workload != "latency")
	})
	// Each policy's throughput cell with the most durable MB/s, and its
	// latency cell at the lowest rate.
	thr, lat := map[string]*runfile.Cell{}, map[string]*runfile.Cell{}
	for _, c := range swept {
		switch pk := key(c) + "|" + c.Policy; {
		case c.Workload == "throughput" && (thr[pk] == nil || c.DurableMBps > thr[pk].DurableMBps):
			thr[pk] = c
		case c.Workload == "latency" && (lat[pk] == nil || c.RatePerSec < lat[pk].RatePerSec):
			lat[pk] = c
		}
	}
	var out []sweepSeries
	for _, first := range firstByKey(swept, key) {
		s, k := sweepSeries{key: key(first), cell: first}, key(first)
		var ts, ls []*runfile.Cell
		for _, p := range f.Config.Policies {
			t := thr[k+"|"+p.Name]
			if t == nil || !strings.HasPrefix(k, t.Backend+" ") || (p.Backend != "" && p.Backend != t.Backend) {
				continue
			}
			ts, ls = append(ts, t), append(ls, lat[k+"|"+p.Name])
		}
		if len(ts) == 0 {
			continue
		}
		mode := sweepTailLatency
		for _, l := range ls {
			switch {
			case l == nil || l.ServiceTail.Point("p999Ns") == nil && l.GeneratorBound:
				mode = sweepTailClosed
			case l.GeneratorBound && mode == sweepTailLatency:
				mode = sweepTailService
			}
		}
		for i, t := range ts {
			pt := ParetoPoint{Label: t.Policy, Thr: durableMsgs(t)}
			switch mode {
			case sweepTailLatency:
				pt.P999 = tailInterval(ls[i].Tail, ls[i].P999Ns)
			case sweepTailService:
				pt.P999 = tailInterval(ls[i].ServiceTail, ls[i].ServiceP999Ns)
			default:
				pt.P999 = tailInterval(t.Tail, t.P999Ns)
			}
			s.points = append(s.points, pt)
		}
		if mode == sweepTailClosed {
			s.tail = fmt.Sprintf(mode, ts[0].Producers)
		} else {
			s.tail = fmt.Sprintf(mode, fmtCount(ls[0].RatePerSec))
		}
		s.front = ParetoFront(s.points)
		out = append(out, s)
	}
	return out
}

func durableMsgs(c *runfile.Cell) runfile.Interval {
	iv := c.Interval("msgsPerSec")
	if c.WrittenMBps > 0 && c.DurableMBps < c.WrittenMBps {
		k := c.DurableMBps / c.WrittenMBps
		iv.Median, iv.Lo, iv.Hi = iv.Median*k, iv.Lo*k, iv.Hi*k
	}
	return iv
}

func writeSweep(b *strings.Builder, f *runfile.RunFile) {
	series := sweepOf(f)
	if len(series) == 0 {
		return
	}
	b.WriteString("## Flush-policy sweep (durable throughput against p99.9; ★ = on the Pareto front)\n\n")
	for _, s := range series {
		fmt.Fprintf(b, "### %s\n\np99.9: %s.\n\n", s.key, s.tail)
		t := newTable(b, "policy", "durable msgs/s>", "p99.9>", "front")
		for i, p := range s.points {
			t.row(p.Label, ci(p.Thr, fmtCount), ci(p.P999, fmtNsF), map[bool]string{true: "★"}[slices.Contains(s.front, i)])
		}
		names := join(s.front, func(i int) string { return "`" + s.points[i].Label + "`" }, ", ")
		fmt.Fprintf(b, "\nPareto front, slowest to fastest: %s. A policy leaves the front only when another is better on both figures and measurably so on one (intervals separate); front points whose intervals overlap are not distinguished by this run.\n\n", names)
	}
	b.WriteString("Policy names: fi = flush interval, flp = flush least pages, fti = thorough interval, ci = commit interval, clp = commit least pages (backends whose commit moves data only), gct = group-commit timeout, gcb = group-commit batching (auto, merge, convoys). Each series' p99.9 is one figure for all its policies, named under its heading: the open loop's latency at the sweep's lowest rate when no policy's latency cell is generator-bound, else the open loop's service time at that rate, else the closed loop's tail.\n\n")
}

// tailInterval is a merged-tail p99.9 with its interval (the repeats'
// median figure when the tail is missing); a bound (too few samples above
// it) has no interval (Level 0), so no separation is called on it.
func tailInterval(t *runfile.Tail, median int64) runfile.Interval {
	p := t.Point("p999Ns")
	if p == nil {
		v := float64(median)
		return runfile.Interval{Median: v, Lo: v, Hi: v}
	}
	iv := p.Interval()
	if p.Bound {
		iv.Lo, iv.Hi, iv.Level = iv.Median, iv.Median, 0
	}
	return iv
}

// ErrNotASweep: the run given to quote has no flush-policy sweep.
var ErrNotASweep = errors.New("the run is not a flush-policy sweep (mqbench sweep)")

// LoadSweepReference reads the sweep run in dir and keeps each series'
// Pareto front, for another run's first screen to quote.
func LoadSweepReference(dir string) (*runfile.SweepReference, error) {
	f, err := runfile.Read(dir)
	if err != nil {
		return nil, err
	}
	Analyze(f)
	series := sweepOf(f)
	if len(series) == 0 {
		return nil, fmt.Errorf("%s: %w", dir, ErrNotASweep)
	}
	ref := &runfile.SweepReference{ID: f.ID, Path: dir, Commit: f.Machine.Commit, StartedAt: f.StartedAt,
		Host: f.Machine.Host, Repeat: f.Config.Repeat, Message: f.Config.Store.Message}
	flushOf := map[string]string{}
	for _, p := range f.Config.Policies {
		flushOf[p.Name] = p.Flush
	}
	// A front per flush policy: the durable answer picks among sync
	// policies, which the async ones would push off a joint front.
	for _, s := range series {
		for _, flush := range []string{"sync", "async"} {
			pts := slices.DeleteFunc(slices.Clone(s.points), func(p ParetoPoint) bool { return flushOf[p.Label] != flush })
			if len(pts) == 0 {
				continue
			}
			rs := runfile.SweepSeries{Backend: s.cell.Backend, SizeBytes: s.cell.SizeBytes, Target: s.cell.Target,
				Pressure: s.cell.Pressure, Flush: flush, Policies: len(pts), Tail: s.tail}
			for _, i := range ParetoFront(pts) {
				rs.Front = append(rs.Front, runfile.SweepPoint{Policy: pts[i].Label, DurableMsgs: pts[i].Thr, P999Ns: pts[i].P999})
			}
			ref.Series = append(ref.Series, rs)
		}
	}
	return ref, nil
}

// writeSweepQuote is the first screen's flush-policy answer for one
// device and body size when the run itself swept no policy: the quoted
// sweep's front for each backend it has at that size, unpressured, named
// as another run.
func writeSweepQuote(b *strings.Builder, f *runfile.RunFile, size int) {
	ref := f.SweepReference
	if ref == nil || len(f.Config.Policies) > 0 {
		return
	}
	var quoted []runfile.SweepSeries
	tails := map[string]bool{}
	for _, s := range ref.Series {
		if s.SizeBytes != size || (s.Pressure != "" && s.Pressure != "none") || len(s.Front) == 0 {
			continue
		}
		quoted = append(quoted, s)
		tails[s.Tail] = true
	}
	if len(quoted) == 0 {
		return
	}
	// One p99.9 for every front is named once; else each front names its own.
	against := "p99.9"
	if len(tails) == 1 && quoted[0].Tail != "" {
		against = quoted[0].Tail
		for i := range quoted {
			quoted[i].Tail = ""
		}
	}
	fmt.Fprintf(b, "- flush policy: this run measured each backend's defaults only; the flush-policy sweep %s (another run: %s, commit %s, %d repeats, the %s message, `%s`) has on its Pareto fronts of durable msgs/s against %s (one per backend and flush; a point off a front is beaten on both, points on it are not told apart by that run):\n",
		ref.ID, ref.StartedAt.Format("2006-01-02"), shortCommit(ref.Commit), ref.Repeat, orDefault(ref.Message, "bare"), ref.Path, against)
	for _, s := range quoted {
		b.WriteString("  - " + frontLine(s) + "\n")
	}
}

// frontLine names a front's two ends — the most durable msgs/s and the
// lowest p99.9 — and how many points lie between.
func frontLine(s runfile.SweepSeries) string {
	point := func(p runfile.SweepPoint) string {
		return fmt.Sprintf("`%s` %s msgs/s, p99.9 %s", p.Policy, ci(p.DurableMsgs, fmtCount), ci(p.P999Ns, fmtNsF))
	}
	head := fmt.Sprintf("%s %s on %s (%d %s measured", s.Backend, s.Flush, s.Target, s.Policies, plural(s.Policies, "policy", "policies"))
	if s.Tail != "" {
		head += "; p99.9: " + s.Tail
	}
	head += "): "
	fastest, lowest := s.Front[len(s.Front)-1], s.Front[0]
	for _, p := range s.Front {
		if p.P999Ns.Median < lowest.P999Ns.Median {
			lowest = p
		}
	}
	if len(s.Front) == 1 {
		return head + point(fastest) + ", alone on the front"
	}
	line, named := head+"most throughput "+point(fastest), 1
	if lowest.Policy != fastest.Policy {
		line, named = line+"; lowest p99.9 "+point(lowest), 2
	} else {
		line += ", also the lowest p99.9"
	}
	if n := len(s.Front) - named; n > 0 {
		line += fmt.Sprintf("; %d more on the front, not told apart from these", n)
	}
	return line
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
