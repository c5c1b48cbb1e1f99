package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"golang.org/x/perf/benchfmt"
)

// histogramOf records each value in µs.
func histogramOf(us ...int) *load.Histogram {
	h := load.NewHistogram()
	for _, v := range us {
		h.Record(time.Duration(v) * time.Microsecond)
	}
	return h
}

// fakeRun builds a run with known figures: two store cells, a peer, a
// failed cell and limits.
func fakeRun() *RunFile {
	cfg := DefaultConfig()
	cfg.Backends, cfg.Sizes, cfg.Flushes, cfg.Repeat = []string{"mmap", "transient"}, []int{1024}, []string{"async"}, 3
	f := &RunFile{Schema: SchemaVersion, ID: "20250101-000000-test", Command: "mqbench run",
		StartedAt: time.Unix(1735689600, 0).UTC(), FinishedAt: time.Unix(1735689660, 0).UTC(),
		Machine: Machine{Host: "test", OS: "linux", Arch: "amd64", CPUs: 2, CPUModel: "Test CPU", Kernel: "6.1", GoVersion: "go1.26", Commit: "0123456789abcdef"},
		Devices: []Device{{Dir: ".", Device: "vda", FSType: "ext4"}}, Config: cfg,
		Cells: []Cell{}, Peers: []Cell{}, Limits: []Limit{}, Ratios: []Ratio{}, Profiles: []ProfileSummary{}}
	mk := func(workload, backend string, msgsPerSec []float64) Cell {
		c := Cell{Name: CellName(workload, backend, 1024, "async", "none"), Workload: workload, Backend: backend, SizeBytes: 1024,
			Flush: "async", Pressure: "none", Producers: 4, FlushParams: map[string]string{"flushInterval": "500ms"}}
		for i, rate := range msgsPerSec {
			res := load.Result{Workload: load.Workload(workload), Messages: int64(rate), PayloadBytes: int64(rate) * 1024,
				ElapsedNs: 1e9, CPUUserNs: 5e8, Mallocs: uint64(rate) / 10, Service: histogramOf(10*(i+1), 20, 30, 40, 1000)}
			if workload == "latency" {
				res.Latency, res.DispatchLag, res.Arrivals = histogramOf(15*(i+1), 25, 35, 45, 2000), histogramOf(1, 2), int64(rate)
				c.TargetRatePerSec, c.InFlight, c.Arrival = rate, 8, "poisson"
			}
			c.Repeats = append(c.Repeats, Repeat{Index: i, Status: StatusOK, Result: res, Figures: figuresOf(&res)})
		}
		finishCell(&c)
		return c
	}
	f.Cells = append(f.Cells, mk("throughput", "mmap", []float64{300e3, 100e3, 200e3}), mk("latency", "mmap", []float64{100e3, 100e3, 100e3}))
	bad := Cell{Name: "throughput-uring-1024-async", Workload: "throughput", Backend: "uring", SizeBytes: 1024, Flush: "async", Pressure: "none",
		Repeats: []Repeat{failedRepeat(os.ErrPermission)}}
	finishCell(&bad)
	f.Cells = append(f.Cells, bad)
	f.Peers = append(f.Peers, mk("throughput", "nats", []float64{50e3, 40e3, 60e3}))
	copyLimit := Limit{Name: LimitCopyCeiling, Tool: "mqbench", SizeBytes: 1024, Status: "",
		Repeats: []Figures{{MBPerSec: 1000}, {MBPerSec: 2000}, {MBPerSec: 4000}}}
	finishLimit(&copyLimit)
	seq := Limit{Name: LimitDeviceSeq, Tool: "uring", SizeBytes: 1 << 20, Repeats: []Figures{{MBPerSec: 2048}}}
	finishLimit(&seq)
	f.Limits = append(f.Limits, copyLimit, seq, Limit{Name: LimitFioSeq, Status: StatusSkipped, Reason: "fio is not on PATH"})
	f.Profiles = append(f.Profiles, ProfileSummary{Cell: "throughput-mmap-1024-async", Kind: "cpu", SampleType: "cpu", Unit: "nanoseconds",
		Total: 1e9, Top: []FunctionCost{{Function: "runtime.memmove", Flat: 4e8, FlatPct: 40, Cum: 4e8, CumPct: 40}}})
	ComputeRatios(f)
	return f
}

func TestMedianMinMaxAndFailedCells(t *testing.T) {
	f := fakeRun()
	thr := f.Cells[0]
	if thr.Status != StatusOK || thr.MsgsPerSec != 200e3 || thr.Min.MsgsPerSec != 100e3 || thr.Max.MsgsPerSec != 300e3 {
		t.Errorf("throughput cell: status %s median %v [%v–%v], want ok 200k [100k–300k]", thr.Status, thr.MsgsPerSec, thr.Min.MsgsPerSec, thr.Max.MsgsPerSec)
	}
	if thr.AllocsPerMsg != 0.1 || thr.CPUSecPerGiB == 0 {
		t.Errorf("allocs/msg %v cpu %v", thr.AllocsPerMsg, thr.CPUSecPerGiB)
	}
	if Median([]float64{4, 1, 3, 2}) != 2.5 || Median([]float64{5}) != 5 {
		t.Error("median")
	}
	bad := f.Cells[2]
	if bad.Status != StatusFailed || bad.MsgsPerSec != 0 || !strings.Contains(bad.Reason, "permission") {
		t.Errorf("failed cell: %+v", bad)
	}
	// One failing repeat among good ones fails the whole cell: no number.
	c := f.Cells[0]
	c.Repeats = append(c.Repeats, failedRepeat(os.ErrClosed))
	c.Status = ""
	finishCell(&c)
	if c.Status != StatusFailed || c.MsgsPerSec != 0 {
		t.Errorf("a cell with a failed repeat reports %s %v", c.Status, c.MsgsPerSec)
	}
	lat := f.Cells[1]
	if lat.P50Ns == 0 || lat.ServiceP50Ns == 0 || lat.CPUSecPerGiB != 0 || lat.P50Ns < lat.ServiceP50Ns {
		t.Errorf("latency cell figures: %+v", lat.Figures)
	}
}

func TestRatiosOnKnownFigures(t *testing.T) {
	f := fakeRun()
	find := func(kind, against string) Ratio {
		for _, r := range f.Ratios {
			if r.Kind == kind && r.Against == against && r.Cell == "throughput-mmap-1024-async" {
				return r
			}
		}
		t.Fatalf("no %s ratio against %s in %+v", kind, against, f.Ratios)
		return Ratio{}
	}
	// Store MB/s: 1024 B × 200k/s = 204.8 MB/s median, [102.4–307.2].
	// Copy ceiling 2000 [1000–4000]: 0.1024 [0.0256–0.3072].
	r := find("copy-ceiling", LimitCopyCeiling)
	if !near(r.Median, 0.1024) || !near(r.Low, 0.0256) || !near(r.High, 0.3072) {
		t.Errorf("copy ratio %+v", r)
	}
	if r := find("device", LimitDeviceSeq); !near(r.Median, 204.8/2048) {
		t.Errorf("device ratio %+v", r)
	}
	// Peer: 200k ÷ 50k = 4, [100k/60k, 300k/40k].
	if r := find("peer", "throughput-nats-1024-async"); !near(r.Median, 4) || !near(r.Low, 100.0/60) || !near(r.High, 7.5) {
		t.Errorf("peer ratio %+v", r)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestRunFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	f := fakeRun()
	if err := WriteRunFile(dir, f); err != nil {
		t.Fatal(err)
	}
	back, err := ReadRunFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(f)
	b, _ := json.Marshal(back)
	if !bytes.Equal(a, b) {
		t.Fatal("run.json changed in a round trip")
	}
	if !back.Cells[1].Repeats[2].Result.Latency.Equal(f.Cells[1].Repeats[2].Result.Latency) {
		t.Error("a latency histogram changed in a round trip")
	}
	var raw map[string]any
	data, _ := os.ReadFile(filepath.Join(dir, "run.json"))
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	if raw["schema"] != float64(1) {
		t.Errorf("schema = %v", raw["schema"])
	}
	cell := raw["cells"].([]any)[0].(map[string]any)
	for _, k := range []string{"workload", "backend", "sizeBytes", "flush", "pressure", "producers", "repeats", "msgsPerSec", "mbPerSec",
		"p50Ns", "p99Ns", "p999Ns", "p9999Ns", "maxNs", "cpuSecPerGiB", "allocsPerMsg", "min", "max", "flushParams"} {
		if _, ok := cell[k]; !ok {
			t.Errorf("cells[0] lacks %q", k)
		}
	}
	f.Schema = 2
	_ = WriteRunFile(dir, f)
	if _, err := ReadRunFile(dir); err == nil {
		t.Error("schema 2 accepted")
	}
}

func TestBenchTxtParsesWithBenchfmt(t *testing.T) {
	f := fakeRun()
	var buf bytes.Buffer
	if err := WriteBenchTxt(&buf, f); err != nil {
		t.Fatal(err)
	}
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
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	thr := results["MQBench/workload=throughput/backend=mmap/size=1024/flush=async/pressure=none"]
	if len(thr) != 3 {
		t.Fatalf("throughput lines %d, want one per repeat (3); have %v", len(thr), keys(results))
	}
	want := []float64{300e3, 100e3, 200e3}
	for i, res := range thr {
		if v, ok := res.Value("msgs/s"); !ok || v != want[i] {
			t.Errorf("repeat %d msgs/s = %v, want %v", i, v, want[i])
		}
		if v, _ := res.Value("B/s"); !near(v/1e6, want[i]*1024/1e6) { // benchfmt tidies MB/s into B/s
			t.Errorf("repeat %d MB/s = %v", i, v/1e6)
		}
		if res.Iters != int(want[i]) {
			t.Errorf("iterations %d", res.Iters)
		}
		if v, ok := res.Value("sec/op"); !ok || !near(v, 1/want[i]) {
			t.Errorf("sec/op %v (benchfmt converts ns/op)", v)
		}
	}
	if lat := results["MQBench/workload=latency/backend=mmap/size=1024/flush=async/pressure=none"]; len(lat) != 3 {
		t.Errorf("latency lines: %d", len(lat))
	} else if v, _ := lat[0].Value("p99.9-sec"); v <= 0 || math.Abs(v*1e9/float64(f.Cells[1].Repeats[0].Figures.P999Ns)-1) > 1e-5 { // ns tidied to sec
		t.Error("latency line lacks p99.9")
	}
	if len(results["MQBench/workload=throughput/backend=nats/size=1024/flush=async/pressure=none"]) != 3 {
		t.Error("peer lines missing")
	}
	if len(results["MQBenchLimit/limit=copy-ceiling/size=1024"]) != 3 {
		t.Error("limit lines missing")
	}
	for name := range results {
		if strings.Contains(name, "uring") {
			t.Errorf("failed cell written as a benchmark line: %s", name)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestReportRegeneratesIdenticalSummary(t *testing.T) {
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
	for _, name := range []string{"latency-async.png", "throughput-async.png", "latency-mmap-1024-async.hgrm", "throughput-nats-1024-async.hgrm"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", name, err)
		}
	}
	os.Remove(filepath.Join(dir, "summary.md"))
	if _, err := Report(dir); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(filepath.Join(dir, "summary.md"))
	bench2, _ := os.ReadFile(filepath.Join(dir, "bench.txt"))
	if !bytes.Equal(first, second) || !bytes.Equal(bench1, bench2) {
		t.Fatal("report did not regenerate an identical summary.md and bench.txt")
	}
	s := string(first)
	for _, want := range []string{"## Throughput", "## Latency", "200k [100k–300k]", "throughput-uring-1024-async`: **failed**",
		"store ÷ page-cache copy ceiling", "mqstore ÷ peers", "nats (peer)", "![latency-async](latency-async.png)", "runtime.memmove 40.0%"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
}

func TestCompareMarksOverlap(t *testing.T) {
	a, b := fakeRun(), fakeRun()
	for i := range b.Cells[0].Repeats {
		b.Cells[0].Repeats[i].Figures.MsgsPerSec *= 10 // B clearly faster
	}
	b.Cells[0].Status = ""
	finishCell(&b.Cells[0])
	out := Compare(a, b)
	if !strings.Contains(out, "| throughput-mmap-1024-async | msgsPerSec | 200k [100k–300k] | 2M [1M–3M] | 10× |  |") {
		t.Errorf("compare row for a clear difference:\n%s", out)
	}
	if !strings.Contains(out, "| latency-mmap-1024-async | p50Ns |") || !strings.Contains(out, "| 1× | ~ |") {
		t.Errorf("compare row for identical cells should be 1× and ~:\n%s", out)
	}
}

func TestParseFio(t *testing.T) {
	out := []byte(`note: both iodepth >= 1 and synchronous I/O engine are selected
{"fio version": "fio-3.33", "jobs": [{"error": 0,
 "write": {"io_bytes": 4194304, "bw_bytes": 25000000, "iops": 6100.5, "runtime": 167, "lat_ns": {"N": 1024, "mean": 10000, "max": 90000, "percentile": {}}},
 "sync": {"lat_ns": {"N": 1023, "mean": 150000, "max": 621094, "percentile": {"50.000000": 154624, "90.000000": 199680, "99.000000": 246784, "99.900000": 395264, "99.990000": 618496}}}}]}`)
	o, err := parseFio(out)
	if err != nil {
		t.Fatal(err)
	}
	s := fioSyncFigures(o)
	if s.P50Ns != 154624 || s.P999Ns != 395264 || s.P9999Ns != 618496 || s.MaxNs != 621094 || !near(s.MsgsPerSec, 1e9/160000) {
		t.Errorf("sync figures %+v", s)
	}
	if q := fioSeqFigures(o); q.MBPerSec != 25 {
		t.Errorf("seq figures %+v", q)
	}
	if _, err := parseFio([]byte(`{"jobs": [{"error": 5}]}`)); err == nil {
		t.Error("a failed fio job parsed")
	}
}

// fakeProber stands in for the io_uring probes.
type fakeProber struct{}

func (fakeProber) SequentialWrite(_ context.Context, _ string, total int64, _, _ int) (int64, time.Duration, error) {
	return total, time.Duration(total), nil // 1 byte per ns = 1000 MB/s
}

func (fakeProber) SyncLatency(_ context.Context, _ string, count int) ([]time.Duration, error) {
	out := make([]time.Duration, count)
	for i := range out {
		out[i] = time.Duration(i+1) * time.Microsecond
	}
	return out, nil
}

func TestDeviceLimitsWithFakeProber(t *testing.T) {
	seq, err := deviceSeq(context.Background(), fakeProber{}, t.TempDir(), 64<<20)
	if err != nil || !near(seq.MBPerSec, 1000) {
		t.Errorf("seq %+v %v", seq, err)
	}
	sync, err := deviceSync(context.Background(), fakeProber{}, t.TempDir(), 1000)
	if err != nil || sync.P50Ns < 499_000 || sync.P50Ns > 501_000 || sync.MaxNs < 999_000 {
		t.Errorf("sync %+v %v", sync, err)
	}
}

func TestCopyCeiling(t *testing.T) {
	f, err := CopyCeiling(context.Background(), t.TempDir(), 1024, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	if f.MBPerSec <= 0 || f.MsgsPerSec <= 0 {
		t.Errorf("copy ceiling %+v", f)
	}
	if rb := recordBytes(1024); rb <= 1024 || rb > 1024+256 {
		t.Errorf("record of a 1 KiB body is %d bytes", rb)
	}
}

// TestEndToEndRun runs one backend for about a second: throughput, then
// latency at half of it, with the profiles, and checks every output.
func TestEndToEndRun(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end run skipped in -short")
	}
	root := t.TempDir()
	cfg := DefaultConfig()
	cfg.Backends, cfg.Sizes, cfg.Flushes, cfg.Peers = []string{"mmap"}, []int{512}, []string{"async"}, nil
	cfg.Duration, cfg.Warmup, cfg.Repeat, cfg.ProfileDuration = 300*time.Millisecond, 50*time.Millisecond, 1, 200*time.Millisecond
	cfg.Dir, cfg.Out, cfg.ProfilesRoot, cfg.NoLimits = root, filepath.Join(root, "results"), filepath.Join(root, "profiles"), true
	cfg.Store.SegmentSizeBytes = 16 << 20
	var progress bytes.Buffer
	f, dir, err := Run(context.Background(), cfg, RunOptions{Progress: &progress})
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	if len(f.Cells) != 2 {
		t.Fatalf("%d cells", len(f.Cells))
	}
	for _, c := range f.Cells {
		if c.Status != StatusOK || c.MsgsPerSec <= 0 || c.P50Ns <= 0 {
			t.Errorf("%s: %s %s msgs/s %v", c.Name, c.Status, c.Reason, c.MsgsPerSec)
		}
	}
	if lat := f.Cells[1]; !near(lat.TargetRatePerSec, 0.5*f.Cells[0].MsgsPerSec) {
		t.Errorf("latency target %v, want half of %v", lat.TargetRatePerSec, f.Cells[0].MsgsPerSec)
	}
	for _, name := range []string{"run.json", "bench.txt", "summary.md", "throughput-mmap-512-async.hgrm", "latency-mmap-512-async.hgrm", "latency-async.png"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	for _, kind := range ProfileKinds {
		if _, err := os.Stat(filepath.Join(cfg.ProfilesRoot, f.ID, "throughput-mmap-512-async."+kind+".pprof")); err != nil {
			t.Error(err)
		}
	}
	if len(f.Profiles) != 4 || len(f.Profiles[0].Top) == 0 {
		t.Errorf("profile summaries: %+v", f.Profiles)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 2 {
		t.Errorf("work directory left behind: %v", entries)
	}
	if !strings.Contains(progress.String(), "[2/2] latency-mmap-512-async ok") {
		t.Errorf("progress:\n%s", progress.String())
	}
}

func TestInterruptedRunWritesWhatFinished(t *testing.T) {
	root := t.TempDir()
	cfg := DefaultConfig()
	cfg.Backends, cfg.Sizes, cfg.Flushes, cfg.Peers, cfg.Workloads = []string{"mem"}, []int{256}, []string{"async", "sync"}, nil, []string{"throughput"}
	cfg.Duration, cfg.Warmup, cfg.Repeat, cfg.Profile, cfg.NoLimits = 200*time.Millisecond, 0, 1, false, true
	cfg.Dir, cfg.Out, cfg.Store.SegmentSizeBytes = root, filepath.Join(root, "results"), 16<<20
	ctx, cancel := context.WithCancel(context.Background())
	var progress syncBuffer
	progress.onWrite = func(s string) {
		if strings.Contains(s, "throughput-mem-256-async ok") {
			cancel() // during the second cell
		}
	}
	f, dir, err := Run(ctx, cfg, RunOptions{Progress: &progress})
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("err = %v", err)
	}
	back, rerr := ReadRunFile(dir)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if !back.Interrupted || len(back.Cells) == 0 || back.Cells[0].Status != StatusOK {
		t.Fatalf("interrupted run.json: interrupted=%v cells=%d", back.Interrupted, len(back.Cells))
	}
	if len(f.Cells) == 2 && f.Cells[1].Status == StatusOK {
		t.Error("the cell running at Ctrl-C reports figures")
	}
}

type syncBuffer struct {
	bytes.Buffer
	onWrite func(string)
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.onWrite(string(p))
	return b.Buffer.Write(p)
}
