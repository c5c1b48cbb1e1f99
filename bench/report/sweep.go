package report

import (
	"fmt"
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
		dominated := false
		for j, q := range pts {
			if i != j && dominates(q, p) {
				dominated = true
				break
			}
		}
		if !dominated {
			front = append(front, i)
		}
	}
	sort.SliceStable(front, func(a, b int) bool { return pts[front[a]].Thr.Median < pts[front[b]].Thr.Median })
	return front
}

// sweepSeries is one backend × size × target × pressure of a sweep: each
// policy's throughput cell and its latency cell at the lowest rate.
type sweepSeries struct {
	key    string
	points []ParetoPoint
	front  []int
}

func sweepOf(f *runfile.RunFile) []sweepSeries {
	if len(f.Config.Policies) == 0 {
		return nil
	}
	byKey := map[string]*sweepSeries{}
	var order []string
	thr := map[string]*runfile.Cell{}
	lat := map[string]*runfile.Cell{}
	for i := range f.Cells {
		c := &f.Cells[i]
		if c.Policy == "" || !c.Comparable() || c.TwinOf != "" {
			continue
		}
		k := fmt.Sprintf("%s %s %s pressure=%s", c.Backend, runfile.SizeLabel(c.SizeBytes), c.Target, c.Pressure)
		pk := k + "|" + c.Policy
		switch c.Workload {
		case "throughput":
			if prev := thr[pk]; prev == nil || c.DurableMBps > prev.DurableMBps {
				thr[pk] = c
			}
		case "latency":
			if prev := lat[pk]; prev == nil || c.RatePerSec < prev.RatePerSec {
				lat[pk] = c
			}
		default:
			continue
		}
		if _, ok := byKey[k]; !ok {
			byKey[k] = &sweepSeries{key: k}
			order = append(order, k)
		}
	}
	var out []sweepSeries
	for _, k := range order {
		s := byKey[k]
		for _, p := range f.Config.Policies {
			t := thr[k+"|"+p.Name]
			if t == nil || !strings.HasPrefix(k, t.Backend+" ") || (p.Backend != "" && p.Backend != t.Backend) {
				continue
			}
			pt := ParetoPoint{Label: p.Name, Thr: durableMsgs(t), P999: tailInterval(t, "p999Ns")}
			if l := lat[k+"|"+p.Name]; l != nil {
				pt.P999 = tailInterval(l, "p999Ns")
			}
			s.points = append(s.points, pt)
		}
		s.front = ParetoFront(s.points)
		out = append(out, *s)
	}
	return out
}

// durableMsgs is a throughput cell's msgs/s scaled by durable ÷ written.
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
		fmt.Fprintf(b, "### %s\n\n", s.key)
		t := newTable(b, "policy", "durable msgs/s>", "p99.9>", "front")
		onFront := map[int]bool{}
		for _, i := range s.front {
			onFront[i] = true
		}
		for i, p := range s.points {
			star := ""
			if onFront[i] {
				star = "★"
			}
			t.row(p.Label, ci(p.Thr, fmtCount), ci(p.P999, fmtNsF), star)
		}
		var names []string
		for _, i := range s.front {
			names = append(names, fmt.Sprintf("`%s`", s.points[i].Label))
		}
		fmt.Fprintf(b, "\nPareto front, slowest to fastest: %s. A policy leaves the front only when another is better on both figures and measurably so on one (intervals separate); front points whose intervals overlap are not distinguished by this run.\n\n", strings.Join(names, ", "))
	}
	b.WriteString("Policy names: fi = flush interval, flp = flush least pages, fti = thorough interval, ci = commit interval, clp = commit least pages (backends whose commit moves data only), gct = group-commit timeout. p99.9 is the open-loop latency cell's at the sweep's lowest rate when it ran one, else the closed loop's service time.\n\n")
}

// tailInterval is a cell's merged-tail percentile with its interval; a
// bound (too few samples above it) has no interval (Level 0), so no
// separation is called on it.
func tailInterval(c *runfile.Cell, name string) runfile.Interval {
	p := c.Tail.Point(name)
	if p == nil {
		return runfile.Interval{Median: c.Figures.Figure(name), Lo: c.Figures.Figure(name), Hi: c.Figures.Figure(name)}
	}
	iv := p.Interval()
	if p.Bound {
		iv.Lo, iv.Hi, iv.Level = iv.Median, iv.Median, 0
	}
	return iv
}
