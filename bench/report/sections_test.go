package report

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
)

// known builds a measured cell whose figures are given as [median, lo, hi]
// (the interval of five repeats), as a summarized cell carries them.
func known(name, workload, backend, flush string, producers int, figs map[string][3]float64) runfile.Cell {
	c := runfile.Cell{Name: name, Workload: workload, Backend: backend, Flush: flush, SizeBytes: 1024, Producers: producers, Pressure: "none",
		Target: "vda", Status: runfile.StatusOK, CILevel: 0.9375}
	if workload == "latency" || workload == "e2e" {
		c.Producers, c.RatePerSec = 0, float64(producers)
	}
	set := func(f *runfile.Figures, name string, v float64) {
		switch name {
		case "msgsPerSec":
			f.MsgsPerSec = v
		case "durableMBps":
			f.DurableMBps = v
		case "writtenMBps":
			f.WrittenMBps = v
		case "p50Ns":
			f.P50Ns = int64(v)
		case "p99Ns":
			f.P99Ns = int64(v)
		case "p999Ns":
			f.P999Ns = int64(v)
		case "replLagP50Ns":
			f.ReplLagP50Ns = int64(v)
		case "replLagP99Ns":
			f.ReplLagP99Ns = int64(v)
		case "mbPerSec":
			f.MBPerSec = v
		default:
			panic(name)
		}
	}
	for n, v := range figs {
		set(&c.Figures, n, v[0])
		set(&c.CILow, n, v[1])
		set(&c.CIHigh, n, v[2])
	}
	yes := true
	c.Sustained = &yes
	return c
}

func baseRun() *runfile.RunFile {
	f := fakeRun()
	f.Cells, f.Peers, f.Limits, f.Floors = nil, nil, nil, nil
	f.Config.Backends = []string{"mmap", "uring-direct"}
	return f
}

// TestVersusPebbleWAL: each system ÷ pebble-wal per producer count, "no
// significant difference" where the intervals overlap; an async
// pebble-wal that reports durability only at Drain gives no ratio and is
// explained, never called slower.
func TestVersusPebbleWAL(t *testing.T) {
	f := baseRun()
	f.Config.Producers = []int{1, 16}
	tp := func(m, lo, hi float64) map[string][3]float64 { return map[string][3]float64{"msgsPerSec": {m, lo, hi}} }
	f.Cells = []runfile.Cell{
		known("throughput-mmap-1024-sync-p1", "throughput", "mmap", "sync", 1, tp(10e3, 9.5e3, 10.5e3)),
		known("throughput-uring-direct-1024-sync-p1", "throughput", "uring-direct", "sync", 1, tp(25e3, 24e3, 26e3)),
		known("throughput-mmap-1024-sync-p16", "throughput", "mmap", "sync", 16, tp(40e3, 38e3, 42e3)),
		known("throughput-mmap-1024-async-p16", "throughput", "mmap", "async", 16, map[string][3]float64{"msgsPerSec": {300e3, 290e3, 310e3}, "durableMBps": {330, 320, 340}}),
	}
	pw1 := known("throughput-pebble-wal-1024-sync-p1", "throughput", "pebble-wal", "sync", 1, tp(10.2e3, 9.8e3, 10.6e3))
	pw16 := known("throughput-pebble-wal-1024-sync-p16", "throughput", "pebble-wal", "sync", 16, tp(20e3, 19e3, 21e3))
	pwA := known("throughput-pebble-wal-1024-async-p16", "throughput", "pebble-wal", "async", 16, tp(900e3, 880e3, 920e3))
	pwA.Sustained, pwA.DurableAtDrainOnly = nil, true
	pwA.Durability = &runfile.Durability{Mechanism: "none during the run; Drain appends an empty record with SyncRecord"}
	for _, p := range []*runfile.Cell{&pw1, &pw16, &pwA} {
		p.Peer = true
	}
	f.Peers = []runfile.Cell{pw1, pw16, pwA}
	var b strings.Builder
	writeVersusPebbleWAL(&b, f)
	out := b.String()
	wantAll(t, out,
		"| mmap | 1KiB | 0.98× [0.896×–1.07×] no significant difference | 2× [1.81×–2.21×] |",
		"| uring-direct | 1KiB | 2.45× [2.26×–2.65×] | — |",
		"| system | size | 1 producer | 16 producers |",
		"No ratio: `pebble-wal` async reports durable bytes only at Drain (its own statement: \"none during the run;",
		"not a failure to keep up",
	)
}

// TestAtDrainOnlyPeerIsNotCondemned: a NATS async row whose durable
// position moved only at Drain shows no durable MB/s and no "not
// sustained", is explained as an accounting limit, and its ratios do not
// say it fell behind.
func TestAtDrainOnlyPeerIsNotCondemned(t *testing.T) {
	f := fakeRun()
	p := &f.Peers[0]
	p.Sustained, p.DurableAtDrainOnly, p.DurableMBps = nil, true, 0
	p.Durability.Mechanism = "a timer fsyncs every block each sync_interval; durable is counted only at Drain"
	Analyze(f)
	out := SummaryTables(f)
	if !strings.Contains(out, "an accounting limit of the peer") || !strings.Contains(out, "**not the peer failing to keep up**") ||
		!strings.Contains(out, "durable is counted only at Drain") {
		t.Errorf("no explanation of the ‡ row:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "| nats (peer)") && strings.Contains(line, "**no**") {
			t.Errorf("the peer is called not sustained: %s", line)
		}
	}
	for _, r := range f.Ratios {
		if strings.Contains(r.Note, "did not keep durable up") && strings.Contains(r.Note, "nats") {
			t.Errorf("a ratio condemns the peer: %+v", r)
		}
	}
}

// TestNamedComparisonRendered: the four configurations at the same
// producers, the seed's recommendation named, ratios to SYNC_FLUSH alone
// with verdicts only where intervals separate.
func TestNamedComparisonRendered(t *testing.T) {
	f := baseRun()
	f.Config.Replication = []string{"none", "async", "sync"}
	mk := func(flush, repl string, m, lo, hi float64) runfile.Cell {
		name := "throughput-mmap-1024-" + flush + "-p16"
		if repl != "" {
			name += "-ha" + repl
		}
		c := known(name, "throughput", "mmap", flush, 16, map[string][3]float64{"msgsPerSec": {m, lo, hi}, "p50Ns": {1e6, 0.9e6, 1.1e6},
			"replLagP50Ns": {2e5, 1e5, 3e5}, "replLagP99Ns": {9e5, 8e5, 1e6}})
		c.Replication = repl
		c.Durability = &runfile.Durability{MachineLoss: map[string]string{"": "everything: no other copy", "sync": "nothing acknowledged", "async": "the replication lag"}[repl]}
		return c
	}
	f.Cells = []runfile.Cell{mk("sync", "", 10e3, 9e3, 11e3), mk("sync", "sync", 8e3, 7e3, 9.5e3), mk("async", "sync", 30e3, 28e3, 32e3), mk("async", "async", 300e3, 290e3, 310e3)}
	var b strings.Builder
	writeReplication(&b, f)
	out := b.String()
	wantAll(t, out,
		"### ASYNC_FLUSH + SYNC_MASTER against SYNC_FLUSH",
		"| mmap 1KiB | 16 producers | SYNC_FLUSH alone (no slave) | ok | 10k [9k–11k] | — |",
		"| mmap 1KiB | 16 producers | SYNC_FLUSH + SYNC_MASTER | ok | 8k [7k–9.5k] | 0.8× [0.636×–1.06×] — no significant difference |",
		"| mmap 1KiB | 16 producers | **ASYNC_FLUSH + SYNC_MASTER** (the seed's recommendation) | ok | 30k [28k–32k] | 3× [2.55×–3.56×] — significantly better |",
		"200µs [100µs–300µs] / 900µs [800µs–1ms] | nothing acknowledged |",
		"ASYNC_FLUSH + ASYNC_MASTER | ok | 300k [290k–310k] |",
		"- mmap 1KiB at 16 producers: ASYNC_FLUSH + SYNC_MASTER ÷ SYNC_FLUSH alone, throughput: 3× [2.55×–3.56×] — significantly better",
	)
}

// TestSustainedColumnSaysWhenTheIntervalStraddles: the column's verdict is
// the median repeat's; when the backlog share's interval straddles the 10 %
// bar (the recommendation then calls the cell undetermined) the column
// says so rather than a bare yes or no.
func TestSustainedColumnSaysWhenTheIntervalStraddles(t *testing.T) {
	cell := func(median, low, high float64) *runfile.Cell {
		c := &runfile.Cell{CILevel: 0.9375}
		c.BacklogShare, c.CILow.BacklogShare, c.CIHigh.BacklogShare = median, low, high
		ok := median <= load.SustainedBacklogShare
		c.Sustained = &ok
		return c
	}
	for _, tc := range []struct {
		c    *runfile.Cell
		want string
	}{
		{cell(0.01, 0, 0.05), "yes"},
		{cell(0.02, 0, 0.4), "yes (median; its interval straddles 10 %)"},
		{cell(0.3, 0, 0.5), "**no** (median; its interval straddles 10 %)"},
		{cell(0.5, 0.3, 0.8), "**no**"},
		{func() *runfile.Cell { c := cell(0, 0, 0); c.Status = runfile.StatusSaturated; return c }(), "**no** (saturated)"},
	} {
		if got := sustainedText(tc.c); got != tc.want {
			t.Errorf("backlog share %v [%v–%v]: %q, want %q", tc.c.BacklogShare, tc.c.CILow.BacklogShare, tc.c.CIHigh.BacklogShare, got, tc.want)
		}
	}
}

// TestSustainableRateIsALowerBoundUntilNarrowed: a search whose probes ran
// out before the sustained and the saturated rate came within 10 %, whose
// probes never saturated, or one of whose probes was limited by the
// generator's requests in flight reports a lower bound, not a rate — in
// the search table and in the latency table's column, which finds the
// cell's search by its group.
func TestSustainableRateIsALowerBoundUntilNarrowed(t *testing.T) {
	inFlightBound := []runfile.Probe{{RatePerSec: 29000, Status: runfile.StatusSaturated, AchievedPerSec: 28000, InFlightCapPerSec: 29000}}
	for _, tc := range []struct {
		sustainable, saturatedAt float64
		probes                   []runfile.Probe
		latency, search          string
	}{
		{1000, 25900, nil, "≥ 1k (saturated at 25.9k; the probes ran out before narrowing it to 10 %)", "≥ 1k (the probes ran out before narrowing it to 10 %)"},
		{27200, 29000, nil, "27.2k", "27.2k"},
		{27200, 0, nil, "≥ 27.2k (no probe saturated)", "≥ 27.2k (no probe saturated)"},
		{27200, 29000, inFlightBound, "≥ 27.2k (saturated at 29k; the generator's requests in flight limited a probe)", "≥ 27.2k (the generator's requests in flight limited a probe)"},
	} {
		c := known("latency-mmap-1024-sync-r1000", "latency", "mmap", "sync", 1000, map[string][3]float64{"msgsPerSec": {1000, 990, 1010}})
		c.SustainableRatePerSec = tc.sustainable
		f := &runfile.RunFile{Cells: []runfile.Cell{c}, Searches: []runfile.RateSearch{{Group: runfile.SearchGroup("mmap", 1024, "sync", ""),
			Backend: "mmap", Flush: "sync", Size: 1024, Target: "vda", Pressure: "none",
			SustainableRatePerSec: tc.sustainable, SaturatedAtPerSec: tc.saturatedAt, Probes: tc.probes}}}
		var lat, sea strings.Builder
		writeLatency(&lat, f)
		writeSearches(&sea, f)
		if !strings.Contains(lat.String(), "| "+tc.latency+" |") {
			t.Errorf("sustainable %v, saturated at %v: the latency table lacks %q:\n%s", tc.sustainable, tc.saturatedAt, tc.latency, lat.String())
		}
		if !strings.Contains(sea.String(), "| "+tc.search+" |") {
			t.Errorf("sustainable %v, saturated at %v: the search table lacks %q:\n%s", tc.sustainable, tc.saturatedAt, tc.search, sea.String())
		}
	}
}

// TestMessageIsNamed: a store cell that put the rocketmq message says so
// in its label, the run's context names its record size, and the
// comparison with the peers says they wrote the body alone.
func TestMessageIsNamed(t *testing.T) {
	f := baseRun()
	f.Config.Producers = []int{16}
	tp := map[string][3]float64{"msgsPerSec": {40e3, 38e3, 42e3}}
	c := known("throughput-mmap-1024-sync-p16", "throughput", "mmap", "sync", 16, tp)
	c.Message, c.RecordBytes = "rocketmq", 1290
	p := known("throughput-pebble-wal-1024-sync-p16", "throughput", "pebble-wal", "sync", 16, tp)
	p.Peer = true
	f.Cells, f.Peers = []runfile.Cell{c}, []runfile.Cell{p}
	Analyze(f)
	out := Summary(f)
	wantAll(t, out,
		"| mmap · rocketmq msg | 1KiB | sync | 16 |",
		"- message: mqstore's cells put the *rocketmq* message (records of 1290 B for a 1KiB body:",
		"Not the same message: mqstore's cells put the *rocketmq* message",
		"(mqstore puts the rocketmq message, the peer the body alone)",
	)
	c.Message = "bare"
	f.Cells = []runfile.Cell{c}
	Analyze(f)
	if out := Summary(f); strings.Contains(out, "rocketmq") || strings.Contains(out, "Not the same message") {
		t.Errorf("a bare run speaks of another message:\n%s", out)
	}
}

// TestGroupCommitLimitFileStates: the ÷ group-commit limit is over the
// best of the written-extent limits (page cache, one or two in flight, and
// O_DIRECT); a cell whose measured windows made fallocated segments also
// gets its ratio to the best of the fallocated limits, shown after it in
// the throughput table, and a cell that made none does not.
func TestGroupCommitLimitFileStates(t *testing.T) {
	f := baseRun()
	f.Config.Producers = []int{16}
	c := known("throughput-uring-direct-1024-sync-p16", "throughput", "uring-direct", "sync", 16, map[string][3]float64{"msgsPerSec": {40e3, 38e3, 42e3}})
	c.Message, c.RecordBytes = "bare", 1125
	c.Repeats = []runfile.Repeat{{Warm: true, Store: &runfile.StoreCounters{SegmentsFallocated: 5}}, {Store: &runfile.StoreCounters{SegmentsPrewritten: 1}}}
	gc := func(name string, inFlight int, med, lo, hi float64) runfile.Limit {
		l := runfile.Limit{Name: name, Target: "vda", Status: runfile.StatusOK, SizeBytes: 1024, RecordBytes: 1125, Producers: 16,
			InFlight: inFlight, Params: map[string]string{"message": "bare", "recordsPerOp": "16"}, CILevel: 0.9375}
		l.Figures.MsgsPerSec, l.CILow.MsgsPerSec, l.CIHigh.MsgsPerSec = med, lo, hi
		l.Repeats = []runfile.LimitRepeat{{Figures: l.Figures}}
		return l
	}
	f.Limits = []runfile.Limit{gc(runfile.LimitGroupCommit, 1, 100e3, 95e3, 105e3), gc(runfile.LimitGroupCommit, 2, 90e3, 80e3, 110e3),
		gc(runfile.LimitGroupCommitDirect, 1, 130e3, 120e3, 140e3), gc(runfile.LimitGroupCommitFallocated, 1, 60e3, 55e3, 65e3),
		gc(runfile.LimitGroupCommitDirectFallocated, 1, 70e3, 65e3, 80e3)}
	f.Cells = []runfile.Cell{c}
	Analyze(f)
	r := find(t, f.Ratios, func(r runfile.Ratio) bool { return r.Kind == "group-commit" })
	if !near(r.Median, 40.0/130) || !near(r.Low, 38.0/140) || !near(r.High, 42.0/120) ||
		r.Against != "device-group-commit ×16 (1 or 2 in flight), device-group-commit-direct ×16 (1 in flight)" {
		t.Errorf("written-extent ratio %+v", r)
	}
	for _, r := range f.Ratios {
		if r.Kind == "group-commit-fallocated" {
			t.Errorf("a cell whose measured windows made no fallocated segment (the warm one did) has a fallocated ratio: %+v", r)
		}
	}
	f.Cells[0].Repeats[1].Store.SegmentsFallocated = 2
	f.Ratios = nil
	Analyze(f)
	r = find(t, f.Ratios, func(r runfile.Ratio) bool { return r.Kind == "group-commit-fallocated" })
	if !near(r.Median, 40.0/70) || r.Against != "device-group-commit-fallocated ×16 (1 in flight), device-group-commit-direct-fallocated ×16 (1 in flight)" ||
		!strings.Contains(r.Note, "made 2 fallocated segments") {
		t.Errorf("fallocated ratio %+v", r)
	}
	out := Summary(f)
	wantAll(t, out,
		"| 0.308× [0.271×–0.35×]; fallocated 0.571× [0.475×–0.646×] |",
		"### sync store ÷ the device's group-commit limit on a fallocated file",
		"| device-group-commit-direct | 1125 B (bare 1KiB body) | 16 | 1 |",
	)
}

// TestGroupCommitLimit: a sync throughput cell ÷ the better of the one-
// and two-in-flight group-commit limits at its producer count and record
// size, with the interval [the higher low, the higher high] of the two;
// a cell of another record size gets none.
func TestGroupCommitLimit(t *testing.T) {
	f := baseRun()
	f.Config.Producers = []int{16}
	c := known("throughput-mmap-1024-sync-p16", "throughput", "mmap", "sync", 16, map[string][3]float64{"msgsPerSec": {40e3, 38e3, 42e3}})
	c.Message, c.RecordBytes = "rocketmq", 1290
	c.Figures.FlushBusyShare, c.CILow.FlushBusyShare, c.CIHigh.FlushBusyShare, c.Figures.FlushMeanNs = 0.9, 0.85, 0.95, 250_000
	other := known("throughput-uring-1024-sync-p16", "throughput", "uring", "sync", 16, map[string][3]float64{"msgsPerSec": {40e3, 38e3, 42e3}})
	other.Message, other.RecordBytes = "bare", 1100
	f.Cells = []runfile.Cell{c, other}
	gc := func(inFlight int, med, lo, hi float64) runfile.Limit {
		l := runfile.Limit{Name: runfile.LimitGroupCommit, Target: "vda", Status: runfile.StatusOK, SizeBytes: 1024, RecordBytes: 1290, Producers: 16,
			InFlight: inFlight, Params: map[string]string{"message": "rocketmq", "recordsPerOp": map[int]string{1: "16", 2: "8 and 8"}[inFlight]}, CILevel: 0.9375}
		l.Figures.MsgsPerSec, l.CILow.MsgsPerSec, l.CIHigh.MsgsPerSec = med, lo, hi
		l.Figures.OpsPerSec, l.CILow.OpsPerSec, l.CIHigh.OpsPerSec = med/16, lo/16, hi/16
		l.Figures.P50Ns, l.Figures.P99Ns = 120_000, 300_000
		l.Repeats = []runfile.LimitRepeat{{Figures: l.Figures}}
		return l
	}
	benchTxt := func() string {
		var b strings.Builder
		if err := WriteBenchTxt(&b, f); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	f.Limits = []runfile.Limit{gc(1, 100e3, 95e3, 105e3), gc(2, 120e3, 110e3, 150e3)}
	Analyze(f)
	r := find(t, f.Ratios, func(r runfile.Ratio) bool { return r.Kind == "group-commit" })
	if r.Cell != c.Name || !near(r.Median, 40.0/120) || !near(r.Low, 38.0/150) || !near(r.High, 42.0/110) || r.Figure != "msgsPerSec" {
		t.Errorf("group-commit ratio %+v", r)
	}
	for _, r := range f.Ratios {
		if r.Kind == "group-commit" && r.Cell == other.Name {
			t.Errorf("a cell of other records has a group-commit ratio: %+v", r)
		}
	}
	out := Summary(f)
	wantAll(t, out,
		"| ÷ group-commit limit | in flush (mean flush) |",
		"| 0.333× [0.253×–0.382×] | 90% [85%–95%] (250µs) |",
		"| device-group-commit | 1290 B (rocketmq 1KiB body) | 16 | 2 | 8 and 8 | 7.5k [6.88k–9.38k] | 120k [110k–150k] |",
		"### sync store ÷ the device's group-commit limit",
		"device-group-commit ×16 (1 or 2 in flight)",
	)
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "| uring |") && strings.Contains(line, "| 40k") && !strings.Contains(line, "| — | — | yes |") {
			t.Errorf("a cell without flush figures shows some (or no ratio dash): %s", line)
		}
	}
	if txt := benchTxt(); !strings.Contains(txt, "/producers=16/inflight=2/split 1\t") || !strings.Contains(txt, "/producers=16/inflight=1 1\t") {
		t.Errorf("bench.txt's group-commit limit lines:\n%s", txt)
	}
	// Before schema 5 the two writers each wrote N records: that limit is
	// shown as measured and said to be no bound, and the ratio is to the
	// one-in-flight limit alone.
	f.Schema, f.Ratios = 4, nil
	delete(f.Limits[1].Params, "recordsPerOp")
	Analyze(f)
	r = find(t, f.Ratios, func(r runfile.Ratio) bool { return r.Kind == "group-commit" })
	if r.Cell != c.Name || !near(r.Median, 40.0/100) || r.Against != "device-group-commit ×16 (1 in flight)" {
		t.Errorf("group-commit ratio of a schema 4 run %+v", r)
	}
	if out := Summary(f); !strings.Contains(out, "| 16 | 2 | 16 each (2N outstanding: not used as the limit) | 7.5k [6.88k–9.38k] |") {
		t.Errorf("a schema 4 two-in-flight limit is not marked as no bound in:\n%s", out)
	}
	if txt := benchTxt(); strings.Contains(txt, "/split") || !strings.Contains(txt, "/producers=16/inflight=2 1\t") {
		t.Errorf("bench.txt's group-commit limit lines of a schema 4 run:\n%s", txt)
	}
}

// TestStageCPUTable: one row per profiled cell with stages, a column per
// stage that appears (in the engine's order, other last), µs/msg and %,
// and the total; a profile without stages gets no row.
func TestStageCPUTable(t *testing.T) {
	f := baseRun()
	f.Profiles = []runfile.ProfileSummary{
		{Cell: "throughput-mmap-1024-sync-p16", Kind: "cpu", Total: 100, CPUPerMsgNs: 20_000, Messages: 1000, Stages: []runfile.StageCost{
			{Stage: "append", Pct: 10, UsPerMsg: 2}, {Stage: "flush", Pct: 50, UsPerMsg: 10}, {Stage: "other", Pct: 40, UsPerMsg: 8}}},
		{Cell: "throughput-mmap-1024-sync-p16", Kind: "heap", Total: 100},
		{Cell: "throughput-uring-1024-async-p16", Kind: "cpu", Total: 100, Stages: []runfile.StageCost{
			{Stage: "wait", Pct: 25}, {Stage: "other", Pct: 75}}},
		{Cell: "throughput-transient-1024-async-p16", Kind: "cpu", Total: 100},
	}
	var b strings.Builder
	writeStageCPU(&b, f)
	out := b.String()
	wantAll(t, out,
		"| cell | samples | append | wait | flush | other | total |",
		"| throughput-mmap-1024-sync-p16 | — | 2 (10%) | — | 10 (50%) | 8 (40%) | 20 (100%) |",
		"| throughput-uring-1024-async-p16 | — | — | — (25%) | — | — (75%) | — (100%) |",
	)
	if strings.Contains(out, "transient") {
		t.Errorf("a profile without stages has a row:\n%s", out)
	}
	if strings.Contains(out, "few (") {
		t.Errorf("a run file without sample counts shows stages as few:\n%s", out)
	}
}

// TestStageCPUTableShowsFewSamples: with the profile's sample counts
// recorded, a stage of fewer than runfile.MinStageSamples samples shows
// its count instead of a figure (31 samples split eight ways are not
// µs/msg to three digits); the others keep theirs.
func TestStageCPUTableShowsFewSamples(t *testing.T) {
	f := baseRun()
	f.Profiles = []runfile.ProfileSummary{
		{Cell: "throughput-mmap-1024-sync-p16", Kind: "cpu", Total: 310e6, Samples: 31, CPUPerMsgNs: 20_000, Messages: 1000, Stages: []runfile.StageCost{
			{Stage: "append", Pct: 9.68, UsPerMsg: 1.94, Samples: 3}, {Stage: "flush", Pct: 58.1, UsPerMsg: 11.6, Samples: 18},
			{Stage: "other", Pct: 32.3, UsPerMsg: 6.45, Samples: 10}}},
	}
	var b strings.Builder
	writeStageCPU(&b, f)
	out := b.String()
	wantAll(t, out,
		"| throughput-mmap-1024-sync-p16 | 31 | few (3) | 11.6 (58.1%) | 6.45 (32.3%) | 20 (100%) |",
		fmt.Sprintf("fewer than %d shows *few (k)*", runfile.MinStageSamples),
	)
}

// TestMachineLineSaysTHP: the machine line names the kernel's transparent
// huge page setting when the run recorded it (the store's staging memory
// and async mmap segments depend on it), and says nothing of it for a run
// file from before it was recorded.
func TestMachineLineSaysTHP(t *testing.T) {
	f := baseRun()
	f.Machine.Clocksource, f.Machine.THP = "tsc", "madvise"
	var b strings.Builder
	writeContext(&b, f)
	if !strings.Contains(b.String(), "clocksource tsc, transparent huge pages madvise, commit") {
		t.Errorf("no THP setting on the machine line:\n%s", b.String())
	}
	f.Machine.THP = ""
	b.Reset()
	writeContext(&b, f)
	if strings.Contains(b.String(), "huge pages") {
		t.Errorf("a run without the setting names one:\n%s", b.String())
	}
	// Free page reporting is said where it was seen, and only there.
	if strings.Contains(b.String(), "free page reporting") {
		t.Errorf("a run without free page reporting speaks of it:\n%s", b.String())
	}
	f.Machine.FreePageReporting = true
	b.Reset()
	writeContext(&b, f)
	if !strings.Contains(b.String(), "clocksource tsc, free page reporting to the host") {
		t.Errorf("no free page reporting on the machine line:\n%s", b.String())
	}
	// Idle vCPUs: said for a haltpoll guest only.
	if strings.Contains(b.String(), "idle vCPU") {
		t.Errorf("a run without a cpuidle record speaks of idle vCPUs:\n%s", b.String())
	}
	for _, tc := range []struct{ driver, poll, want string }{
		{"haltpoll", "0", "the host: docs/harness.md), idle vCPUs halt at once (cpuidle haltpoll, guest_halt_poll_ns 0: every wake-up of an idle vCPU waits for the host: docs/harness.md), commit"},
		{"haltpoll", "200000", ", idle vCPUs poll up to 200µs before they halt (cpuidle haltpoll: docs/harness.md), commit"},
		{"intel_idle", "", "the host: docs/harness.md), commit"},
	} {
		f.Machine.CPUIdleDriver, f.Machine.GuestHaltPollNs = tc.driver, tc.poll
		b.Reset()
		writeContext(&b, f)
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("%s, %q: missing %q in:\n%s", tc.driver, tc.poll, tc.want, b.String())
		}
	}
}

// TestSummaryNamesTheAgedStore: with --recycle-segments the store line
// says mqstore's cells ran on an aged store, with the range of segments
// the measured windows took from the pool, and which peers ran on a
// recycled WAL (those whose options say so) and which on new files;
// without it nothing speaks of aging.
func TestSummaryNamesTheAgedStore(t *testing.T) {
	f := fakeRun()
	if out := Summary(f); strings.Contains(out, "aged") || strings.Contains(out, "--recycle-segments") {
		t.Errorf("a run of fresh stores speaks of aging:\n%s", out)
	}
	f.Config.Store.RecycleSegments = 4
	for i := range f.Cells {
		for j := range f.Cells[i].Repeats {
			r := &f.Cells[i].Repeats[j]
			r.Store = &runfile.StoreCounters{SegmentsRecycled: uint64(2 + j%2), SegmentsFallocated: uint64(j % 2)}
			if r.Warm {
				r.Store.SegmentsRecycled = 9 // not a measured window
			}
		}
	}
	Analyze(f)
	out := Summary(f)
	wantAll(t, out,
		"- mqstore's throughput, latency and e2e cells ran on an aged store: 4 segments retired by retention before the window, reused as new segments (--recycle-segments 4)",
		"A measured window took 2–3 segments from the pool and made 0–1 new",
		"Peers: `nats` wrote new files, not aged",
	)
	if strings.Contains(out, "recycled WAL") {
		t.Errorf("no peer reported a recycled log, yet:\n%s", out)
	}
	// pebble-wal on a recycled WAL (its options say so), nats fresh.
	wal := f.Peers[0]
	wal.Name, wal.Backend = "throughput-pebble-wal-1024-sync-p4", "pebble-wal"
	wal.Options = map[string]string{load.RecycledLogOption: "805306368 bytes requested: log 1 written, synced and closed, its file reused as log 2"}
	f.Peers = append(f.Peers, wal)
	f.Config.Store.SegmentSizeBytes = 192 << 20
	out = Summary(f)
	if want := "Peers: `pebble-wal` ran on a recycled WAL file of 4 × 192MiB, the retired segments' bytes: filled by its own writer and closed before the warm-up, " +
		"then renamed to the next log number and written over, as a running pebble reuses an obsolete WAL (run.json `peers[].options.recycledLog`); `nats` wrote new files, not aged"; !strings.Contains(out, want) {
		t.Errorf("missing %q in:\n%s", want, out)
	}
	// A peer that never reported its options is named neither way.
	silent := f.Peers[0]
	silent.Name, silent.Backend, silent.Options = "throughput-pebble-1024-sync-p4", "pebble", nil
	f.Peers = append(f.Peers, silent)
	if out := Summary(f); strings.Contains(out, "`pebble`") {
		t.Errorf("a peer without options is named:\n%s", out)
	}
	if strings.Contains(out, "consume and recovery") {
		t.Errorf("a run without consume or recovery cells speaks of them:\n%s", out)
	}
	f.Config.Workloads = []string{"throughput", "recovery"}
	if out := Summary(f); !strings.Contains(out, "the consume and recovery cells keep up to that many segments but fill a fresh store") {
		t.Errorf("the recovery cells' fresh stores are not named:\n%s", out)
	}
}

// TestLimitTailsWithFewSamplesAreBounds: a limit's percentile with fewer
// than MinSamplesAbove of a repeat's probes above it is shown as a bound.
func TestLimitTailsWithFewSamplesAreBounds(t *testing.T) {
	for _, tc := range []struct {
		count     string
		p99, p999 string
	}{
		{"300", "≥ 400µs", "≥ 900µs"},
		{"5000", "400µs", "≥ 900µs"},
		{"20000", "400µs", "900µs"},
		{"", "400µs", "900µs"}, // no count recorded: not marked
	} {
		f := baseRun()
		l := runfile.Limit{Name: runfile.LimitDeviceSync, Tool: "probe", Status: runfile.StatusOK, SizeBytes: 4096, Params: map[string]string{"count": tc.count}}
		l.Figures.MsgsPerSec, l.Figures.P50Ns, l.Figures.P99Ns, l.Figures.P999Ns = 5000, 200_000, 400_000, 900_000
		l.CILow, l.CIHigh = l.Figures, l.Figures
		f.Limits = []runfile.Limit{l}
		var b strings.Builder
		writeLimits(&b, f)
		if want := "| 200µs | " + tc.p99 + " | " + tc.p999 + " |"; !strings.Contains(b.String(), want) {
			t.Errorf("count %q: missing %q in:\n%s", tc.count, want, b.String())
		}
	}
}

// TestDurabilityRowPerPolicy: in a policy sweep each policy's cells get
// their own durability row, named after the system, since the backends'
// statements carry the intervals the cells ran with.
func TestDurabilityRowPerPolicy(t *testing.T) {
	f := baseRun()
	var cells []runfile.Cell
	for _, p := range []string{"fi=50ms", "fi=500ms"} {
		c := known("throughput-transient-1024-async-p16-"+p, "throughput", "transient", "async", 16, map[string][3]float64{"msgsPerSec": {40e3, 38e3, 42e3}})
		c.Policy = p
		c.Durability = &runfile.Durability{Ack: "in memory", ProcessCrash: "nothing", PowerLoss: "up to " + strings.TrimPrefix(p, "fi="), Mechanism: "flush every " + strings.TrimPrefix(p, "fi=")}
		cells = append(cells, c)
	}
	f.Cells = cells
	var b strings.Builder
	writeDurability(&b, f)
	for _, want := range []string{"| transient · fi=50ms | async | in memory | nothing | up to 50ms |", "| transient · fi=500ms | async | in memory | nothing | up to 500ms |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
}

// TestRecoveryScannedIsTheMeasuredRepeats: the CommitLog a recovery cell
// scanned is its measured repeats' median (with their range), not the
// first repeat's, and never the warm one's.
func TestRecoveryScannedIsTheMeasuredRepeats(t *testing.T) {
	rep := func(warm bool, mb int64) runfile.Repeat {
		r := runfile.Repeat{Warm: warm}
		r.Result.PayloadBytes = mb * 1e6
		return r
	}
	for _, tc := range []struct {
		repeats []runfile.Repeat
		want    string
	}{
		{[]runfile.Repeat{rep(true, 999), rep(false, 100), rep(false, 120), rep(false, 110)}, "110 MB [100–120]"},
		{[]runfile.Repeat{rep(false, 100), rep(false, 100)}, "100 MB"},
		{[]runfile.Repeat{rep(true, 100)}, "—"},
	} {
		if got := scannedText(&runfile.Cell{Repeats: tc.repeats}); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.repeats, got, tc.want)
		}
	}
}

// TestCPUText: no CPU reading shows —, and a remoting peer's figure from
// before the peer counted its broker says it is the client's alone.
func TestCPUText(t *testing.T) {
	for _, tc := range []struct {
		c    runfile.Cell
		want string
	}{
		{runfile.Cell{}, "—"},
		{runfile.Cell{Figures: runfile.Figures{CPUSecPerGiB: 3.5}}, "3.5"},
		{runfile.Cell{Peer: true, Backend: "remoting", Options: map[string]string{"queues": "8"}, Figures: runfile.Figures{CPUSecPerGiB: 79.2}}, "79.2 (client only)"},
		{runfile.Cell{Peer: true, Backend: "remoting", Options: map[string]string{"cpu": "this process's and the broker's"}, Figures: runfile.Figures{CPUSecPerGiB: 90}}, "90"},
	} {
		if got := cpuText(&tc.c); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.c, got, tc.want)
		}
	}
}

// TestPressureGateStraddlingIsUndetermined: the gate passes a tail under
// pressure only when the ratio's interval is at or below 2×, excludes it
// only when above, and calls an interval across 2× undetermined — a
// median of 2.73× is never a pass.
func TestPressureGateStraddlingIsUndetermined(t *testing.T) {
	cell := func(name, pressure string, p99, lo, hi int64) *runfile.Cell {
		c := &runfile.Cell{Name: name, Workload: "latency", Pressure: pressure, Status: runfile.StatusOK, Tail: &runfile.Tail{Count: 100000}}
		for _, n := range []string{"p999Ns", "p99Ns"} {
			c.Tail.Points = append(c.Tail.Points, runfile.TailPoint{Name: n, ValueNs: p99, LoNs: lo, HiNs: hi, Above: 100})
		}
		return c
	}
	base := cell("base", "none", 1_000_000, 1_000_000, 1_000_000)
	for _, tc := range []struct {
		p99, lo, hi int64
		want        string
	}{
		{2_730_000, 1_730_000, 6_260_000, "undetermined"},
		{1_500_000, 1_200_000, 1_900_000, "pass"},
		{1_900_000, 1_500_000, 2_000_000, "pass"},
		{3_000_000, 2_500_000, 4_000_000, "exclude"},
		{1_900_000, 1_500_000, 2_100_000, "undetermined"},
	} {
		if got, r, _ := gate(cell("p", "dirty", tc.p99, tc.lo, tc.hi), base); got != tc.want {
			t.Errorf("ratio %.2f [%.2f–%.2f]: %s, want %s", r.Median, r.Low, r.High, got, tc.want)
		}
	}
}

// TestFloorTableNamesItsTarget: with floors on two targets the floor
// table says which is which; with one it has no target column.
func TestFloorTableNamesItsTarget(t *testing.T) {
	f := baseRun()
	f.Floors = []runfile.Floor{{RatePerSec: 1000, Pressure: "none", Target: "vda", Status: runfile.StatusOK, P50Ns: 1000},
		{RatePerSec: 1000, Pressure: "none", Target: "hdd", Status: runfile.StatusOK, P50Ns: 2000}}
	var b strings.Builder
	writeFloors(&b, f)
	if !strings.Contains(b.String(), "| target |") || !strings.Contains(b.String(), "| vda |") || !strings.Contains(b.String(), "| hdd |") {
		t.Errorf("two targets' floors:\n%s", b.String())
	}
	f.Floors = f.Floors[:1]
	b.Reset()
	writeFloors(&b, f)
	if strings.Contains(b.String(), "| target |") {
		t.Errorf("one target's floors:\n%s", b.String())
	}
}

// TestCompareSaysWhatDiffers: comparing runs whose store options differ
// says which, with both values; comparing runs with no cell in common
// says nothing was compared.
func TestCompareSaysWhatDiffers(t *testing.T) {
	a, b := baseRun(), baseRun()
	a.Cells = []runfile.Cell{known("throughput-mmap-1024-sync-p16", "throughput", "mmap", "sync", 16, map[string][3]float64{"msgsPerSec": {40e3, 38e3, 42e3}})}
	b.Cells = []runfile.Cell{known("throughput-mmap-1024-sync-p16", "throughput", "mmap", "sync", 16, map[string][3]float64{"msgsPerSec": {41e3, 39e3, 43e3}})}
	a.Config.Store.SegmentSizeBytes, b.Config.Store.SegmentSizeBytes = 64<<20, 256<<20
	b.Config.Store.RecycleSegments = 20
	out := Compare(a, b)
	if !strings.Contains(out, "**The runs' store options differ**") || !strings.Contains(out, "segmentSizeBytes A 67108864, B 268435456") ||
		!strings.Contains(out, "recycleSegments A (default), B 20") || strings.Contains(out, "No cell of A") {
		t.Errorf("store options differing:\n%s", out)
	}
	b.Cells[0].Producers, b.Cells[0].Name = 64, "throughput-mmap-1024-sync-p64"
	b.Config.Store = a.Config.Store
	if out := Compare(a, b); !strings.Contains(out, "**No cell of A has a counterpart in B**") || strings.Contains(out, "store options differ") {
		t.Errorf("no cell in common:\n%s", out)
	}
}

// TestSummarySaysHowZerosWereWritten: a backend's settings line says how
// the zeros of the segments it pre-wrote in measured windows were written
// (by the device, with O_DIRECT writes, through the page cache), counting
// no warm repeat, and says nothing of zeros where none were written.
func TestSummarySaysHowZerosWereWritten(t *testing.T) {
	f := fakeRun()
	set := func(i int, prewrite string, counters func(r *runfile.StoreCounters)) {
		c := &f.Cells[i]
		c.Options = map[string]string{"PrewriteSegments": prewrite}
		for j := range c.Repeats {
			r := &c.Repeats[j]
			r.Store = &runfile.StoreCounters{}
			if r.Warm {
				r.Store.ZerosByDevice = 7 // not a measured window
				continue
			}
			counters(r.Store)
		}
	}
	set(0, "off", func(*runfile.StoreCounters) {})                                         // mmap async
	set(3, "auto", func(r *runfile.StoreCounters) { r.ZerosCached = 1 })                   // mmap sync
	set(4, "on", func(r *runfile.StoreCounters) { r.ZerosDirect, r.ZerosByDevice = 2, 0 }) // uring sync
	Analyze(f)
	out := Summary(f)
	wantAll(t, out,
		"- mmap (async flush): engine PrewriteSegments off\n",
		"- mmap (sync flush): engine PrewriteSegments auto; the segments pre-written in measured windows: 5 with zeros through the page cache\n",
		"- uring (sync flush): engine PrewriteSegments on; the segments pre-written in measured windows: 10 with O_DIRECT writes of zeros (the kernel, the file system or the device has no FALLOC_FL_WRITE_ZEROES)\n",
	)
	for i := range f.Cells {
		if c := &f.Cells[i]; c.Backend == "uring" && c.Flush == "sync" && c.Workload == "throughput" {
			c.Repeats[1].Store.ZerosByDevice = 3 // Repeats[0] is mkCell's warm one
		}
	}
	if out := Summary(f); !strings.Contains(out, "the segments pre-written in measured windows: 3 by the device (fallocate FALLOC_FL_WRITE_ZEROES), 10 with O_DIRECT writes of zeros\n") {
		t.Errorf("zeros by the device not said:\n%s", out)
	}
}

// wantAll fails t for each of wants that out lacks.
func wantAll(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
