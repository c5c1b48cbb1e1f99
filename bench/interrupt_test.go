package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/bench/runfile"
)

// roundsRunner is a runner with just what runRounds and finishJobs use.
func roundsRunner(t *testing.T, repeat int) *runner {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Repeat = repeat
	return &runner{cfg: cfg, rng: rand.New(rand.NewPCG(1, 2)), progress: newProgress(nil, false, 0, 0), runDir: t.TempDir(),
		file: &runfile.RunFile{Schema: runfile.SchemaVersion, Cells: []runfile.Cell{}, Peers: []runfile.Cell{}}}
}

// okJob is a job whose every repeat is ok; onRun is called before each.
func okJob(name string, onRun func(round int)) *job {
	c := runfile.Cell{Name: name, Workload: "throughput", Backend: "mem", SizeBytes: 1024, Flush: "async", Pressure: PressureNone, Producers: 1, Repeats: []runfile.Repeat{}}
	return &job{cell: c, run: func(_ context.Context, _ *runfile.Cell, round int, _ uint64) runfile.Repeat {
		if onRun != nil {
			onRun(round)
		}
		return runfile.Repeat{Status: runfile.StatusOK, Figures: runfile.Figures{MsgsPerSec: 1000 + float64(round), DurableMBps: 1}}
	}}
}

// TestCutShortCellsAreInterrupted: after Ctrl-C the later rounds skip
// every job without a repeat; a cell left with fewer measured repeats than
// --repeat is interrupted, without figures — not ok on the repeats it has.
func TestCutShortCellsAreInterrupted(t *testing.T) {
	r := roundsRunner(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jobs := []*job{okJob("a", nil), okJob("b", func(round int) {
		if round == 2 {
			cancel() // during the second measured round: the jobs after it in that round never run it
		}
	}), okJob("c", nil)}
	r.runRounds(ctx, &phaseEnv{}, jobs)
	r.finishJobs(ctx, jobs, nil)
	if len(r.file.Cells) != 3 {
		t.Fatalf("recorded %d cells, want 3", len(r.file.Cells))
	}
	for _, c := range r.file.Cells {
		n := len(c.MeasuredRepeats())
		if n >= 3 {
			t.Fatalf("%s ran all %d measured repeats: the test did not cut it short", c.Name, n)
		}
		if c.Status != runfile.StatusInterrupted || c.Measured() || c.MsgsPerSec != 0 || c.CILevel != 0 {
			t.Errorf("%s with %d of 3 measured repeats: status %q, msgs/s %v, ciLevel %v — want interrupted, no figures", c.Name, n, c.Status, c.MsgsPerSec, c.CILevel)
		}
		if want := fmt.Sprintf("after %d of its 3 measured repeats", n); !strings.Contains(c.Reason, want) {
			t.Errorf("%s: reason %q, want it to say %q", c.Name, c.Reason, want)
		}
	}
}

// TestCompleteCellsStayOK: without an interruption every cell runs all
// its repeats and keeps its figures.
func TestCompleteCellsStayOK(t *testing.T) {
	r := roundsRunner(t, 3)
	jobs := []*job{okJob("a", nil), okJob("b", nil)}
	ctx := context.Background()
	r.runRounds(ctx, &phaseEnv{}, jobs)
	r.finishJobs(ctx, jobs, nil)
	for _, c := range r.file.Cells {
		if c.Status != runfile.StatusOK || len(c.MeasuredRepeats()) != 3 || c.MsgsPerSec != 1002 {
			t.Errorf("%s: status %q, %d measured repeats, msgs/s %v", c.Name, c.Status, len(c.MeasuredRepeats()), c.MsgsPerSec)
		}
	}
}

// TestInterruptedAfterTheLastRoundKeepsFigures: Ctrl-C after every job
// ran its last round cuts nothing short.
func TestInterruptedAfterTheLastRoundKeepsFigures(t *testing.T) {
	r := roundsRunner(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	jobs := []*job{okJob("a", nil), okJob("b", nil)}
	r.runRounds(ctx, &phaseEnv{}, jobs)
	cancel()
	markCutShort(ctx, jobs, r.cfg.Repeat)
	r.finishJobs(ctx, jobs, nil)
	for _, c := range r.file.Cells {
		if c.Status != runfile.StatusOK || len(c.MeasuredRepeats()) != 2 {
			t.Errorf("%s: status %q with %d measured repeats", c.Name, c.Status, len(c.MeasuredRepeats()))
		}
	}
}
