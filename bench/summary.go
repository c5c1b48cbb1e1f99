package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Summary renders summary.md from the run alone (no other file is read), so
// `mqbench report` regenerates it byte for byte.
func Summary(f *RunFile) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# mqbench run %s\n\n", f.ID)
	writeContext(&b, f)
	b.WriteString(SummaryTables(f))
	writePlotsSection(&b, f)
	writeProfiles(&b, f)
	writeSystemChanges(&b, f)
	b.WriteString(howToRead)
	return b.String()
}

func writeContext(b *strings.Builder, f *RunFile) {
	m, c := f.Machine, f.Config
	dirty := ""
	if m.CommitDirty {
		dirty = " (with uncommitted changes)"
	}
	fmt.Fprintf(b, "- machine: %s, %d CPUs (%s), %.1f GiB RAM, %s %s, kernel %s, %s, commit %s%s\n",
		m.Host, m.CPUs, m.CPUModel, float64(m.MemTotalBytes)/(1<<30), m.OS, m.Arch, m.Kernel, m.GoVersion, shortCommit(m.Commit), dirty)
	for _, d := range f.Devices {
		rot := "unknown"
		if d.Rotational != nil {
			rot = map[bool]string{true: "rotational", false: "non-rotational"}[*d.Rotational]
		}
		fua := "unknown"
		if d.FUA != nil {
			fua = fmt.Sprint(*d.FUA)
		}
		label := ""
		if d.Label != "" {
			label = "`" + d.Label + "`: "
		}
		if d.Emulated {
			label += "**EMULATED** "
		}
		fmt.Fprintf(b, "- target %s%s on %s (%s, %s, device %s, model %q, scheduler %q, blocks %d/%d B, write cache %q, FUA %s)\n",
			label, d.Dir, d.MountSource, d.FSType, rot, d.Device, d.Model, d.Scheduler, d.LogicalBlockBytes, d.PhysicalBlockBytes, d.WriteCache, fua)
		if d.Note != "" {
			fmt.Fprintf(b, "  - %s\n", d.Note)
		}
	}
	fmt.Fprintf(b, "- started %s, took %s", f.StartedAt.Format(time.RFC3339), f.FinishedAt.Sub(f.StartedAt).Round(time.Second))
	if f.Interrupted {
		b.WriteString(" — **interrupted (Ctrl-C): only the cells that finished are shown**")
	}
	b.WriteString("\n")
	if f.Command != "" {
		fmt.Fprintf(b, "- command: `%s`\n", f.Command)
	}
	fmt.Fprintf(b, "- each cell: %d repeat(s) of %s after a %s warm-up, each in a fresh store; figures are **median [min–max]** over the repeats\n",
		c.Repeat, c.Duration, c.Warmup)
	fmt.Fprintf(b, "- throughput: closed loop, %d producers; latency: open loop, %s arrivals, up to %d requests in flight, latency from the *intended* start\n",
		c.Producers, c.Arrival, c.InFlight)
	fmt.Fprintf(b, "- store: segment %s; flush policy parameters are in run.json (`cells[].flushParams`)\n\n", sizeLabel(int(c.Store.SegmentSizeBytes)))
}

func shortCommit(c string) string {
	if len(c) >= 12 && !strings.Contains(c, " ") {
		return c[:12]
	}
	return c
}

// SummaryTables is the part of the summary `make bench` prints: the cell
// tables, failures, limits and ratios.
func SummaryTables(f *RunFile) string {
	var b strings.Builder
	all := append(append([]Cell{}, f.Cells...), f.Peers...)
	writeRecommendations(&b, f)
	writeThroughput(&b, f, all)
	writeLatency(&b, f, all)
	writePressure(&b, f)
	writeE2E(&b, f)
	writeConsume(&b, f)
	writeRecovery(&b, f)
	writeSweep(&b, f)
	writeFailures(&b, f, all)
	writeLimits(&b, f)
	writeRatios(&b, f)
	return b.String()
}

func backendLabel(_ *RunFile, c *Cell) string {
	l := c.Backend
	if isPeerName(c.Backend) {
		l += " (peer)"
	}
	if c.Policy != "" {
		l += " [" + c.Policy + "]"
	}
	if c.Pressure != "" && c.Pressure != PressureNone {
		l += " · pressure " + c.Pressure
	}
	if c.Target != "" && c.Emulated {
		l += " @" + c.Target + " (EMULATED)"
	} else if c.Target != "" && multiTargetCells(c) {
		l += " @" + c.Target
	}
	return l
}

// multiTargetCells reports whether the cell's name carries its target.
func multiTargetCells(c *Cell) bool { return strings.Contains(c.Name, "@") }

func isPeerName(s string) bool { return s == "nats" || s == "pebble" }

// thin marks a percentile backed by fewer than 10 samples beyond it in the
// smallest repeat: its median is noise more than measurement.
func thin(c *Cell, q float64) string {
	least := int64(-1)
	for _, r := range c.Repeats {
		if least < 0 || r.Result.Messages < least {
			least = r.Result.Messages
		}
	}
	if least >= 0 && float64(least)*(1-q) < 10 {
		return "*"
	}
	return ""
}

func writeThroughput(b *strings.Builder, f *RunFile, all []Cell) {
	rows := filterCells(all, "throughput")
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "## Throughput (closed loop, %d producers)\n\n", f.Config.Producers)
	b.WriteString("| backend | size | flush | msgs/s | MB/s | p50 | p99 | p99.9 | CPU s/GiB | allocs/msg |\n")
	b.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for i := range rows {
		c := &rows[i]
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s%s | %s | %s |\n", backendLabel(f, c), sizeLabel(c.SizeBytes), c.Flush,
			withRange(c.MsgsPerSec, c.Min.MsgsPerSec, c.Max.MsgsPerSec, fmtCount),
			withRange(c.MBPerSec, c.Min.MBPerSec, c.Max.MBPerSec, fmtFloat),
			nsRange(c.P50Ns, c.Min.P50Ns, c.Max.P50Ns), nsRange(c.P99Ns, c.Min.P99Ns, c.Max.P99Ns),
			nsRange(c.P999Ns, c.Min.P999Ns, c.Max.P999Ns), thin(c, 0.999),
			withRange(c.CPUSecPerGiB, c.Min.CPUSecPerGiB, c.Max.CPUSecPerGiB, fmtFloat),
			withRange(c.AllocsPerMsg, c.Min.AllocsPerMsg, c.Max.AllocsPerMsg, fmtFloat))
	}
	b.WriteString("\nLatency columns here are service times (a closed loop has no intended start). CPU is the whole process (getrusage), not the kernel's writeback threads.\n\n")
}

func writeLatency(b *strings.Builder, f *RunFile, all []Cell) {
	rows := filterCells(all, "latency")
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "## Latency (open loop, %s arrivals; completion − intended start)\n\n", f.Config.Arrival)
	b.WriteString("| backend | size | flush | target → achieved msgs/s | p50 | p99 | p99.9 | p99.99 | max | service p99.9 | dropped | harness lag p99 |\n")
	b.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i := range rows {
		c := &rows[i]
		fmt.Fprintf(b, "| %s | %s | %s | %s → %s | %s | %s | %s%s | %s%s | %s | %s | %s | %s |\n", backendLabel(f, c), sizeLabel(c.SizeBytes), c.Flush,
			fmtCount(c.TargetRatePerSec), withRange(c.MsgsPerSec, c.Min.MsgsPerSec, c.Max.MsgsPerSec, fmtCount),
			nsRange(c.P50Ns, c.Min.P50Ns, c.Max.P50Ns), nsRange(c.P99Ns, c.Min.P99Ns, c.Max.P99Ns),
			nsRange(c.P999Ns, c.Min.P999Ns, c.Max.P999Ns), thin(c, 0.999),
			nsRange(c.P9999Ns, c.Min.P9999Ns, c.Max.P9999Ns), thin(c, 0.9999),
			nsRange(c.MaxNs, c.Min.MaxNs, c.Max.MaxNs), nsRange(c.ServiceP999Ns, c.Min.ServiceP999Ns, c.Max.ServiceP999Ns),
			fmtPct(c.Max.DroppedFraction), fmtNs(c.Max.DispatchLagP99)+generatorLimited(c))
	}
	b.WriteString("\n`*`: fewer than 10 samples beyond that percentile in a repeat — read it as noise. `dropped`: worst repeat's share of arrivals never sent (queue of 65 536 full, or not started within a tenth of the window after it closed); above 0 the store could not sustain the rate. `harness lag`: how late the load generator itself released arrivals (worst repeat); `†` marks a cell where it reaches a tenth of the latency p99 — there the tail is partly the load generator competing with the store for CPU, not the store alone (use more cores, fewer --producers, or a lower --rate-fraction).\n\n")
}

// generatorLimited flags a latency cell whose load generator lagged by at
// least a tenth of the latency p99 it measured.
func generatorLimited(c *Cell) string {
	if c.P99Ns > 0 && c.Max.DispatchLagP99*10 >= c.P99Ns {
		return " †"
	}
	return ""
}

func fmtPct(x float64) string {
	if x == 0 {
		return "0"
	}
	return fmt.Sprintf("%.2g%%", 100*x)
}

func filterCells(all []Cell, workload string) []Cell {
	var out []Cell
	for _, c := range all {
		if c.Workload == workload && c.Status == StatusOK {
			out = append(out, c)
		}
	}
	return out
}

func writeFailures(b *strings.Builder, f *RunFile, all []Cell) {
	var lines []string
	for _, c := range all {
		if c.Status != StatusOK {
			lines = append(lines, fmt.Sprintf("- `%s`: **%s** — %s\n", c.Name, c.Status, oneLine(c.Reason)))
		}
	}
	for _, l := range f.Limits {
		if l.Status != StatusOK {
			lines = append(lines, fmt.Sprintf("- limit `%s`: **%s** — %s\n", l.Name, l.Status, oneLine(l.Reason)))
		}
	}
	if len(lines) == 0 {
		return
	}
	b.WriteString("## Failed, skipped or interrupted (no figures)\n\n")
	for _, l := range lines {
		b.WriteString(l)
	}
	b.WriteString("\n")
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func writeLimits(b *strings.Builder, f *RunFile) {
	var ok []Limit
	for _, l := range f.Limits {
		if l.Status == StatusOK {
			ok = append(ok, l)
		}
	}
	if len(ok) == 0 {
		return
	}
	b.WriteString("## Limits (same run, same directory, no engine)\n\n")
	b.WriteString("| limit | tool | block/record | MB/s | ops/s | p50 | p99 | p99.9 |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for i := range ok {
		l := &ok[i]
		lat := func(med, lo, hi int64) string {
			if med == 0 {
				return "—"
			}
			return nsRange(med, lo, hi)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", limitLabel(f, l), l.Tool, sizeLabel(l.SizeBytes),
			withRange(l.MBPerSec, l.Min.MBPerSec, l.Max.MBPerSec, fmtFloat),
			withRange(l.MsgsPerSec, l.Min.MsgsPerSec, l.Max.MsgsPerSec, fmtCount),
			lat(l.P50Ns, l.Min.P50Ns, l.Max.P50Ns), lat(l.P99Ns, l.Min.P99Ns, l.Max.P99Ns), lat(l.P999Ns, l.Min.P999Ns, l.Max.P999Ns))
	}
	b.WriteString("\ncopy-ceiling: the store's records for that body size memcpy'd by one goroutine into a fresh mapped file (page faults included; MB/s counts body bytes like the cells). device-seq-write: O_DIRECT 1 MiB writes at depth 32 through io_uring. device-fdatasync-4k: 4 KiB pwrite + fdatasync, one at a time; fio's fdatasync figures time the fdatasync alone.\n\n")
}

func writeRatios(b *strings.Builder, f *RunFile) {
	if len(f.Ratios) == 0 {
		return
	}
	b.WriteString("## Ratios (median [lowest–highest the repeats allow])\n\n")
	titles := map[string]string{"copy-ceiling": "store ÷ page-cache copy ceiling", "device": "store ÷ device limit", "peer": "mqstore ÷ peers", "pressure": "under pressure ÷ unpressured (same cell otherwise)", "sendfile": "consume: sendfile ÷ copy"}
	for _, kind := range []string{"pressure", "sendfile", "copy-ceiling", "device", "peer"} {
		var rows []Ratio
		for _, r := range f.Ratios {
			if r.Kind == kind {
				rows = append(rows, r)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(b, "### %s\n\n| cell | against | figure | ratio | note |\n|---|---|---|---:|---|\n", titles[kind])
		for _, r := range rows {
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", r.Cell, r.Against, r.Figure,
				withRange(r.Median, r.Low, r.High, func(x float64) string { return fmtFloat(x) + "×" }), r.Note)
		}
		b.WriteString("\n")
	}
}

func writePlotsSection(b *strings.Builder, f *RunFile) {
	names := PlotNames(f)
	if len(names) == 0 {
		return
	}
	b.WriteString("## Plots\n\n")
	for _, n := range names {
		fmt.Fprintf(b, "![%s](%s)\n\n", strings.TrimSuffix(n, filepath.Ext(n)), n)
	}
}

func writeProfiles(b *strings.Builder, f *RunFile) {
	if len(f.Profiles) == 0 {
		return
	}
	b.WriteString("## Profiles (top functions by flat share; an extra unmeasured run of each throughput cell)\n\n")
	fmt.Fprintf(b, "Files: `%s/%s/<cell>.{cpu,heap,block,mutex}.pprof` — open with `go tool pprof -top FILE`.\n\n", f.Config.ProfilesRoot, f.ID)
	cells := map[string][]ProfileSummary{}
	var order []string
	for _, p := range f.Profiles {
		if _, ok := cells[p.Cell]; !ok {
			order = append(order, p.Cell)
		}
		cells[p.Cell] = append(cells[p.Cell], p)
	}
	for _, cell := range order {
		fmt.Fprintf(b, "### %s\n\n", cell)
		for _, p := range cells[cell] {
			if p.Error != "" {
				fmt.Fprintf(b, "- %s: %s\n", p.Kind, oneLine(p.Error))
				continue
			}
			var tops []string
			for _, t := range p.Top[:min(5, len(p.Top))] {
				tops = append(tops, fmt.Sprintf("%s %.1f%%", shortFunc(t.Function), t.FlatPct))
			}
			fmt.Fprintf(b, "- %s (%s, total %s): %s\n", p.Kind, p.SampleType, fmtTotal(p.Total, p.Unit), strings.Join(tops, ", "))
		}
		b.WriteString("\n")
	}
}

func shortFunc(name string) string {
	if i := strings.LastIndex(name, "/"); i >= 0 {
		return name[i+1:]
	}
	return name
}

func fmtTotal(v int64, unit string) string {
	switch unit {
	case "nanoseconds":
		return fmtNs(v)
	case "bytes":
		return fmt.Sprintf("%.3g MB", float64(v)/1e6)
	}
	return fmt.Sprintf("%d %s", v, unit)
}

const howToRead = `## How to read this

- Pick by the **median**, trust it only as far as the **[min–max]** range: two cells whose ranges overlap are not shown different by this run (repeat with --repeat 5 or a longer --duration).
- **Throughput** is the closed loop: how fast the producers can append when each waits for its previous append. **Latency** is the open loop at a fixed fraction of that throughput: latency counts the time a request waited because earlier ones were slow (no coordinated omission); *service* is the append alone.
- **async** acknowledges from memory (durability within the flush interval); **sync** acknowledges after fdatasync with group commit — compare sync latency with the device's fdatasync latency in Limits.
- **Ratios**: store ÷ copy ceiling says how much of the memory bandwidth the engine keeps; store ÷ device how close a backend gets to the disk; mqstore ÷ peer how it compares with NATS JetStream's file store and pebble's WAL on the same workload.
- A cell that failed is listed as failed with its reason, never as a number.
`

// WriteOutputs writes run.json, bench.txt, one .hgrm per cell, summary.md and
// the plots into dir (ratios are recomputed from the cells first).
func WriteOutputs(dir string, f *RunFile) error {
	ComputeRatios(f)
	if err := WriteRunFile(dir, f); err != nil {
		return err
	}
	return Render(dir, f)
}

// Render writes everything derived from run.json: bench.txt, .hgrm files,
// plots and summary.md.
func Render(dir string, f *RunFile) error {
	if err := writeFile(filepath.Join(dir, "bench.txt"), func(w io.Writer) error { return WriteBenchTxt(w, f) }); err != nil {
		return err
	}
	if err := writeHgrms(dir, f); err != nil {
		return err
	}
	if err := WritePlots(dir, f); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "summary.md"), []byte(Summary(f)), 0o644)
}

func writeFile(path string, fn func(io.Writer) error) error {
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := fn(out); err != nil {
		out.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return out.Close()
}

// writeHgrms writes <cell>.hgrm: the cell's histogram merged over its
// repeats (latency for open-loop cells, service time for closed-loop ones),
// values in microseconds.
func writeHgrms(dir string, f *RunFile) error {
	for _, cells := range [][]Cell{f.Cells, f.Peers} {
		for i := range cells {
			c := &cells[i]
			h := mergedHistogram(c)
			if h == nil || h.Count() == 0 {
				continue
			}
			if err := writeFile(filepath.Join(dir, c.Name+".hgrm"), h.WriteHgrm); err != nil {
				return err
			}
		}
	}
	return nil
}

// limitLabel is a limit's name with its target, EMULATED when it is.
func limitLabel(f *RunFile, l *Limit) string {
	if l.Target == "" {
		return l.Name
	}
	for _, d := range f.Devices {
		if d.Label == l.Target && d.Emulated {
			return l.Name + " @" + l.Target + " (EMULATED)"
		}
	}
	if len(f.Devices) > 1 {
		return l.Name + " @" + l.Target
	}
	return l.Name
}
