package bench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqstore/mqstore/bench/device"
	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/hostctl"
	"github.com/mqstore/mqstore/internal/testenv"
)

// testConfig is a small run in temporary directories: one backend, 1 KiB,
// no peers, no profiles, no limits.
func testConfig(t *testing.T) Config {
	t.Helper()
	root := t.TempDir()
	cfg := DefaultConfig()
	cfg.Backends, cfg.Sizes, cfg.Flushes, cfg.Peers = []string{"mmap"}, []int{1024}, []string{"async"}, nil
	cfg.Producers, cfg.Rates, cfg.Repeat, cfg.InFlight = []int{2}, []float64{200}, 2, 8
	cfg.Duration, cfg.Warmup, cfg.SearchProbes, cfg.SearchDuration = 300*time.Millisecond, 50*time.Millisecond, 0, 200*time.Millisecond
	cfg.Dir, cfg.Out, cfg.ProfilesRoot = root, filepath.Join(root, "results"), filepath.Join(root, "profiles")
	cfg.NoLimits, cfg.Profile, cfg.ColdReads = true, false, false
	cfg.Store.SegmentSizeBytes = 16 << 20
	return cfg
}

// lockedBuffer is a progress sink the test reads while the run writes.
type lockedBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	onWrite func(string)
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	if l.onWrite != nil {
		l.onWrite(string(p))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestEndToEndRun runs mmap async and sync through the closed loop and the
// open loop (with floors, the A/A twin, the search and profiles) and checks
// the schema 3 contract fields of every cell and the outputs.
func TestEndToEndRun(t *testing.T) {
	cfg := testConfig(t)
	cfg.Flushes, cfg.SearchProbes, cfg.Profile, cfg.ProfileDuration = []string{"async", "sync"}, 2, true, 200*time.Millisecond
	var progress lockedBuffer
	f, dir, err := Run(context.Background(), cfg, RunOptions{Progress: &progress})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	var twin *runfile.Cell
	for i := range f.Cells {
		c := &f.Cells[i]
		if c.TwinOf != "" {
			twin = c
		}
		if c.Status == runfile.StatusSkipped && c.RatePerSec > 0 && strings.Contains(c.Reason, "the generator, not the system, limits this rate") {
			t.Logf("%s: %s", c.Name, c.Reason) // a loaded machine: the floor itself did not keep the rate
			continue
		}
		if !c.Measured() {
			t.Errorf("%s: %s %s", c.Name, c.Status, c.Reason)
			continue
		}
		if len(c.Repeats) != cfg.Repeat+1 || !c.Repeats[0].Warm || c.Repeats[1].Warm || c.Repeats[1].Seed == c.Repeats[2].Seed {
			t.Errorf("%s: %d repeats (the first warm, a seed per round), want %d", c.Name, len(c.Repeats), cfg.Repeat+1)
		}
		if c.Repeats[1].Seed != f.Cells[0].Repeats[1].Seed {
			t.Errorf("%s: round 1's seed differs from another cell's in the same round", c.Name)
		}
		if c.WrittenMBps <= 0 || c.DurableMBps <= 0 || c.DrainNs <= 0 || c.Sustained == nil || c.Options["FlushMode"] != c.Flush || c.Durability == nil {
			t.Errorf("%s lacks durability figures or options: written %v durable %v drain %v sustained %v options %v", c.Name, c.WrittenMBps, c.DurableMBps, c.DrainNs, c.Sustained, c.Options)
		}
		for _, r := range c.Repeats[1:] {
			d := r.Result.Durability
			if d == nil || d.DurableAfterDrainBytes != d.WrittenEndBytes || d.DurableEndBytes > d.WrittenEndBytes {
				t.Errorf("%s repeat %d: durability %+v", c.Name, r.Index, d)
			}
		}
		if c.Workload == "throughput" && c.Flush == "sync" && c.MsgsPerGroupCommit < 1 {
			t.Errorf("%s: %v messages per group commit", c.Name, c.MsgsPerGroupCommit)
		}
	}
	if twin == nil || len(f.AA) == 0 {
		t.Errorf("no A/A twin (%v) or comparison (%d)", twin != nil, len(f.AA))
	}
	if len(f.Floors) != 1 || f.Floors[0].P999Ns <= 0 || len(f.Floors[0].Repeats) != cfg.Repeat+1 {
		t.Fatalf("floors %+v", f.Floors)
	}
	if f.Floors[0].Status == runfile.StatusOK {
		lat := 0
		for _, c := range f.Cells {
			if c.Workload == "latency" {
				lat++
				// The floor's merged tail (of every measured repeat).
				if c.RatePerSec != 200 || c.FloorP999Ns != f.Floors[0].Tail.Point("p999Ns").ValueNs {
					t.Errorf("%s: rate %v, floor %v", c.Name, c.RatePerSec, c.FloorP999Ns)
				}
			}
		}
		if lat != 2 || len(f.Searches) != 2 {
			t.Errorf("%d latency cells, %d searches; want 2 and 2", lat, len(f.Searches))
		}
		// The floor ran in the cells' rounds: the first round of a latency
		// cell started before the floor's last one.
		first := func(r runfile.Repeat) int64 {
			if len(r.Samples) == 0 {
				t.Fatalf("a repeat without samples: %+v", r)
			}
			return r.Samples[0].UnixNs
		}
		floorLast, interleaved := first(f.Floors[0].Repeats[cfg.Repeat]), false
		for _, c := range f.Cells {
			interleaved = interleaved || (c.Workload == "latency" && first(c.Repeats[0]) < floorLast)
		}
		if !interleaved {
			t.Error("the floor's repeats all ran before the latency cells'")
		}
	}
	for _, name := range []string{runfile.FileName, "bench.txt", "summary.md", "throughput-mmap-1024-async-p2.hgrm", "throughput-async.png"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	back, err := runfile.Read(dir)
	if err != nil || back.Plan.WindowNs != int64(300*time.Millisecond) || back.Machine.GOMAXPROCS == 0 || back.Machine.VM["vm.dirty_ratio"] == "" {
		t.Errorf("run file: %v, plan %+v, machine %+v", err, back.Plan, back.Machine)
	}
	for _, kind := range ProfileKinds {
		if _, err := os.Stat(filepath.Join(cfg.ProfilesRoot, f.ID, "throughput-mmap-1024-async-p2."+kind+".pprof")); err != nil {
			t.Error(err)
		}
	}
	// The profiled runs label the engine's goroutines: their CPU splits by
	// stage, the shares add up, and so do the µs per message. A 300 ms
	// window under the race detector holds a few dozen samples, which can
	// all land in the append; that some sample carries an engine stage is
	// what this run can show (engine's TestProfileLabels checks the labels
	// themselves).
	cpus := 0
	for _, p := range f.Profiles {
		if p.Kind != "cpu" {
			continue
		}
		cpus++
		var pct, us float64
		labelled := false
		for _, st := range p.Stages {
			pct, us = pct+st.Pct, us+st.UsPerMsg
			labelled = labelled || slices.Contains(runfile.StageOrder, st.Stage)
		}
		if !labelled || p.Messages <= 0 || p.CPUPerMsgNs <= 0 || math.Abs(pct-100) > 1e-6 || math.Abs(us-p.CPUPerMsgNs/1e3) > 1e-6*us {
			t.Errorf("%s: stages %+v (%v%%, %v µs/msg of %v ns/msg, %d messages)", p.Cell, p.Stages, pct, us, p.CPUPerMsgNs, p.Messages)
		}
	}
	if summary, err := os.ReadFile(filepath.Join(dir, "summary.md")); cpus != 2 || err != nil || !strings.Contains(string(summary), "## CPU by stage") {
		t.Errorf("%d CPU profiles; summary: %v", cpus, err)
	}
	if entries, _ := os.ReadDir(cfg.Dir); len(entries) != 2 {
		t.Errorf("work directory left behind: %v", entries)
	}
	m := regexp.MustCompile(`\[(\d+)/(\d+)\] search`).FindAllStringSubmatch(progress.String(), -1)
	if len(m) == 0 || m[len(m)-1][1] > m[len(m)-1][2] {
		t.Errorf("progress:\n%s", progress.String())
	}
}

// TestSaturatedCellReportsItsSustainableRate: one worker appending with
// sync flush (one fdatasync per message) cannot keep 20 000 msgs/s; the
// cell is saturated and the search finds a rate it sustains below it. The
// no-op floor keeps that rate on any machine this runs on; if it does not
// (a machine too loaded to offer the rate), the cells at that rate are
// skipped with the floor's reason, and the run says so.
func TestSaturatedCellReportsItsSustainableRate(t *testing.T) {
	cfg := testConfig(t)
	cfg.Workloads, cfg.Flushes, cfg.Rates, cfg.InFlight, cfg.Repeat = []string{"latency"}, []string{"sync"}, []float64{20000}, 1, 2
	cfg.SearchProbes, cfg.AA = 3, false
	f, _, err := Run(context.Background(), cfg, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Floors) != 1 {
		t.Fatalf("floors %+v", f.Floors)
	}
	if f.Floors[0].Status != runfile.StatusOK {
		t.Logf("the floor could not keep 20000/s here: %s", f.Floors[0].Reason)
		if len(f.Cells) != 1 || f.Cells[0].Status != runfile.StatusSkipped || !strings.Contains(strings.Join(f.Notes, " "), "the cells at this rate are not compared") {
			t.Fatalf("a saturated floor: cells %d, notes %v", len(f.Cells), f.Notes)
		}
		return
	}
	c := f.Cells[0]
	if c.Status != runfile.StatusSaturated || len(c.Saturation) == 0 {
		t.Fatalf("%s: status %s, saturation %v", c.Name, c.Status, c.Saturation)
	}
	for _, p := range []string{"p50Ns", "p999Ns"} {
		if c.Figures.Figure(p) <= 0 {
			t.Errorf("%s: no %s recorded for a saturated cell", c.Name, p)
		}
	}
	s := f.Searches[0]
	if s.InFlight != 1 {
		t.Errorf("search in flight %d, want the run's 1", s.InFlight)
	}
	for _, p := range s.Probes {
		if p.InFlightCapPerSec <= 0 {
			t.Errorf("probe at %.0f/s has no in-flight cap", p.RatePerSec)
		}
	}
	if s.SaturatedAtPerSec == 0 || s.SaturatedAtPerSec > 20000 || len(s.Probes) == 0 || s.SustainableRatePerSec >= s.SaturatedAtPerSec ||
		c.SustainableRatePerSec != s.SustainableRatePerSec {
		t.Errorf("search %+v, cell's sustainable rate %v", s, c.SustainableRatePerSec)
	}
}

func TestInterruptedRunWritesWhatFinished(t *testing.T) {
	cfg := testConfig(t)
	cfg.Backends, cfg.Flushes, cfg.Workloads, cfg.AA = []string{"mem"}, []string{"async", "sync"}, []string{"throughput"}, false
	ctx, cancel := context.WithCancel(context.Background())
	progress := &lockedBuffer{onWrite: func(s string) {
		if strings.Contains(s, "warm round of 2 cells done") {
			cancel() // as the first measured round starts
		}
	}}
	f, dir, err := Run(ctx, cfg, RunOptions{Progress: progress})
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("err = %v", err)
	}
	back, rerr := runfile.Read(dir)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if !back.Interrupted || len(f.Cells) != 2 {
		t.Fatalf("interrupted run file: interrupted=%v cells=%d", back.Interrupted, len(f.Cells))
	}
	for _, c := range f.Cells {
		if c.Measured() {
			t.Errorf("%s reports figures although its measured repeats were interrupted", c.Name)
		}
	}
}

func TestARunThatFailsAtStartLeavesNoResults(t *testing.T) {
	cfg := testConfig(t)
	cfg.Dir = filepath.Join(cfg.Dir, "does-not-exist")
	_, dir, err := Run(context.Background(), cfg, RunOptions{})
	if err == nil || dir != "" {
		t.Fatalf("run in a missing directory: %v, %q", err, dir)
	}
	if entries, err := os.ReadDir(cfg.Out); err == nil && len(entries) > 0 {
		t.Errorf("a results directory was left: %v", entries)
	}
}

// fakeProber stands in for the io_uring probes: 1000 MB/s, fdatasync
// latencies 1..count µs.
type fakeProber struct{}

func (fakeProber) SequentialWrite(_ context.Context, _ string, total int64, _, _ int) (int64, time.Duration, error) {
	return total, time.Duration(total), nil
}

// DurableSequentialWrite: 500 MB/s, half the rate without the sync.
func (fakeProber) DurableSequentialWrite(_ context.Context, _ string, total int64, _, _ int) (int64, time.Duration, error) {
	return total, 2 * time.Duration(total), nil
}

// SyncWrites: the writes' latencies are 1..count µs (half that
// pre-written, four fifths of it with O_DIRECT), and the writers overlap
// perfectly.
func (fakeProber) SyncWrites(_ context.Context, _ string, p device.SyncProbe) (device.SyncResult, error) {
	per := p.Count / p.InFlight
	r := device.SyncResult{Latencies: make([]time.Duration, per*p.InFlight)}
	for i := range r.Latencies {
		r.Latencies[i] = time.Duration(i+1) * time.Microsecond
		if p.Prewritten {
			r.Latencies[i] /= 2
		}
		if p.Direct {
			r.Latencies[i] = r.Latencies[i] * 4 / 5
		}
		r.Elapsed += r.Latencies[i]
		if p.WriterBytes != nil {
			r.Bytes += int64(p.WriterBytes[i/per])
		} else {
			r.Bytes += int64(p.WriteBytes)
		}
	}
	r.Elapsed /= time.Duration(p.InFlight)
	return r, nil
}

// CreateSegment: 1 ns per byte pre-written (1000 MB/s), half that with
// O_DIRECT, 1 ms otherwise.
func (fakeProber) CreateSegment(_ context.Context, _ string, size int64, prewrite, direct bool) (time.Duration, error) {
	switch {
	case prewrite && direct:
		return time.Duration(size / 2), nil
	case prewrite:
		return time.Duration(size), nil
	}
	return time.Millisecond, nil
}

// TestLimitsAndProgressReachItsTotal: the limits with a fake prober (and
// fio when on PATH; skipped otherwise) — the progress count reaches its
// total either way.
func TestLimitsAndProgressReachItsTotal(t *testing.T) {
	cfg := testConfig(t)
	cfg.Workloads, cfg.NoLimits, cfg.AA = []string{"throughput"}, false, false
	cfg.Flushes, cfg.Producers, cfg.Store.Message = []string{"sync"}, []int{1, 5}, MessageRocketMQ
	cfg.DeviceProbeBytes, cfg.SyncProbeCount = 4<<20, 10
	var progress lockedBuffer
	f, _, err := Run(context.Background(), cfg, RunOptions{Prober: fakeProber{}, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]*runfile.Limit{}
	for i := range f.Limits {
		names[f.Limits[i].Name] = &f.Limits[i]
	}
	if l := names[runfile.LimitDeviceSeq]; l == nil || l.MBPerSec < 999.99 || l.MBPerSec > 1000.01 {
		t.Errorf("device seq %+v", l)
	}
	if l := names[runfile.LimitDeviceSeqDurable]; l == nil || l.MBPerSec < 499.99 || l.MBPerSec > 500.01 {
		t.Errorf("device seq to the sync %+v", l)
	}
	if l := names[runfile.LimitDeviceSync]; l == nil || l.P50Ns < 5_000 || l.P50Ns > 6_010 {
		t.Errorf("device sync %+v", l)
	}
	if l := names[runfile.LimitDeviceSyncPrewritten]; l == nil || l.P50Ns < 2_500 || l.P50Ns > 3_010 {
		t.Errorf("device sync on a pre-written file %+v", l)
	}
	if l := names[runfile.LimitSegmentPrewritten]; l == nil || l.MBPerSec < 999.99 || l.MBPerSec > 1000.01 || l.P50Ns != cfg.Store.SegmentSizeBytes {
		t.Errorf("segment creation, pre-written %+v", l)
	}
	if l := names[runfile.LimitSegmentPrewrittenDirect]; l == nil || l.MBPerSec < 1999.99 || l.MBPerSec > 2000.01 {
		t.Errorf("segment creation, pre-written with O_DIRECT %+v", l)
	}
	if l := names[runfile.LimitSegmentFallocated]; l == nil || l.P50Ns != int64(time.Millisecond) || l.MBPerSec != 0 {
		t.Errorf("segment creation, fallocated %+v", l)
	}
	// The group-commit limits: N records of the rocketmq message per write
	// with one in flight, N split over two writers with two, for each
	// producer count; msgs/s = records written per second. With the fake's
	// 10 pre-written writes of 0.5..5 µs, one writer does 10 ops in 27.5
	// µs, and two (5 ops each) overlap perfectly: twice the ops per second,
	// half the records per op.
	rec := recordBytes(MessageRocketMQ, 1024)
	groupCommit := map[[2]int]*runfile.Limit{}
	for i := range f.Limits {
		if l := &f.Limits[i]; l.Name == runfile.LimitGroupCommit {
			groupCommit[[2]int{l.Producers, l.InFlight}] = l
			wantBytes := strconv.Itoa(l.Producers * rec)
			if l.InFlight == 2 {
				wantBytes = fmt.Sprintf("%d and %d", (l.Producers-l.Producers/2)*rec, l.Producers/2*rec)
			}
			if l.RecordBytes != rec || l.SizeBytes != 1024 || l.Params["writeBytes"] != wantBytes || l.Status != runfile.StatusOK {
				t.Errorf("group-commit limit %+v: want %d-byte records, %s bytes per write", l, rec, wantBytes)
			}
		}
	}
	for _, n := range cfg.Producers {
		one, two := groupCommit[[2]int{n, 1}], groupCommit[[2]int{n, 2}]
		if one == nil || (two == nil) != (n == 1) { // one producer never has two syncs in flight
			t.Fatalf("group-commit limits at %d producers: one in flight %v, two %v", n, one, two)
		}
		if !within(one.OpsPerSec, 10/27.5e-6) || !within(one.MsgsPerSec, float64(n)*one.OpsPerSec) || !within(one.MBPerSec, one.MsgsPerSec*float64(rec)/1e6) {
			t.Errorf("%d producers, one in flight: %v ops/s %v msgs/s %v MB/s", n, one.OpsPerSec, one.MsgsPerSec, one.MBPerSec)
		}
		if two != nil && (!within(two.OpsPerSec, 2*one.OpsPerSec) || !within(two.MsgsPerSec, one.MsgsPerSec) || !within(two.MBPerSec, one.MBPerSec)) {
			t.Errorf("%d producers, two in flight: %v ops/s %v msgs/s %v MB/s against one's %v, %v, %v", n,
				two.OpsPerSec, two.MsgsPerSec, two.MBPerSec, one.OpsPerSec, one.MsgsPerSec, one.MBPerSec)
		}
	}
	// The other ways: O_DIRECT on a pre-written file, and both on a
	// fallocated one, one in flight each.
	for _, v := range []struct {
		name   string
		factor float64 // ops/s against the page cache's on a pre-written file
		method string
	}{
		{runfile.LimitGroupCommitDirect, 5.0 / 4, "pwritev2 with RWF_DSYNC"},
		{runfile.LimitGroupCommitFallocated, 1.0 / 2, "pwrite + fdatasync"},
		{runfile.LimitGroupCommitDirectFallocated, 5.0 / 8, "pwritev2 with RWF_DSYNC"},
	} {
		for _, n := range cfg.Producers {
			one := groupCommit[[2]int{n, 1}]
			i := slices.IndexFunc(f.Limits, func(l runfile.Limit) bool { return l.Name == v.name && l.Producers == n })
			if i < 0 {
				t.Fatalf("no %s limit at %d producers", v.name, n)
			}
			l := &f.Limits[i]
			if way, _ := runfile.GroupCommitLimit(l.Name); l.InFlight != 1 || l.RecordBytes != rec || !strings.HasPrefix(l.Params["method"], v.method) ||
				!within(l.OpsPerSec, v.factor*one.OpsPerSec) || way.Written != strings.Contains(l.Params["file"], "pre-written") {
				t.Errorf("%s at %d producers: %+v, want %v× the ops/s of %s", v.name, n, l, v.factor, runfile.LimitGroupCommit)
			}
		}
	}
	lines := strings.Split(strings.TrimSpace(progress.String()), "\n")
	m := regexp.MustCompile(`^\[(\d+)/(\d+)\]`).FindStringSubmatch(lines[len(lines)-1])
	if m == nil || m[1] != m[2] {
		t.Errorf("the last progress line does not reach its total: %q", lines[len(lines)-1])
	}
}

func within(a, b float64) bool { return a > b*(1-1e-6) && a < b*(1+1e-6) }

// TestStoreDurability: a real store's positions through the adapter, on a
// buffered backend whose commit and flush lag its appends.
func TestStoreDurability(t *testing.T) {
	for _, c := range []struct{ backend, flush string }{{"mmap", "async"}, {"transient", "async"}, {"mmap", "sync"}} {
		t.Run(c.backend+"-"+c.flush, func(t *testing.T) {
			sp := load.Spec{Workload: load.Throughput, SizeBytes: 1024, Producers: 4, Duration: 200 * time.Millisecond}
			rep, options := storeRepeat(context.Background(), StoreConfig{SegmentSizeBytes: 16 << 20}, filepath.Join(t.TempDir(), "s"), c.backend, c.flush, sp, nil)
			if rep.Status != runfile.StatusOK {
				t.Fatalf("%s: %s", rep.Status, rep.Reason)
			}
			d := rep.Result.Durability
			recordsPerMsg := float64(d.WrittenBytes()) / float64(rep.Result.Messages)
			if recordsPerMsg < 1024 || recordsPerMsg > 1024+200 || d.DurableAfterDrainBytes != d.WrittenEndBytes || options["Backend"] != c.backend {
				t.Errorf("durability %+v (%.0f bytes per message), options %v", d, recordsPerMsg, options)
			}
			if c.flush == "sync" && (d.BacklogBytes() != 0 || rep.Store.Flushes == 0 || rep.Figures.MsgsPerGroupCommit < 1) {
				t.Errorf("sync: backlog %d, store %+v, per commit %v", d.BacklogBytes(), rep.Store, rep.Figures.MsgsPerGroupCommit)
			}
			// The time in flushes: some, about the window at most (one
			// group commit owner flushes at a time; a flush that began
			// before the window counts whole, so a loaded machine may go a
			// little over), and its mean per flush.
			busy, mean := rep.Figures.FlushBusyShare, rep.Figures.FlushMeanNs
			if c.flush == "sync" && (rep.Store.FlushNs <= 0 || busy <= 0 || busy > 1.5 || mean != rep.Store.FlushNs/int64(rep.Store.Flushes)) {
				t.Errorf("sync: %d ns in %d flushes, busy share %v, mean %d ns", rep.Store.FlushNs, rep.Store.Flushes, busy, mean)
			}
		})
	}
}

func TestSweepPoliciesApplyPerBackend(t *testing.T) {
	pols, err := SweepPolicies([]string{"flush=async,sync", "flush-interval=100ms,500ms", "commit-interval=50ms,200ms", "sync-flush-timeout=1s,5s"},
		StoreConfig{SegmentSizeBytes: 1 << 20}, []string{"mmap", "transient"})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, p := range pols {
		count[p.Backend+" "+p.Flush]++
		if p.Backend == "mmap" && strings.Contains(p.Name, "ci=") {
			t.Errorf("mmap policy varies the commit interval (a no-op for mmap): %q", p.Name)
		}
	}
	// mmap: 2 flush intervals (async), 2 timeouts (sync); transient: ×2 commit intervals.
	want := map[string]int{"mmap async": 2, "mmap sync": 2, "transient async": 4, "transient sync": 4}
	for k, v := range want {
		if count[k] != v {
			t.Errorf("%s: %d policies, want %d (%v)", k, count[k], v, count)
		}
	}
	for _, bad := range []string{"flush-interval", "nope=1", "flush-least-pages=x", "flush=maybe", "group-commit-batching=fast"} {
		if _, err := SweepPolicies([]string{bad}, StoreConfig{}, []string{"mmap"}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// The group commit's batching: sync only, and the engine runs what the
	// policy names.
	pols, err = SweepPolicies([]string{"flush=async,sync", "group-commit-batching=auto,merge,convoys"}, StoreConfig{SegmentSizeBytes: 1 << 20}, []string{"mmap"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pols {
		o, err := storeOptions(p.Store, p.Backend, p.Flush)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name+" → "+o.GroupCommitBatching.String())
	}
	if want := []string{"async → auto", "sync gcb=auto → auto", "sync gcb=merge → merge", "sync gcb=convoys → convoys"}; !slices.Equal(names, want) {
		t.Errorf("policies %q, want %q", names, want)
	}
}

// TestChooseWindow: the automatic window on a fake /proc/sys and a fake
// device probe.
func TestChooseWindow(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "vm"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "vm", "dirty_bytes"), []byte("3000000000"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := hostctl.Default()
	h.ProcSys = root
	cfg := DefaultConfig()
	dev := runfile.Limit{Name: runfile.LimitDeviceSeq, Target: "vda", Status: runfile.StatusOK}
	dev.MBPerSec = 1000
	for _, c := range []struct {
		name    string
		mod     func(*Config)
		want    time.Duration
		whyPart string
	}{
		{"given", func(c *Config) { c.Duration = 1500 * time.Millisecond }, 1500 * time.Millisecond, "--duration"},
		{"sync only", func(c *Config) { c.Flushes = []string{"sync"} }, time.Second, "nothing to absorb"},
		{"dirty threshold", func(c *Config) {}, 3 * time.Second, "vm.dirty_bytes=3000000000"},
		{"uring-direct staging", func(c *Config) { c.Backends = []string{"uring-direct"} }, time.Second, "4 staging rings of 16777216 bytes"},
		{"uring-direct large staging", func(c *Config) {
			c.Backends, c.Store.SegmentSizeBytes = []string{"uring-direct"}, 1e9
			c.Store.BackendOptions = map[string]string{"uring-direct": `{"StagingBytes": 999997440}`}
		}, 4 * time.Second, "4 staging rings of 999997440 bytes"},
		{"transient pool", func(c *Config) {
			c.Backends, c.Store.SegmentSizeBytes = []string{"transient"}, 1e9
			c.Store.BackendOptions = map[string]string{"transient": `{"poolSize": 5}`}
		}, 5 * time.Second, "the transient pool, 5 segments"},
	} {
		cfg := cfg
		c.mod(&cfg)
		w, why := chooseWindow(&cfg, h, []runfile.Limit{dev}, []string{"vda"})
		if w != c.want || !strings.Contains(why, c.whyPart) {
			t.Errorf("%s: %v (%s), want %v (…%s…)", c.name, w, why, c.want, c.whyPart)
		}
	}
	// What the device makes durable sizes it where measured, in either order.
	durable := dev
	durable.Name, durable.Figures.MBPerSec = runfile.LimitDeviceSeqDurable, dev.Figures.MBPerSec/2
	for _, limits := range [][]runfile.Limit{{dev, durable}, {durable, dev}} {
		if w, why := chooseWindow(&cfg, h, limits, []string{"vda"}); w != 6*time.Second || !strings.Contains(why, "500 MB/s durable") {
			t.Errorf("with the durable rate: %v (%s), want 6s at 500 MB/s", w, why)
		}
	}
	if w, why := chooseWindow(&cfg, h, nil, []string{"vda"}); w != 5*time.Second || !strings.Contains(why, "not measured") {
		t.Errorf("no device figure: %v %s", w, why)
	}
	// Every target sizes it: the slowest one's rate, named in the reason.
	hdd := dev
	hdd.Target, hdd.Figures.MBPerSec = "hdd", dev.Figures.MBPerSec/4
	for _, limits := range [][]runfile.Limit{{dev, hdd}, {hdd, dev}} {
		w, why := chooseWindow(&cfg, h, limits, []string{"vda", "hdd"})
		if w != 12*time.Second || !strings.Contains(why, "the slowest of the targets, hdd,") {
			t.Errorf("two targets: %v (%s), want 12s sized by hdd", w, why)
		}
	}
	if w, why := chooseWindow(&cfg, h, []runfile.Limit{dev}, []string{"vda", "hdd"}); w != 5*time.Second || !strings.Contains(why, "hdd was not measured") {
		t.Errorf("one target unmeasured: %v %s", w, why)
	}
}

func TestPlanCountsCells(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Backends, cfg.Sizes, cfg.Flushes, cfg.Peers, cfg.Pressures = []string{"mmap", "uring"}, []int{1024}, []string{"async", "sync"}, []string{"nats"}, []string{"none"}
	cfg.Producers, cfg.Rates, cfg.Repeat, cfg.SearchProbes, cfg.NoLimits, cfg.Profile = []int{4, 16}, []float64{1000, 5000}, 5, 3, true, false
	cfg.Duration, cfg.Warmup = time.Second, 200*time.Millisecond
	p := plan(&cfg, false, 1)
	// mqstore: 2 backends × 2 flushes × (2 producers + 2 rates) = 16, + the
	// A/A twin; nats: 2 flushes × (2 + 2) = 8; floors 2 rates × 2 processes
	// (mqbench's and the peers'); probes (2×2 + 2) × 3.
	if p.Cells != 25 || p.Runs != 6*(25+4)+18 {
		t.Errorf("plan %+v: want 25 cells, %d runs", p, 6*(25+4)+18)
	}
	want := 6*(17*(0.2+1+storeRunOverhead.Seconds())+8*(0.2+1+peerRunOverhead.Seconds())+4*(0.2+1+floorRunOverhead.Seconds())) + 18*(0.2+1+storeRunOverhead.Seconds())
	if d := p.EstimatedSeconds - want; d > 1e-6 || d < -1e-6 {
		t.Errorf("estimate %v s, want %v", p.EstimatedSeconds, want)
	}
	// The replication axis: the same 16 mqstore cells with an ASYNC_MASTER
	// and with a SYNC_MASTER slave (no search probes, no twin of theirs),
	// and without a slave only when "none" is in the axis.
	cfg.Replication = []string{ReplicationNone, ReplicationAsync, ReplicationSync}
	if p := plan(&cfg, false, 1); p.Cells != 25+32 || p.Runs != 6*(57+4)+18 {
		t.Errorf("plan with replication %+v: want 57 cells, %d runs", p, 6*(57+4)+18)
	}
	cfg.Replication = []string{ReplicationSync}
	if p := plan(&cfg, false, 1); p.Cells != 16+8 || p.Runs != 6*(24+4)+6 {
		t.Errorf("plan with a SYNC_MASTER only %+v: want 24 cells (no twin: it is of a cell without a slave), %d runs", p, 6*(24+4)+6)
	}
}

// With --recycle-segments the estimate adds the aging of every mqstore
// run of a window or a search probe (not the peers' probes) and the filling
// of pebble-wal's recycled WAL before each of its runs; the other peers
// are not aged.
func TestPlanCountsAging(t *testing.T) {
	estimate := func(peer string, segments int) float64 {
		cfg := DefaultConfig()
		cfg.Backends, cfg.Sizes, cfg.Flushes, cfg.Peers, cfg.Pressures = []string{"mmap", "uring"}, []int{1024}, []string{"async", "sync"}, []string{peer}, []string{"none"}
		cfg.Producers, cfg.Rates, cfg.Repeat, cfg.SearchProbes, cfg.NoLimits, cfg.Profile = []int{4, 16}, []float64{1000, 5000}, 5, 3, true, false
		cfg.Duration, cfg.Warmup = time.Second, 200*time.Millisecond
		cfg.Store.SegmentSizeBytes, cfg.Store.RecycleSegments = 64<<20, segments
		return plan(&cfg, false, 1).EstimatedSeconds
	}
	perRun := 2 * float64(64<<20) / fillBytesPerSec
	// mqstore: 6 rounds of 17 cells (the twin included) and 12 probes;
	// pebble-wal: 6 rounds of 8 cells and 6 probes.
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"mqstore aged", estimate("nats", 2) - estimate("nats", 0), (6*17 + 12) * perRun},
		{"pebble-wal recycled", estimate("pebble-wal", 2) - estimate("nats", 2), (6*8 + 6) * perRun},
		{"fresh stores", estimate("pebble-wal", 0) - estimate("nats", 0), 0},
	} {
		if d := c.got - c.want; d > 1e-6 || d < -1e-6 {
			t.Errorf("%s: %v s more, want %v", c.name, c.got, c.want)
		}
	}
}

func TestRepeatSeedsDifferAcrossRoundsOnly(t *testing.T) {
	a, b := repeatSeed(1, 3), repeatSeed(1, 3)
	if a != b || a == repeatSeed(1, 4) || a == repeatSeed(2, 3) {
		t.Error("repeat seeds")
	}
}

func TestNextProbe(t *testing.T) {
	for _, c := range []struct {
		lo, hi, guess float64
		near          bool
		want          float64
	}{
		{0, 0, 0, false, 1000},
		{0, 0, 5000, false, 5000},
		{1000, 0, 0, false, 1500},
		{1000, 0, 800, false, 1500}, // a guess below what was sustained is no use
		{0, 8000, 0, false, 4000},
		{1000, 16000, 0, false, 4000},     // geometric mean
		{1000, 16000, 9500, false, 9500},  // the guess from a saturated run's achieved rate first
		{1000, 16000, 20000, false, 4000}, // a guess above what saturated is no use
		{5000, 200000, 0, true, 6250},     // just above a guess that held, not halfway to a far saturated rung
		{5000, 5800, 0, true, math.Sqrt(5000 * 5800)},
	} {
		if got := nextProbe(c.lo, c.hi, c.guess, c.near); got != c.want {
			t.Errorf("nextProbe(%v, %v, %v, %v) = %v, want %v", c.lo, c.hi, c.guess, c.near, got, c.want)
		}
	}
}

// TestCellSaturation: dropped arrivals in one repeat saturate a cell; a
// shortfall of the schedule or rising latency in one repeat of five does
// not (one stall of the machine), in most of them it does.
func TestCellSaturation(t *testing.T) {
	rising := []load.Percentiles{{P50Ns: 1e3}, {P50Ns: 2e3}, {P50Ns: 3e3}, {P50Ns: 4e3}}
	flat := []load.Percentiles{{P50Ns: 1e3}, {P50Ns: 1e3}, {P50Ns: 1e3}, {P50Ns: 1e3}}
	rep := func(unstarted int64, lateNs int64, q []load.Percentiles) *runfile.Repeat {
		return &runfile.Repeat{Result: load.Result{Workload: load.Latency, Arrivals: 1000, Messages: 1000 - unstarted, Unstarted: unstarted,
			LastIntendedNs: 1e9, LastStartNs: 1e9 + lateNs, Quarters: q}}
	}
	ok := func() *runfile.Repeat { return rep(0, 1e3, flat) }
	for _, c := range []struct {
		name    string
		repeats []*runfile.Repeat
		want    string
	}{
		{"every repeat keeps up", []*runfile.Repeat{ok(), ok(), ok(), ok(), ok()}, ""},
		{"one repeat stalled at the end", []*runfile.Repeat{ok(), ok(), rep(0, 50e6, flat), ok(), ok()}, ""},
		{"one repeat rising", []*runfile.Repeat{ok(), rep(0, 1e3, rising), ok(), ok(), ok()}, ""},
		{"one repeat dropped arrivals", []*runfile.Repeat{ok(), ok(), ok(), rep(3, 1e3, flat), ok()}, "3 of 1000 arrivals"},
		{"most repeats late", []*runfile.Repeat{rep(0, 50e6, flat), rep(0, 60e6, flat), rep(0, 40e6, flat), ok(), ok()}, "kept 96.2% of its schedule"},
		{"most repeats rising", []*runfile.Repeat{rep(0, 1e3, rising), rep(0, 1e3, rising), rep(0, 1e3, rising), ok(), ok()}, "in 3 of 5 repeats"},
	} {
		got := strings.Join(cellSaturation(c.repeats), "; ")
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestEffectiveInFlight: --inflight 0 gives the open loop twice the
// largest closed-loop producer count (at least 64), so that it can offer
// twice what the closed loop completes; a given count is kept.
func TestEffectiveInFlight(t *testing.T) {
	cfg := DefaultConfig()
	if cfg.InFlight != 0 {
		t.Fatalf("default in flight %d, want 0 (chosen)", cfg.InFlight)
	}
	for _, c := range []struct {
		producers []int
		given     int
		want      int
	}{{[]int{1, 4, 16, 64, 256}, 0, 512}, {[]int{16}, 0, 64}, {[]int{1, 48}, 0, 96}, {nil, 0, 64}, {[]int{256}, 8, 8}} {
		cfg.Producers, cfg.InFlight = c.producers, c.given
		if got := EffectiveInFlight(&cfg); got != c.want {
			t.Errorf("producers %v, --inflight %d: %d in flight, want %d", c.producers, c.given, got, c.want)
		}
	}
	cfg = DefaultConfig()
	if err := Validate(&cfg); err != nil {
		t.Errorf("the default (chosen) in flight does not validate: %v", err)
	}
	cfg.InFlight = -1
	if err := Validate(&cfg); err == nil || !strings.Contains(err.Error(), "in flight -1") {
		t.Errorf("in flight -1: %v", err)
	}
}

// TestSweepRunsDistinctEffectivePolicies: the default grid's least-pages
// values are three policies that differ in what the engine runs — 0 is
// "whatever is pending", not the engine's default 4 under another name.
func TestSweepRunsDistinctEffectivePolicies(t *testing.T) {
	pols, err := SweepPolicies(DefaultSweepGrid(), StoreConfig{SegmentSizeBytes: 1 << 20}, []string{"mmap"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, p := range pols {
		o, err := storeOptions(p.Store, p.Backend, p.Flush)
		if err != nil {
			t.Fatal(err)
		}
		o = engine.EffectiveOptions(o)
		key := fmt.Sprintf("%s %v %v %d %v", p.Flush, o.FlushInterval, o.SyncFlushTimeout, o.FlushLeastPages, o.CommitInterval)
		if other, ok := seen[key]; ok {
			t.Errorf("policies %q and %q run the same engine options (%s)", other, p.Name, key)
		}
		seen[key] = p.Name
	}
}

// TestFailedFloorIsNotBlamedOnTheGenerator: a floor that could not keep
// its rate says the generator limits it; a floor that failed measured
// nothing and says only that the cells lack it.
func TestFailedFloorIsNotBlamedOnTheGenerator(t *testing.T) {
	r := &runner{file: &runfile.RunFile{}, progress: newProgress(nil, false, 0, 0)}
	ph := &phaseEnv{t: &target{label: "vda"}, pressure: "none"}
	floor := func(rate float64, status, reason string) *job {
		c := runfile.Cell{Name: fmt.Sprintf("floor-%.0f", rate), Workload: "latency", RatePerSec: rate,
			Repeats: []runfile.Repeat{{Warm: true, Status: status, Reason: reason}, {Status: status, Reason: reason}}}
		return &job{cell: c}
	}
	bad := r.recordFloors(ph, []*job{floor(1000, runfile.StatusFailed, "mqpeer exited: signal: killed")})
	why := bad[runfile.FloorMQBench][1000]
	if why == "" {
		t.Fatalf("a failed floor leaves its rate unmarked: %v", bad)
	}
	if strings.Contains(why, "the generator, not the system, limits this rate") || !strings.Contains(why, "not judged") {
		t.Errorf("a failed floor's reason: %q", why)
	}
}

// TestStoreCountsHowZerosWereWritten: a cell's store counters say how the
// zeros of the segments its store pre-wrote in the window were written —
// through the page cache for mmap, by the device or with O_DIRECT writes
// for uring-direct — one per segment pre-written (give or take the one
// being made at an edge of the window).
func TestStoreCountsHowZerosWereWritten(t *testing.T) {
	for _, backend := range []string{"mmap", "uring-direct"} {
		t.Run(backend, func(t *testing.T) {
			sp := load.Spec{Workload: load.Throughput, SizeBytes: 1024, Producers: 4, Duration: 300 * time.Millisecond}
			rep, options := storeRepeat(context.Background(), StoreConfig{SegmentSizeBytes: 1 << 20}, filepath.Join(t.TempDir(), "s"), backend, "sync", sp, nil)
			if rep.Status != runfile.StatusOK {
				if backend == "uring-direct" && options == nil {
					testenv.Skip(t, testenv.Uring, "uring-direct cannot run here: %s", rep.Reason)
				}
				t.Fatalf("%s: %s", rep.Status, rep.Reason)
			}
			st := rep.Store
			if options["PrewriteSegments"] == "off" || st.SegmentsPrewritten == 0 {
				t.Fatalf("no segment pre-written in the window (PrewriteSegments %s): %+v", options["PrewriteSegments"], st)
			}
			zeros, other := st.ZerosCached, st.ZerosDirect+st.ZerosByDevice // mmap: through the page cache
			if backend == "uring-direct" {
				zeros, other = other, zeros
			}
			if other != 0 || zeros+1 < st.SegmentsPrewritten || zeros > st.SegmentsPrewritten+1 {
				t.Errorf("%d segments pre-written, zeros counted %+v", st.SegmentsPrewritten, st)
			}
		})
	}
}
