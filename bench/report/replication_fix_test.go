package report

import (
	"strings"
	"testing"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
)

// replRepeats are five measured repeats of a replicated cell whose master
// accepted 100 MB in each window (from 10 MB) and whose slave lacked
// behind[i] bytes at the window's end; its flushed offset went from 4 MB
// (a backlog of the warm-up: the window's bytes start at 10 MB) to 90 MB
// in 1 s — 80 MB/s of the window's bytes; run files before the fix stored
// the whole progress, 86 MB/s, as its durable MB/s.
func replRepeats(behind [5]int64) []runfile.Repeat {
	var reps []runfile.Repeat
	for i, b := range behind {
		d := &load.DurabilityResult{WrittenStartBytes: 10e6, DurableStartBytes: 10e6, WrittenEndBytes: 110e6, DurableEndBytes: 110e6}
		r := &runfile.ReplicationResult{Role: "ASYNC_MASTER", SlaveWroteEnd: 110e6 - b, SlaveFlushedStart: 4e6, SlaveFlushedEnd: 90e6, SlaveElapsedNs: 1e9}
		reps = append(reps, runfile.Repeat{Index: i + 1, Status: runfile.StatusOK, Result: load.Result{Durability: d}, Replication: r,
			Figures: runfile.Figures{SlaveDurableMBps: 86}})
	}
	return reps
}

// TestSlaveBehindIsNotSustained: a replicated cell whose slave lacked more
// than 10 % of the window's bytes at its end (the reference's mmap async
// ASYNC_MASTER) is not sustained in the replication table, whatever the
// master's flush backlog, shows its repl backlog, and gets no ratio or
// verdict in the named comparison — it says why — while a replicated cell
// whose slave kept up keeps its ratio. The slave's durable MB/s counts the
// window's bytes only, recomputed from the repeats' positions of a run file
// that stored the whole progress.
func TestSlaveBehindIsNotSustained(t *testing.T) {
	f := baseRun()
	f.Config.Replication = []string{"none", "async", "sync"}
	mk := func(flush, repl string, m, lo, hi float64, behind [5]int64) runfile.Cell {
		name := "throughput-mmap-1024-" + flush + "-p16"
		if repl != "" {
			name += "-ha" + repl
		}
		c := known(name, "throughput", "mmap", flush, 16, map[string][3]float64{"msgsPerSec": {m, lo, hi}, "p50Ns": {1e6, 0.9e6, 1.1e6},
			"replLagP50Ns": {2e5, 1e5, 3e5}, "replLagP99Ns": {9e5, 8e5, 1e6}})
		c.Replication = repl
		c.Durability = &runfile.Durability{MachineLoss: map[string]string{"": "everything: no other copy", "sync": "nothing acknowledged", "async": "the replication lag"}[repl]}
		if repl != "" {
			c.Repeats = replRepeats(behind)
			c.CPUSecPerGiB, c.CILow.CPUSecPerGiB, c.CIHigh.CPUSecPerGiB = 4.28, 4.28, 4.28
		}
		return c
	}
	f.Cells = []runfile.Cell{
		mk("sync", "", 10e3, 9e3, 11e3, [5]int64{}),
		mk("sync", "sync", 8e3, 7e3, 9.5e3, [5]int64{}),
		mk("async", "sync", 30e3, 28e3, 32e3, [5]int64{}),
		// 112 MB of 327 in the reference; here 30–45 MB of 100.
		mk("async", "async", 300e3, 290e3, 310e3, [5]int64{30e6, 34e6, 38e6, 41e6, 45e6}),
	}
	var b strings.Builder
	writeReplication(&b, f)
	out := b.String()
	row := func(prefix string) string {
		for line := range strings.SplitSeq(out, "\n") {
			if strings.HasPrefix(line, prefix) {
				return line
			}
		}
		t.Fatalf("no row %q in:\n%s", prefix, out)
		return ""
	}
	thr := row("| mmap | 1KiB | async | ASYNC_MASTER | 16 |")
	for _, want := range []string{"| 38 MB (38% [30%–45%]) | **no** (the slave fell behind) | 80 |", "| 4.28 (master only) |"} {
		if !strings.Contains(thr, want) {
			t.Errorf("replication row lacks %q: %s", want, thr)
		}
	}
	if kept := row("| mmap | 1KiB | async | SYNC_MASTER | 16 |"); !strings.Contains(kept, "| 0 B (0) | yes | 80 |") {
		t.Errorf("a slave that kept up: %s", kept)
	}
	named := row("| mmap 1KiB | 16 producers | ASYNC_FLUSH + ASYNC_MASTER |")
	for _, want := range []string{"| not compared: not sustained, its slave fell behind — 38 MB not on the slave at the window's end, 38% [30%–45%] of what the master accepted in the window (above the 10 % bar)",
		"the replication lag; at the window's end the slave lacked 38 MB (38% [30%–45%] of the window's bytes) |"} {
		if !strings.Contains(named, want) {
			t.Errorf("named row lacks %q: %s", want, named)
		}
	}
	if strings.Contains(named, "×") || strings.Contains(named, "significantly") {
		t.Errorf("a cell whose slave fell behind got a ratio: %s", named)
	}
	if seed := row("| mmap 1KiB | 16 producers | **ASYNC_FLUSH + SYNC_MASTER**"); !strings.Contains(seed, "3× [2.55×–3.56×] — significantly better") {
		t.Errorf("a slave that kept up lost its ratio: %s", seed)
	}
	for _, want := range []string{
		"Lag and lag bytes are the median over the repeats of each repeat's own p50 or p99, with its interval — unlike the p50, p99 and p99.9 columns, which are percentiles of the repeats' histograms pooled",
		"*unacked* is the worst repeat's share",
		"*repl backlog*", "what the slave made durable of the bytes the master accepted in the window",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the text lacks %q", want)
		}
	}
}

// TestReplicatedSustainedVerdict: the replication table's sustained
// column applies the bar to the master's backlog and the repl backlog,
// each by its median, saying when an interval straddles the bar.
func TestReplicatedSustainedVerdict(t *testing.T) {
	cell := func(master [3]float64, behind [5]int64) *runfile.Cell {
		c := &runfile.Cell{Replication: "async", Status: runfile.StatusOK, CILevel: 0.9375, Repeats: replRepeats(behind)}
		c.BacklogShare, c.CILow.BacklogShare, c.CIHigh.BacklogShare = master[0], master[1], master[2]
		ok := master[0] <= load.SustainedBacklogShare
		c.Sustained = &ok
		return c
	}
	kept, straddles, behind := [5]int64{0, 1e6, 1e6, 2e6, 3e6}, [5]int64{0, 1e6, 5e6, 12e6, 20e6}, [5]int64{5e6, 20e6, 30e6, 31e6, 40e6}
	for _, tc := range []struct {
		c    *runfile.Cell
		want string
	}{
		{cell([3]float64{0.01, 0, 0.02}, kept), "yes"},
		{cell([3]float64{0.01, 0, 0.02}, straddles), "yes (median; the interval of the repl backlog straddles 10 %)"},
		{cell([3]float64{0.01, 0, 0.02}, behind), "**no** (the slave fell behind — median; its interval straddles 10 %)"},
		{cell([3]float64{0.3, 0.2, 0.4}, [5]int64{20e6, 20e6, 30e6, 31e6, 40e6}), "**no** (the master's flush fell behind; the slave fell behind)"},
		{cell([3]float64{0.3, 0.2, 0.4}, kept), "**no** (the master's flush fell behind)"},
		{func() *runfile.Cell { c := cell([3]float64{0, 0, 0}, kept); c.Replication = ""; return c }(), "yes"},
	} {
		if got := replSustainedText(tc.c); got != tc.want {
			t.Errorf("master %v, repl %v: %q, want %q", tc.c.BacklogShare, replFiguresOf(tc.c).Median.ReplBacklogShare, got, tc.want)
		}
	}
}

// TestReplicatedCPUSaysWhoseItIs: a replicated cell's CPU counts the
// master's process and the slave's, with the slave's part; a run file from
// before the slave's was counted says *master only*.
func TestReplicatedCPUSaysWhoseItIs(t *testing.T) {
	c := &runfile.Cell{Replication: "sync"}
	c.CPUSecPerGiB, c.SlaveCPUSecPerGiB = 30, 10
	c.CILow, c.CIHigh = c.Figures, c.Figures
	if got := replCPUText(c); got != "30 (master only)" {
		t.Errorf("an old run's CPU: %q", got)
	}
	c.Options = map[string]string{"cpu": "the master's process and the slave's"}
	if got := replCPUText(c); got != "30 (slave 10)" {
		t.Errorf("master and slave: %q", got)
	}
}
