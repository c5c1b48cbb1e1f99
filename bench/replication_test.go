package bench

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/ha"
)

// TestComputeLagOnAFakeTimeline: the lag of known Puts against a known
// acknowledgement timeline, in time and bytes; marks outside the window
// left out; a record never acknowledged counted and entered at the
// deadline.
func TestComputeLagOnAFakeTimeline(t *testing.T) {
	acks := []ackPoint{{at: 0, offset: 0}, {at: 10, offset: 100}, {at: 20, offset: 300}, {at: 50, offset: 600}, {at: 95, offset: 900}}
	marks := []putMark{
		{start: 2, end: 50, ackedAtReturn: 0},      // warm-up: before the window
		{start: 5, end: 100, ackedAtReturn: 0},     // acked at 10: lag 5; 100 bytes behind at return
		{start: 12, end: 250, ackedAtReturn: 100},  // acked at 20: lag 8; 150 bytes
		{start: 21, end: 300, ackedAtReturn: 300},  // acked at 20 (before it began): lag 0; 0 bytes
		{start: 30, end: 700, ackedAtReturn: 300},  // acked at 95, after the deadline 80: unacked, lag 80 − 30 = 50
		{start: 45, end: 600, ackedAtReturn: -1},   // acked at 50: lag 5; no ack yet: 600 bytes
		{start: 61, end: 1000, ackedAtReturn: 600}, // after the window
	}
	r := computeLag(marks, acks, 5, 60, 80)
	if r.Records != 5 || r.Unacked != 1 || r.Sampled != 7 || r.Acks != 3 || r.DeadlineNs != 20 {
		t.Fatalf("records %d unacked %d sampled %d acks %d deadline %d; want 5 1 7 3 20", r.Records, r.Unacked, r.Sampled, r.Acks, r.DeadlineNs)
	}
	// Time lags 0 (recorded as the histogram's least, 1), 5, 5, 8, 50 ns.
	if p50, max := r.LagNs.Quantile(0.5), r.LagNs.Max(); p50 != 5 || max != 50 || r.LagNs.Count() != 5 {
		t.Errorf("lag p50 %d max %d count %d; want 5, 50, 5", p50, max, r.LagNs.Count())
	}
	var f runfile.Figures
	f.AddReplication(&r)
	// Byte lags 0, 100, 150, 400, 600 (recorded + 1); p50 150, p99 600.
	if f.ReplLagBytesP50 != 150 || f.ReplLagBytesP99 != 600 || f.ReplUnackedFraction != 0.2 {
		t.Errorf("figures %+v", f)
	}
}

// TestLagTrackerKeepsAnEvenSample: past its share of marks a worker keeps
// every other mark and every second Put from then on, so what it keeps is
// an even sample of the whole window.
func TestLagTrackerKeepsAnEvenSample(t *testing.T) {
	tr := newLagTracker(2048) // 1024 marks per worker
	const puts = 5000
	for i := int64(1); i <= puts; i++ {
		tr.mark(0, putMark{start: i})
	}
	w := tr.workers[0]
	if w.stride != 8 || len(w.marks) != puts/8 {
		t.Fatalf("stride %d, %d marks; want 8 and %d", w.stride, len(w.marks), puts/8)
	}
	for i, m := range w.marks {
		if m.start != int64(i+1)*w.stride {
			t.Fatalf("mark %d is Put %d, want %d: not an even sample", i, m.start, int64(i+1)*w.stride)
		}
	}
}

// fakeOffset is an acknowledged offset that tests move by hand; waiting
// tells which offset a waiter waits to exceed (the watcher waits above
// what it last recorded).
type fakeOffset struct {
	mu      sync.Mutex
	v       int64
	changed chan struct{}
	waiting chan int64
}

func newFakeOffset() *fakeOffset {
	return &fakeOffset{changed: make(chan struct{}), waiting: make(chan int64, 64)}
}

func (o *fakeOffset) set(v int64) {
	o.mu.Lock()
	o.v = v
	close(o.changed)
	o.changed = make(chan struct{})
	o.mu.Unlock()
}

func (o *fakeOffset) get() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.v
}

func (o *fakeOffset) waitAbove(ctx context.Context, off int64) error {
	select {
	case o.waiting <- off:
	default:
	}
	for {
		o.mu.Lock()
		v, ch := o.v, o.changed
		o.mu.Unlock()
		if v >= off {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TestWatchRecordsTheTimeline: every move of the acknowledged offset is on
// the timeline, in order, with times that never go back.
func TestWatchRecordsTheTimeline(t *testing.T) {
	tr := newLagTracker(1)
	off := newFakeOffset()
	ctx, stop := context.WithCancel(context.Background())
	done := tr.watch(ctx, off.get, off.waitAbove)
	waitFor := func(want int64) {
		deadline := time.After(10 * time.Second)
		for {
			select {
			case got := <-off.waiting:
				if got == want {
					return
				}
			case <-deadline:
				t.Fatalf("the watcher never waited above %d", want-1)
			}
		}
	}
	waitFor(1)
	for _, v := range []int64{10, 20, 35} {
		off.set(v)
		waitFor(v + 1) // it recorded v
	}
	stop()
	<-done
	want := []int64{0, 10, 20, 35}
	if len(tr.acks) != len(want) {
		t.Fatalf("timeline %+v, want offsets %v", tr.acks, want)
	}
	for i, a := range tr.acks {
		if a.offset != want[i] || (i > 0 && a.at < tr.acks[i-1].at) {
			t.Fatalf("timeline %+v, want offsets %v at times that never go back", tr.acks, want)
		}
	}
}

// TestSlaveProcessStartedAndStopped: a real slave process replicates a
// master's records, answers where it is, stops cleanly with its store
// closed and its CommitLog equal to the master's, and leaves no process;
// a slave that cannot open its store leaves none either.
func TestSlaveProcessStartedAndStopped(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	store := StoreConfig{SegmentSizeBytes: 1 << 20}
	opts, err := storeOptions(store, "mmap", "async")
	if err != nil {
		t.Fatal(err)
	}
	opts.Role = engine.AsyncMaster
	s, err := engine.Open(ctx, filepath.Join(root, "master"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m, err := ha.NewMaster(s, ha.MasterOptions{ListenAddr: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	slaveDir := filepath.Join(root, "slave")
	sp, err := startSlave(ctx, store, slaveDir, "mmap", "async", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer sp.kill()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := m.WaitSlaves(wctx, 1); err != nil {
		t.Fatal(err)
	}
	var end int64
	for i := range 200 {
		r, err := s.Put(ctx, newProducerMessages(MessageBare, i, 1000).next())
		if err != nil {
			t.Fatal(err)
		}
		end = r.PhysicalOffset + int64(r.Size)
	}
	if err := m.WaitAcked(wctx, end); err != nil {
		t.Fatal(err)
	}
	st, err := sp.status()
	if err != nil || st.Wrote < end || !st.Connected {
		t.Fatalf("slave status %+v, %v; want at %d, connected", st, err, end)
	}
	pid := sp.w.cmd.Process.Pid
	final, err := sp.stop()
	if err != nil || !final.Final || final.Wrote != end || final.Flushed != end {
		t.Fatalf("stop: %+v, %v; want a final answer at %d, flushed", final, err, end)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the slave process %d is still there after stop: %v", pid, err)
	}
	seg := segment.Name(0)
	a, errA := os.ReadFile(filepath.Join(root, "master", "commitlog", seg))
	b, errB := os.ReadFile(filepath.Join(slaveDir, "commitlog", seg))
	if errA != nil || errB != nil || !bytes.Equal(a[:end], b[:end]) {
		t.Errorf("the slave's CommitLog differs from the master's up to %d (%v, %v)", end, errA, errB)
	}
	if _, err := startSlave(ctx, store, filepath.Join(root, "bad"), "floppy", "async", m.Addr().String()); err == nil || !strings.Contains(err.Error(), "floppy") {
		t.Errorf("a slave with an unknown backend: %v", err)
	}
}

// TestReplicatedRepeat: one repeat of each role, the SYNC_MASTER one
// through the proxy with an EMULATED delay: every window record
// acknowledged by the slave, its lag measured (never below the two
// one-way delays a record and its acknowledgement cross), no bytes behind
// at a SYNC_MASTER's acknowledgement, the slave's own durable rate, and
// both stores removed.
func TestReplicatedRepeat(t *testing.T) {
	const delay = 2 * time.Millisecond
	for _, c := range []struct {
		repl  string
		flush string
		delay time.Duration
	}{{ReplicationAsync, "async", 0}, {ReplicationSync, "async", delay}, {ReplicationSync, "sync", 0}} {
		t.Run(c.repl+"-"+c.flush, func(t *testing.T) {
			root := t.TempDir()
			sys := system{backend: "mmap", size: 1024, pol: Policy{Flush: c.flush}, repl: c.repl, delay: c.delay}
			sp := load.Spec{Workload: load.Throughput, SizeBytes: 1024, Producers: 2, Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond}
			// A flush interval well inside the 300 ms window: with the
			// default 500 ms an async-flush slave may flush nothing in it,
			// and its durable rate is then truly 0.
			store := StoreConfig{SegmentSizeBytes: 16 << 20, FlushInterval: 50 * time.Millisecond}
			rep, options := runReplicatedRepeat(context.Background(), store, filepath.Join(root, "m"), filepath.Join(root, "s"), sys, sp)
			if rep.Status != runfile.StatusOK {
				t.Fatalf("%s: %s", rep.Status, rep.Reason)
			}
			r, f := rep.Replication, rep.Figures
			if r == nil || r.Records == 0 || r.Unacked != 0 || r.Role != replicationRole(c.repl).String() || options["Role"] != r.Role {
				t.Fatalf("replication %+v, options role %q", r, options["Role"])
			}
			if f.ReplLagP50Ns <= 0 || f.SlaveDurableMBps <= 0 || rep.Result.Durability == nil {
				t.Errorf("figures %+v", f)
			}
			if c.repl == ReplicationSync && f.ReplLagBytesP99 != 0 {
				t.Errorf("a SYNC_MASTER Put returned with the slave %v bytes behind its record", f.ReplLagBytesP99)
			}
			if c.delay > 0 && f.ReplLagP50Ns < int64(2*c.delay) {
				t.Errorf("lag p50 %v through a proxy delaying each way by %v", time.Duration(f.ReplLagP50Ns), c.delay)
			}
			if entries, _ := os.ReadDir(root); len(entries) != 0 {
				t.Errorf("left behind: %v", entries)
			}
		})
	}
}

// TestReplicationRun: the axis through Run — cells named per role, a
// durability row per role, the named comparison in the summary, the
// slaves' directory in --slave-dir removed at the end.
func TestReplicationRun(t *testing.T) {
	cfg := testConfig(t)
	cfg.Workloads, cfg.Flushes, cfg.Repeat, cfg.AA = []string{"throughput"}, []string{"async", "sync"}, 1, false
	cfg.Replication, cfg.SlaveDir = []string{ReplicationNone, ReplicationAsync, ReplicationSync}, t.TempDir()
	f, dir, err := Run(context.Background(), cfg, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, c := range f.Cells {
		names[c.Name] = true
		if !c.Measured() {
			t.Errorf("%s: %s %s", c.Name, c.Status, c.Reason)
		}
		if (c.Replication != "") != (c.Repeats[1].Replication != nil) || c.Durability == nil || c.Durability.MachineLoss == "" {
			t.Errorf("%s: replication %q, result %v, durability %+v", c.Name, c.Replication, c.Repeats[1].Replication != nil, c.Durability)
		}
	}
	for _, n := range []string{"throughput-mmap-1024-async-p2", "throughput-mmap-1024-async-p2-haasync", "throughput-mmap-1024-async-p2-hasync",
		"throughput-mmap-1024-sync-p2", "throughput-mmap-1024-sync-p2-haasync", "throughput-mmap-1024-sync-p2-hasync"} {
		if !names[n] {
			t.Errorf("no cell %s (have %v)", n, names)
		}
	}
	summary, err := os.ReadFile(filepath.Join(dir, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### ASYNC_FLUSH + SYNC_MASTER against SYNC_FLUSH", "| mmap + SYNC_MASTER slave | async |", "the seed's recommendation"} {
		if !strings.Contains(string(summary), want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	if left, _ := os.ReadDir(cfg.SlaveDir); len(left) != 0 {
		t.Errorf("--slave-dir keeps %v", left)
	}
}
