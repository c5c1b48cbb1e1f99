package report

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
)

// ParetoPoint is one policy's throughput and tail latency, with intervals.
type ParetoPoint struct {
	// Label names the policy; in a sweep series, followed by
	// "(not sustained)" when its throughput cell did not sustain (the plot
	// labels a front's ends with it).
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
func ParetoFront(pts []ParetoPoint) []int { return frontOf(pts, nil) }

// frontOf is ParetoFront where sustained[i] says whether point i
// sustained (nil: every point did). A point that did not sustain is never
// recommended, so it is no alternative to one that did: it pushes no
// sustained point off the front. It is on the front itself (to be marked)
// when nothing dominates it. The front's sustained points are thus the
// front of the sustained points alone.
func frontOf(pts []ParetoPoint, sustained []bool) []int {
	ok := func(i int) bool { return sustained == nil || sustained[i] }
	var front []int
	for i, p := range pts {
		// No point dominates itself: it is better than itself on neither figure.
		beaten := false
		for j, q := range pts {
			if (ok(j) || !ok(i)) && dominates(q, p) {
				beaten = true
				break
			}
		}
		if !beaten {
			front = append(front, i)
		}
	}
	sort.SliceStable(front, func(a, b int) bool { return pts[front[a]].Thr.Median < pts[front[b]].Thr.Median })
	return front
}

// sweepSeries is one backend × size × target × pressure × producer count
// of a sweep: each policy's throughput cell at that producer count and its
// latency cell at the series' rate; tail says which p99.9 every point of
// the series carries.
type sweepSeries struct {
	key       string
	cell      *runfile.Cell // the series' first cell: its backend, size, target, pressure
	producers int           // the closed loop's producer count of every point's throughput cell
	points    []ParetoPoint
	cells     []*runfile.Cell // points[i]'s throughput cell
	front     []int
	tail      string
	// omitted are the policies with a throughput cell at this producer
	// count but no durable msgs/s (and why): not points of the series.
	omitted []string
}

// sustained reports whether point i's throughput cell sustained.
func (s *sweepSeries) sustained(i int) bool {
	return s.cells[i].Sustained != nil && *s.cells[i].Sustained
}

func (s *sweepSeries) sustainedAll() []bool {
	out := make([]bool, len(s.points))
	for i := range out {
		out[i] = s.sustained(i)
	}
	return out
}

// Which p99.9 a sweep series compares. One figure for every point of a
// series, so the front compares like with like: the open loop's latency
// at the lowest rate every policy has a latency cell at, when every one of
// those cells measured the store (none generator-bound); else the open
// loop's service time at that rate, which the generator's late starts do
// not enter; else, with no such rate (or a generator-bound cell without
// a service time), the closed loop's tail at the series' producer count.
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
	// Each policy's throughput cell at each producer count and latency cell
	// at each rate: a series compares its policies at one producer count
	// and one rate.
	thr, lat := map[string]*runfile.Cell{}, map[string]*runfile.Cell{}
	producers, rates := map[string][]int{}, map[string][]float64{}
	for _, c := range swept {
		k := key(c)
		switch c.Workload {
		case "throughput":
			if pk := fmt.Sprintf("%s|%d|%s", k, c.Producers, c.Policy); thr[pk] == nil {
				thr[pk] = c
			}
			if !slices.Contains(producers[k], c.Producers) {
				producers[k] = append(producers[k], c.Producers)
			}
		case "latency":
			if lk := fmt.Sprintf("%s|%g|%s", k, c.RatePerSec, c.Policy); lat[lk] == nil {
				lat[lk] = c
			}
			if !slices.Contains(rates[k], c.RatePerSec) {
				rates[k] = append(rates[k], c.RatePerSec)
			}
		}
	}
	var out []sweepSeries
	for _, first := range firstByKey(swept, key) {
		k := key(first)
		for _, n := range slices.Sorted(slices.Values(producers[k])) {
			s := sweepSeries{key: fmt.Sprintf("%s producers=%d", k, n), cell: first, producers: n}
			for _, p := range f.Config.Policies {
				t := thr[fmt.Sprintf("%s|%d|%s", k, n, p.Name)]
				if t == nil || (p.Backend != "" && p.Backend != t.Backend) {
					continue
				}
				iv, why := durableMsgs(t)
				if why != "" {
					s.omitted = append(s.omitted, "`"+p.Name+"` ("+why+")")
					continue
				}
				label := t.Policy
				if !*t.Sustained {
					label += " (not sustained)"
				}
				s.points, s.cells = append(s.points, ParetoPoint{Label: label, Thr: iv}), append(s.cells, t)
			}
			if len(s.points) == 0 {
				continue
			}
			// The lowest rate every policy of the series has a latency cell at.
			ls := make([]*runfile.Cell, len(s.cells))
			for _, r := range slices.Sorted(slices.Values(rates[k])) {
				at := mapped(s.cells, func(t *runfile.Cell) *runfile.Cell { return lat[fmt.Sprintf("%s|%g|%s", k, r, t.Policy)] })
				if !slices.Contains(at, nil) {
					ls = at
					break
				}
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
			for i, t := range s.cells {
				switch mode {
				case sweepTailLatency:
					s.points[i].P999 = tailInterval(ls[i].Tail, ls[i].P999Ns)
				case sweepTailService:
					s.points[i].P999 = tailInterval(ls[i].ServiceTail, ls[i].ServiceP999Ns)
				default:
					s.points[i].P999 = tailInterval(t.Tail, t.P999Ns)
				}
			}
			if mode == sweepTailClosed {
				s.tail = fmt.Sprintf(mode, n)
			} else {
				s.tail = fmt.Sprintf(mode, fmtCount(ls[0].RatePerSec))
			}
			s.front = frontOf(s.points, s.sustainedAll())
			out = append(out, s)
		}
	}
	return out
}

// durableMsgs is a throughput cell's durable msgs/s: each measured
// repeat's msgs/s × its own durable ÷ written MB/s (the messages that
// became durable in its window), summarized as every figure of a cell is —
// their median and its interval (runfile.MedianCI). why says why the cell
// has none ("" when it has).
func durableMsgs(c *runfile.Cell) (iv runfile.Interval, why string) {
	if c.Sustained == nil {
		return iv, "its throughput cell reports no durability"
	}
	var xs []float64
	for _, r := range c.MeasuredRepeats() {
		share := 0.0
		if r.Figures.WrittenMBps > 0 {
			share = min(1, r.Figures.DurableMBps/r.Figures.WrittenMBps)
		}
		xs = append(xs, r.Figures.MsgsPerSec*share)
	}
	if len(xs) == 0 {
		return iv, "its throughput cell keeps no measured repeat"
	}
	iv.Median, iv.Lo, iv.Hi, iv.Level = runfile.MedianCI(xs)
	return iv, ""
}

func writeSweep(b *strings.Builder, f *runfile.RunFile) {
	series := sweepOf(f)
	if len(series) == 0 {
		return
	}
	b.WriteString("## Flush-policy sweep (durable throughput against p99.9; ★ = on the Pareto front)\n\n")
	for _, s := range series {
		fmt.Fprintf(b, "### %s\n\nDurable msgs/s: the closed loop at %d producers. p99.9: %s.\n\n", s.key, s.producers, s.tail)
		t := newTable(b, "policy", "durable msgs/s>", "p99.9>", "sustained", "front")
		for i, p := range s.points {
			front := ""
			if slices.Contains(s.front, i) {
				front = "★" + map[bool]string{false: " (not sustained)"}[s.sustained(i)]
			}
			t.row(s.cells[i].Policy, ci(p.Thr, fmtCount), ci(p.P999, fmtNsF), sustainedText(s.cells[i]), front)
		}
		names := join(s.front, func(i int) string {
			return "`" + s.cells[i].Policy + "`" + map[bool]string{false: " (not sustained)"}[s.sustained(i)]
		}, ", ")
		fmt.Fprintf(b, "\nPareto front, slowest to fastest: %s. A policy leaves the front only when another is better on both figures and measurably so on one (intervals separate), and one that did not sustain pushes none that did off it; front points whose intervals overlap are not distinguished by this run.\n\n", names)
		if len(s.omitted) > 0 {
			fmt.Fprintf(b, "Not in this series (no durable msgs/s): %s.\n\n", strings.Join(s.omitted, ", "))
		}
	}
	fmt.Fprintf(b, "Policy names: fi = flush interval, flp = flush least pages, fti = thorough interval, ci = commit interval, clp = commit least pages (backends whose commit moves data only), gct = group-commit timeout, gcb = group-commit batching (auto, merge, convoys). A series is one producer count: each policy's durable msgs/s is its closed-loop cell's at that count — each repeat's msgs/s × its durable ÷ written MB/s, median [interval] over the repeats. Each series' p99.9 is one figure for all its policies, named under its heading: the open loop's latency at the lowest rate every policy has a latency cell at when none of those cells is generator-bound, else the open loop's service time at that rate, else the closed loop's tail. Sustained: the backlog at the window's end is at most %s of what the cell wrote (the median over the repeats). A policy that did not sustain is never recommended: it pushes none that did off the front, and is on it, marked, only when no policy beats it.\n\n",
		pctText(load.SustainedBacklogShare))
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
			var idx []int
			for i, c := range s.cells {
				if flushOf[c.Policy] == flush {
					idx = append(idx, i)
				}
			}
			if len(idx) == 0 {
				continue
			}
			pts := mapped(idx, func(i int) ParetoPoint { return s.points[i] })
			rs := runfile.SweepSeries{Backend: s.cell.Backend, SizeBytes: s.cell.SizeBytes, Target: s.cell.Target,
				Pressure: s.cell.Pressure, Flush: flush, Policies: len(pts), Tail: s.tail}
			for _, j := range frontOf(pts, mapped(idx, s.sustained)) {
				c := s.cells[idx[j]]
				sustained := *c.Sustained
				rs.Front = append(rs.Front, runfile.SweepPoint{Policy: c.Policy, Producers: c.Producers, DurableMsgs: pts[j].Thr, P999Ns: pts[j].P999,
					Sustained: &sustained, BacklogStraddles: backlogStraddles(c)})
			}
			ref.Series = append(ref.Series, rs)
		}
	}
	return ref, nil
}

// backlogStraddles reports whether the interval of a cell's backlog share
// straddles the sustained bar: its verdict is the median repeat's, and the
// run cannot tell whether it sustains (as the throughput table says).
func backlogStraddles(c *runfile.Cell) bool {
	return c.CILevel > 0 && c.CILow.BacklogShare <= load.SustainedBacklogShare && c.CIHigh.BacklogShare > load.SustainedBacklogShare
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
	tails, producers := map[string]bool{}, map[int]bool{}
	for _, s := range ref.Series {
		if s.SizeBytes != size || (s.Pressure != "" && s.Pressure != "none") || len(s.Front) == 0 {
			continue
		}
		quoted = append(quoted, s)
		tails[s.Tail] = true
		producers[s.Front[0].Producers] = true
	}
	if len(quoted) == 0 {
		return
	}
	run := fmt.Sprintf("the flush-policy sweep %s (another run: %s, commit %s, %d repeats, the %s message, `%s`)",
		ref.ID, ref.StartedAt.Format("2006-01-02"), shortCommit(ref.Commit), ref.Repeat, orDefault(ref.Message, "bare"), ref.Path)
	// A reference copied before sweeps recorded whether each point
	// sustained is not quoted: a front's end could be a policy that did not,
	// and its intervals are not intervals of durable msgs/s.
	for _, s := range quoted {
		if slices.ContainsFunc(s.Front, func(p runfile.SweepPoint) bool { return p.Sustained == nil }) {
			fmt.Fprintf(b, "- flush policy: this run measured each backend's defaults only; %s is not quoted: this run copied its Pareto fronts before sweeps recorded whether each policy sustained, so a front's end could be one that did not (never recommended), and its durable msgs/s intervals were each policy's msgs/s interval times one ratio; a run with `--sweep-from %s` copies them as they are now\n",
				run, ref.Path)
			return
		}
	}
	// One p99.9 for every front is named once; else each front names its own.
	against := "p99.9"
	if len(tails) == 1 && quoted[0].Tail != "" {
		against = quoted[0].Tail
		for i := range quoted {
			quoted[i].Tail = ""
		}
	}
	// So is one producer count (0: a reference copied before it was recorded).
	durable, per := "durable msgs/s", "one per backend and flush"
	if n := quoted[0].Front[0].Producers; len(producers) == 1 && n > 0 {
		durable = fmt.Sprintf("durable msgs/s at %d producers", n)
		for i := range quoted {
			quoted[i].Front = mapped(quoted[i].Front, func(p runfile.SweepPoint) runfile.SweepPoint { p.Producers = 0; return p })
		}
	} else if len(producers) > 1 {
		per = "one per backend, flush and producer count"
	}
	fmt.Fprintf(b, "- flush policy: this run measured each backend's defaults only; %s has on its Pareto fronts of %s against %s (%s; a point off a front is beaten on both, points on it are not told apart by that run; a policy that did not sustain — its backlog at the window's end above %s of what it wrote — pushes none that did off a front and is never quoted):\n",
		run, durable, against, per, pctText(load.SustainedBacklogShare))
	for _, s := range quoted {
		b.WriteString("  - " + frontLine(s) + "\n")
	}
}

// frontLine names a front's two ends among the policies that sustained —
// the most durable msgs/s and the lowest p99.9 — how many sustained points
// lie between, and how many it left out because they did not sustain.
func frontLine(s runfile.SweepSeries) string {
	bar := pctText(load.SustainedBacklogShare)
	point := func(p runfile.SweepPoint) string {
		text := fmt.Sprintf("`%s` %s msgs/s, p99.9 %s", p.Policy, ci(p.DurableMsgs, fmtCount), ci(p.P999Ns, fmtNsF))
		if p.BacklogStraddles {
			text += fmt.Sprintf(" (sustained by the median repeat; its backlog's interval straddles %s, so whether it sustains is undetermined)", bar)
		}
		return text
	}
	head := fmt.Sprintf("%s %s on %s", s.Backend, s.Flush, s.Target)
	if n := s.Front[0].Producers; n > 0 {
		head += fmt.Sprintf(" at %d producers", n)
	}
	head += fmt.Sprintf(" (%d %s measured", s.Policies, plural(s.Policies, "policy", "policies"))
	if s.Tail != "" {
		head += "; p99.9: " + s.Tail
	}
	head += "): "
	// A point of a reference copied before sweeps recorded whether each
	// point sustained (Sustained nil; writeSweepQuote quotes none) is named
	// with that said.
	var ends []runfile.SweepPoint
	notSustained, unrecorded := 0, false
	for _, p := range s.Front {
		switch {
		case p.Sustained == nil:
			unrecorded = true
			ends = append(ends, p)
		case *p.Sustained:
			ends = append(ends, p)
		default:
			notSustained++
		}
	}
	if len(ends) == 0 {
		return head + fmt.Sprintf("none quoted: none of its %d %s sustained (backlog at the window's end above %s of what they wrote: never recommended; %d on the front)",
			s.Policies, plural(s.Policies, "policy", "policies"), bar, notSustained)
	}
	var rest string
	if notSustained > 0 {
		head += "of the policies that sustained, "
		rest = fmt.Sprintf("; left out: %d on the front that did not sustain (each left a backlog at the window's end above %s of what it wrote: never recommended)", notSustained, bar)
	}
	if unrecorded {
		rest += "; this reference does not record whether its policies sustained"
	}
	fastest, lowest := ends[len(ends)-1], ends[0]
	for _, p := range ends {
		if p.P999Ns.Median < lowest.P999Ns.Median {
			lowest = p
		}
	}
	if len(ends) == 1 {
		if notSustained > 0 {
			return head + point(fastest) + ", the only sustained one on the front" + rest
		}
		return head + point(fastest) + ", alone on the front" + rest
	}
	line, named := head+"most throughput "+point(fastest), 1
	if lowest.Policy != fastest.Policy {
		line, named = line+"; lowest p99.9 "+point(lowest), 2
	} else {
		line += ", also the lowest p99.9"
	}
	if n := len(ends) - named; n > 0 {
		line += fmt.Sprintf("; %d more on the front, not told apart from these", n)
	}
	return line + rest
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
