// Package report renders a run file: summary.md (tables, the durability
// table, the recommendation, plots, profile tops), bench.txt (Go benchmark
// format for benchstat), the .hgrm percentile distributions, and the
// comparison of two runs. It is pure: everything it writes is derived from
// run.json (Analyze recomputes the derived parts), so `mqbench report`
// regenerates a run's files byte for byte.
//
// Files: summary.go (summary.md's frame and first screen), tables.go (its
// tables), peers.go and replication.go (their sections), analyze.go
// (generator-bound flags, ratios, A/A, recommendations), plots.go (PNG
// plots), files.go (writing a run's files), benchtxt.go, compare.go,
// sweep.go (the Pareto front), format.go.
package report

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/mappedfile"
)

// Summary renders summary.md from the run alone.
func Summary(f *runfile.RunFile) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# mqbench run %s\n\n", f.ID)
	writeAnswer(&b, f)
	writeContext(&b, f)
	writeTables(&b, f)
	writePlotsSection(&b, f)
	writeProfiles(&b, f)
	writeSystemChanges(&b, f)
	b.WriteString("How to read this — the rules every figure obeys, what each column means: docs/harness.md in the mqstore repository.\n")
	return b.String()
}

// idleText says what an idle vCPU of a KVM guest with the haltpoll
// cpuidle driver does: halt at once, or poll first; "" elsewhere.
func idleText(m runfile.Machine) string {
	if m.CPUIdleDriver != "haltpoll" || m.GuestHaltPollNs == "" {
		return ""
	}
	if m.GuestHaltPollNs == "0" {
		return ", idle vCPUs halt at once (cpuidle haltpoll, guest_halt_poll_ns 0: every wake-up of an idle vCPU waits for the host: docs/harness.md)"
	}
	ns, err := strconv.ParseInt(m.GuestHaltPollNs, 10, 64)
	if err != nil {
		return ", cpuidle haltpoll, guest_halt_poll_ns " + m.GuestHaltPollNs
	}
	return fmt.Sprintf(", idle vCPUs poll up to %v before they halt (cpuidle haltpoll: docs/harness.md)", time.Duration(ns))
}

func writeContext(b *strings.Builder, f *runfile.RunFile) {
	m, c := f.Machine, f.Config
	dirty := map[bool]string{true: " (with uncommitted changes)"}[m.CommitDirty]
	thp := ""
	if m.THP != "" {
		thp = ", transparent huge pages " + m.THP
	}
	if m.FreePageReporting {
		thp += ", free page reporting to the host (a fresh store's new page cache is faulted in by the host: docs/harness.md)"
	}
	thp += idleText(m)
	fmt.Fprintf(b, "- machine: %s, %d CPUs (%s), %.1f GiB RAM, %s %s, kernel %s, %s, GOMAXPROCS %d, GOGC %s, clocksource %s%s, commit %s%s (%s)\n",
		m.Host, m.CPUs, m.CPUModel, float64(m.MemTotalBytes)/(1<<30), m.OS, m.Arch, m.Kernel, m.GoVersion, m.GOMAXPROCS, orDefault(m.GOGC, "default"),
		m.Clocksource, thp, shortCommit(m.Commit), dirty, m.CommitSource)
	if len(m.VM) > 0 {
		kv := join(slices.Sorted(maps.Keys(m.VM)), func(k string) string { return strings.TrimPrefix(k, "vm.") + "=" + m.VM[k] }, ", ")
		fmt.Fprintf(b, "- vm at the start: %s; load average %s at the start, %s at the end\n", kv, m.LoadAvgStart, m.LoadAvgEnd)
	}
	for _, d := range f.Devices {
		label := ""
		if d.Label != "" {
			label = "`" + d.Label + "`: "
		}
		if d.Emulated {
			label += "**EMULATED** "
		}
		fmt.Fprintf(b, "- target %s%s on %s (%s, mount options %s), %s, device %s, model %q, scheduler %q, blocks %d/%d B, write cache %q, FUA %s\n",
			label, d.Dir, d.MountSource, d.FSType, orDefault(d.MountOptions, "?"), orDefault(d.Kind, "unknown kind"), d.Device, d.Model,
			d.Scheduler, d.LogicalBlockBytes, d.PhysicalBlockBytes, d.WriteCache, boolOr(d.FUA))
		if d.Note != "" {
			fmt.Fprintf(b, "  - %s\n", d.Note)
		}
	}
	fmt.Fprintf(b, "- started %s, took %s (estimated %s)", f.StartedAt.Format(time.RFC3339), runTook(f).Round(time.Second),
		(time.Duration(f.Plan.EstimatedSeconds) * time.Second).Round(time.Second))
	short := shortCells(f)
	if f.Interrupted {
		b.WriteString(" — **interrupted (Ctrl-C)**: what it had not reached is missing")
		if len(short) == 0 {
			b.WriteString(", and a cell it cut short has no figures (listed as interrupted under *Failed, skipped or interrupted*)")
		} else {
			b.WriteString("; what it cut short and still shows with figures is named below with its repeats")
		}
	}
	b.WriteString("\n")
	if f.Command != "" {
		fmt.Fprintf(b, "- command: `%s`\n", f.Command)
	}
	except := ""
	if len(short) > 0 {
		except = " (except those named in the next line)"
	}
	fmt.Fprintf(b, "- each cell%s: one unmeasured warm repeat, then %d measured repeats of %s after a %s warm-up, each in a fresh store; repeats run round-robin over the cells in a shuffled order, every system on the same arrivals in a round (seed %d + the round). Figures are **median [confidence interval of the median]**: order statistics, %s\n",
		except, c.Repeat, time.Duration(f.Plan.WindowNs), c.Warmup, c.Seed, ciLevelText(c.Repeat))
	if len(short) > 0 {
		fmt.Fprintf(b, "- **fewer measured repeats than %d** (the run cut them short): %s — each interval is at the confidence its own count gives, and no cell among them enters the recommendation\n",
			c.Repeat, strings.Join(short, ", "))
	}
	fmt.Fprintf(b, "- window %s: %s\n", time.Duration(f.Plan.WindowNs), f.Plan.WindowWhy)
	fmt.Fprintf(b, "- throughput: closed loop at %s producers; latency: open loop, %s arrivals at the absolute rates %s msgs/s (the same for every system), %d workers each owning its share of the schedule, latency from the *intended* start\n",
		join(c.Producers, strconv.Itoa, ","), c.Arrival, join(c.Rates, fmtCount, ", "), c.InFlight)
	paced := ""
	if c.Store.PacePrewrite {
		paced = "; a segment made ahead is pre-written in synced steps (--pace-prewrite)"
	}
	fmt.Fprintf(b, "- store: segment %s%s; every cell's effective engine options are in run.json (`cells[].options`)\n", runfile.SizeLabel(int(c.Store.SegmentSizeBytes)), paced)
	if n := recyclingNote(f); n != "" {
		fmt.Fprintf(b, "- %s\n", n)
	}
	if n := messageNote(f); n != "" {
		fmt.Fprintf(b, "- message: %s\n", n)
	}
	writeBackendSettings(b, f)
	if reps := replicationAxis(f); reps != "" {
		fmt.Fprintf(b, "- replication: %s\n", reps)
	}
	b.WriteString("\n")
}

// recyclingNote says how the mqstore cells' stores were aged
// (StoreConfig.RecycleSegments), how many of their windows' new segments
// came from the pool, and which peers ran on recycled logs
// (peersRecyclingNote); "" when they were not aged.
func recyclingNote(f *runfile.RunFile) string {
	n := f.Config.Store.RecycleSegments
	if n <= 0 {
		return ""
	}
	note := fmt.Sprintf("mqstore's throughput, latency and e2e cells ran on an aged store: %d segments retired by retention before the window, reused as new segments (--recycle-segments %d); "+
		"every mqstore record then carries a whole-record checksum property", n, n)
	if slices.ContainsFunc(f.Config.Workloads, func(w string) bool { return w == "consume" || w == "recovery" }) {
		note += "; the consume and recovery cells keep up to that many segments but fill a fresh store"
	}
	var took, made []uint64
	for c := range ptrs(f.Cells) {
		if c.Peer {
			continue
		}
		for _, r := range c.Repeats {
			if !r.Warm && r.Store != nil {
				took = append(took, r.Store.SegmentsRecycled)
				made = append(made, r.Store.SegmentsPrewritten+r.Store.SegmentsFallocated)
			}
		}
	}
	if len(took) > 0 {
		note += fmt.Sprintf(". A measured window took %s segments from the pool and made %s new (run.json `cells[].repeats[].store`: segmentsRecycled, segmentsPrewritten, segmentsFallocated)",
			countRange(took), countRange(made))
	}
	if p := peersRecyclingNote(f); p != "" {
		note += ". " + p
	}
	return note
}

// peersRecyclingNote says, in a run of aged stores, which peers' windows
// wrote over a recycled log (a cell whose options have
// load.RecycledLogOption: pebble-wal, given the retired segments' bytes)
// and which wrote new files; "" without peer cells that reported options.
func peersRecyclingNote(f *runfile.RunFile) string {
	var recycled, fresh []string
	for c := range ptrs(f.Peers) {
		if c.Options[load.RecycledLogOption] != "" && !slices.Contains(recycled, c.Backend) {
			recycled = append(recycled, c.Backend)
		}
	}
	for c := range ptrs(f.Peers) {
		// A cell without options never heard from its peer: it says nothing
		// of the peer's files.
		if c.Options != nil && !slices.Contains(recycled, c.Backend) && !slices.Contains(fresh, c.Backend) {
			fresh = append(fresh, c.Backend)
		}
	}
	quoted := func(names []string) string {
		return "`" + strings.Join(names, "`, `") + "`"
	}
	var parts []string
	if len(recycled) > 0 {
		st := f.Config.Store
		parts = append(parts, fmt.Sprintf("%s ran on a recycled WAL file of %d × %s, the retired segments' bytes: filled by its own writer and closed before the warm-up, "+
			"then renamed to the next log number and written over, as a running pebble reuses an obsolete WAL (run.json `peers[].options.%s`)",
			quoted(recycled), st.RecycleSegments, runfile.SizeLabel(int(st.SegmentSizeBytes)), load.RecycledLogOption))
	}
	if len(fresh) > 0 {
		parts = append(parts, quoted(fresh)+" wrote new files, not aged")
	}
	if len(parts) == 0 {
		return ""
	}
	return "Peers: " + strings.Join(parts, "; ")
}

// countRange is "a" or "a–b": the least and the most of xs.
func countRange(xs []uint64) string {
	lo, hi := slices.Min(xs), slices.Max(xs)
	if lo == hi {
		return strconv.FormatUint(lo, 10)
	}
	return fmt.Sprintf("%d–%d", lo, hi)
}

// writeBackendSettings names the options each backend ran with where they
// are not its own defaults (mqbench's tuning, or --backend-options), and
// the store's segment pre-writing when the engine reports it.
func writeBackendSettings(b *strings.Builder, f *runfile.RunFile) {
	type key struct{ backend, flush string }
	withOptions := slices.DeleteFunc(slices.Collect(ptrs(f.Cells)), func(c *runfile.Cell) bool { return c.Options == nil })
	for _, c := range firstByKey(withOptions, func(c *runfile.Cell) key { return key{c.Backend, c.Flush} }) {
		var parts []string
		if c.Tuning != "" {
			parts = append(parts, fmt.Sprintf("%s (options `%s`)", c.Tuning, c.Options["BackendOptions"]))
		}
		if p := c.Options["PrewriteSegments"]; p != "" {
			parts = append(parts, "engine PrewriteSegments "+p)
		}
		if z := zerosText(f, c.Backend, c.Flush); z != "" {
			parts = append(parts, z)
		}
		if len(parts) > 0 {
			fmt.Fprintf(b, "- %s (%s flush): %s\n", c.Backend, c.Flush, strings.Join(parts, "; "))
		}
	}
}

// zerosText says how the zeros of the segments backend pre-wrote with
// flush in the measured windows were written (run.json's store counters
// zerosByDevice, zerosDirect, zerosCached); "" when it pre-wrote none.
func zerosText(f *runfile.RunFile, backend, flush string) string {
	var byDevice, direct, cached uint64
	for c := range ptrs(f.Cells) {
		if c.Peer || c.Backend != backend || c.Flush != flush {
			continue
		}
		for _, r := range c.Repeats {
			if !r.Warm && r.Store != nil {
				byDevice, direct, cached = byDevice+r.Store.ZerosByDevice, direct+r.Store.ZerosDirect, cached+r.Store.ZerosCached
			}
		}
	}
	var ways []string
	for _, w := range []struct {
		n   uint64
		how mappedfile.Zeros
	}{{byDevice, mappedfile.ZerosByDevice}, {direct, mappedfile.ZerosDirect}, {cached, mappedfile.ZerosCached}} {
		if w.n == 0 {
			continue
		}
		way := fmt.Sprintf("%d %v", w.n, w.how)
		if w.how == mappedfile.ZerosDirect && byDevice == 0 {
			way += " (the kernel, the file system or the device has no FALLOC_FL_WRITE_ZEROES)"
		}
		ways = append(ways, way)
	}
	if len(ways) == 0 {
		return ""
	}
	return "the segments pre-written in measured windows: " + strings.Join(ways, ", ")
}

func replicationAxis(f *runfile.RunFile) string {
	roles := mapped(f.Config.Replication, func(r string) string {
		if r == "none" {
			return "no slave"
		}
		return roleName(r)
	})
	if len(roles) == 0 || (len(roles) == 1 && roles[0] == "no slave") {
		return ""
	}
	where := "in a directory beside the master's"
	if f.Config.SlaveDir != "" {
		where = "in " + f.Config.SlaveDir + " (--slave-dir)"
	}
	return fmt.Sprintf("%s, crossed with the flush policies; each slave in its own process, %s; master to slave: %s", strings.Join(roles, ", "), where,
		delayText(f.Config.HADelay.Nanoseconds()))
}

// shortCells names the cells and floors shown with figures that have
// fewer measured repeats than the run asked for, each with its count and
// the confidence that count gives: cut short by Ctrl-C in a run file from
// before the harness marked such cells interrupted, or a consume or
// recovery cell, whose repeats stop at the interruption.
func shortCells(f *runfile.RunFile) []string {
	var out []string
	named := func(name string, n int) string { return fmt.Sprintf("%s %d (%s)", name, n, ciLevelShort(n)) }
	for _, c := range allCells(f) {
		if shortOfRepeats(f, c) {
			out = append(out, named("`"+c.Name+"`", len(c.MeasuredRepeats())))
		}
	}
	for _, fl := range f.Floors {
		floorCell := runfile.Cell{Status: fl.Status, Repeats: fl.Repeats}
		if shortOfRepeats(f, &floorCell) {
			out = append(out, named(fmt.Sprintf("the floor at %s msgs/s (%s, %s pressure)", fmtCount(fl.RatePerSec), orDefault(fl.Process, runfile.FloorMQBench), fl.Pressure),
				len(floorCell.MeasuredRepeats())))
		}
	}
	return out
}

// ciLevelShort is the confidence of the interval of the median of n
// repeats, in a few words.
func ciLevelShort(n int) string {
	if n < 2 {
		return "one repeat: no interval"
	}
	_, _, _, level := runfile.MedianCI(make([]float64, n))
	return fmt.Sprintf("%.1f%% confidence", 100*level)
}

func ciLevelText(n int) string {
	_, _, _, level := runfile.MedianCI(make([]float64, n))
	if n < 6 {
		return fmt.Sprintf("with %d repeats the interval is the min–max range, at %.1f%% confidence", n, 100*level)
	}
	return fmt.Sprintf("at ≥ %.0f%% confidence (%.1f%% with %d repeats)", 100*runfile.CILevel, 100*level, n)
}

func boolOr(b *bool) string {
	if b == nil {
		return "unknown"
	}
	return fmt.Sprint(*b)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// SummaryTables is the part of the summary `mqbench run` prints: the
// recommendation, the A/A check, the cell tables, failures, limits and
// ratios.
func SummaryTables(f *runfile.RunFile) string {
	var b strings.Builder
	writeAnswer(&b, f)
	writeTables(&b, f)
	return b.String()
}

func writeTables(b *strings.Builder, f *runfile.RunFile) {
	for _, write := range []func(*strings.Builder, *runfile.RunFile){
		writeAA, writeThroughput, writeAtDrainOnly, writeVersusPebbleWAL, writeStageCPU, writeLatency,
		writeReplication, writeSearches, writeFloors, writeDurability, writePressure, writeE2E,
		writeConsume, writeRecovery, writeSweep, writeFailures, writeLimits, writeRatios,
	} {
		write(b, f)
	}
	writeList(b, "## Notes\n\n", f.Notes)
}

func writePlotsSection(b *strings.Builder, f *runfile.RunFile) {
	names := PlotNames(f)
	if len(names) == 0 {
		return
	}
	b.WriteString("## Plots\n\n(PNG files are regenerated by `mqbench report " + filepath.Join(f.Config.Out, f.ID) + "`; results/ keeps only summary.md, bench.txt and run.json.gz.)\n\n")
	for _, n := range names {
		fmt.Fprintf(b, "![%s](%s)\n\n", strings.TrimSuffix(n, filepath.Ext(n)), n)
	}
}

func writeProfiles(b *strings.Builder, f *runfile.RunFile) {
	if len(f.Profiles) == 0 {
		return
	}
	fmt.Fprintf(b, "## Profiles (top functions by flat share; an extra unmeasured run of each system's throughput cell at %d producers)\n\n", f.Config.ProfiledProducers())
	fmt.Fprintf(b, "Files: `%s/%s/<cell>.{cpu,heap,block,mutex}.pprof` — open with `go tool pprof -top FILE` (see profiles/README.md).\n\n", f.Config.ProfilesRoot, f.ID)
	for _, cell := range distinct(mapped(f.Profiles, func(p runfile.ProfileSummary) string { return p.Cell })) {
		fmt.Fprintf(b, "### %s\n\n", cell)
		for _, p := range f.Profiles {
			switch {
			case p.Cell != cell:
			case p.Error != "":
				fmt.Fprintf(b, "- %s: %s\n", p.Kind, oneLine(p.Error))
			default:
				tops := join(p.Top[:min(5, len(p.Top))], func(t runfile.FunctionCost) string { return fmt.Sprintf("%s %.1f%%", shortFunc(t.Function), t.FlatPct) }, ", ")
				fmt.Fprintf(b, "- %s (%s, total %s): %s\n", p.Kind, p.SampleType, fmtTotal(p.Total, p.Unit), tops)
			}
		}
		b.WriteString("\n")
	}
}

// writeStageCPU is the CPU by stage of each profiled cell whose CPU
// profile carries the engine's stage labels: µs per message and the share
// of the samples, one column per stage that appears.
func writeStageCPU(b *strings.Builder, f *runfile.RunFile) {
	var rows []*runfile.ProfileSummary
	var stages []string
	for p := range ptrs(f.Profiles) {
		if p.Kind != "cpu" || len(p.Stages) == 0 {
			continue
		}
		rows = append(rows, p)
		for _, st := range p.Stages {
			stages = appendNew(stages, st.Stage)
		}
	}
	if len(rows) == 0 {
		return
	}
	rank := func(s string) int {
		if i := slices.Index(runfile.StageOrder, s); i >= 0 {
			return i
		}
		switch s {
		case runfile.StageProfiler:
			return len(runfile.StageOrder) + 1
		case runfile.StageOther:
			return len(runfile.StageOrder) + 2
		}
		return len(runfile.StageOrder) // a stage this report does not know, before other
	}
	slices.SortStableFunc(stages, func(a, b string) int { return rank(a) - rank(b) })
	fmt.Fprintf(b, "## CPU by stage (µs of CPU per message, and %% of the CPU profile; the profiled run of each system's throughput cell at %d producers)\n\n", f.Config.ProfiledProducers())
	heads := append([]string{"cell", "samples>"}, mapped(stages, func(st string) string { return st + ">" })...)
	t := newTable(b, append(heads, "total>")...)
	us := func(v, pct float64, known bool) string {
		return fmt.Sprintf("%s (%s%%)", orDash(known, fmtFloat(v)), fmtFloat(pct))
	}
	few, spanned := false, false
	for _, p := range rows {
		spanned = spanned || !p.WindowOnly
		row := []string{p.Cell, orDash(p.Samples > 0, fmtCount(float64(p.Samples)))}
		for _, st := range stages {
			i := slices.IndexFunc(p.Stages, func(c runfile.StageCost) bool { return c.Stage == st })
			switch {
			case i < 0:
				row = append(row, "—")
			case p.Samples > 0 && p.Stages[i].Samples < runfile.MinStageSamples:
				row = append(row, fmt.Sprintf("few (%d)", p.Stages[i].Samples))
				few = true
			default:
				row = append(row, us(p.Stages[i].UsPerMsg, p.Stages[i].Pct, p.CPUPerMsgNs > 0))
			}
		}
		t.row(append(row, us(p.CPUPerMsgNs/1e3, 100, p.CPUPerMsgNs > 0))...)
	}
	b.WriteString("\nThe engine labels its goroutines by stage (pprof label `" + runfile.StageLabel + "`, engine.Options.ProfileLabels, set for the profiled runs only): *append* a producer inside Put before it waits, *wait* a producer waiting for durability, then the commit, flush, dispatch, pre-write and replication services; *other* is every sample without the label — the harness (load generator, clocks, histograms) and the Go runtime. A stage's µs/msg is its share of the profile's samples × the profiled run's CPU per message (getrusage; the profile's own samples when the run has none): run.json `profiles[].stages`. *samples* is how many samples the profile holds (one per 10 ms of CPU); a share of k samples is known to about ±1/√k of itself")
	if few {
		fmt.Fprintf(b, ", and a stage with fewer than %d shows *few (k)*, its k samples, instead of a figure (a longer `--profile-duration` takes more)", runfile.MinStageSamples)
	}
	if spanned {
		b.WriteString(". This run's harness profiled more than the measured window: its profiles also hold the GC before it and the merge of the workers' histograms after it (in *other*, which takes that share from the other stages), and the block and mutex profilers' own recording in the stage it ran in (mostly *wait*).")
	} else {
		b.WriteString(". The profile covers the measured window alone; *" + runfile.StageProfiler + "* is the block and mutex profilers' own recording and the clock reads that time waits for them (they run beside the CPU profile), kept out of the stage it ran in.")
	}
	b.WriteString("\n\n")
}

func shortFunc(name string) string { return name[strings.LastIndex(name, "/")+1:] }

func fmtTotal(v int64, unit string) string {
	switch unit {
	case "nanoseconds":
		return fmtNs(v)
	case "bytes":
		return fmt.Sprintf("%.3g MB", float64(v)/1e6)
	}
	return fmt.Sprintf("%d %s", v, unit)
}

func writeSystemChanges(b *strings.Builder, f *runfile.RunFile) {
	writeList(b, "## System changes\n\n", mapped(f.SystemChanges, func(c runfile.SystemChange) string {
		if c.Undone {
			return c.What + ": undone"
		}
		return c.What + ": **NOT undone** (" + c.UndoError + ") — run `mqbench cleanup`"
	}))
}

// writeList writes head and items as a list, then a blank line; nothing
// without items.
func writeList(b *strings.Builder, head string, items []string) {
	if len(items) == 0 {
		return
	}
	b.WriteString(head)
	for _, it := range items {
		b.WriteString("- " + it + "\n")
	}
	b.WriteString("\n")
}

func join[T any](xs []T, f func(T) string, sep string) string {
	return strings.Join(mapped(xs, f), sep)
}

func mapped[T, U any](xs []T, f func(T) U) []U {
	out := make([]U, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// answerClasses are the two questions the first screen answers: what to
// run when an acknowledgement must mean durable (sync) and when it may
// mean in memory (any policy).
var answerClasses = map[string]string{"sync": "ack = durable", "any": "ack = in memory"}

// flushPolicy names the flush parameters a cell ran with, from its
// effective engine options.
func flushPolicy(c *runfile.Cell) string {
	o := c.Options
	if o == nil {
		return c.Flush
	}
	if c.Flush == "sync" {
		return fmt.Sprintf("sync (group commit, SyncFlushTimeout %s)", orDefault(o["SyncFlushTimeout"], "?"))
	}
	return fmt.Sprintf("async (FlushInterval %s, FlushLeastPages %s, FlushThoroughInterval %s)",
		orDefault(o["FlushInterval"], "?"), orDefault(o["FlushLeastPages"], "?"), orDefault(o["FlushThoroughInterval"], "?"))
}

// writeAnswer is summary.md's first screen: per device and body size, the
// backend and flush policy to run for each durability, with the figure
// and interval that decided it and what was excluded and why — or the tie
// and what would separate it. Everything else follows it.
func writeAnswer(b *strings.Builder, f *runfile.RunFile) {
	cell := map[string]*runfile.Cell{}
	for i := range f.Cells {
		cell[f.Cells[i].Name] = &f.Cells[i]
	}
	b.WriteString("## What to run\n\n")
	if len(f.Recommendations) == 0 {
		b.WriteString("This run has no throughput cells to recommend from.\n\n")
		return
	}
	fmt.Fprintf(b, "Highest durable MB/s among the backend/flush policies that qualify (sustained; not saturated, nor above %d× their own tail, under pressure; not on an emulated device that models no seek), median [interval] of %d repeats; a pick only where it separates from the rest on durable MB/s, or, tied there with every tied policy fully determined and at one producer count, on CPU per GiB.\n\n",
		PressureBar, f.Config.Repeat)
	last, lastSize := "", 0
	for _, r := range f.Recommendations {
		title, ok := answerClasses[r.Durability]
		if !ok {
			continue
		}
		if k := r.Target + fmt.Sprint(r.SizeBytes); k != last {
			if last != "" {
				writeSweepQuote(b, f, lastSize)
			}
			fmt.Fprintf(b, "**%s**, %s bodies:\n", orDefault(deviceLabel(f, r.Target), "target"), runfile.SizeLabel(r.SizeBytes))
			last, lastSize = k, r.SizeBytes
		}
		c := cell[r.Cell]
		switch {
		case r.Pick != "" && c != nil:
			fmt.Fprintf(b, "- %s: **%s**, flush %s — %s durable MB/s at %d producers\n", title, c.Backend, flushPolicy(c), ci(r.Interval, fmtFloat), c.Producers)
			fmt.Fprintf(b, "  - why: %s\n", r.Text)
		case len(r.Tied) > 0:
			fmt.Fprintf(b, "- %s: **no single pick** — %s\n", title, r.Text)
		default:
			fmt.Fprintf(b, "- %s: **nothing qualifies**\n", title)
		}
		if n := len(r.Excluded); n > 0 {
			fmt.Fprintf(b, "  - excluded: %s\n", strings.Join(r.Excluded, "; "))
		}
	}
	if last != "" {
		writeSweepQuote(b, f, lastSize)
	}
	b.WriteString("\nWhy, and every figure behind it: the sections below (the rule in full: run.json's recommendations, docs/harness.md).\n\n")
}

// runTook is how long the run took: its monotonic ElapsedNs, or for a run
// file from before that was recorded the wall clock's FinishedAt − StartedAt.
func runTook(f *runfile.RunFile) time.Duration {
	if f.ElapsedNs > 0 {
		return time.Duration(f.ElapsedNs)
	}
	return f.FinishedAt.Sub(f.StartedAt)
}
