package report

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/mqstore/mqstore/backends" // the registry says which backends are volatile (kept out of the recommendation)
	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"golang.org/x/perf/benchfmt"
	"gonum.org/v1/plot"
)

func histogramOf(us ...int) *load.Histogram {
	h := load.NewHistogram()
	for _, v := range us {
		h.Record(time.Duration(v) * time.Microsecond)
	}
	return h
}

// mkCell builds a cell with one measured repeat per value of each figure
// list (plus a warm one), summarized like the harness does.
func mkCell(name, workload, backend, flush string, msgs, durable []float64, p999us []int) runfile.Cell {
	c := runfile.Cell{Name: name, Workload: workload, Backend: backend, SizeBytes: 1024, Flush: flush, Pressure: "none", Target: "vda", Status: runfile.StatusOK,
		Producers: 4, Options: map[string]string{"FlushInterval": "500ms"}}
	if workload == "latency" {
		c.Producers, c.RatePerSec, c.InFlight = 0, 1000, 8
	}
	c.Repeats = append(c.Repeats, runfile.Repeat{Index: 0, Warm: true, Status: runfile.StatusOK})
	var fs []runfile.Figures
	for i := range msgs {
		res := load.Result{Workload: load.Workload(workload), Messages: int64(msgs[i]), PayloadBytes: int64(msgs[i]) * 1024, ElapsedNs: 1e9, WindowNs: 1e9,
			Service: histogramOf(10, 20, p999us[i])}
		if workload == "latency" {
			// The service time is a quarter of the latency: the rest is
			// the wait for a worker and the generator's wake-up.
			res.Latency, res.Arrivals, res.DispatchLag = histogramOf(15, 25, p999us[i]), int64(msgs[i]), histogramOf(1)
			res.Service = histogramOf(4, 6, p999us[i]/4)
		}
		written := int64(msgs[i] * 1100)
		res.Durability = &load.DurabilityResult{WrittenEndBytes: written, DurableEndBytes: int64(durable[i] * 1e6), WrittenAfterDrainBytes: written, DurableAfterDrainBytes: written, DrainNs: 1e6}
		rep := runfile.Repeat{Index: i + 1, Status: runfile.StatusOK, Result: res, Figures: runfile.FiguresOf(&res, nil)}
		c.Repeats = append(c.Repeats, rep)
		fs = append(fs, rep.Figures)
	}
	s := runfile.Summarize(fs)
	c.Figures, c.CILow, c.CIHigh, c.Min, c.Max, c.CILevel = s.Median, s.CILow, s.CIHigh, s.Min, s.Max, s.CILevel
	ok := c.BacklogShare <= load.SustainedBacklogShare
	c.Sustained = &ok
	return c
}

// fakeRun is a run with known figures: mmap async clearly fastest, transient
// async tied with it? no — transient async not sustained; uring async tied
// with mmap; two sync backends whose intervals overlap; a peer; a floor that
// makes one latency cell generator-bound; an A/A twin; limits.
func fakeRun() *runfile.RunFile {
	f := &runfile.RunFile{Schema: runfile.SchemaVersion, ID: "20250101-000000-test", Command: "mqbench run",
		StartedAt: time.Unix(1735689600, 0).UTC(), FinishedAt: time.Unix(1735689660, 0).UTC(),
		Machine: runfile.Machine{Host: "test", OS: "linux", Arch: "amd64", CPUs: 2, Kernel: "6.1", GoVersion: "go1.26", Commit: "0123456789abcdef",
			VM: map[string]string{"vm.dirty_ratio": "20"}},
		Devices: []runfile.Device{{Dir: ".", Device: "vda", FSType: "ext4", Label: "vda", Kind: "virtual disk (virtio-blk)"}},
		Config:  runfile.Config{Flushes: []string{"async", "sync"}, Sizes: []int{1024}, Repeat: 5, Producers: []int{4}, Rates: []float64{1000}, Arrival: "poisson", InFlight: 8, Pressures: []string{"none"}},
		Plan:    runfile.Plan{WindowNs: 1e9, WindowWhy: "given with --duration"}}
	five := func(v float64) []float64 { return []float64{v * 0.98, v * 0.99, v, v * 1.01, v * 1.02} }
	p := []int{100, 110, 120, 130, 140}
	mmap := mkCell("throughput-mmap-1024-async-p4", "throughput", "mmap", "async", five(400e3), five(440), p)
	uring := mkCell("throughput-uring-1024-async-p4", "throughput", "uring", "async", five(395e3), five(435), p)
	transient := mkCell("throughput-transient-1024-async-p4", "throughput", "transient", "async", five(900e3), five(20), p)
	s1 := mkCell("throughput-mmap-1024-sync-p4", "throughput", "mmap", "sync", five(10e3), five(11), p)
	s2 := mkCell("throughput-uring-1024-sync-p4", "throughput", "uring", "sync", []float64{9.5e3, 9.9e3, 10.1e3, 10.3e3, 10.6e3}, []float64{10.4, 10.9, 11.1, 11.3, 11.7}, p)
	twin := mmap
	twin.Name, twin.TwinOf = "throughput-mmap-1024-async-p4-aa", mmap.Name
	latFast := mkCell("latency-mmap-1024-async-r1000", "latency", "mmap", "async", five(1000), five(1.1), []int{20, 21, 22, 23, 24})
	latSync := mkCell("latency-mmap-1024-sync-r1000", "latency", "mmap", "sync", five(1000), five(1.1), []int{2000, 2100, 2200, 2300, 2400})
	sat := mkCell("latency-uring-1024-sync-r1000", "latency", "uring", "sync", five(800), five(0.9), []int{50000, 51000, 52000, 53000, 54000})
	sat.Status, sat.Saturation = runfile.StatusSaturated, []string{"repeat 1: 80 of 1000 arrivals never started"}
	f.Cells = []runfile.Cell{mmap, uring, transient, s1, s2, twin, latFast, latSync, sat}
	peer := mkCell("throughput-nats-1024-async-p4", "throughput", "nats", "async", five(100e3), five(110), p)
	peer.Peer, peer.Label, peer.Durability = true, "nats-server v2.15.2 JetStream file store", &runfile.Durability{Ack: "after the PubAck", ProcessCrash: "nothing", PowerLoss: "up to the sync interval", Mechanism: "fsync every 2 min"}
	f.Peers = []runfile.Cell{peer}
	f.Floors = []runfile.Floor{{RatePerSec: 1000, Pressure: "none", Target: "vda", Status: runfile.StatusOK, P50Ns: 5000, P99Ns: 9000, P999Ns: 10_000}}
	seq := runfile.Limit{Name: runfile.LimitDeviceSeq, Target: "vda", Tool: "probe", SizeBytes: 1 << 20, Status: runfile.StatusOK}
	seq.Figures.MBPerSec, seq.CILow.MBPerSec, seq.CIHigh.MBPerSec = 1000, 900, 1100
	// A limit no rule relates a cell to: it is shown, and bounds nothing.
	faults := runfile.Limit{Name: "fault-ceiling", Target: "vda", Tool: "probe", SizeBytes: 4096, Status: runfile.StatusOK}
	faults.Figures.MBPerSec, faults.CILow.MBPerSec, faults.CIHigh.MBPerSec = 800, 800, 800
	durable := runfile.Limit{Name: runfile.LimitDeviceSeqDurable, Target: "vda", Tool: "probe", SizeBytes: 1 << 20, Status: runfile.StatusOK}
	durable.Figures.MBPerSec, durable.CILow.MBPerSec, durable.CIHigh.MBPerSec = 550, 500, 600
	f.Limits = []runfile.Limit{seq, durable, faults, {Name: runfile.LimitFioSeq, Status: runfile.StatusSkipped, Reason: "fio is not on PATH"}}
	return f
}

func find[T any](t *testing.T, xs []T, ok func(T) bool) T {
	t.Helper()
	for _, x := range xs {
		if ok(x) {
			return x
		}
	}
	var zero T
	t.Fatalf("not found in %+v", xs)
	return zero
}

func TestGeneratorBoundFromTheFloor(t *testing.T) {
	f := fakeRun()
	Analyze(f)
	// The floor's p99.9 is 10 µs: 22 µs < 30 µs is generator-bound, 2.2 ms is not.
	if c := f.Cells[6]; !c.GeneratorBound || c.FloorP999Ns != 10_000 {
		t.Errorf("%s: generatorBound %v floor %d, want true, 10µs", c.Name, c.GeneratorBound, c.FloorP999Ns)
	}
	if c := f.Cells[7]; c.GeneratorBound {
		t.Errorf("%s (p99.9 2.2 ms) called generator-bound", c.Name)
	}
	for _, r := range f.Ratios {
		if r.Cell == f.Cells[6].Name || r.Cell == f.Cells[8].Name {
			t.Errorf("a generator-bound or saturated cell has a ratio: %+v", r)
		}
	}
}

func TestRatiosOnKnownFigures(t *testing.T) {
	f := fakeRun()
	Analyze(f)
	// mmap durable 440 [431.2–448.8] ÷ device 1000 [900–1100].
	r := find(t, f.Ratios, func(r runfile.Ratio) bool {
		return r.Kind == "device" && r.Cell == "throughput-mmap-1024-async-p4" && r.Against == runfile.LimitDeviceSeq
	})
	if !near(r.Median, 0.44) || !near(r.Low, 431.2/1100) || !near(r.High, 448.8/900) {
		t.Errorf("device ratio %+v", r)
	}
	// ÷ what the device makes durable, 550 [500–600].
	r = find(t, f.Ratios, func(r runfile.Ratio) bool {
		return r.Kind == "device" && r.Cell == "throughput-mmap-1024-async-p4" && r.Against == runfile.LimitDeviceSeqDurable
	})
	if !near(r.Median, 440.0/550) || !near(r.Low, 431.2/600) || !near(r.High, 448.8/500) || !strings.Contains(r.Note, "fdatasync") {
		t.Errorf("durable device ratio %+v", r)
	}
	// Only the limits a rule names give ratios: the run's fault-ceiling is
	// in the limits table and related to no cell.
	for _, r := range f.Ratios {
		if r.Against == "fault-ceiling" {
			t.Errorf("a ratio against a limit no rule names: %+v", r)
		}
	}
	var b strings.Builder
	writeLimits(&b, f)
	if !strings.Contains(b.String(), "| fault-ceiling | probe | 4KiB | 800 |") {
		t.Errorf("the fault-ceiling limit is not in the limits table:\n%s", b.String())
	}
	r = find(t, f.Ratios, func(r runfile.Ratio) bool { return r.Kind == "peer" && r.Figure == "msgsPerSec" })
	if !near(r.Median, 4) || !near(r.Low, 392e3/102e3) {
		t.Errorf("peer ratio %+v", r)
	}
}

func near(a, b float64) bool { return a-b < 1e-6*max(1, b) && b-a < 1e-6*max(1, b) }

func TestAAComparison(t *testing.T) {
	f := fakeRun()
	Analyze(f)
	if len(f.AA) != 3 {
		t.Fatalf("A/A comparisons %+v", f.AA)
	}
	for _, c := range f.AA {
		if c.Different {
			t.Errorf("identical twin called different on %s", c.Figure)
		}
	}
	// A twin whose repeats all moved up by half is called different.
	f.Cells[5].Repeats = slices.Clone(f.Cells[5].Repeats) // the twin shares its original's
	for i := range f.Cells[5].Repeats {
		f.Cells[5].Repeats[i].Figures.MsgsPerSec *= 1.5
	}
	f.Cells[5].Figures.MsgsPerSec *= 1.5
	f.Cells[5].CILow.MsgsPerSec *= 1.5
	f.Cells[5].CIHigh.MsgsPerSec *= 1.5
	Analyze(f)
	if c := find(t, f.AA, func(c runfile.Comparison) bool { return c.Figure == "msgsPerSec" }); !c.Different || c.P > 0.01 || c.N != 5 {
		t.Errorf("a 1.5× twin not called different: %+v", c)
	}
	// The sentence claims no more than the test: its power at n = 5.
	var b strings.Builder
	f.Cells[5].Repeats = f.Cells[0].Repeats
	Analyze(f)
	writeAA(&b, f)
	if s := b.String(); !strings.Contains(s, "With 5 repeats a side the smallest p it can reach is 0.008") || !strings.Contains(s, "says nothing about smaller ones") {
		t.Errorf("A/A sentence:\n%s", s)
	}
}

func TestRecommendation(t *testing.T) {
	f := fakeRun()
	Analyze(f)
	rec := func(d string) runfile.Recommendation {
		return find(t, f.Recommendations, func(r runfile.Recommendation) bool { return r.Durability == d })
	}
	// async: mmap (440) and uring (435) overlap: no significant difference;
	// transient accepted the most but is not sustained and never picked.
	a := rec("async")
	if a.Pick != "" || strings.Join(a.Tied, ",") != "mmap async,uring async" || !strings.Contains(a.Text, "no significant difference") {
		t.Errorf("async: %+v", a)
	}
	if !strings.Contains(strings.Join(a.Excluded, " "), "transient async: not sustained") {
		t.Errorf("transient not excluded as unsustained: %v", a.Excluded)
	}
	// sync: uring's pressure check is not run (no pressure), both sustained,
	// intervals overlap.
	if s := rec("sync"); !strings.Contains(s.Text, "no significant difference") {
		t.Errorf("sync: %+v", s)
	}
	// any: the async pair separates from the sync cells; still tied with
	// each other: no pick.
	if an := rec("any"); an.Pick != "" || len(an.Tied) != 2 {
		t.Errorf("any: %+v", an)
	}
	// uring async clearly slower: mmap is picked alone, significantly.
	for i := range f.Cells[1].Repeats {
		f.Cells[1].Repeats[i].Figures.DurableMBps /= 2
	}
	f.Cells[1].DurableMBps, f.Cells[1].CILow.DurableMBps, f.Cells[1].CIHigh.DurableMBps = 217, 213, 221
	Analyze(f)
	if a := rec("async"); a.Pick != "mmap async" || len(a.Tied) != 0 || !strings.Contains(a.Text, "significantly above the next, uring async") {
		t.Errorf("async after the change: %+v", a)
	}
}

// TestRecommendationUndeterminedSustain: a backend whose backlog interval
// straddles the 10 % bar is never picked alone, even when it is fastest.
func TestRecommendationUndeterminedSustain(t *testing.T) {
	f := fakeRun()
	tr := &f.Cells[2] // transient async: fastest
	tr.DurableMBps, tr.CILow.DurableMBps, tr.CIHigh.DurableMBps = 900, 880, 920
	tr.BacklogShare, tr.CILow.BacklogShare, tr.CIHigh.BacklogShare = 0.08, 0.05, 0.2
	yes := true
	tr.Sustained = &yes
	Analyze(f)
	a := find(t, f.Recommendations, func(r runfile.Recommendation) bool { return r.Durability == "async" })
	if a.Pick != "" || strings.Join(a.Tied, ",") != "transient async,mmap async" ||
		!strings.Contains(a.Text, "whether it sustains is undetermined") || !strings.Contains(a.Text, "of those fully determined, the best is mmap async") {
		t.Errorf("async with an undetermined fastest: %+v", a)
	}
	// Clearly sustained: picked alone.
	tr.CIHigh.BacklogShare = 0.09
	Analyze(f)
	a = find(t, f.Recommendations, func(r runfile.Recommendation) bool { return r.Durability == "async" })
	if a.Pick != "transient async" || len(a.Tied) != 0 || !strings.Contains(a.Text, "significantly above the next") {
		t.Errorf("async with a clearly sustained fastest: %+v", a)
	}
}

// spreadCell is an open-loop cell at 1000/s with 5 measured repeats of
// 1000 samples each, spread evenly over [baseUs, 2·baseUs) (p99 ≈ 1.99 ×
// baseUs, with 50 samples above it in the merged tail; p99.9 has 5 and is
// a bound), service time svc × the latency.
func spreadCell(name, backend, flush, pressure string, baseUs, svc float64) runfile.Cell {
	c := runfile.Cell{Name: name, Workload: "latency", Backend: backend, SizeBytes: 1024, Flush: flush, Pressure: pressure, Target: "vda",
		Status: runfile.StatusOK, RatePerSec: 1000, InFlight: 8}
	c.Repeats = append(c.Repeats, runfile.Repeat{Index: 0, Warm: true, Status: runfile.StatusOK})
	var fs []runfile.Figures
	for i := 1; i <= 5; i++ {
		lat, service := load.NewHistogram(), load.NewHistogram()
		for j := range 1000 {
			d := time.Duration(baseUs * (1 + float64(j)/1000) * 1e3)
			lat.Record(d)
			service.Record(time.Duration(svc * float64(d)))
		}
		res := load.Result{Workload: load.Latency, Messages: 1000, Arrivals: 1000, PayloadBytes: 1024e3, ElapsedNs: 1e9, WindowNs: 1e9,
			Latency: lat, Service: service, DispatchLag: histogramOf(1)}
		rep := runfile.Repeat{Index: i, Status: runfile.StatusOK, Result: res, Figures: runfile.FiguresOf(&res, nil)}
		c.Repeats = append(c.Repeats, rep)
		fs = append(fs, rep.Figures)
	}
	sm := runfile.Summarize(fs)
	c.Figures, c.CILow, c.CIHigh, c.Min, c.Max, c.CILevel = sm.Median, sm.CILow, sm.CIHigh, sm.Min, sm.Max, sm.CILevel
	return c
}

func recOf(t *testing.T, f *runfile.RunFile, durability string) runfile.Recommendation {
	t.Helper()
	return find(t, f.Recommendations, func(r runfile.Recommendation) bool { return r.Durability == durability })
}

func TestRecommendationPressureRules(t *testing.T) {
	f := fakeRun()
	f.Config.Pressures = []string{"none", "dirty"}
	f.Cells[7] = spreadCell("latency-mmap-1024-sync-r1000", "mmap", "sync", "none", 2000, 0.5)
	// mmap sync at 1000/s under dirty pressure: saturated → excluded.
	p := spreadCell("latency-mmap-1024-sync-r1000-dirty", "mmap", "sync", "dirty", 2000, 0.5)
	p.Status = runfile.StatusSaturated
	f.Cells = append(f.Cells, p)
	Analyze(f)
	s := recOf(t, f, "sync")
	if s.Pick != "uring sync" || !strings.Contains(strings.Join(s.Excluded, " "), "mmap sync: saturated under dirty pressure at 1000 msgs/s") {
		t.Errorf("sync with mmap saturated under pressure: %+v", s)
	}
	// Instead 3× slower at the tail, clearly: excluded for the 2× bar, on
	// p99 (the merged p99.9 has 5 samples above it: a bound).
	f.Cells[len(f.Cells)-1] = spreadCell(p.Name, "mmap", "sync", "dirty", 6000, 0.5)
	Analyze(f)
	s = recOf(t, f, "sync")
	if !strings.Contains(strings.Join(s.Excluded, " "), "p99 under dirty pressure at 1000/s is 3 [2.99–3.01]× its unpressured p99 (above 2× at the run's confidence)") {
		t.Errorf("sync with mmap 3× slower under pressure: %+v", s)
	}
	// 1.2×: passes, and says so.
	f.Cells[len(f.Cells)-1] = spreadCell(p.Name, "mmap", "sync", "dirty", 2400, 0.5)
	Analyze(f)
	if s = recOf(t, f, "sync"); len(s.Excluded) != 0 || len(s.Tied) != 2 || strings.Contains(s.Text, "undetermined") {
		t.Errorf("sync with mmap 1.2× under pressure: %+v", s)
	}
}

// TestPressureGateAppliesToGeneratorBoundCells: a generator-bound
// unpressured tail bounds the store's from above, so the ratio it gives is
// a lower bound: 40× excludes; 1.5× cannot pass (undetermined).
func TestPressureGateAppliesToGeneratorBoundCells(t *testing.T) {
	f := fakeRun()
	f.Config.Pressures = []string{"none", "dirty"}
	f.Floors[0].P999Ns = 20_000
	// Latency p99.9 ≈ 40 µs < 3 × 20 µs, service ≈ 4 µs: generator-bound.
	f.Cells[7] = spreadCell("latency-mmap-1024-sync-r1000", "mmap", "sync", "none", 20, 0.1)
	f.Cells = append(f.Cells, spreadCell("latency-mmap-1024-sync-r1000-dirty", "mmap", "sync", "dirty", 800, 0.5))
	Analyze(f)
	if !f.Cells[7].GeneratorBound {
		t.Fatalf("the unpressured cell is not generator-bound: tail %+v floor %d", f.Cells[7].Tail.Point("p999Ns"), f.Cells[7].FloorP999Ns)
	}
	s := recOf(t, f, "sync")
	if !strings.Contains(strings.Join(s.Excluded, " "), "mmap sync: p99 under dirty pressure at 1000/s is 40 [39.9–40.1]×") {
		t.Errorf("a 40× tail under pressure over a generator-bound one is not excluded: %+v", s)
	}
	f.Cells[len(f.Cells)-1] = spreadCell("latency-mmap-1024-sync-r1000-dirty", "mmap", "sync", "dirty", 30, 0.1)
	Analyze(f)
	s = recOf(t, f, "sync")
	if len(s.Excluded) != 0 || !strings.Contains(s.Text, "the pressure gate is undetermined") || strings.Contains(s.Text, "×unpressured") {
		t.Errorf("1.5× over a generator-bound tail: %+v", s)
	}
}

// TestGeneratorBoundNeedsTheServiceTail: a latency tail within 3× the
// floor's is still the store's when its service time alone exceeds the
// floor's tail.
func TestGeneratorBoundNeedsTheServiceTail(t *testing.T) {
	f := fakeRun()
	f.Floors[0].P999Ns = 20_000
	f.Cells[7] = spreadCell("latency-mmap-1024-sync-r1000", "mmap", "sync", "none", 20, 1) // service p99.9 ≈ 40 µs > 20 µs
	f.Cells[6] = spreadCell("latency-mmap-1024-async-r1000", "mmap", "async", "none", 20, 0.1)
	Analyze(f)
	if f.Cells[7].GeneratorBound {
		t.Error("a cell whose service-time p99.9 exceeds the floor's p99.9 is called generator-bound")
	}
	if !f.Cells[6].GeneratorBound {
		t.Error("a cell whose service time is within the floor's tail is not generator-bound")
	}
}

// TestSaturatedUnpressuredCellKeepsTheGate: an unpressured cell saturated
// at a rate does not skip the gate at that rate: its tail is a lower
// bound, so 3× under pressure is undetermined, never silently passed.
func TestSaturatedUnpressuredCellKeepsTheGate(t *testing.T) {
	f := fakeRun()
	f.Config.Pressures = []string{"none", "dirty"}
	f.Cells[7] = spreadCell("latency-mmap-1024-sync-r1000", "mmap", "sync", "none", 2000, 0.5)
	f.Cells[7].Status = runfile.StatusSaturated
	f.Cells = append(f.Cells, spreadCell("latency-mmap-1024-sync-r1000-dirty", "mmap", "sync", "dirty", 6000, 0.5))
	Analyze(f)
	s := recOf(t, f, "sync")
	if !strings.Contains(s.Text, "mmap sync") || !strings.Contains(s.Text, "the pressure gate is undetermined (dirty pressure at 1000/s: p99 3 [2.99–3.01]× unpressured") ||
		!strings.Contains(s.Text, "none saturated") {
		t.Errorf("a saturated unpressured cell skipped the gate: %+v", s)
	}
}

// TestAnyPrefersTheDurableOnATie: when an acknowledgement may mean in
// memory, an async policy no faster than a sync one is set aside — the
// sync one acknowledges only what is durable at no measurable cost.
func TestAnyPrefersTheDurableOnATie(t *testing.T) {
	f := fakeRun()
	s1 := &f.Cells[3] // mmap sync: as fast as mmap async
	s1.DurableMBps, s1.CILow.DurableMBps, s1.CIHigh.DurableMBps = 438, 428, 450
	Analyze(f)
	an := recOf(t, f, "any")
	if an.Pick != "mmap sync" || !strings.Contains(an.Text, "set aside: mmap async (no faster than mmap sync") {
		t.Errorf("any with sync as fast as async: %+v", an)
	}
	// async clearly faster: it stays, and is picked.
	s1.DurableMBps, s1.CILow.DurableMBps, s1.CIHigh.DurableMBps = 200, 190, 210
	f.Cells[1].DurableMBps, f.Cells[1].CILow.DurableMBps, f.Cells[1].CIHigh.DurableMBps = 217, 213, 221
	Analyze(f)
	if an = recOf(t, f, "any"); an.Pick != "mmap async" {
		t.Errorf("any with async clearly faster: %+v", an)
	}
}

// TestEmulatedDeviceWithoutSeeksRecommendsNothing: an emulation that is a
// bandwidth and IOPS limit does not stand for a rotating disk: no cell on
// it is recommended, sync included.
func TestEmulatedDeviceWithoutSeeksRecommendsNothing(t *testing.T) {
	f := fakeRun()
	f.Devices[0].Emulated, f.Devices[0].BufferedWritebackThrottled = true, true
	Analyze(f)
	for _, r := range f.Recommendations {
		if r.Pick != "" || len(r.Tied) != 0 || !strings.Contains(strings.Join(r.Excluded, " "), "models no seek") {
			t.Errorf("%s on an emulated device without seeks: %+v", r.Durability, r)
		}
	}
	f.Devices[0].ModelsSeeks = true
	Analyze(f)
	if s := recOf(t, f, "sync"); len(s.Tied) == 0 {
		t.Errorf("sync on an emulated device that models seeks: %+v", s)
	}
}

func TestReportRegeneratesIdenticalFiles(t *testing.T) {
	dir := t.TempDir()
	f := fakeRun()
	if err := WriteOutputs(dir, f); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(filepath.Join(dir, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	bench1, _ := os.ReadFile(filepath.Join(dir, "bench.txt"))
	for _, name := range []string{"latency-async-r1000.png", "latency-vs-rate-async.png", "throughput-async.png", "throughput-mmap-1024-async-p4.hgrm", "run.json.gz"} {
		if name == "latency-vs-rate-async.png" {
			continue // one rate: no curve to draw
		}
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", name, err)
		}
	}
	for _, name := range []string{"summary.md", "bench.txt", "throughput-async.png"} {
		os.Remove(filepath.Join(dir, name))
	}
	if _, err := Report(dir); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(filepath.Join(dir, "summary.md"))
	bench2, _ := os.ReadFile(filepath.Join(dir, "bench.txt"))
	if !bytes.Equal(first, second) || !bytes.Equal(bench1, bench2) {
		t.Fatal("report did not regenerate an identical summary.md and bench.txt")
	}
	if _, err := os.Stat(filepath.Join(dir, "throughput-async.png")); err != nil {
		t.Error("report did not redraw the plots")
	}
	s := string(first)
	for _, want := range []string{"## What to run", "no significant difference between mmap async", "## A/A check", "no significant difference ✓",
		"## Throughput (closed loop)", "durable MB/s", "**no**", "† generator-bound", "≥ 54ms", "## Durability: what an acknowledgement means",
		"nats (peer: nats-server v2.15.2 JetStream file store)", "fio-seq-write`: **skipped**", "store ÷ device"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
}

func TestBenchTxtParsesWithBenchfmt(t *testing.T) {
	f := fakeRun()
	for i := range f.Cells {
		if c := &f.Cells[i]; c.Name == "throughput-mmap-1024-async-p4" {
			for j := range c.Repeats {
				c.Repeats[j].Figures.FlushBusyShare, c.Repeats[j].Figures.FlushMeanNs = 0.8, 300_000
			}
		}
	}
	Analyze(f)
	var buf bytes.Buffer
	if err := WriteBenchTxt(&buf, f); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	r := benchfmt.NewReader(&buf, "bench.txt")
	results := map[string][]*benchfmt.Result{}
	for r.Scan() {
		switch rec := r.Result().(type) {
		case *benchfmt.Result:
			results[string(rec.Name.Full())] = append(results[string(rec.Name.Full())], rec.Clone())
		case *benchfmt.SyntaxError:
			t.Errorf("benchfmt: %v", rec)
		}
	}
	thr := results["MQBench/workload=throughput/backend=mmap/size=1024/flush=async/pressure=none/producers=4"]
	if len(thr) != 5 {
		t.Fatalf("throughput lines %d, want one per measured repeat (5, the warm one left out)", len(thr))
	}
	if v, ok := thr[2].Value("durable-B/s"); !ok || !near(v, 440e6) {
		t.Errorf("durable MB/s %v %v", v, ok)
	}
	if v, ok := thr[2].Value("flush-busy"); !ok || !near(v, 0.8) {
		t.Errorf("flush-busy %v %v", v, ok)
	}
	if v, ok := thr[2].Value("flush-mean-sec"); !ok || !near(v, 300e-6) {
		t.Errorf("flush-mean %v %v (units %v)", v, ok, thr[2].Values)
	}
	for name, rs := range results { // cells without the figure have no such value
		if _, ok := rs[0].Value("flush-busy"); ok && !strings.Contains(name, "producers=4") {
			t.Errorf("%s has a flush-busy value", name)
		}
	}
	for name := range results {
		if strings.Contains(name, "backend=uring/size=1024/flush=sync/pressure=none/rate") || strings.Contains(name, "latency-mmap-1024-async") {
			t.Errorf("a saturated or generator-bound cell is a benchmark line: %s", name)
		}
	}
	if !strings.Contains(text, "# latency-uring-1024-sync-r1000 saturated") || !strings.Contains(text, "# latency-mmap-1024-async-r1000 generator-bound") {
		t.Errorf("bench.txt lacks the comments for the saturated and generator-bound cells:\n%s", text)
	}
}

func TestCompareSaysNoSignificantDifference(t *testing.T) {
	a, b := fakeRun(), fakeRun()
	Analyze(a)
	Analyze(b)
	out := Compare(a, b)
	if !strings.Contains(out, "| throughput-mmap-1024-async-p4 | msgsPerSec | 400k [392k–408k] | 400k [392k–408k] | 1× | no significant difference |") {
		t.Errorf("identical runs:\n%s", out)
	}
	if !strings.Contains(out, "not compared: A is saturated, B is saturated") || !strings.Contains(out, "A is generator-bound") {
		t.Errorf("saturated / generator-bound cells compared:\n%s", out)
	}
	// B 10× faster: a separated verdict.
	for _, iv := range []*runfile.Figures{&b.Cells[0].Figures, &b.Cells[0].CILow, &b.Cells[0].CIHigh} {
		iv.MsgsPerSec *= 10
	}
	if out := Compare(a, b); !strings.Contains(out, "| 10× | B better (intervals separate) |") {
		t.Errorf("10× faster B:\n%s", out)
	}
	// B ran its latency cells at another rate: not comparable.
	b.Cells[7].RatePerSec = 1100
	if out := Compare(a, b); !strings.Contains(out, "A at 1k/s, B at 1.1k/s) | | | | | not comparable") {
		t.Errorf("different rates:\n%s", out)
	}
	// A two-in-flight group-commit limit of a schema 4 run (N records in
	// each writer) is not compared with one of schema 5 (N split); the
	// one-in-flight limits are.
	gc := func(inFlight int) runfile.Limit {
		l := runfile.Limit{Name: runfile.LimitGroupCommit, Status: runfile.StatusOK, SizeBytes: 1024, RecordBytes: 1125, Producers: 16, InFlight: inFlight, CILevel: 0.9}
		l.Figures.P50Ns, l.CILow.P50Ns, l.CIHigh.P50Ns = 200_000, 190_000, 210_000
		return l
	}
	a.Limits, b.Limits = []runfile.Limit{gc(1), gc(2)}, []runfile.Limit{gc(1), gc(2)}
	a.Schema = 4
	out = Compare(a, b)
	if !strings.Contains(out, "| limit device-group-commit-1024-1125B×16-inflight1 | p50Ns | 200µs [190µs–210µs] | 200µs [190µs–210µs] | 1× | no significant difference |") ||
		!strings.Contains(out, "| limit device-group-commit-1024-1125B×16-inflight2 | p50Ns |  |  |  | not comparable: one run's two writers each wrote N records per op") {
		t.Errorf("group-commit limits of schemas 4 and 5:\n%s", out)
	}
}

func TestLogTicksLabelShortRanges(t *testing.T) {
	for _, r := range [][2]float64{{2, 8}, {1.2, 1.9}, {3e3, 4e5}, {0.5, 700}} {
		var labelled int
		for _, tk := range (logTicks{}).Ticks(r[0], r[1]) {
			if tk.Label != "" {
				labelled++
			}
		}
		if labelled < 2 {
			t.Errorf("range %v: %d labelled ticks", r, labelled)
		}
	}
	var _ plot.Ticker = logTicks{}
}

func TestParetoFrontNeedsSeparation(t *testing.T) {
	iv := func(m, lo, hi float64) runfile.Interval {
		return runfile.Interval{Median: m, Lo: lo, Hi: hi, Level: 0.94}
	}
	pts := []ParetoPoint{
		{"a", iv(100, 90, 110), iv(50, 45, 55)},  // dominated by c, clearly
		{"b", iv(50, 45, 55), iv(10, 9, 11)},     // front: lowest tail
		{"c", iv(120, 115, 125), iv(40, 38, 42)}, // front
		{"d", iv(200, 190, 210), iv(90, 85, 95)}, // front: fastest
		{"e", iv(199, 189, 209), iv(91, 84, 96)}, // d is better on medians, not measurably: stays
	}
	var labels []string
	for _, i := range ParetoFront(pts) {
		labels = append(labels, pts[i].Label)
	}
	if strings.Join(labels, ",") != "b,c,e,d" {
		t.Fatalf("front %v, want b,c,e,d", labels)
	}
}

// TestSearchShowsItsInFlight: the search table says how many requests
// were in flight and which probe they limited.
func TestSearchShowsItsInFlight(t *testing.T) {
	f := fakeRun()
	f.Searches = []runfile.RateSearch{{Group: "mmap-1024-sync", Backend: "mmap", Flush: "sync", Size: 1024, Pressure: "none", InFlight: 8,
		SustainableRatePerSec: 5000, SaturatedAtPerSec: 10000, Probes: []runfile.Probe{
			{RatePerSec: 5000, Status: runfile.StatusOK, AchievedPerSec: 5000, InFlightCapPerSec: 16000},
			{RatePerSec: 10000, Status: runfile.StatusSaturated, AchievedPerSec: 7900, InFlightCapPerSec: 8000}}}}
	var b strings.Builder
	writeSearches(&b, f)
	s := b.String()
	for _, want := range []string{"| in flight |", "| 8 |", "10k: saturated (**in-flight bound**: achieved 7.9k of the 8k that 8 in flight allow)", "| ≥ 5k (the probes ran out before narrowing it to 10 %; the generator's requests in flight limited a probe) |"} {
		if !strings.Contains(s, want) {
			t.Errorf("search table lacks %q:\n%s", want, s)
		}
	}
}

// TestPSIIsNoSignalWhereTheCellSaturatesIt: an unpressured uring cell whose
// own device stalls keep PSI io some at 90 % cannot show a pressure there;
// where it is low, the rise is evidence.
func TestPSIIsNoSignalWhereTheCellSaturatesIt(t *testing.T) {
	withSamples := func(c runfile.Cell, io float64, dirty int64) runfile.Cell {
		c.Repeats = slices.Clone(c.Repeats)
		for i := range c.Repeats {
			c.Repeats[i].Samples = []runfile.Sample{{IOSomeAvg10: io, NrDirtyPages: dirty}, {IOSomeAvg10: io, NrDirtyPages: dirty}}
		}
		return c
	}
	base := spreadCell("latency-uring-1024-sync-r1000", "uring", "sync", "none", 2000, 0.5)
	p := spreadCell("latency-uring-1024-sync-r1000-dirty", "uring", "sync", "dirty", 2400, 0.5)
	got := pressureEvidence(ptr(withSamples(base, 90, 100)), ptr(withSamples(p, 95, 8000)))
	if !strings.Contains(got, "dirty+writeback 100 → 8k pages") || !strings.Contains(got, "PSI io some 90% → 95%: not a signal (the cell alone keeps it at 90%)") {
		t.Errorf("saturated io some: %s", got)
	}
	got = pressureEvidence(ptr(withSamples(base, 5, 100)), ptr(withSamples(p, 60, 8000)))
	if !strings.Contains(got, "PSI io some 5% → 60%") || strings.Contains(got, "not a signal") {
		t.Errorf("io some as a signal: %s", got)
	}
}

func ptr[T any](v T) *T { return &v }

// TestFirstScreenAnswers: summary.md opens with, per device, the backend
// and flush policy for each durability with the interval that decided
// it, and what was excluded — within 25 lines.
func TestFirstScreenAnswers(t *testing.T) {
	f := fakeRun()
	// uring async and uring sync clearly slower: mmap is picked for both.
	f.Cells[1].DurableMBps, f.Cells[1].CILow.DurableMBps, f.Cells[1].CIHigh.DurableMBps = 217, 213, 221
	f.Cells[4].DurableMBps, f.Cells[4].CILow.DurableMBps, f.Cells[4].CIHigh.DurableMBps = 5, 4.8, 5.2
	Analyze(f)
	lines := strings.Split(Summary(f), "\n")
	first := strings.Join(lines[:min(25, len(lines))], "\n")
	for _, want := range []string{"## What to run", "**vda**, 1KiB bodies:",
		"- ack = durable: **mmap**, flush sync (group commit, SyncFlushTimeout ?) — 11 [10.8–11.2] durable MB/s at 4 producers",
		"- ack = in memory: **mmap**, flush async (FlushInterval 500ms, FlushLeastPages ?, FlushThoroughInterval ?) — 440 [431–449] durable MB/s at 4 producers",
		"excluded: transient async: not sustained"} {
		if !strings.Contains(first, want) {
			t.Errorf("the first 25 lines lack %q:\n%s", want, first)
		}
	}
	// A tie is said as one, with what would separate it.
	f = fakeRun()
	Analyze(f)
	first = strings.Join(strings.Split(Summary(f), "\n")[:25], "\n")
	if !strings.Contains(first, "- ack = durable: **no single pick** — no significant difference between") || !strings.Contains(first, "more repeats would separate them") {
		t.Errorf("a tie on the first screen:\n%s", first)
	}
}

// TestSweepDecidesOnNoBound: the Pareto front's p99.9 is the merged
// tail's; a bound (5 samples above) carries no interval to separate on.
func TestSweepDecidesOnNoBound(t *testing.T) {
	f := &runfile.RunFile{Cells: []runfile.Cell{spreadCell("latency-mmap-1024-sync-r1000", "mmap", "sync", "none", 2000, 0.5)}}
	Analyze(f)
	c := &f.Cells[0]
	if iv := tailInterval(c.Tail, c.P999Ns); iv.Level != 0 || iv.Median < 3.9e6 {
		t.Errorf("p99.9 (a bound) %+v", iv)
	}
	if p := c.Tail.Point("p99Ns"); p == nil || p.Bound || p.Interval().Level == 0 {
		t.Errorf("p99 (a figure) %+v", p)
	}
}

// TestRecommendationTieBrokenOnCPU: two policies tied on durable MB/s are
// told apart by CPU per GiB when one is significantly cheaper; not when
// their CPU intervals overlap.
func TestRecommendationTieBrokenOnCPU(t *testing.T) {
	f := fakeRun()
	setCPU := func(c *runfile.Cell, lo, med, hi float64) {
		c.CILow.CPUSecPerGiB, c.CPUSecPerGiB, c.CIHigh.CPUSecPerGiB = lo, med, hi
	}
	setCPU(&f.Cells[3], 9.5, 10, 10.5) // mmap sync
	setCPU(&f.Cells[4], 19, 20, 21)    // uring sync
	Analyze(f)
	s := recOf(t, f, "sync")
	if s.Pick != "mmap sync" || s.Cell != f.Cells[3].Name || !strings.Contains(s.Text, "no significant difference from uring sync") ||
		!strings.Contains(s.Text, "significantly less CPU: 10 [9.5–10.5] s/GiB against uring sync 20 [19–21]") {
		t.Errorf("sync tied on MB/s, mmap clearly cheaper: %+v", s)
	}
	var b strings.Builder
	writeAnswer(&b, f)
	if !strings.Contains(b.String(), "- ack = durable: **mmap**, flush sync") || !strings.Contains(b.String(), "significantly less CPU") {
		t.Errorf("the first screen does not name the pick made on CPU and why:\n%s", b.String())
	}
	setCPU(&f.Cells[4], 10, 11, 12) // overlaps: no pick
	Analyze(f)
	if s = recOf(t, f, "sync"); s.Pick != "" || len(s.Tied) != 2 {
		t.Errorf("sync tied on MB/s and on CPU: %+v", s)
	}
}

// TestRecommendationWhenEveryPolicyFailsThePressureGate: when the gate
// excludes every policy of a class, it does not tell them apart; they are
// ranked without it, the text says so, and the exclusions stay listed.
func TestRecommendationWhenEveryPolicyFailsThePressureGate(t *testing.T) {
	f := fakeRun()
	f.Config.Pressures = []string{"none", "dirty"}
	f.Cells[7] = spreadCell("latency-mmap-1024-sync-r1000", "mmap", "sync", "none", 2000, 0.5)
	f.Cells[8] = spreadCell("latency-uring-1024-sync-r1000", "uring", "sync", "none", 2000, 0.5)
	f.Cells = append(f.Cells, spreadCell("latency-mmap-1024-sync-r1000-dirty", "mmap", "sync", "dirty", 6000, 0.5),
		spreadCell("latency-uring-1024-sync-r1000-dirty", "uring", "sync", "dirty", 8000, 0.5))
	// mmap sync clearly faster.
	c := &f.Cells[3]
	c.DurableMBps, c.CILow.DurableMBps, c.CIHigh.DurableMBps = 30, 29, 31
	Analyze(f)
	s := recOf(t, f, "sync")
	if s.Pick != "mmap sync" || len(s.Excluded) != 2 || !strings.Contains(s.Text, "every sync policy's tail under pressure is above 2× its own or saturated") ||
		!strings.Contains(s.Text, "ranked without it") {
		t.Errorf("every sync policy fails the gate: %+v", s)
	}
	// Both saturated under pressure at a rate they sustained without: the
	// same gate, ranked without it the same way.
	for i := len(f.Cells) - 2; i < len(f.Cells); i++ {
		f.Cells[i].Status = runfile.StatusSaturated
	}
	Analyze(f)
	if s = recOf(t, f, "sync"); s.Pick != "mmap sync" || len(s.Excluded) != 2 || !strings.Contains(s.Text, "ranked without it") ||
		!strings.Contains(strings.Join(s.Excluded, " "), "saturated under dirty pressure") {
		t.Errorf("every sync policy saturated under pressure: %+v", s)
	}
	f.Cells[len(f.Cells)-2] = spreadCell("latency-mmap-1024-sync-r1000-dirty", "mmap", "sync", "dirty", 6000, 0.5)
	// One of them passes: the gate decides again, and the other stays out.
	f.Cells[len(f.Cells)-1] = spreadCell("latency-uring-1024-sync-r1000-dirty", "uring", "sync", "dirty", 2200, 0.5)
	Analyze(f)
	if s = recOf(t, f, "sync"); s.Pick != "uring sync" || strings.Contains(s.Text, "ranked without it") {
		t.Errorf("one sync policy passes the gate: %+v", s)
	}
}

// TestFirstScreenQuotesACommittedSweep: a run that swept no policy quotes
// another run's sweep on its first screen — that run named, its front's
// policies with their intervals — and a run that is not a sweep is
// refused as a reference.
func TestFirstScreenQuotesACommittedSweep(t *testing.T) {
	sw := fakeRun()
	sw.ID = "20250102-000000-sweep"
	sw.Config.Policies = []runfile.Policy{{Name: "async fi=50ms", Flush: "async"}, {Name: "async fi=500ms", Flush: "async"}}
	p := []int{100, 110, 120, 130, 140}
	five := func(v float64) []float64 { return []float64{v * 0.98, v * 0.99, v, v * 1.01, v * 1.02} }
	fast := mkCell("throughput-mmap-1024-async-p4-fast", "throughput", "mmap", "async", five(400e3), five(440), p)
	slow := mkCell("throughput-mmap-1024-async-p4-slow", "throughput", "mmap", "async", five(200e3), five(220), p)
	fast.Policy, slow.Policy = "async fi=500ms", "async fi=50ms"
	fast.Target, slow.Target = "vda", "vda"
	sw.Cells = []runfile.Cell{fast, slow}
	sw.Peers, sw.Floors, sw.Limits = nil, nil, nil
	dir := t.TempDir()
	if err := runfile.Write(dir, sw); err != nil {
		t.Fatal(err)
	}
	ref, err := LoadSweepReference(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.Series) != 1 || len(ref.Series[0].Front) != 1 || ref.Series[0].Front[0].Policy != "async fi=500ms" || ref.Series[0].Policies != 2 {
		t.Fatalf("the sweep's front: %+v", ref.Series)
	}
	f := fakeRun()
	f.SweepReference = ref
	Analyze(f)
	first := strings.Join(strings.Split(Summary(f), "\n")[:25], "\n")
	for _, want := range []string{"- flush policy: this run measured each backend's defaults only; the flush-policy sweep 20250102-000000-sweep (another run",
		"against closed-loop p99.9 at 4 producers (one per backend", "  - mmap async on vda (2 policies measured): `async fi=500ms` 400k [392k–408k] msgs/s, p99.9 140µs, alone on the front"} {
		if !strings.Contains(first, want) {
			t.Errorf("the first 25 lines lack %q:\n%s", want, first)
		}
	}
	plain := t.TempDir()
	if err := runfile.Write(plain, fakeRun()); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSweepReference(plain); !errors.Is(err, ErrNotASweep) {
		t.Errorf("a run that is not a sweep: %v", err)
	}
}

// TestSweepFrontLine: the quote names the front's two ends and counts
// the points between without counting an end twice.
func TestSweepFrontLine(t *testing.T) {
	iv := func(v float64) runfile.Interval { return runfile.Interval{Median: v, Lo: v, Hi: v} }
	s := runfile.SweepSeries{Backend: "mmap", Flush: "async", Target: "vda", Policies: 6, Front: []runfile.SweepPoint{
		{Policy: "a", DurableMsgs: iv(100e3), P999Ns: iv(7e6)}, {Policy: "b", DurableMsgs: iv(150e3), P999Ns: iv(8e6)},
		{Policy: "c", DurableMsgs: iv(200e3), P999Ns: iv(6e6)}}}
	if got := frontLine(s); !strings.Contains(got, "most throughput `c`") || !strings.Contains(got, "also the lowest p99.9; 2 more on the front") {
		t.Errorf("fastest is also the lowest tail: %s", got)
	}
	s.Front[0].P999Ns = iv(1e6)
	if got := frontLine(s); !strings.Contains(got, "; lowest p99.9 `a`") || !strings.Contains(got, "; 1 more on the front") {
		t.Errorf("two ends: %s", got)
	}
	s.Tail = "closed-loop p99.9 at 16 producers" // fronts that differ in their p99.9 name it each
	if got := frontLine(s); !strings.HasPrefix(got, "mmap async on vda (6 policies measured; p99.9: closed-loop p99.9 at 16 producers): ") {
		t.Errorf("a front's own p99.9: %s", got)
	}
}

// TestSweepTailIsOneFigure: a series compares one p99.9 for every policy
// and names it. With generator-bound latency cells the points carry the
// open loop's service time, never the closed loop's tail under a label
// that says open loop; with the store's own latency tails they carry those.
func TestSweepTailIsOneFigure(t *testing.T) {
	build := func(latUs float64) *runfile.RunFile {
		f := fakeRun()
		f.Config.Policies = []runfile.Policy{{Name: "async fi=50ms", Flush: "async"}, {Name: "async fi=500ms", Flush: "async"}}
		f.Floors = []runfile.Floor{{RatePerSec: 1000, Pressure: "none", Target: "vda", Status: runfile.StatusOK, P50Ns: 50e3, P99Ns: 90e3, P999Ns: 100e3}}
		five := func(v float64) []float64 { return []float64{v * 0.98, v * 0.99, v, v * 1.01, v * 1.02} }
		closed := []int{5000, 5100, 5200, 5300, 5400} // a saturated closed loop's tail, µs
		f.Cells = nil
		for i, pol := range f.Config.Policies {
			thr := mkCell(fmt.Sprintf("throughput-mmap-1024-async-p4-%d", i), "throughput", "mmap", "async", five(400e3), five(440), closed)
			lat := spreadCell(fmt.Sprintf("latency-mmap-1024-async-r1000-%d", i), "mmap", "async", "none", latUs, 0.3)
			thr.Policy, lat.Policy = pol.Name, pol.Name
			f.Cells = append(f.Cells, thr, lat)
		}
		f.Peers, f.Limits = nil, nil
		Analyze(f)
		return f
	}
	f := build(100) // p99.9 ≈ 200µs: within 3× the floor's 100µs, service ≈ 60µs
	if !f.Cells[1].GeneratorBound {
		t.Fatalf("the latency cell should be generator-bound: %+v", f.Cells[1].Tail)
	}
	s := sweepOf(f)
	if len(s) != 1 || len(s[0].points) != 2 {
		t.Fatalf("series %+v", s)
	}
	for _, p := range s[0].points {
		if p.P999.Median > 100e3 {
			t.Errorf("%s: p99.9 %v is not the open loop's service time (≈ 60µs)", p.Label, p.P999.Median)
		}
	}
	if !strings.Contains(s[0].tail, "service-time p99.9 at 1k msgs/s") {
		t.Errorf("the series does not name its figure: %q", s[0].tail)
	}
	var b strings.Builder
	writeSweep(&b, f)
	if !strings.Contains(b.String(), "p99.9: open-loop service-time p99.9 at 1k msgs/s") {
		t.Errorf("the table does not say which p99.9 it shows:\n%s", b.String())
	}
	f = build(1000) // p99.9 ≈ 2ms: the store's own
	s = sweepOf(f)
	for _, p := range s[0].points {
		if p.P999.Median < 1.5e6 || p.P999.Median > 2.5e6 {
			t.Errorf("%s: p99.9 %v is not the open loop's latency (≈ 2ms)", p.Label, p.P999.Median)
		}
	}
	if !strings.HasPrefix(s[0].tail, "open-loop latency p99.9") {
		t.Errorf("series figure %q", s[0].tail)
	}
}

// TestThroughputBarOfABodyOnlyPeer: the throughput plot's axis counts
// records; a system drawn with its body MB/s (no record bytes reported)
// says so under its bars.
func TestThroughputBarOfABodyOnlyPeer(t *testing.T) {
	if got := throughputBarLabel("nats", &runfile.Cell{Figures: runfile.Figures{MBPerSec: 90}}); !strings.Contains(got, "body MB/s") {
		t.Errorf("a peer drawn with its body MB/s is labelled %q", got)
	}
	if got := throughputBarLabel("mmap", &runfile.Cell{Figures: runfile.Figures{MBPerSec: 90, WrittenMBps: 95}}); got != "mmap" {
		t.Errorf("a store cell is labelled %q", got)
	}
}
