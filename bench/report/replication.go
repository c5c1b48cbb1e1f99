package report

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/mqstore/mqstore/bench/runfile"
)

// The replication sections: every cell with a slave, with its lag and the
// slave's own durable rate, and the comparison the seed's book recommends
// — ASYNC_FLUSH + SYNC_MASTER beside SYNC_FLUSH alone, SYNC_FLUSH +
// SYNC_MASTER and ASYNC_FLUSH + ASYNC_MASTER — at the same producers and at
// the same offered rates.

type replicaConfig struct {
	name, flush, repl string
	seed              bool // the seed's recommendation
}

var namedConfigs = []replicaConfig{
	{name: "SYNC_FLUSH alone (no slave)", flush: "sync"},
	{name: "SYNC_FLUSH + SYNC_MASTER", flush: "sync", repl: "sync"},
	{name: "**ASYNC_FLUSH + SYNC_MASTER** (the seed's recommendation)", flush: "async", repl: "sync", seed: true},
	{name: "ASYNC_FLUSH + ASYNC_MASTER", flush: "async", repl: "async"},
}

func delayText(ns int64) string {
	if ns <= 0 {
		return "loopback"
	}
	return "EMULATED " + fmtNs(ns) + " one-way (TCP proxy)"
}

func writeReplication(b *strings.Builder, f *runfile.RunFile) {
	replicated := func(workload string) []*runfile.Cell {
		return slices.DeleteFunc(cellsOf(f, workload, false), func(c *runfile.Cell) bool { return c.Replication == "" })
	}
	thr, lat := replicated("throughput"), replicated("latency")
	if len(thr)+len(lat) == 0 {
		return
	}
	b.WriteString("## Replication (master and slave, RocketMQ's classic HA)\n\n")
	fmt.Fprintf(b, "The store under test is the master; its slave runs in a process of its own (an mqbench worker over package ha), in its own directory%s, with the same backend and flush mode. Master to slave: %s.\n\n",
		map[bool]string{true: " (" + f.Config.SlaveDir + ", --slave-dir)", false: " beside the master's"}[f.Config.SlaveDir != ""], delayText(f.Config.HADelay.Nanoseconds()))
	// A table of each workload: the point's columns between the cell's
	// and the lag and slave columns.
	table := func(cells []*runfile.Cell, heads []string, point func(c *runfile.Cell) []string) {
		if len(cells) == 0 {
			return
		}
		t := newTable(b, slices.Concat([]string{"backend", "size>", "flush", "master role"}, heads, []string{"p50>", "p99>", "p99.9>"}, replHeads)...)
		for _, c := range cells {
			t.row(slices.Concat([]string{c.Backend, runfile.SizeLabel(c.SizeBytes), c.Flush, roleName(c.Replication)}, point(c),
				[]string{tailText(c, "p50Ns"), tailText(c, "p99Ns"), tailText(c, "p999Ns")}, replFigs(c))...)
		}
		b.WriteString("\n")
	}
	table(thr, []string{"producers>", "msgs/s>", "durable MB/s>"}, func(c *runfile.Cell) []string {
		return []string{fmt.Sprint(c.Producers), fig(c, "msgsPerSec", fmtCount), fig(c, "durableMBps", fmtFloat)}
	})
	sort.SliceStable(lat, func(i, j int) bool { return lat[i].RatePerSec < lat[j].RatePerSec })
	table(lat, []string{"rate>", "status"}, func(c *runfile.Cell) []string { return []string{fmtCount(c.RatePerSec), statusText(c, " †")} })
	b.WriteString("*lag*: for every record acknowledged to a producer in the window, the time from its Put's start (its append) to the first slave acknowledgement covering its end — with SYNC_MASTER the Put waited for it, so the lag is part of the Put's latency; *lag bytes*: how far the slave's acknowledged offset was behind the record's end when its Put returned (0 with SYNC_MASTER: acknowledged bytes a loss of the master at that moment would lose). *unacked*: records the slave had not acknowledged by the end of the catch-up after the window (their lag is counted up to it: a lower bound). *slave durable MB/s*: the slave's own flushed offset over the window, read from its process at the window's edges. The master sends only committed bytes: a buffered backend's commit interval is part of an ASYNC_MASTER's lag.\n\n")
	writeNamedComparison(b, f)
}

// replHeads and replFigs are a replicated cell's lag and slave columns.
var replHeads = []string{"lag p50>", "lag p99>", "lag bytes p50>", "lag bytes p99>", "unacked>", "slave durable MB/s>"}

func replFigs(c *runfile.Cell) []string {
	return []string{fig(c, "replLagP50Ns", fmtNsF), fig(c, "replLagP99Ns", fmtNsF), fig(c, "replLagBytesP50", fmtBytes), fig(c, "replLagBytesP99", fmtBytes),
		fmtPct(c.Max.ReplUnackedFraction), fig(c, "slaveDurableMBps", fmtFloat)}
}

// namedPoint is one point of the named comparison: a backend at a body
// size on a target, at a producer count (closed loop) or an offered rate.
type namedPoint struct {
	backend, target string
	size, producers int
	rate            float64
}

// namedCell is the cell of a named configuration at a point (nil: not in
// the run).
func namedCell(f *runfile.RunFile, p namedPoint, rc replicaConfig) *runfile.Cell {
	for c := range ptrs(f.Cells) {
		if c.Backend == p.backend && c.Target == p.target && c.SizeBytes == p.size && c.Producers == p.producers && c.RatePerSec == p.rate &&
			c.Flush == rc.flush && c.Replication == rc.repl && c.Pressure == "none" && c.Policy == "" && c.TwinOf == "" &&
			(rc.repl == "" || c.HADelayNs == f.Config.HADelay.Nanoseconds()) {
			return c
		}
	}
	return nil
}

// namedPoints are the points where the run has ASYNC_FLUSH + SYNC_MASTER,
// per backend: closed-loop points first, by producers, then by rate.
func namedPoints(f *runfile.RunFile) []namedPoint {
	var points []namedPoint
	for c := range ptrs(f.Cells) {
		if c.Replication == "sync" && c.Flush == "async" && (c.Workload == "throughput" || c.Workload == "latency") {
			points = append(points, namedPoint{backend: c.Backend, target: c.Target, size: c.SizeBytes, producers: c.Producers, rate: c.RatePerSec})
		}
	}
	points = distinct(points)
	sort.SliceStable(points, func(i, j int) bool {
		a, c := points[i], points[j]
		if a.backend != c.backend {
			return a.backend < c.backend
		}
		if (a.rate > 0) != (c.rate > 0) {
			return a.rate == 0
		}
		return a.producers < c.producers || (a.producers == c.producers && a.rate < c.rate)
	})
	return points
}

// writeNamedComparison is the ASYNC_FLUSH + SYNC_MASTER against SYNC_FLUSH table: per backend, size and point
// (producer count or offered rate), the four named configurations.
func writeNamedComparison(b *strings.Builder, f *runfile.RunFile) {
	points := namedPoints(f)
	if len(points) == 0 {
		return
	}
	fmt.Fprintf(b, "### ASYNC_FLUSH + SYNC_MASTER against SYNC_FLUSH (master to slave: %s)\n\n", delayText(f.Config.HADelay.Nanoseconds()))
	b.WriteString("\"Usually configure master and slave with ASYNC_FLUSH, and SYNC_MASTER replication between them: even if one machine fails, no data is lost.\" Each group compares the four configurations at the same producers (closed loop: throughput, service-time percentiles) or the same offered rate (open loop: latency from the intended start); the ratio is to SYNC_FLUSH alone, a difference is called only where the intervals separate. Its p50, p99 and p99.9 are the median over the repeats of each repeat's own percentile, with their interval (the latency tables' percentiles pool the repeats' histograms instead).\n\n")
	t := newTable(b, "backend, size", "point", "configuration", "status", "msgs/s>", "÷ SYNC_FLUSH alone", "p50>", "p99>", "p99.9>", "lag p50 / p99",
		"losing the master's machine loses")
	var verdicts []string
	for _, p := range points {
		verdicts = append(verdicts, writeNamedPoint(t, f, p)...)
	}
	b.WriteString("\n")
	writeList(b, "", verdicts)
}

// writeNamedPoint is the four configurations' rows at one point; it
// returns the verdict on ASYNC_FLUSH + SYNC_MASTER there.
func writeNamedPoint(t table, f *runfile.RunFile, p namedPoint) (verdicts []string) {
	where := fmt.Sprintf("%d producers", p.producers)
	cmpFig, cmpName := "msgsPerSec", "throughput"
	if p.rate > 0 {
		where, cmpFig, cmpName = fmt.Sprintf("%s msgs/s offered", fmtCount(p.rate)), "p99Ns", "p99"
	}
	base := namedCell(f, p, namedConfigs[0])
	for _, rc := range namedConfigs {
		c := namedCell(f, p, rc)
		if c == nil || !c.Measured() {
			status := "not in this run"
			if c != nil {
				status = c.Status
			}
			fmt.Fprintf(t.b, "| %s %s | %s | %s | %s | | | | | | | |\n", p.backend, runfile.SizeLabel(p.size), where, rc.name, status)
			continue
		}
		ratio, loss := "—", "—"
		lag := orDash(rc.repl != "", fig(c, "replLagP50Ns", fmtNsF)+" / "+fig(c, "replLagP99Ns", fmtNsF))
		if c.Durability != nil {
			loss = orDefault(c.Durability.MachineLoss, "—")
		}
		if base != nil && base.Measured() && c != base {
			ratio = namedRatio(base, c, cmpFig)
			if rc.seed {
				verdicts = append(verdicts, fmt.Sprintf("%s %s at %s: ASYNC_FLUSH + SYNC_MASTER ÷ SYNC_FLUSH alone, %s: %s", p.backend, runfile.SizeLabel(p.size),
					where, cmpName, ratio))
			}
		}
		t.row(p.backend+" "+runfile.SizeLabel(p.size), where, rc.name, statusText(c, " †"),
			fig(c, "msgsPerSec", fmtCount), ratio, latencyFig(c, "p50Ns"), latencyFig(c, "p99Ns"), latencyFig(c, "p999Ns"), lag, loss)
	}
	return verdicts
}

// namedRatio is c ÷ base for a figure, with the widest ratio the intervals
// allow and the verdict they support.
func namedRatio(base, c *runfile.Cell, figure string) string {
	if !base.Comparable() || !c.Comparable() {
		return "not compared: " + notComparable([]string{"SYNC_FLUSH alone", "this one"}, " ", " †", base, c)
	}
	text, r, separated := cellRatio("replication", c, base, figure)
	switch {
	case r.Missing != "":
		return text
	case !separated:
		return text + " — no significant difference"
	}
	better := r.Median > 1
	if strings.HasSuffix(figure, "Ns") {
		better = r.Median < 1
	}
	return text + map[bool]string{true: " — significantly better", false: " — significantly worse"}[better]
}
