package report

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
)

// The replication sections: every cell with a slave, with its lag, the
// slave's own durable rate, how far the slave was behind at the window's
// end (whether it kept up), and the comparison the seed's book recommends
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
	table(thr, []string{"producers>", "msgs/s>", "durable MB/s>", "CPU s/GiB>"}, func(c *runfile.Cell) []string {
		return []string{fmt.Sprint(c.Producers), fig(c, "msgsPerSec", fmtCount), fig(c, "durableMBps", fmtFloat), replCPUText(c)}
	})
	sort.SliceStable(lat, func(i, j int) bool { return lat[i].RatePerSec < lat[j].RatePerSec })
	table(lat, []string{"rate>", "status"}, func(c *runfile.Cell) []string { return []string{fmtCount(c.RatePerSec), statusText(c, " †")} })
	fmt.Fprintf(b, "*lag*: for every record acknowledged to a producer in the window, the time from its Put's start (its append) to the first slave acknowledgement covering its end — with SYNC_MASTER the Put waited for it, so the lag is part of the Put's latency; *lag bytes*: how far the slave's acknowledged offset was behind the record's end when its Put returned (0 with SYNC_MASTER: acknowledged bytes a loss of the master at that moment would lose). Lag and lag bytes are the median over the repeats of each repeat's own p50 or p99, with its interval — unlike the p50, p99 and p99.9 columns, which are percentiles of the repeats' histograms pooled (service times in the closed loop, latency from the intended start in the open loop), as in the tables above; *unacked* is the worst repeat's share of records the slave had not acknowledged by the end of the catch-up after the window (their lag is counted up to it: a lower bound). *repl backlog*: the master's CommitLog end at the window's end less the slave's, read from its process just after (what losing the master's machine then would have lost), the median over the repeats, and that as a share of the bytes the master accepted in the window, median [interval]. *sustained* applies the harness's bar to the master's flush backlog and to the repl backlog: either above %s of the window's bytes (median over the repeats) and the cell did not keep up — with the slave's backlog, its master accepted faster than it replicated, and its lag figures depend on how long the window ran. *slave durable MB/s*: what the slave made durable of the bytes the master accepted in the window (its flushed offset's progress past the master's written offset at the window's start, read from its process at the window's edges), per second, median [interval] — as in *durable MB/s*, a backlog accepted before the window does not count. *CPU s/GiB* (closed loop): CPU seconds per GiB of message bodies accepted of the master's process and the slave's together (each its getrusage over the window; the slave's part in brackets); *master only* where the run file predates counting the slave's. The master sends only committed bytes: a buffered backend's commit interval is part of an ASYNC_MASTER's lag.\n\n", pctText(load.SustainedBacklogShare))
	writeNamedComparison(b, f)
}

// replHeads and replFigs are a replicated cell's lag and slave columns.
var replHeads = []string{"lag p50>", "lag p99>", "lag bytes p50>", "lag bytes p99>", "unacked>", "repl backlog>", "sustained", "slave durable MB/s>"}

func replFigs(c *runfile.Cell) []string {
	r := replFiguresOf(c)
	return []string{fig(c, "replLagP50Ns", fmtNsF), fig(c, "replLagP99Ns", fmtNsF), fig(c, "replLagBytesP50", fmtBytes), fig(c, "replLagBytesP99", fmtBytes),
		fmtPct(c.Max.ReplUnackedFraction), r.backlogText(), replSustainedText(c), r.fig("slaveDurableMBps", fmtFloat)}
}

// replFigures are a replicated cell's figures that set the slave's
// positions against the master's — the slave's durable rate of the
// window's bytes and the replication backlog — recomputed from each
// measured repeat's positions (so a run file from before they were
// figures, or whose slave durable rate counted a backlog flushed in the
// window, reads as this report says), the median and interval over the
// repeats.
type replFigures struct {
	runfile.Summary
	known bool // some repeat has both sides' positions
}

func replFiguresOf(c *runfile.Cell) replFigures {
	var fs []runfile.Figures
	for _, rep := range c.MeasuredRepeats() {
		if rep.Replication == nil || rep.Result.Durability == nil {
			continue
		}
		var f runfile.Figures
		f.AddReplicationPositions(rep.Replication, rep.Result.Durability)
		fs = append(fs, f)
	}
	return replFigures{Summary: runfile.Summarize(fs), known: len(fs) > 0}
}

func (r replFigures) interval(name string) runfile.Interval {
	return runfile.Interval{Median: r.Median.Figure(name), Lo: r.CILow.Figure(name), Hi: r.CIHigh.Figure(name), Level: r.CILevel}
}

func (r replFigures) fig(name string, f func(float64) string) string {
	if !r.known {
		return "—"
	}
	return ci(r.interval(name), f)
}

// behind reports whether the slave fell behind: the median repl backlog
// above the sustained bar.
func (r replFigures) behind() bool {
	return r.known && r.Median.ReplBacklogShare > load.SustainedBacklogShare
}

// backlogText is the repl backlog: bytes (median), and the share of the
// window's bytes with its interval.
func (r replFigures) backlogText() string {
	if !r.known {
		return "—"
	}
	return fmtBytes(r.Median.ReplBacklogBytes) + " (" + r.fig("replBacklogShare", fmtPct) + ")"
}

// replSustainedText is a cell's sustained verdict: for a replicated cell
// the harness's bar applied to the master's flush backlog and to the repl
// backlog (the slave keeping up), each by its median over the repeats and
// saying when its interval straddles the bar; any other cell's is
// sustainedText.
func replSustainedText(c *runfile.Cell) string {
	if c.Replication == "" || c.Sustained == nil {
		return sustainedText(c)
	}
	r := replFiguresOf(c)
	bar := load.SustainedBacklogShare
	var no, straddle []string
	if c.Status == runfile.StatusSaturated {
		no = append(no, "saturated")
	}
	side := func(known bool, median, lo, hi float64, level float64, behind, backlog string) {
		crosses := known && level > 0 && lo <= bar && hi > bar
		switch {
		case known && median > bar && crosses:
			no = append(no, behind+" — median; its interval straddles "+pctText(bar))
		case known && median > bar:
			no = append(no, behind)
		case crosses:
			straddle = append(straddle, backlog)
		}
	}
	side(true, c.BacklogShare, c.CILow.BacklogShare, c.CIHigh.BacklogShare, c.CILevel, "the master's flush fell behind", "the master's backlog")
	side(r.known, r.Median.ReplBacklogShare, r.CILow.ReplBacklogShare, r.CIHigh.ReplBacklogShare, r.CILevel, "the slave fell behind", "the repl backlog")
	if len(no) > 0 {
		return "**no** (" + strings.Join(no, "; ") + ")"
	}
	if len(straddle) > 0 {
		return "yes (median; the interval of " + strings.Join(straddle, " and ") + " straddles " + pctText(bar) + ")"
	}
	return "yes"
}

// notSustainedWhy says why a replicated cell did not keep up with what it
// accepted ("" when it did, or has no slave): its slave fell behind, or
// its master's flush did. Such a cell's throughput ran ahead of what it
// made safe, and gets no ratio.
func notSustainedWhy(c *runfile.Cell) string {
	if c.Replication == "" {
		return ""
	}
	var why []string
	if r := replFiguresOf(c); r.behind() {
		why = append(why, fmt.Sprintf("its slave fell behind — %s not on the slave at the window's end, %s of what the master accepted in the window (above the %s bar): the master accepted faster than it replicated",
			fmtBytes(r.Median.ReplBacklogBytes), r.fig("replBacklogShare", fmtPct), pctText(load.SustainedBacklogShare)))
	}
	if c.Sustained != nil && c.BacklogShare > load.SustainedBacklogShare {
		why = append(why, fmt.Sprintf("its master's flush fell behind — %s not durable at the window's end, %s of what it accepted (above the %s bar)",
			fmtBytes(c.BacklogBytes), fig(c, "backlogShare", fmtPct), pctText(load.SustainedBacklogShare)))
	}
	return strings.Join(why, "; ")
}

// replCPUText is a replicated cell's CPU s/GiB: the master's process and
// the slave's, with the slave's part; "(master only)" for a run file from
// before the slave's CPU was counted.
func replCPUText(c *runfile.Cell) string {
	if c.CPUSecPerGiB <= 0 {
		return "—"
	}
	text := fig(c, "cpuSecPerGiB", fmtFloat)
	if c.Options["cpu"] == "" {
		return text + " (master only)"
	}
	return text + " (slave " + fig(c, "slaveCpuSecPerGiB", fmtFloat) + ")"
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
	b.WriteString("\"Usually configure master and slave with ASYNC_FLUSH, and SYNC_MASTER replication between them: even if one machine fails, no data is lost.\" Each group compares the four configurations at the same producers (closed loop: throughput, service-time percentiles) or the same offered rate (open loop: latency from the intended start); the ratio is to SYNC_FLUSH alone, a difference is called only where the intervals separate. A replicated configuration that did not keep up — its slave's repl backlog or its master's flush backlog above " + pctText(load.SustainedBacklogShare) + " of the window's bytes (median over the repeats) — gets no ratio, and the row says why: its rate ran ahead of what it replicated or made durable in the window. Its p50, p99 and p99.9, and the lag's, are the median over the repeats of each repeat's own percentile, with their interval (the latency tables' percentiles pool the repeats' histograms instead).\n\n")
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
		if r := replFiguresOf(c); c.Replication != "" && r.known && r.Median.ReplBacklogBytes > 0 {
			loss += fmt.Sprintf("; at the window's end the slave lacked %s (%s of the window's bytes)", fmtBytes(r.Median.ReplBacklogBytes), r.fig("replBacklogShare", fmtPct))
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
	if why := notSustainedWhy(c); why != "" {
		return "not compared: not sustained, " + why
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
