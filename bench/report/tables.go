package report

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
)

// label names a cell's system in tables: backend (peer), policy, pressure,
// target, A/A.
func label(f *runfile.RunFile, c *runfile.Cell) string {
	l := c.Backend + peerMark(c.Peer)
	if c.Policy != "" {
		l += " [" + c.Policy + "]"
	}
	if c.Message != "" && c.Message != "bare" {
		l += " · " + c.Message + " msg"
	}
	if c.Pressure != "" && c.Pressure != "none" {
		l += " · pressure " + c.Pressure
	}
	l += slaveText(c)
	if c.TwinOf != "" {
		l += " (A/A twin)"
	}
	if c.Target != "" && c.Emulated {
		l += " @" + c.Target + " (EMULATED)"
	} else if c.Target != "" && len(f.Devices) > 1 {
		l += " @" + c.Target
	}
	return l
}

func peerMark(peer bool) string { return map[bool]string{true: " (peer)"}[peer] }

func slaveText(c *runfile.Cell) string {
	switch {
	case c.Replication == "":
		return ""
	case c.HADelayNs > 0:
		return " + " + roleName(c.Replication) + " slave (EMULATED " + fmtNs(c.HADelayNs) + " one-way)"
	}
	return " + " + roleName(c.Replication) + " slave"
}

// messageNote says what the store cells put when it is not the bare body
// the peers write ("" when it is): the message and its record sizes.
func messageNote(f *runfile.RunFile) string {
	var kinds, sizes []string
	for c := range ptrs(f.Cells) {
		if c.Message == "" || c.Message == "bare" || c.RecordBytes == 0 {
			continue
		}
		kinds = appendNew(kinds, c.Message)
		sizes = appendNew(sizes, fmt.Sprintf("%d B for a %s body", c.RecordBytes, runfile.SizeLabel(c.SizeBytes)))
	}
	if len(kinds) == 0 {
		return ""
	}
	return fmt.Sprintf("mqstore's cells put the *%s* message (records of %s: TAGS, two KEYS and a UNIQ_KEY unique per message, WAIT, CLUSTER, a user property; the IndexFile indexes every key); the peers write the body alone, in their own format", strings.Join(kinds, ", "), strings.Join(sizes, ", "))
}

func cellsOf(f *runfile.RunFile, workload string, peers bool) []*runfile.Cell {
	cells := allCells(f)
	if !peers {
		cells = cells[:len(f.Cells)]
	}
	return slices.DeleteFunc(cells, func(c *runfile.Cell) bool { return c.Workload != workload || !c.Measured() })
}

func fig(c *runfile.Cell, name string, f func(float64) string) string {
	return ci(c.Interval(name), f)
}

// latencyFig shows a latency percentile of a cell; a saturated cell's as
// "≥ x" (every percentile of a growing queue is a lower bound).
func latencyFig(c *runfile.Cell, name string) string {
	return orMore(c.Status == runfile.StatusSaturated, fig(c, name, fmtNsF))
}

func orMore(bound bool, s string) string {
	if bound {
		return "≥ " + s
	}
	return s
}

// tailText shows a percentile of a cell's merged tail: the value, the
// samples above it and the spread of the percentile over the repeats —
// "≥ v" when it is a bound (fewer than runfile.MinSamplesAbove samples
// above it, or a saturated cell's growing queue), "—" without a tail.
func tailText(c *runfile.Cell, name string) string {
	p := c.Tail.Point(name)
	if p == nil {
		return "—"
	}
	spread := fmtNs(p.RepeatMinNs) + "–" + fmtNs(p.RepeatMaxNs)
	if name == "maxNs" {
		return fmt.Sprintf("%s (repeats %s)", fmtNs(p.ValueNs), spread)
	}
	return fmt.Sprintf("%s (%d above; repeats %s)", orMore(p.Bound || c.Status == runfile.StatusSaturated, fmtNs(p.ValueNs)), p.Above, spread)
}

func tailCount(c *runfile.Cell) string {
	if c.Tail == nil {
		return "—"
	}
	return fmtCount(float64(c.Tail.Count))
}

func deviceLabel(f *runfile.RunFile, target string) string {
	for _, d := range f.Devices {
		if d.Label == target && d.Emulated {
			return target + " (EMULATED)"
		}
	}
	return target
}

func sustainedText(c *runfile.Cell) string {
	switch {
	case c.DurableAtDrainOnly:
		return "— ‡"
	case c.Status == runfile.StatusSaturated:
		return "**no** (saturated)" // it did not keep its schedule, whatever its backlog
	case c.Sustained == nil:
		return "—"
	}
	// The verdict is the median repeat's; say so when the interval of the
	// backlog share straddles the bar (the recommendation calls such a cell
	// undetermined).
	straddles := ""
	if c.CILevel > 0 && c.CILow.BacklogShare <= load.SustainedBacklogShare && c.CIHigh.BacklogShare > load.SustainedBacklogShare {
		straddles = " (median; its interval straddles " + pctText(load.SustainedBacklogShare) + ")"
	}
	return map[bool]string{true: "yes", false: "**no**"}[*c.Sustained] + straddles
}

func writeThroughput(b *strings.Builder, f *runfile.RunFile) {
	rows := cellsOf(f, "throughput", true)
	if len(rows) == 0 {
		return
	}
	b.WriteString("## Throughput (closed loop)\n\n")
	t := newTable(b, "backend", "size>", "flush", "producers>", "msgs/s>", "accepted MB/s>", "durable MB/s>", "backlog>", "drain>", "time-to-durable MB/s>",
		"msgs/group commit>", "÷ group-commit limit>", "in flush (mean flush)>", "sustained", "p50>", "p99>", "p99.9>", "CPU s/GiB>", "allocs/msg>")
	for _, c := range rows {
		durable, backlog, drain, ttd := "—", "—", "—", "—"
		switch {
		case c.DurableAtDrainOnly:
			durable, drain, ttd = "— ‡", fig(c, "drainNs", fmtNsF), fig(c, "timeToDurableMBps", fmtFloat)
		case c.Sustained != nil:
			durable, backlog, drain, ttd = fig(c, "durableMBps", fmtFloat), fig(c, "backlogBytes", fmtBytes), fig(c, "drainNs", fmtNsF), fig(c, "timeToDurableMBps", fmtFloat)
		}
		perCommit := orDash(c.MsgsPerGroupCommit > 0 && c.Flush == "sync", fig(c, "msgsPerGroupCommit", fmtFloat))
		inFlush := orDash(c.FlushBusyShare > 0, fig(c, "flushBusyShare", fmtPct)+" ("+fmtNs(c.FlushMeanNs)+")")
		accepted := fig(c, "writtenMBps", fmtFloat)
		if c.WrittenMBps == 0 {
			accepted = fig(c, "mbPerSec", fmtFloat) + " (body)"
		}
		t.row(label(f, c), runfile.SizeLabel(c.SizeBytes), c.Flush, fmt.Sprint(c.Producers),
			fig(c, "msgsPerSec", fmtCount), accepted, durable, backlog, drain, ttd, perCommit, groupCommitText(f, c), inFlush, replSustainedText(c),
			tailText(c, "p50Ns"), tailText(c, "p99Ns"), tailText(c, "p999Ns"), cpuText(c), fig(c, "allocsPerMsg", fmtFloat))
	}
	b.WriteString("\nMB are 10^6 bytes of CommitLog records (a peer's: its own records) — *accepted* were acknowledged, *durable* were flushed during the window; a peer without durability reporting shows body MB/s. Latency columns are service times (a closed loop has no intended start). *CPU s/GiB*: CPU seconds per GiB (2^30 bytes) of message bodies accepted — the same bodies for every system, whatever its records add — of the whole process that runs the system (getrusage; the remoting peer adds its broker's, read from /proc; an older run's remoting row, which counted its client alone, says *client only*), not the kernel's writeback threads; — where the repeats have no CPU reading. *drain* is Store.Flush for mqstore (commit and flush of everything written: the CommitLog, as a peer's Drain syncs its own log); Close — dispatch, the ConsumeQueue and index flush, the checkpoint — is timed apart (run.json `closeNs`). *in flush*: the share of the window mqstore spent in its durable flushes (with sync flush, the group commit's commit and sync; with async, the flush service's), with the mean flush in brackets: near the whole window with sync flush, the device's syncs set the rate and only more records per sync go faster; well below, the time between syncs does (the producers, the CPUs, the scheduler). *÷ group-commit limit*: msgs/s over the most the device made durable with the cell's producer count of its records per durable write on written extents (a pre-written file, as a pre-written or reused segment is), and, after *fallocated*, on a fallocated file — shown for a cell whose windows made fallocated segments, whose syncs then also committed extent conversions (the limits' table below says how each was measured).\n\n")
}

// cpuText is a throughput cell's CPU s/GiB: — without a reading, and
// marked when it is a remoting peer's from before the peer counted its
// broker (its options say nothing of its CPU).
func cpuText(c *runfile.Cell) string {
	if c.Replication != "" {
		return replCPUText(c)
	}
	if c.CPUSecPerGiB <= 0 {
		return "—"
	}
	text := fig(c, "cpuSecPerGiB", fmtFloat)
	if c.Peer && c.Backend == "remoting" && c.Options != nil && c.Options["cpu"] == "" {
		text += " (client only)"
	}
	return text
}

// groupCommitText is a sync cell's ÷ group-commit limit on written
// extents, and on a fallocated file after it when the cell has that ratio.
func groupCommitText(f *runfile.RunFile, c *runfile.Cell) string {
	text := ratioText(f, kindGroupCommit, c)
	if fa := ratioText(f, kindGroupCommitFallocated, c); fa != "—" {
		text += "; fallocated " + fa
	}
	return text
}

func ratioText(f *runfile.RunFile, kind string, c *runfile.Cell) string {
	if i := slices.IndexFunc(f.Ratios, func(r runfile.Ratio) bool { return r.Kind == kind && r.Cell == c.Name }); i >= 0 {
		return ratioRange(f.Ratios[i])
	}
	return "—"
}

// writeAtDrainOnly explains the ‡ rows: peers whose durable position moved
// only at Drain. Their durable rate cannot be observed, which is a limit
// of what they report, not a failure to keep up: they get no sustained
// verdict, and their own statement says what they do in between.
func writeAtDrainOnly(b *strings.Builder, f *runfile.RunFile) {
	drained := slices.DeleteFunc(allCells(f), func(c *runfile.Cell) bool { return !c.DurableAtDrainOnly || !c.Measured() })
	for _, c := range firstByKey(drained, func(c *runfile.Cell) string { return c.Backend + "|" + c.Flush }) {
		fmt.Fprintf(b, "‡ **%s (%s)** reported durable bytes only when drained: its durable position did not move during any window, and Drain made everything durable. That is an accounting limit of the peer — the harness cannot observe when (or whether) it syncs in between — **not the peer failing to keep up**, so the row has no durable MB/s and no sustained verdict (neither \"not sustained\" nor a recommendation is drawn from it). Its own statement: \"%s\".\n\n",
			c.Backend, c.Flush, mechanismOf(c))
	}
}

func roleName(repl string) string {
	return orDefault(map[string]string{"sync": "SYNC_MASTER", "async": "ASYNC_MASTER"}[repl], repl)
}

func writeLatency(b *strings.Builder, f *runfile.RunFile) {
	rows := cellsOf(f, "latency", true)
	if len(rows) == 0 {
		return
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].RatePerSec < rows[j].RatePerSec })
	fmt.Fprintf(b, "## Latency (open loop, %s arrivals at absolute rates; completion − intended start)\n\n", f.Config.Arrival)
	t := newTable(b, "backend", "size>", "flush", "rate>", "status", "achieved msgs/s>", "samples>", "p50>", "p99>", "p99.9>", "max>", "floor p99.9>",
		"service p99.9>", "unstarted>", "sustained", "sustainable rate>")
	for _, c := range rows {
		floor, sustainable := orDash(c.FloorP999Ns > 0, fmtNs(c.FloorP999Ns)), "—"
		if c.SustainableRatePerSec > 0 {
			sustainable = fmtCount(c.SustainableRatePerSec)
			if s := f.SearchOf(c); s != nil {
				if why := s.LowerBound(); why != "" {
					if s.SaturatedAtPerSec > 0 {
						why = "saturated at " + fmtCount(s.SaturatedAtPerSec) + "; " + why
					}
					sustainable = "≥ " + sustainable + " (" + why + ")"
				}
			}
		}
		t.row(label(f, c), runfile.SizeLabel(c.SizeBytes), c.Flush,
			fmtCount(c.RatePerSec), statusText(c, " † generator-bound"), fig(c, "msgsPerSec", fmtCount), tailCount(c), tailText(c, "p50Ns"), tailText(c, "p99Ns"), tailText(c, "p999Ns"),
			tailText(c, "maxNs"), floor, serviceText(c), fmtPct(c.Max.UnstartedFraction), replSustainedText(c), sustainable)
	}
	fmt.Fprintf(b, "\nPercentiles come from the merged histogram of every measured repeat (*samples* in all), each with the number of samples above it and the range of the same percentile over the repeats; one with fewer than %d samples above it is a bound (≥) that no rule decides on. *unstarted*: the worst repeat's share of arrivals never started by the deadline: the window's end plus a tenth of the window (each is in the percentiles at deadline − intended). † *generator-bound*: p99.9 below %s× the floor's and the service-time p99.9 within the floor's — the load generator's tail, which bounds the store's from above. *saturated* cells show lower bounds (≥).\n\n",
		runfile.MinSamplesAbove, fmtFloat(runfile.GeneratorBoundFactor))
	for _, c := range rows {
		if c.Status == runfile.StatusSaturated {
			fmt.Fprintf(b, "- `%s` saturated: %s\n", c.Name, strings.Join(c.Saturation, " | "))
		}
	}
	b.WriteString("\n")
}

func statusText(c *runfile.Cell, mark string) string {
	if c.GeneratorBound {
		return c.Status + mark
	}
	return c.Status
}

func serviceText(c *runfile.Cell) string {
	p := c.ServiceTail.Point("p999Ns")
	if p == nil {
		return "—"
	}
	return orMore(p.Bound, fmtNs(p.ValueNs))
}

func writeSearches(b *strings.Builder, f *runfile.RunFile) {
	if len(f.Searches) == 0 {
		return
	}
	b.WriteString("## Highest sustainable rate (open loop; probes of one repeat each)\n\n")
	t := newTable(b, "system", "sustainable msgs/s>", "saturated at>", "in flight>", "probes (rate: status)")
	for _, s := range f.Searches {
		var probes []string
		bound := false
		for _, p := range s.Probes {
			txt := fmt.Sprintf("%s: %s", fmtCount(p.RatePerSec), p.Status)
			if p.InFlightBound() {
				txt += fmt.Sprintf(" (**in-flight bound**: achieved %s of the %s that %d in flight allow)", fmtCount(p.AchievedPerSec), fmtCount(p.InFlightCapPerSec), s.InFlight)
				bound = true
			}
			probes = append(probes, txt)
		}
		sus := "none found"
		if s.SustainableRatePerSec > 0 {
			sus = fmtCount(s.SustainableRatePerSec)
			if why := s.LowerBound(); why != "" {
				sus = "≥ " + sus + " (" + why + ")"
			}
		}
		if s.Reason != "" {
			sus += " (" + oneLine(s.Reason) + ")"
		}
		if bound && s.SustainableRatePerSec <= 0 {
			sus += " — the generator's in flight, not the system, limited a probe"
		}
		t.row(s.Backend+peerMark(s.Peer)+" "+runfile.SizeLabel(s.Size)+" "+s.Flush, sus, orDash(s.SaturatedAtPerSec > 0, fmtCount(s.SaturatedAtPerSec)),
			orDash(s.InFlight > 0, fmt.Sprint(s.InFlight)), strings.Join(probes, ", "))
	}
	fmt.Fprintf(b, "\nSustained means the open loop kept its schedule and, for a system that reports durability, kept what it accepted durable (backlog ≤ %s of what it wrote): a probe that only filled buffers is *not sustained*. The ladder's rungs count as probes: the search starts between the highest rung sustained and the lowest not, tries just below what a failed probe achieved durably, and bisects to within %s. With W requests in flight of mean service time S the open loop offers at most W ÷ S (Little's law): a saturated probe that achieved at least %s of that is *in-flight bound* — the generator's limit, not the system's.\n\n",
		pctText(load.SustainedBacklogShare), pctText(runfile.SearchResolution-1), pctText(runfile.InFlightBoundShare))
}

func writeFloors(b *strings.Builder, f *runfile.RunFile) {
	if len(f.Floors) == 0 {
		return
	}
	b.WriteString("## The harness's floor (the same schedule against a no-op, in the process that drives the cells)\n\n")
	targets := len(distinct(mapped(f.Floors, func(fl runfile.Floor) string { return fl.Target }))) > 1
	heads := []string{"rate>", "process", "pressure"}
	if targets {
		heads = append(heads, "target")
	}
	t := newTable(b, append(heads, "status", "p50>", "p99>", "merged p99.9>")...)
	for _, fl := range f.Floors {
		iv := func(name string, median int64) string {
			return ci(runfile.Interval{Median: float64(median), Lo: fl.CILow.Figure(name), Hi: fl.CIHigh.Figure(name)}, fmtNsF)
		}
		row := []string{fmtCount(fl.RatePerSec), orDefault(fl.Process, runfile.FloorMQBench), fl.Pressure}
		if targets {
			row = append(row, deviceLabel(f, fl.Target))
		}
		t.row(append(row, fl.Status, iv("p50Ns", fl.P50Ns), iv("p99Ns", fl.P99Ns), fmtNs(floorP999(&fl)))...)
	}
	b.WriteString("\n")
}

// writeDurability is the table of what an acknowledgement means, a row
// for every system, flush mode and replication that appears in the run.
// mqstore's rows are its backends' own statements (their registrations'
// Durability, with this run's options), the peers' their own.
func writeDurability(b *strings.Builder, f *runfile.RunFile) {
	type key struct {
		backend, flush, repl, policy string
		delay                        int64
		peer                         bool
	}
	rows := firstByKey(slices.DeleteFunc(allCells(f), func(c *runfile.Cell) bool {
		return c.Durability == nil || c.Workload == "consume" || c.Workload == "recovery"
	}), func(c *runfile.Cell) key {
		return key{c.Backend, c.Flush, c.Replication, c.Policy, c.HADelayNs, c.Peer}
	})
	if len(rows) == 0 {
		return
	}
	machine := slices.ContainsFunc(rows, func(c *runfile.Cell) bool { return c.Replication != "" })
	b.WriteString("## Durability: what an acknowledgement means\n\n")
	heads := []string{"system", "flush", "ack is sent", "a process crash loses", "a power loss loses"}
	if machine {
		heads = append(heads, "losing the (master's) machine loses")
	}
	t := newTable(b, append(heads, "mechanism")...)
	for _, c := range rows {
		name := c.Backend
		if c.Peer {
			name = c.Backend + " (peer: " + orDefault(c.Label, c.Backend)
			if c.Version != "" && !strings.Contains(c.Label, c.Version) {
				name += ", " + c.Version
			}
			name += ")"
		} else {
			name += slaveText(c)
		}
		if c.Policy != "" {
			name += " · " + c.Policy
		}
		d := c.Durability
		row := []string{name, c.Flush, d.Ack, d.ProcessCrash, d.PowerLoss}
		if machine {
			row = append(row, orDefault(d.MachineLoss, "everything: no other copy"))
		}
		t.row(append(row, d.Mechanism)...)
	}
	b.WriteString("\nmqstore's rows are each backend's own statement — its registration's `Durability`, written beside the code whose system calls it names, for the options the cell ran with — with the flush and commit intervals its cells ran with (in a policy sweep, a row per policy, named after the system); the peers' rows are what each peer reports about itself. A row is not comparable with another's throughput unless both acknowledge the same thing.\n\n")
}

func writePressure(b *strings.Builder, f *runfile.RunFile) {
	type row struct {
		base *runfile.Cell
		by   map[string]*runfile.Cell
	}
	var rows []row
	ps := slices.DeleteFunc(slices.Clone(f.Config.Pressures), func(p string) bool { return p == "none" })
	for c := range ptrs(f.Cells) {
		if c.Workload != "latency" || c.Pressure != "none" || !c.Measured() || c.TwinOf != "" {
			continue
		}
		r := row{base: c, by: map[string]*runfile.Cell{}}
		for p := range ptrs(f.Cells) {
			if p.Pressure != "none" && samePoint(c, p) {
				r.by[p.Pressure] = p
			}
		}
		if len(r.by) > 0 {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "## Under pressure (open loop at the same rates; p99.9, and the gate's ratio to the unpressured tail: on p99.9, or on p99 where a p99.9 has fewer than %d samples above it — each cell names the figure)\n\n", runfile.MinSamplesAbove)
	t := newTable(b, append([]string{"backend", "size>", "flush", "rate>", "none p99.9>"}, mapped(ps, func(p string) string { return p + " p99.9 (÷ none)>" })...)...)
	for _, r := range rows {
		c := r.base
		row := []string{label(f, c), runfile.SizeLabel(c.SizeBytes), c.Flush, fmtCount(c.RatePerSec), tailText(c, "p999Ns")}
		for _, p := range ps {
			switch pc := r.by[p]; {
			case pc == nil:
				row = append(row, "—")
			case !pc.Measured():
				row = append(row, pc.Status)
			default:
				verdict, rt, figure := gate(pc, c)
				row = append(row, fmt.Sprintf("%s (%s %s×: %s)", tailText(pc, "p999Ns"), figureName(figure), withRange(rt.Median, rt.Low, rt.High, fmtFloat), verdict))
			}
		}
		t.row(row...)
	}
	b.WriteString("\nWhat the samples show of each pressure (means over the measured repeats, without → with):\n\n")
	for _, r := range rows {
		for _, p := range ps {
			if pc := r.by[p]; pc != nil && pc.Measured() {
				fmt.Fprintf(b, "- %s %s at %s/s, %s: %s\n", label(f, r.base), r.base.Flush, fmtCount(r.base.RatePerSec), p, pressureEvidence(r.base, pc))
			}
		}
	}
	b.WriteString("\nThe pressures, as applied in this run:\n\n")
	for _, n := range f.Notes {
		if strings.HasPrefix(n, "pressure ") {
			fmt.Fprintf(b, "- %s\n", n)
		}
	}
	b.WriteString("\nThe system was sampled every 100 ms in every repeat (run.json `repeats[].samples`: dirty and writeback pages, swap, major faults, PSI, load average, CPU steal).\n\n")
}

func writeE2E(b *strings.Builder, f *runfile.RunFile) {
	rows := cellsOf(f, "e2e", false)
	if len(rows) == 0 {
		return
	}
	b.WriteString("## End to end (open-loop producers, one long-polling consumer per queue; store-to-delivery latency)\n\n")
	t := newTable(b, "backend", "size>", "flush", "rate>", "status", "delivered msgs/s>", "p50>", "p99>", "p99.9>", "max>", "Put latency p99.9>", "unstarted>")
	for _, c := range rows {
		t.row(label(f, c), runfile.SizeLabel(c.SizeBytes), c.Flush, fmtCount(c.RatePerSec), statusText(c, " †"),
			fig(c, "msgsPerSec", fmtCount), tailText(c, "p50Ns"), tailText(c, "p99Ns"), tailText(c, "p999Ns"), tailText(c, "maxNs"),
			serviceText(c), fmtPct(c.Max.UnstartedFraction))
	}
	b.WriteString("\nLatency = the consumer's clock once it has decoded the message − the message's *intended* start (stamped in the body), so a producer that started late does not hide the wait. Messages become visible once dispatch has put them in their ConsumeQueue, which follows the CommitLog's committed position — what a process crash keeps: the write position for mmap, what the commit service has written into the file for the buffered backends (a Put wakes a commit of everything pending, so their end-to-end latency follows the commit's, not the commit interval). *Put latency*: the producers' service time.\n\n")
}

func writeConsume(b *strings.Builder, f *runfile.RunFile) {
	rows := cellsOf(f, "consume", false)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "## Consume (catch-up read of a %s CommitLog through the ConsumeQueue, one queue, to a loopback TCP reader)\n\n", runfile.SizeLabel(int(f.Config.ConsumeBytes)))
	t := newTable(b, "backend", "size>", "variant", "msgs/s>", "GB/s>", "sender CPU s/GiB>", "process CPU s/GiB>", "resident after drop>")
	for _, c := range rows {
		t.row(label(f, c), runfile.SizeLabel(c.SizeBytes), c.Variant,
			fig(c, "msgsPerSec", fmtCount), fig(c, "mbPerSec", fmtGBps),
			fig(c, "cpuSecPerGiB", fmtFloat), fig(c, "processCpuSecPerGiB", fmtFloat),
			orDash(strings.HasPrefix(c.Variant, "cold"), fmtPct(c.ResidentFraction)))
	}
	fmt.Fprintf(b, "\nGet (up to 1024 messages, 256 KiB) then GetResult.CopyTo (read, write) or GetResult.WriteTo (sendfile per contiguous range) into a loopback TCP connection whose reader discards. *sender CPU*: getrusage(RUSAGE_THREAD) of the locked OS thread running the loop, %s; *process CPU*: getrusage of the whole process until the reader has read everything. hot: after an unmeasured pass; cold: MADV_PAGEOUT of the store's mappings then drop_caches (root, --cold-reads).\n\n", senderCPUSpan(rows))
}

// fmtGBps shows MB/s as GB/s.
func fmtGBps(mbps float64) string { return fmtFloat(mbps / 1e3) }

func senderCPUSpan(rows []*runfile.Cell) string {
	for _, c := range rows {
		if c.SenderCPU != runfile.SenderCPUSends {
			return "until the reader had read everything (this run's harness counted its wait for the reader too)"
		}
	}
	return "from its first Get until its last send returned (not the wait for the reader)"
}

func writeRecovery(b *strings.Builder, f *runfile.RunFile) {
	rows := cellsOf(f, "recovery", false)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "## Recovery (engine.Open after SIGKILL of a producer holding a %s CommitLog)\n\n", runfile.SizeLabel(int(f.Config.RecoveryBytes)))
	t := newTable(b, "backend", "size>", "variant", "CommitLog scanned>", "open time>", "GB/s scanned>")
	for _, c := range rows {
		t.row(label(f, c), runfile.SizeLabel(c.SizeBytes), c.Variant, scannedText(c),
			fig(c, "openNs", fmtNsF), fig(c, "mbPerSec", fmtGBps))
	}
	b.WriteString("\nA child process fills the store (async) and is killed with SIGKILL holding it; engine.Open then recovers it. MB/s counts the CommitLog bytes recovery scanned.\n\n")
}

// scannedText is the CommitLog a recovery cell's measured repeats
// scanned: their median, with their range when they differ.
func scannedText(c *runfile.Cell) string {
	var mb []float64
	for _, r := range c.Repeats {
		if !r.Warm {
			mb = append(mb, float64(r.Result.PayloadBytes)/1e6)
		}
	}
	if len(mb) == 0 {
		return "—"
	}
	slices.Sort(mb)
	text := fmt.Sprintf("%.0f MB", runfile.Median(mb))
	if mb[0] != mb[len(mb)-1] {
		text += fmt.Sprintf(" [%.0f–%.0f]", mb[0], mb[len(mb)-1])
	}
	return text
}

func writeFailures(b *strings.Builder, f *runfile.RunFile) {
	var lines []string
	for _, c := range allCells(f) {
		if !c.Measured() {
			lines = append(lines, fmt.Sprintf("`%s`: **%s** — %s", c.Name, c.Status, oneLine(c.Reason)))
		}
	}
	for _, l := range f.Limits {
		if l.Status != runfile.StatusOK {
			lines = append(lines, fmt.Sprintf("limit `%s`: **%s** — %s", l.Name, l.Status, oneLine(l.Reason)))
		}
	}
	writeList(b, "## Failed, skipped or interrupted (no figures)\n\n", lines)
}

// limitLabel names a limit, with its target when it is emulated or the
// run has several.
func limitLabel(f *runfile.RunFile, l *runfile.Limit) string {
	if d := deviceLabel(f, l.Target); l.Target != "" && (d != l.Target || len(f.Devices) > 1) {
		return l.Name + " @" + d
	}
	return l.Name
}

func writeLimits(b *strings.Builder, f *runfile.RunFile) {
	var ok, groupCommit []*runfile.Limit
	for i := range f.Limits {
		switch l := &f.Limits[i]; {
		case l.Status != runfile.StatusOK:
		case isGroupCommitLimit(l.Name):
			groupCommit = append(groupCommit, l)
		default:
			ok = append(ok, l)
		}
	}
	defer writeGroupCommitLimits(b, f, groupCommit)
	if len(ok) == 0 {
		return
	}
	b.WriteString("## Limits (same run, same directory, no engine)\n\n")
	t := newTable(b, "limit", "tool", "block/record>", "MB/s>", "ops/s>", "p50>", "p99>", "p99.9>")
	for _, l := range ok {
		lat := func(name string) string {
			return orDash(l.Figures.Figure(name) != 0, orMore(thinTail(l, name), ci(l.Interval(name), fmtNsF)))
		}
		size := runfile.SizeLabel(l.SizeBytes)
		if rec := l.Params["recordBytes"]; rec != "" { // a limit on records of a body size
			size = rec + " B record (" + size + " body)"
		}
		mbps := orDash(l.MBPerSec > 0, ci(l.Interval("mbPerSec"), fmtFloat)) // a limit that writes nothing has no bandwidth
		t.row(limitLabel(f, l), l.Tool, size, mbps, ci(l.Interval("msgsPerSec"), fmtCount), lat("p50Ns"), lat("p99Ns"), lat("p999Ns"))
	}
	fmt.Fprintf(b, "\nEach latency is the median over the repeats of each repeat's own percentile; one that has fewer than %d of a repeat's probes above it (`--sync-probes` per repeat) is a bound (≥).", runfile.MinSamplesAbove)
	b.WriteString(" *device-seq-write*: O_DIRECT 1 MiB writes at depth 32 through io_uring, timed to the last completion (no sync: what the device accepts, faster than it makes them durable where it has a volatile cache); *device-seq-write-durable*: the same writes and one fdatasync after them, timed to its return — the durable bandwidth an async cell's durable MB/s can reach. *device-fdatasync-4k*: 4 KiB pwrite + fdatasync, one at a time, into a fallocated file (each sync also commits an extent conversion); *device-fdatasync-4k-prewritten*: the same into a file pre-written as the engine pre-writes a segment (zeros through the page cache, synced) — data only: the physical cost of one durable append; fio's fdatasync figures time the fdatasync alone. *segment-create-fallocated* / *-prewritten* / *-prewritten-direct*: one segment of the run's size made per repeat by the allocation service's own code (segfile.OpenOrCreate: create, fallocate, [zeros through the page cache, or with O_DIRECT for uring-direct,] fdatasync, rename, directory sync) — p50 is its time; MB/s, for a pre-written one, the write bandwidth pre-writing takes (Options.PrewriteSegments' cost). Both are made at full speed, as the engine makes them unless Options.PacePrewrite (--pace-prewrite) writes a segment made ahead in synced steps, slower for the same bytes.\n\n")
}

// thinTail reports whether a limit's percentile (p50Ns, p99Ns, p999Ns)
// rests on fewer than runfile.MinSamplesAbove of a repeat's probes above
// it: each repeat's percentile is taken from its own count of probes, and
// the figure is the median of the repeats', so such a one is a bound.
// Limits that do not record their count are not marked.
func thinTail(l *runfile.Limit, name string) bool {
	n, err := strconv.Atoi(l.Params["count"])
	if err != nil || n <= 0 {
		return false
	}
	for _, q := range runfile.TailQuantiles {
		if q.Name == name {
			return float64(n)*(1-q.Q) < runfile.MinSamplesAbove
		}
	}
	return false
}

// isGroupCommitLimit reports whether name is one of the group-commit
// limits.
func isGroupCommitLimit(name string) bool {
	_, ok := runfile.GroupCommitLimit(name)
	return ok
}

// writeGroupCommitLimits is the device's group-commit limit at each
// producer count: one row per count, way of writing and syncs in flight.
func writeGroupCommitLimits(b *strings.Builder, f *runfile.RunFile, ls []*runfile.Limit) {
	if len(ls) == 0 {
		return
	}
	var direct, fallocated bool
	for _, l := range ls {
		way, _ := runfile.GroupCommitLimit(l.Name)
		direct, fallocated = direct || way.Direct, fallocated || !way.Written
	}
	if direct || fallocated {
		b.WriteString("### The group-commit limit (N records per durable write: through the page cache or with O_DIRECT, on a pre-written or a fallocated file)\n\n")
	} else { // a run from before the O_DIRECT and fallocated limits
		b.WriteString("### The group-commit limit (N records per pwrite + fdatasync on a pre-written file: in one, or split over two in flight)\n\n")
	}
	t := newTable(b, "limit", "record>", "N (producers)>", "in flight>", "records per op>", "ops/s>", "msgs/s>", "MB/s>", "p50 per op>", "p99 per op>")
	for _, l := range ls {
		perOp := l.Params["recordsPerOp"]
		if perOp == "" { // before schema 5 every op wrote all N
			perOp = strconv.Itoa(l.Producers)
		}
		if !boundsItsProducers(f, l) {
			perOp += " each (2N outstanding: not used as the limit)"
		}
		t.row(limitLabel(f, l), fmt.Sprintf("%d B (%s %s body)", l.RecordBytes, l.Params["message"], runfile.SizeLabel(l.SizeBytes)),
			fmt.Sprint(l.Producers), fmt.Sprint(l.InFlight), perOp, ci(l.Interval("opsPerSec"), fmtCount), ci(l.Interval("msgsPerSec"), fmtCount), ci(l.Interval("mbPerSec"), fmtFloat),
			ci(l.Interval("p50Ns"), fmtNsF), orMore(thinTail(l, "p99Ns"), ci(l.Interval("p99Ns"), fmtNsF)))
	}
	b.WriteString("\nWhat the device makes durable for a group commit of N producers: N closed-loop producers never have more than N records outstanding, so each op writes the N records of the cell's message at the next offset of one file, one op after another. ")
	b.WriteString("*device-group-commit*: one pwrite, then fdatasync (the buffered backends' sync), on a file made as the engine makes a pre-written segment (written extents: a sync commits data only); from two producers on also *in flight 2*, the N records split between two goroutines at once, ⌈N/2⌉ and ⌊N/2⌋ per op, each on its own part of the file (two syncs in flight on one segment, as a pipelined commit would). ")
	if direct {
		b.WriteString("*device-group-commit-direct*: one pwritev2 with RWF_DSYNC of the aligned blocks that cover the N records, O_DIRECT (uring-direct's commit: the next op starts in the block where the last one ended), on a file pre-written with O_DIRECT zeros; on a device with FUA writes it can beat the page cache's write and cache flush. ")
	}
	if fallocated {
		b.WriteString("*-fallocated*: the same on a file that is only fallocated, as a new segment the engine does not pre-write (unwritten extents: each sync also commits an extent conversion). ")
	}
	msgs := "msgs/s is the records written per second. A sync throughput cell's *÷ group-commit limit* is its msgs/s over the best of the written-extent limits at its producer count"
	if fallocated {
		msgs += "; a cell whose measured windows made fallocated segments (Options.PrewriteSegments auto fallocates once syncs carry 128 KiB or more) also gets its msgs/s over the best of the fallocated ones"
	}
	fmt.Fprintf(b, "%s. The limits run once, before the cells: a device that drifts during the run moves the cells, not them. A p99 per op with fewer than %d of a repeat's ops above it is a bound (≥).\n\n", msgs, runfile.MinSamplesAbove)
}

func writeRatios(b *strings.Builder, f *runfile.RunFile) {
	if len(f.Ratios) == 0 {
		return
	}
	b.WriteString("## Ratios (median [the widest the intervals allow]; only comparable cells — not saturated, not generator-bound — except the pressure gate's latency ratios, which take the merged tails of every measured cell and say where a bound leaves the verdict undetermined)\n\n")
	titles := map[string]string{"device": "store ÷ device", "group-commit": "sync store ÷ the device's group-commit limit on written extents (same producers, same records)",
		"group-commit-fallocated": "sync store ÷ the device's group-commit limit on a fallocated file (the cells whose windows made fallocated segments)", "peer": "mqstore ÷ peers (same producers, or the same rate)", "pressure": "under pressure ÷ unpressured (same cell otherwise)",
		"sendfile": "consume: sendfile ÷ copy"}
	for _, kind := range []string{"pressure", "sendfile", "device", kindGroupCommit, kindGroupCommitFallocated, "peer"} {
		rows := slices.DeleteFunc(slices.Clone(f.Ratios), func(r runfile.Ratio) bool { return r.Kind != kind })
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(b, "### %s\n\n", titles[kind])
		t := newTable(b, "cell", "against", "figure", "ratio>", "note")
		for _, r := range rows {
			t.row(r.Cell, r.Against, r.Figure, ratioRange(r), strings.Join(slices.DeleteFunc([]string{r.Note, r.Missing}, func(s string) bool { return s == "" }), " — "))
		}
		b.WriteString("\n")
	}
}

// PSISaturated: a PSI "some" share (avg10, %) at or above this without
// pressure is the cell's own stalls — the pressure cannot show in it.
const PSISaturated = 50.0

// sampleMeans are the means of a cell's system samples; swapPerSec is its
// swap traffic (pages in and out) per second of the samples whose wall time
// is known.
type sampleMeans struct {
	n                                   int
	dirtyPages, swapPerSec, ioSome, mem float64
}

func meansOf(c *runfile.Cell) sampleMeans {
	var m sampleMeans
	var swapped, wallNs float64
	for _, r := range c.MeasuredRepeats() {
		for i, s := range r.Samples {
			m.n++
			m.dirtyPages += float64(s.NrDirtyPages + s.NrWritebackPages)
			if ns := sampleWallNs(r.Samples, i); ns > 0 {
				swapped += float64(s.PswpIn + s.PswpOut)
				wallNs += float64(ns)
			}
			m.ioSome += s.IOSomeAvg10
			m.mem += s.MemSomeAvg10
		}
	}
	if m.n > 0 {
		k := float64(m.n)
		m.dirtyPages, m.ioSome, m.mem = m.dirtyPages/k, m.ioSome/k, m.mem/k
	}
	if wallNs > 0 {
		m.swapPerSec = swapped / (wallNs / 1e9)
	}
	return m
}

// pressureEvidence says what the system samples show of a pressure on a
// cell against its unpressured twin: dirty and writeback pages, swap
// traffic, and PSI — whose "some" share is no signal where the cell
// itself keeps it saturated (at or above PSISaturated % without
// pressure: a busy device's own stalls).
func pressureEvidence(base, p *runfile.Cell) string {
	b, q := meansOf(base), meansOf(p)
	if b.n == 0 || q.n == 0 {
		return "no samples"
	}
	out := []string{fmt.Sprintf("dirty+writeback %s → %s pages", fmtCount(b.dirtyPages), fmtCount(q.dirtyPages))}
	if p.Pressure == "swap" {
		out = append(out, fmt.Sprintf("swap in+out %s → %s pages/s", fmtFloat(b.swapPerSec), fmtFloat(q.swapPerSec)),
			psiEvidence("memory some", b.mem, q.mem))
	} else {
		out = append(out, psiEvidence("io some", b.ioSome, q.ioSome))
	}
	return strings.Join(out, "; ")
}

func psiEvidence(name string, without, with float64) string {
	if without >= PSISaturated {
		return fmt.Sprintf("PSI %s %.0f%% → %.0f%%: not a signal (the cell alone keeps it at %.0f%%)", name, without, with, without)
	}
	return fmt.Sprintf("PSI %s %.0f%% → %.0f%%", name, without, with)
}
