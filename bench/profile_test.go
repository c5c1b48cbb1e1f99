package bench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/engine"
)

// TestStagesAreTheEngines: the run file's stage label and stages are the
// engine's.
func TestStagesAreTheEngines(t *testing.T) {
	want := []string{engine.StageAppend, engine.StageWait, engine.StageCommit, engine.StageFlush, engine.StageDispatch, engine.StagePrewrite, engine.StageReplicate}
	if runfile.StageLabel != engine.ProfileLabelKey || !slices.Equal(runfile.StageOrder, want) {
		t.Errorf("runfile: %q %v, engine: %q %v", runfile.StageLabel, runfile.StageOrder, engine.ProfileLabelKey, want)
	}
}

// stageProfile is a CPU profile with known samples: 10 ms in append,
// 20 ms waiting, 10 ms waiting inside the block profiler's recording,
// 20 ms flushing, 1 ms under a stage the table does not know, 39 ms with
// no label (the harness and the runtime) — 100 ms.
func stageProfile() *profile.Profile {
	fn := &profile.Function{ID: 1, Name: "github.com/mqstore/mqstore/engine.(*Store).Put"}
	loc := &profile.Location{ID: 1, Line: []profile.Line{{Function: fn}}}
	rec := &profile.Function{ID: 2, Name: "runtime.saveblockevent"}
	recLoc := &profile.Location{ID: 2, Line: []profile.Line{{Function: rec}}}
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Function: []*profile.Function{fn, rec}, Location: []*profile.Location{loc, recLoc}, PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}, Period: 1e7}
	for _, s := range []struct {
		stage    string
		ms       int64
		recorder bool
	}{{"append", 10, false}, {"wait", 20, false}, {"wait", 10, true}, {"flush", 12, false}, {"", 39, false}, {"flush", 8, false}, {"zz-new", 1, false}} {
		stack := []*profile.Location{loc}
		if s.recorder {
			stack = []*profile.Location{recLoc, loc}
		}
		sample := &profile.Sample{Location: stack, Value: []int64{s.ms / 10, s.ms * 1e6}}
		if s.stage != "" {
			sample.Label = map[string][]string{runfile.StageLabel: {s.stage}, "other-key": {"x"}}
		}
		p.Sample = append(p.Sample, sample)
	}
	return p
}

func TestStagesOfACPUProfile(t *testing.T) {
	// Through the wire format, as profiles/<run>/<cell>.cpu.pprof is read.
	var buf bytes.Buffer
	if err := stageProfile().Write(&buf); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	s, err := SummarizeProfile(p, "cpu", 8)
	if err != nil {
		t.Fatal(err)
	}
	// The run did 1000 messages on 200 ms of CPU (getrusage): 200 µs/msg.
	perMessage(&s, 200e6, 1000)
	type stageWant struct {
		stage         string
		value         int64
		pct, usPerMsg float64
		samples       int64 // the profile's "samples" counts: ms / 10, rounded down per sample
	}
	want := []stageWant{{"append", 10e6, 10, 20, 1}, {"wait", 20e6, 20, 40, 2}, {"flush", 20e6, 20, 40, 1}, {"zz-new", 1e6, 1, 2, 0},
		{runfile.StageProfiler, 10e6, 10, 20, 1}, {"other", 39e6, 39, 78, 3}}
	if len(s.Stages) != len(want) || s.CPUPerMsgNs != 200e3 || s.Messages != 1000 || s.Samples != 8 {
		t.Fatalf("stages %+v, %v ns/msg, %d samples", s.Stages, s.CPUPerMsgNs, s.Samples)
	}
	for i, w := range want {
		g := s.Stages[i]
		if g.Stage != w.stage || g.Value != w.value || math.Abs(g.Pct-w.pct) > 1e-9 || math.Abs(g.UsPerMsg-w.usPerMsg) > 1e-9 || g.Samples != w.samples {
			t.Errorf("stage %d: %+v, want %+v", i, g, w)
		}
	}
	// No CPU from the run: the profile's own 100 ms over the messages.
	s2, _ := SummarizeProfile(p, "cpu", 8)
	perMessage(&s2, 0, 1000)
	if s2.CPUPerMsgNs != 100e3 || math.Abs(s2.Stages[1].UsPerMsg-20) > 1e-9 || s2.CPUSource != "the CPU profile's samples" {
		t.Errorf("from the profile's samples: %v ns/msg, wait %+v (%s)", s2.CPUPerMsgNs, s2.Stages[1], s2.CPUSource)
	}
	// Without a single label there is nothing to split.
	for _, sample := range p.Sample {
		sample.Label = nil
	}
	if s3, _ := SummarizeProfile(p, "cpu", 8); s3.Stages != nil {
		t.Errorf("an unlabelled profile has stages %+v", s3.Stages)
	}
}

// TestProfiledRunIsWarm: the profiled run gets the measured repeats'
// warm-up before the profilers start, on the same store — the profile is
// of the steady state, not of a cold store.
func TestProfiledRunIsWarm(t *testing.T) {
	cfg := testConfig(t)
	cfg.Warmup, cfg.ProfileDuration = 30*time.Millisecond, 30*time.Millisecond
	sys := system{backend: "mmap", size: 1024, pol: Policy{Flush: "async", Store: cfg.Store}}
	var putsBefore uint64
	hooked := false
	rep := profileRepeat(context.Background(), &cfg, filepath.Join(t.TempDir(), "p"), sys, func(s *engine.Store, run func(window func() func())) {
		hooked, putsBefore = true, s.Stats().Puts
		run(nil)
	})
	if !hooked || rep.Status == runfile.StatusFailed {
		t.Fatalf("profiled run: hooked %v, %s %s", hooked, rep.Status, rep.Reason)
	}
	if putsBefore == 0 {
		t.Error("the profilers started on a store the warm-up had not written")
	}
	if d := rep.Result.Durability; d == nil || d.WrittenStartBytes == 0 {
		t.Errorf("the profiled window did not follow the warm-up on the same store: %+v", d)
	}
}

//go:noinline
func spinBeforeTheWindow(d time.Duration) { spinFor(d) }

//go:noinline
func spinInTheWindow(d time.Duration) { spinFor(d) }

//go:noinline
func spinAfterTheWindow(d time.Duration) { spinFor(d) }

// spinFor burns CPU for d of wall time.
func spinFor(d time.Duration) {
	x := 1
	for start := time.Now(); time.Since(start) < d; {
		for range 1000 {
			x ^= x<<1 + 1
		}
	}
	spinSink = x
}

var spinSink int

// TestProfileCoversTheWindowAlone: the profiles of a profiled run hold the
// measured window (what its CPU per message counts) — not the work before
// the window opens or after it ends (the GC, the histograms' merge) — and a
// run that never opens its window is an error, not an empty profile.
func TestProfileCoversTheWindowAlone(t *testing.T) {
	dir := t.TempDir()
	sums, err := profileRun(dir, "cell", func(window func() func()) {
		spinBeforeTheWindow(100 * time.Millisecond)
		end := window()
		// 300 ms of wall time and at least 200 ms of the process's CPU (a
		// loaded machine gives a spinning thread less): 20 samples or more
		// at pprof's 100 Hz.
		for cpu0, start := processCPU(), time.Now(); time.Since(start) < 300*time.Millisecond || (processCPU()-cpu0 < 200*time.Millisecond && time.Since(start) < 10*time.Second); {
			spinInTheWindow(10 * time.Millisecond)
		}
		end()
		spinAfterTheWindow(100 * time.Millisecond)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != len(ProfileKinds) || sums[0].Kind != "cpu" || !sums[0].WindowOnly {
		t.Fatalf("summaries %+v", sums)
	}
	f, err := os.Open(filepath.Join(dir, "cell.cpu.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, s := range p.Sample {
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				seen[line.Function.Name[strings.LastIndex(line.Function.Name, ".")+1:]] = true
			}
		}
	}
	if !seen["spinInTheWindow"] || seen["spinBeforeTheWindow"] || seen["spinAfterTheWindow"] {
		t.Errorf("in the profile: in the window %v, before it %v, after it %v (want only the window)",
			seen["spinInTheWindow"], seen["spinBeforeTheWindow"], seen["spinAfterTheWindow"])
	}
	if _, err := profileRun(t.TempDir(), "cell", func(func() func()) {}); err == nil {
		t.Error("a run that never opened its window profiled without an error")
	}
}

// TestProfilerClockReads: the cycle-counter reads that time a channel wait
// for the block profiler are the profiler's; the scheduler's own reads are
// not.
func TestProfilerClockReads(t *testing.T) {
	fn := func(id uint64, name string) (*profile.Function, *profile.Location) {
		f := &profile.Function{ID: id, Name: name}
		return f, &profile.Location{ID: id, Line: []profile.Line{{Function: f}}}
	}
	ticks, ticksLoc := fn(1, "runtime.cputicks")
	recv, recvLoc := fn(2, "runtime.chanrecv")
	cas, casLoc := fn(3, "runtime.casgstatus")
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Function: []*profile.Function{ticks, recv, cas}, Location: []*profile.Location{ticksLoc, recvLoc, casLoc},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}, Period: 1e7}
	wait := map[string][]string{runfile.StageLabel: {"wait"}}
	p.Sample = []*profile.Sample{
		{Location: []*profile.Location{ticksLoc, recvLoc}, Value: []int64{3, 3e7}, Label: wait},
		{Location: []*profile.Location{ticksLoc, casLoc}, Value: []int64{1, 1e7}, Label: wait},
	}
	s, err := SummarizeProfile(p, "cpu", 8)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, st := range s.Stages {
		got[st.Stage] = st.Value
	}
	if got[runfile.StageProfiler] != 3e7 || got["wait"] != 1e7 {
		t.Errorf("stages %+v: want the profiler's clock reads (30 ms) apart from the scheduler's (10 ms, wait)", s.Stages)
	}
}

// TestProfileProducers: the profiled run is at --profile-producers when it
// is set, at the first of --producers otherwise (as runs from before the
// option were), and a count that is not among --producers is refused by
// name.
func TestProfileProducers(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Producers = []int{4, 64, 256}
	if got := cfg.ProfiledProducers(); got != 4 {
		t.Errorf("by default the run profiles %d producers, want the first of --producers, 4", got)
	}
	cfg.ProfileProducers = 256
	if got := cfg.ProfiledProducers(); got != 256 {
		t.Errorf("--profile-producers 256 profiles %d producers", got)
	}
	if err := Validate(&cfg); err != nil {
		t.Fatalf("--profile-producers 256 with --producers 4,64,256: %v", err)
	}
	for _, n := range []int{16, -1} {
		cfg.ProfileProducers = n
		if err := Validate(&cfg); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("--profile-producers %d", n)) {
			t.Errorf("--profile-producers %d with --producers 4,64,256: %v, want it refused by name", n, err)
		}
	}
}
