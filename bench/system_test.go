package bench

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/internal/hostctl"
)

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
	if s.P50Ns != 154624 || s.P999Ns != 395264 || s.P9999Ns != 618496 || s.MaxNs != 621094 || s.MsgsPerSec < 6249 || s.MsgsPerSec > 6251 {
		t.Errorf("sync figures %+v", s)
	}
	if q := fioSeqFigures(o); q.MBPerSec != 25 {
		t.Errorf("seq figures %+v", q)
	}
	if _, err := parseFio([]byte(`{"jobs": [{"error": 5}]}`)); err == nil {
		t.Error("a failed fio job parsed")
	}
}

// TestConsumeE2ERecoveryRun runs the three other workloads end to end on a
// tiny store (hot variants: the cold ones drop the machine's page cache).
func TestConsumeE2ERecoveryRun(t *testing.T) {
	cfg := testConfig(t)
	cfg.Workloads, cfg.AA = []string{WorkloadConsume, WorkloadE2E, WorkloadRecovery}, false
	cfg.ConsumeBytes, cfg.RecoveryBytes, cfg.Store.SegmentSizeBytes = 2<<20, 2<<20, 1<<20
	f, _, err := Run(context.Background(), cfg, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range f.Cells {
		if c.Status == runfile.StatusSkipped && f.Floors[0].Status != runfile.StatusOK && c.RatePerSec > 0 {
			t.Logf("%s: %s", c.Name, c.Reason) // the generator could not keep the rate here
			continue
		}
		if !c.Measured() {
			t.Errorf("%s: %s %s", c.Name, c.Status, c.Reason)
			continue
		}
		seen[c.Workload+"-"+c.Variant] = true
		switch c.Workload {
		case WorkloadConsume:
			if c.MBPerSec <= 0 || c.CPUSecPerGiB <= 0 || c.Repeats[0].Result.PayloadBytes < 3<<19 {
				t.Errorf("%s: %+v", c.Name, c.Figures)
			}
		case WorkloadE2E:
			r := c.Repeats[1].Result
			// Delivery is measured from the intended start: never below the
			// producer's own latency from the intended start.
			if r.Delivered == 0 || r.Delivered > r.Messages || c.P50Ns <= 0 || c.P999Ns < c.P50Ns || c.OfferedPerSec <= 0 {
				t.Errorf("%s: delivered %d of %d, %+v", c.Name, r.Delivered, r.Messages, c.Figures)
			}
		case WorkloadRecovery:
			if c.OpenNs <= 0 || c.MBPerSec <= 0 || c.Repeats[0].Result.PayloadBytes < 3<<19 {
				t.Errorf("%s: %+v", c.Name, c.Figures)
			}
		}
	}
	for _, k := range []string{"consume-hot-copy", "consume-hot-sendfile", "recovery-hot"} {
		if !seen[k] {
			t.Errorf("no ok %s cell", k)
		}
	}
	if f.Floors[0].Status == runfile.StatusOK && !seen["e2e-"] {
		t.Error("no e2e cell although its rate's floor was ok")
	}
	found := false
	for _, r := range f.Ratios {
		found = found || (r.Kind == "sendfile" && r.Figure == "cpuSecPerGiB" && r.Median > 0)
	}
	if !found {
		t.Error("no sendfile ÷ copy CPU ratio")
	}
}

// TestReviveRestartsADeadNeighbour: a neighbour killed during a repeat (the
// memory cgroup's OOM killer) is started again before the next repeat.
func TestReviveRestartsADeadNeighbour(t *testing.T) {
	ctx := context.Background()
	j, err := hostctl.OpenJournal(t.TempDir(), hostctl.Default())
	if err != nil {
		t.Fatal(err)
	}
	n, err := startNeighbour(ctx, j, workerRequest{Kind: workerAnon, Bytes: 1 << 20}, "anonymous-memory toucher", nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &pressureEnv{neighbours: []*neighbour{n}}
	defer e.stop(nil)
	if err := e.alive(); err != nil {
		t.Fatalf("a fresh neighbour: %v", err)
	}
	if err := e.revive(ctx, j); err != nil || e.restarts != 0 {
		t.Fatalf("revive with every neighbour alive: %v, %d restarts", err, e.restarts)
	}
	old := n.w.cmd.Process.Pid
	if err := n.w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return e.alive() != nil })
	if err := e.revive(ctx, j); err != nil {
		t.Fatal(err)
	}
	if e.restarts != 1 || e.neighbours[0].w.cmd.Process.Pid == old {
		t.Fatalf("after revive: %d restarts, pid %d (was %d)", e.restarts, e.neighbours[0].w.cmd.Process.Pid, old)
	}
	if err := e.alive(); err != nil {
		t.Fatalf("the revived neighbour: %v", err)
	}
	if err := j.Undo(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(j.Path()); err == nil {
		t.Error("the journal's state file was left")
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWorkerStoreRepeat: a store repeat in a worker process (what swap
// pressure uses so the store can sit in a memory cgroup) replies the same
// figures as one in this process.
func TestWorkerStoreRepeat(t *testing.T) {
	cfg := testConfig(t)
	sp := spec(&cfg, "throughput", 1024, 2, 0, 200*time.Millisecond, repeatSeed(1, 1))
	rep, options := workerStoreRepeat(context.Background(), StoreConfig{SegmentSizeBytes: 16 << 20}, filepath.Join(t.TempDir(), "s"), "mmap", "sync", "throughput", sp, nil)
	if rep.Status != runfile.StatusOK || rep.Result.Durability == nil || rep.Store == nil || options["FlushMode"] != "sync" {
		t.Fatalf("worker repeat: %s %s, durability %v, store %v, options %v", rep.Status, rep.Reason, rep.Result.Durability, rep.Store, options)
	}
	if rep.Figures.DurableMBps <= 0 || rep.Figures.MsgsPerGroupCommit < 1 {
		t.Errorf("figures %+v", rep.Figures)
	}
}
