package bench

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
)

// TestSlaveDurableCountsTheWindowsBytesOnly: the slave's durable MB/s
// counts what it made durable of the bytes the master accepted in the
// window, as the master's durable MB/s does — not a backlog accepted
// before the window that the slave flushed inside it, nor its flushed
// offset's whole progress.
func TestSlaveDurableCountsTheWindowsBytesOnly(t *testing.T) {
	master := &load.DurabilityResult{WrittenStartBytes: 10_000_000, DurableStartBytes: 10_000_000, WrittenEndBytes: 30_000_000, DurableEndBytes: 30_000_000}
	for _, tc := range []struct {
		name                     string
		flushedStart, flushedEnd int64
		want                     float64 // MB/s over 1 s
	}{
		// The slave flushed 4 MB of the warm-up (6–10 MB) in the window: not
		// counted, as the master's durable MB/s would not count it.
		{"a warm-up backlog flushed in the window", 6_000_000, 25_000_000, 15},
		{"the slave's flushed offset at 0 at the window's start", 0, 30_000_000, 20},
		{"nothing of the window's bytes durable", 4_000_000, 9_000_000, 0},
		{"ahead of the window's start", 12_000_000, 30_000_000, 18},
	} {
		r := &runfile.ReplicationResult{SlaveFlushedStart: tc.flushedStart, SlaveFlushedEnd: tc.flushedEnd, SlaveWroteEnd: 30_000_000, SlaveElapsedNs: 1e9}
		var f runfile.Figures
		f.AddReplication(r)
		f.AddReplicationPositions(r, master)
		if math.Abs(f.SlaveDurableMBps-tc.want) > 1e-9 {
			t.Errorf("%s: slave durable %v MB/s, want %v", tc.name, f.SlaveDurableMBps, tc.want)
		}
	}
}

// TestReplicationBacklogOfASlaveBehind: a repeat of the reference run's
// mmap async ASYNC_MASTER cell at 16 producers (results/20261130-225430-vm,
// repeat 1): the master wrote 327 MB in the window, the slave 218 MB, and
// 112 MB were not on the slave at the window's end — 34 % of the window's
// bytes, above the sustained bar; a slave that had everything has none.
func TestReplicationBacklogOfASlaveBehind(t *testing.T) {
	master := &load.DurabilityResult{WrittenStartBytes: 41960250, DurableStartBytes: 41960250, WrittenEndBytes: 369116570, DurableEndBytes: 369116570}
	r := &runfile.ReplicationResult{SlaveWroteStart: 39047625, SlaveFlushedStart: 33543000, SlaveWroteEnd: 256835217, SlaveFlushedEnd: 252118092, SlaveElapsedNs: 1e9}
	var f runfile.Figures
	f.AddReplicationPositions(r, master)
	if f.ReplBacklogBytes != 112281353 || math.Abs(f.ReplBacklogShare-112281353.0/327156320) > 1e-12 || f.ReplBacklogShare <= load.SustainedBacklogShare {
		t.Errorf("repl backlog %v bytes, share %v; want 112281353 and %v (above the bar)", f.ReplBacklogBytes, f.ReplBacklogShare, 112281353.0/327156320)
	}
	r.SlaveWroteEnd = master.WrittenEndBytes
	f = runfile.Figures{}
	f.AddReplicationPositions(r, master)
	if f.ReplBacklogBytes != 0 || f.ReplBacklogShare != 0 {
		t.Errorf("a slave with every byte: repl backlog %v, share %v", f.ReplBacklogBytes, f.ReplBacklogShare)
	}
}

// TestSlaveCPUBetweenTheWindowsEdges: the slave's CPU is its getrusage at
// the window's end less at its start; not measured (an error, and no CPU
// counted) when a reading failed or one is missing.
func TestSlaveCPUBetweenTheWindowsEdges(t *testing.T) {
	d := &replDurability{edges: 2}
	d.slaveAt[0] = slaveStatus{CPUUserNs: 1e9, CPUSysNs: 2e9}
	d.slaveAt[1] = slaveStatus{CPUUserNs: 1.5e9, CPUSysNs: 2.25e9}
	if u, s, err := d.slaveCPU(); err != nil || u != 0.5e9 || s != 0.25e9 {
		t.Errorf("slave CPU %d user %d sys, %v; want 5e8 and 2.5e8", u, s, err)
	}
	d.slaveAt[1].CPUError = "getrusage: no"
	if _, _, err := d.slaveCPU(); err == nil {
		t.Error("a failed reading gave a CPU")
	}
	d.slaveAt[1].CPUError, d.edges = "", 1
	if _, _, err := d.slaveCPU(); err == nil {
		t.Error("one edge gave a CPU")
	}
}

// TestReplicatedRepeatCountsTheSlave: a real replicated repeat reports the
// slave's process CPU in its answers, counts it in the cell's CPU (the
// master's and the slave's, options["cpu"] says so), and derives the
// slave's durable MB/s and the repl backlog from both sides' positions at
// the window's edges.
func TestReplicatedRepeatCountsTheSlave(t *testing.T) {
	root := t.TempDir()
	sys := system{backend: "mmap", size: 1024, pol: Policy{Flush: "async"}, repl: ReplicationAsync}
	sp := load.Spec{Workload: load.Throughput, SizeBytes: 1024, Producers: 2, Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond}
	store := StoreConfig{SegmentSizeBytes: 16 << 20, FlushInterval: 50 * time.Millisecond}
	rep, options := runReplicatedRepeat(context.Background(), store, filepath.Join(root, "m"), filepath.Join(root, "s"), sys, sp)
	if rep.Status != runfile.StatusOK {
		t.Fatalf("%s: %s", rep.Status, rep.Reason)
	}
	r, f, d := rep.Replication, rep.Figures, rep.Result.Durability
	if options["cpu"] != replicatedCPU {
		t.Errorf("options cpu %q, want %q", options["cpu"], replicatedCPU)
	}
	if f.SlaveCPUSecPerGiB <= 0 || f.CPUSecPerGiB <= f.SlaveCPUSecPerGiB || math.Abs(f.CPUSecPerGiB-rep.Result.CPUSecPerGiB()) > 1e-9 {
		t.Errorf("CPU %v s/GiB of which the slave's %v (the result's %v): want the slave's counted in the cell's", f.CPUSecPerGiB, f.SlaveCPUSecPerGiB, rep.Result.CPUSecPerGiB())
	}
	want := load.PerSec(float64(max(0, min(r.SlaveFlushedEnd, d.WrittenEndBytes)-max(r.SlaveFlushedStart, d.WrittenStartBytes)))/1e6, r.SlaveElapsedNs)
	if f.SlaveDurableMBps != want || want <= 0 {
		t.Errorf("slave durable %v MB/s, want %v from the positions (slave %+v, master %+v)", f.SlaveDurableMBps, want, r, d)
	}
	bytes, share := runfile.ReplicationBacklog(r, d)
	if f.ReplBacklogBytes != bytes || f.ReplBacklogShare != share {
		t.Errorf("repl backlog %v (%v), want %v (%v)", f.ReplBacklogBytes, f.ReplBacklogShare, bytes, share)
	}
}

// TestSlaveStatusReportsItsCPU: the slave process answers with its
// process's CPU so far.
func TestSlaveStatusReportsItsCPU(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	ms := &masterSide{}
	defer ms.close()
	sys := system{backend: "mmap", size: 1024, pol: Policy{Flush: "async"}, repl: ReplicationAsync}
	store := StoreConfig{SegmentSizeBytes: 1 << 20}
	if _, _, err := ms.open(ctx, store, filepath.Join(root, "m"), sys); err != nil {
		t.Fatal(err)
	}
	sp, err := startSlave(ctx, store, filepath.Join(root, "s"), "mmap", "async", ms.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer sp.kill()
	st, err := sp.status()
	if err != nil || st.CPUError != "" || st.CPUUserNs+st.CPUSysNs <= 0 {
		t.Errorf("status %+v, %v; want the slave's CPU", st, err)
	}
	if _, err := sp.stop(); err != nil {
		t.Error(err)
	}
}
