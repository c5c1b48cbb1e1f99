package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/bench/runfile"
)

// floorTestRunner is a runner with what floorJobs, floorRun and
// recordFloors use: a 1000 msgs/s ladder of 100 ms windows.
func floorTestRunner(isolate bool) *runner {
	cfg := DefaultConfig()
	cfg.Rates, cfg.InFlight, cfg.Warmup = []float64{1000}, 4, 10*time.Millisecond
	return &runner{cfg: cfg, isolate: isolate, window: 100 * time.Millisecond, file: &runfile.RunFile{Floors: []runfile.Floor{}},
		progress: newProgress(nil, false, 0, 0)}
}

// fakeCgroup is a directory that hostctl.JoinCgroup can write a pid into
// (its cgroup.procs), standing in for the swap phase's memory cgroup.
func fakeCgroup(t *testing.T) (dir string, members func() []int) {
	t.Helper()
	dir = t.TempDir()
	procs := filepath.Join(dir, "cgroup.procs")
	if err := os.WriteFile(procs, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, func() []int {
		b, err := os.ReadFile(procs)
		if err != nil {
			t.Fatal(err)
		}
		var pids []int
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("cgroup.procs: %q", b)
			}
			pids = append(pids, pid)
		}
		return pids
	}
}

// TestIsolatedFloorRunsInTheStoresCgroups: with the store's repeats in
// workers (swap pressure in the run), mqstore's floor runs in a worker
// process placed in the same cgroups as the store's repeats of its phase
// (runJob gives them ph.env.cgroups()) — not in mqbench's process, outside
// the memory cgroup, where the generator never swaps with the store — and
// is recorded as the floor of the process that drives mqstore's cells, with
// a note saying where that is.
func TestIsolatedFloorRunsInTheStoresCgroups(t *testing.T) {
	cg, members := fakeCgroup(t)
	r := floorTestRunner(true)
	ph := &phaseEnv{t: &target{work: t.TempDir(), label: "dir"}, pressure: PressureSwap, env: &pressureEnv{memCgroup: cg}}
	if got := ph.env.cgroups(); len(got) != 1 || got[0] != cg {
		t.Fatalf("the store's cgroups %v, want [%s]", got, cg)
	}
	jobs := r.floorJobs(ph, false)
	if len(jobs) != 1 {
		t.Fatalf("%d floor jobs, want 1", len(jobs))
	}
	j := jobs[0]
	for round := 0; round <= 1; round++ {
		rep := j.run(context.Background(), &j.cell, round, repeatSeed(1, round))
		if rep.Status != runfile.StatusOK && rep.Status != runfile.StatusSaturated {
			t.Fatalf("floor repeat %d: %s: %s", round, rep.Status, rep.Reason)
		}
		if rep.Result.Arrivals == 0 || rep.Result.TargetRatePerSec != 1000 {
			t.Fatalf("floor repeat %d ran no schedule at 1000 msgs/s: %+v", round, rep.Result)
		}
		rep.Index, rep.Warm = round, round == 0
		j.cell.Repeats = append(j.cell.Repeats, rep)
	}
	pids := members()
	if len(pids) == 0 {
		t.Fatal("the floor ran outside the store's cgroups: no process joined them")
	}
	for _, pid := range pids {
		if pid == os.Getpid() {
			t.Fatalf("mqbench's own process (%d) was put in the store's cgroup instead of a worker", pid)
		}
	}
	r.recordFloors(ph, jobs)
	if len(r.file.Floors) != 1 || r.file.Floors[0].Process != runfile.FloorMQBench {
		t.Fatalf("floors %+v: want one of process %q (the process that drives mqstore's cells, which the report matches them with)", r.file.Floors, runfile.FloorMQBench)
	}
	if notes := strings.Join(r.file.Notes, "\n"); !strings.Contains(notes, "worker process") || !strings.Contains(notes, "cgroups") {
		t.Errorf("the notes do not say where the floors ran:\n%s", notes)
	}
}

// TestFloorInMQBenchWithoutIsolation: without workers for the store, the
// floor runs in mqbench's process (nothing joins a cgroup) and the run
// has no note about floor workers.
func TestFloorInMQBenchWithoutIsolation(t *testing.T) {
	cg, members := fakeCgroup(t)
	r := floorTestRunner(false)
	ph := &phaseEnv{t: &target{work: t.TempDir(), label: "dir"}, pressure: PressureDirty, env: &pressureEnv{memCgroup: cg}}
	jobs := r.floorJobs(ph, false)
	rep := jobs[0].run(context.Background(), &jobs[0].cell, 1, repeatSeed(1, 1))
	if rep.Result.Arrivals == 0 {
		t.Fatalf("the floor ran no schedule: %s %s", rep.Status, rep.Reason)
	}
	if pids := members(); len(pids) != 0 {
		t.Fatalf("processes %v joined a cgroup without isolation", pids)
	}
	if len(r.file.Notes) != 0 {
		t.Errorf("notes without isolation: %v", r.file.Notes)
	}
}

// TestFloorWorkerRepliesARepeat: the floor worker kind runs the request's
// schedule against a no-op and replies its Repeat.
func TestFloorWorkerRepliesARepeat(t *testing.T) {
	sp := spec(&floorTestRunner(true).cfg, "latency", 1, 0, 2000, 50*time.Millisecond, 7)
	req, err := json.Marshal(workerRequest{Kind: workerFloor, Spec: sp})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runWorker(context.Background(), bytes.NewReader(req), &out); err != nil {
		t.Fatal(err)
	}
	var reply workerReply
	if err := json.Unmarshal(out.Bytes(), &reply); err != nil {
		t.Fatalf("reply %q: %v", out.String(), err)
	}
	res := reply.Repeat.Result
	if reply.Repeat.Status == runfile.StatusFailed || res.Arrivals == 0 || res.TargetRatePerSec != 2000 || res.Latency == nil {
		t.Fatalf("floor worker replied %s (%s), result %+v", reply.Repeat.Status, reply.Repeat.Reason, res)
	}
}
