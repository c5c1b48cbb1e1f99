package bench

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

func cellsOf(f *RunFile, workload string) []*Cell {
	var out []*Cell
	for i := range f.Cells {
		if c := &f.Cells[i]; c.Workload == workload && c.Status == StatusOK {
			out = append(out, c)
		}
	}
	return out
}

func writeConsume(b *strings.Builder, f *RunFile) {
	rows := cellsOf(f, WorkloadConsume)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "## Consume (catch-up read of a %s CommitLog through the ConsumeQueue, one queue, to a loopback TCP reader)\n\n", sizeLabel(int(f.Config.ConsumeBytes)))
	b.WriteString("| backend | size | variant | msgs/s | GB/s | sender CPU s/GiB | process CPU s/GiB | resident after drop |\n|---|---:|---|---:|---:|---:|---:|---:|\n")
	for _, c := range rows {
		resident := "—"
		if strings.HasPrefix(c.Variant, "cold") {
			resident = fmtPct(c.ResidentFraction)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", backendLabel(f, c), sizeLabel(c.SizeBytes), c.Variant,
			withRange(c.MsgsPerSec, c.Min.MsgsPerSec, c.Max.MsgsPerSec, fmtCount),
			withRange(c.MBPerSec/1e3, c.Min.MBPerSec/1e3, c.Max.MBPerSec/1e3, fmtFloat),
			withRange(c.CPUSecPerGiB, c.Min.CPUSecPerGiB, c.Max.CPUSecPerGiB, fmtFloat),
			withRange(c.ProcessCPUSecPerGiB, c.Min.ProcessCPUSecPerGiB, c.Max.ProcessCPUSecPerGiB, fmtFloat), resident)
	}
	b.WriteString("\nGet (up to 1024 messages, GetMaxBytes 256 KiB) then GetResult.CopyTo (read into a 64 KiB buffer, write) or GetResult.WriteTo (sendfile(2) per contiguous range) into a loopback TCP connection whose reader discards. *sender CPU*: getrusage(RUSAGE_THREAD) of the locked OS thread running the loop — on loopback it includes the kernel's TCP transmit and (softirq) receive processing done in that thread, not the reader's copy to user space. *process CPU*: the whole process, reader included. hot: after an unmeasured warm-up pass; cold: sync, MADV_PAGEOUT of the store's own mappings (drop_caches never evicts mapped pages), then `echo 3 > /proc/sys/vm/drop_caches` (root only); *resident after drop* is what mincore still found cached.\n\n")
}

func writeE2E(b *strings.Builder, f *RunFile) {
	rows := cellsOf(f, WorkloadE2E)
	if len(rows) == 0 {
		return
	}
	b.WriteString("## End to end (open-loop producers, one long-polling consumer per queue; store-to-delivery latency)\n\n")
	b.WriteString("| backend | size | flush | target → delivered msgs/s | p50 | p99 | p99.9 | max | Put latency p99.9 |\n|---|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range rows {
		fmt.Fprintf(b, "| %s | %s | %s | %s → %s | %s | %s | %s%s | %s | %s |\n", backendLabel(f, c), sizeLabel(c.SizeBytes), c.Flush,
			fmtCount(c.TargetRatePerSec), withRange(c.MsgsPerSec, c.Min.MsgsPerSec, c.Max.MsgsPerSec, fmtCount),
			nsRange(c.P50Ns, c.Min.P50Ns, c.Max.P50Ns), nsRange(c.P99Ns, c.Min.P99Ns, c.Max.P99Ns),
			nsRange(c.P999Ns, c.Min.P999Ns, c.Max.P999Ns), thin(c, 0.999), nsRange(c.MaxNs, c.Min.MaxNs, c.Max.MaxNs),
			nsRange(c.ServiceP999Ns, c.Min.ServiceP999Ns, c.Max.ServiceP999Ns))
	}
	b.WriteString("\nLatency = the consumer's clock once it has decoded the message (CRC checked) − the wall-clock start of the producer's Put, stamped in the body. Messages become visible to consumers after dispatch to the ConsumeQueue — for the buffered backends (transient, uring) only after the commit service has committed them, so their end-to-end latency follows the commit interval. *Put latency*: the producers' open-loop latency (from the intended start).\n\n")
}

func writeRecovery(b *strings.Builder, f *RunFile) {
	rows := cellsOf(f, WorkloadRecovery)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "## Recovery (engine.Open after SIGKILL of a producer holding a %s CommitLog)\n\n", sizeLabel(int(f.Config.RecoveryBytes)))
	b.WriteString("| backend | size | variant | CommitLog scanned | open time | GB/s scanned |\n|---|---:|---|---:|---:|---:|\n")
	for _, c := range rows {
		scanned := int64(0)
		if len(c.Repeats) > 0 {
			scanned = c.Repeats[0].Result.PayloadBytes
		}
		fmt.Fprintf(b, "| %s | %s | %s | %.0f MB | %s | %s |\n", backendLabel(f, c), sizeLabel(c.SizeBytes), c.Variant, float64(scanned)/1e6,
			nsRange(c.OpenNs, c.Min.OpenNs, c.Max.OpenNs), withRange(c.MBPerSec/1e3, c.Min.MBPerSec/1e3, c.Max.MBPerSec/1e3, fmtFloat))
	}
	b.WriteString("\nA child process fills the store (async flush) and is killed with SIGKILL while it holds it open; then engine.Open recovers it (CRC scan from the segment the checkpoint points at — the whole CommitLog when the producer died before its first checkpoint — and ConsumeQueue repair from there); MB/s counts the bytes scanned. hot: the page cache as the dead process left it (its dirty pages may still be being written back); cold: sync and drop_caches first (root only).\n\n")
}

// pressureRow is one backend × size × policy × target under each pressure.
type pressureRow struct {
	base *Cell
	by   map[string]*Cell
}

func pressureRows(f *RunFile, workload string) []pressureRow {
	var rows []pressureRow
	for i := range f.Cells {
		c := &f.Cells[i]
		if c.Workload != workload || c.Pressure != PressureNone || c.Status != StatusOK {
			continue
		}
		row := pressureRow{base: c, by: map[string]*Cell{}}
		for j := range f.Cells {
			p := &f.Cells[j]
			if p.Pressure != PressureNone && samePoint(c, p) {
				row.by[p.Pressure] = p
			}
		}
		if len(row.by) > 0 {
			rows = append(rows, row)
		}
	}
	return rows
}

func pressuresRun(f *RunFile) []string {
	var out []string
	for _, p := range f.Config.Pressures {
		if p != PressureNone {
			out = append(out, p)
		}
	}
	return out
}

func writePressure(b *strings.Builder, f *RunFile) {
	rows := pressureRows(f, "latency")
	if len(rows) == 0 {
		return
	}
	ps := pressuresRun(f)
	b.WriteString("## Under pressure (open loop at the unpressured cell's rate; p99.9 and its ratio to the unpressured p99.9)\n\n")
	b.WriteString("| backend | size | flush | none p99.9 |")
	for _, p := range ps {
		fmt.Fprintf(b, " %s p99.9 (÷ none) |", p)
	}
	b.WriteString("\n|---|---:|---|---:|" + strings.Repeat("---:|", len(ps)) + "\n")
	for _, row := range rows {
		c := row.base
		fmt.Fprintf(b, "| %s | %s | %s | %s |", backendLabel(f, c), sizeLabel(c.SizeBytes), c.Flush, nsRange(c.P999Ns, c.Min.P999Ns, c.Max.P999Ns))
		for _, p := range ps {
			pc := row.by[p]
			switch {
			case pc == nil:
				b.WriteString(" — |")
			case pc.Status != StatusOK:
				fmt.Fprintf(b, " %s |", pc.Status)
			default:
				fmt.Fprintf(b, " %s (%s×) |", nsRange(pc.P999Ns, pc.Min.P999Ns, pc.Max.P999Ns), fmtFloat(ratio(float64(pc.P999Ns), float64(c.P999Ns))))
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\nThe pressures, as applied in this run:\n\n")
	for _, n := range f.Notes {
		if strings.HasPrefix(n, "pressure ") {
			fmt.Fprintf(b, "- %s\n", n)
		}
	}
	b.WriteString("\nThe system was sampled every 100 ms in every cell (run.json `cells[].repeats[].samples`: nr_dirty, nr_writeback, pswpin, pswpout, pgmajfault, /proc/pressure/io and /memory); the `pressure-*.png` plots draw them beside the latency of the same 100 ms.\n\n")
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.Inf(1)
	}
	return a / b
}

func writeSweep(b *strings.Builder, f *RunFile) {
	series := sweepOf(f)
	if len(series) == 0 {
		return
	}
	b.WriteString("## Flush-policy sweep (throughput against p99.9; ★ = on the Pareto front)\n\n")
	for _, s := range series {
		fmt.Fprintf(b, "### %s\n\n| policy | msgs/s | p99.9 | front |\n|---|---:|---:|---|\n", s.key)
		onFront := map[int]bool{}
		for _, i := range s.front {
			onFront[i] = true
		}
		for i, p := range s.points {
			star := ""
			if onFront[i] {
				star = "★"
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", p.Label, fmtCount(p.MsgsPerSec), fmtNs(p.P999Ns), star)
		}
		var names []string
		for _, i := range s.front {
			names = append(names, fmt.Sprintf("`%s` (%s msgs/s, p99.9 %s)", s.points[i].Label, fmtCount(s.points[i].MsgsPerSec), fmtNs(s.points[i].P999Ns)))
		}
		fmt.Fprintf(b, "\nPareto front, slowest to fastest: %s. Every other policy is beaten on both throughput and p99.9 by one of these.\n\n", strings.Join(names, "; "))
	}
	b.WriteString("Policy names: fi = flush interval, flp = flush least pages, ci = commit interval, clp = commit least pages, gct = group-commit (sync flush) timeout. p99.9 is the open-loop latency cell's (from the intended start) when the sweep ran one, else the closed loop's service time.\n\n")
}

// recommendation per target and size: the backend and policy with the best
// throughput whose latency p99.9 under every pressure stays within 2× of
// its unpressured p99.9.
func writeRecommendations(b *strings.Builder, f *RunFile) {
	rows := pressureRows(f, "latency")
	if len(rows) == 0 {
		return
	}
	type cand struct {
		row   pressureRow
		thr   *Cell
		worst float64
		why   []string
	}
	groups := map[string][]cand{}
	var order []string
	for _, row := range rows {
		c := row.base
		key := fmt.Sprintf("%s|%d", c.Target, c.SizeBytes)
		var thr *Cell
		for i := range f.Cells {
			t := &f.Cells[i]
			if t.Workload == "throughput" && t.Pressure == PressureNone && t.Status == StatusOK && samePointAcross(t, c) {
				thr = t
			}
		}
		if thr == nil {
			continue
		}
		cd := cand{row: row, thr: thr}
		for _, p := range pressuresRun(f) {
			pc := row.by[p]
			if pc == nil || pc.Status != StatusOK {
				cd.worst = math.Inf(1)
				st := "not run"
				if pc != nil {
					st = pc.Status + ": " + oneLine(pc.Reason)
				}
				cd.why = append(cd.why, fmt.Sprintf("%s %s", p, st))
				continue
			}
			rt := ratio(float64(pc.P999Ns), float64(c.P999Ns))
			cd.worst = math.Max(cd.worst, rt)
			cd.why = append(cd.why, fmt.Sprintf("%s p99.9 %s = %s× its unpressured %s", p, fmtNs(pc.P999Ns), fmtFloat(rt), fmtNs(c.P999Ns)))
		}
		if _, ok := groups[key]; !ok {
			order = append(order, key)
		}
		groups[key] = append(groups[key], cd)
	}
	if len(order) == 0 {
		return
	}
	b.WriteString("## Recommendation per device\n\n")
	b.WriteString("Rule: the backend and flush policy with the best unpressured throughput whose open-loop p99.9 under every pressure run stays within 2× of its own unpressured p99.9. async and sync are not interchangeable (async acknowledges from memory, sync after fdatasync): read the durability you need first, then the pick within it.\n\n")
	for _, key := range order {
		cands := groups[key]
		sort.SliceStable(cands, func(i, j int) bool { return cands[i].thr.MsgsPerSec > cands[j].thr.MsgsPerSec })
		target, size, _ := strings.Cut(key, "|")
		label := target
		for _, d := range f.Devices {
			if d.Label == target && d.Emulated {
				label += " (EMULATED HDD)"
			}
		}
		fmt.Fprintf(b, "- **%s**, %s B bodies:\n", orDefault(label, "target"), size)
		for _, durability := range []string{"async", "sync", ""} {
			var pick, closest *cand
			for i := range cands {
				cd := &cands[i]
				if durability != "" && cd.row.base.Flush != durability {
					continue
				}
				if pick == nil && cd.worst <= 2 {
					pick = cd
				}
				if closest == nil || cd.worst < closest.worst {
					closest = cd
				}
			}
			name := durability
			if name == "" {
				name = "any durability"
			}
			switch {
			case pick != nil:
				fmt.Fprintf(b, "  - %s: **%s** — %s msgs/s unpressured (best of those within 2×); %s.\n", name, policyLabel(pick.row.base),
					fmtCount(pick.thr.MsgsPerSec), strings.Join(pick.why, "; "))
			case closest != nil:
				fmt.Fprintf(b, "  - %s: no backend/policy stays within 2× under every pressure; the least affected is %s (worst ratio %s×: %s).\n",
					name, policyLabel(closest.row.base), fmtFloat(closest.worst), strings.Join(closest.why, "; "))
			}
		}
	}
	b.WriteString("\n")
}

func samePointAcross(t, c *Cell) bool {
	return t.Backend == c.Backend && t.SizeBytes == c.SizeBytes && t.Flush == c.Flush && t.Policy == c.Policy && t.Target == c.Target
}

func policyLabel(c *Cell) string {
	if c.Policy != "" {
		return c.Backend + " " + c.Policy
	}
	return c.Backend + " " + c.Flush
}

func writeSystemChanges(b *strings.Builder, f *RunFile) {
	if len(f.SystemChanges) == 0 && len(f.Notes) == 0 {
		return
	}
	b.WriteString("## System changes and notes\n\n")
	for _, c := range f.SystemChanges {
		state := "undone"
		if !c.Undone {
			state = "**NOT undone** (" + c.UndoError + ") — run `mqbench cleanup`"
		}
		fmt.Fprintf(b, "- %s: %s\n", c, state)
	}
	for _, n := range f.Notes {
		fmt.Fprintf(b, "- %s\n", n)
	}
	b.WriteString("\n")
}
