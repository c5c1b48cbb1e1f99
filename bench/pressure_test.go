package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

const journalChildEnv = "MQBENCH_TEST_JOURNAL_CHILD"

// journalChild makes one change of every kind through a Journal, says
// "ready" and waits to be killed (run by TestCleanupAfterKill).
func journalChild(stateDir string) error {
	j, err := OpenJournal(stateDir)
	if err != nil {
		return err
	}
	if err := j.SetVMDirty(48<<20, 12<<20); err != nil {
		return err
	}
	if _, err := j.MakeCgroup("memory", fmt.Sprintf("mqbench-test-%d", os.Getpid()), [][2]string{{"memory.limit_in_bytes", "67108864"}}); err != nil {
		return err
	}
	if err := j.AddSwapfile(filepath.Join(stateDir, "test.swap"), 16<<20); err != nil {
		return err
	}
	image := filepath.Join(stateDir, "disk.img")
	if err := j.Record(Change{Kind: ChangeFile, Path: image}); err != nil {
		return err
	}
	if err := os.WriteFile(image, nil, 0o600); err != nil {
		return err
	}
	if err := os.Truncate(image, 32<<20); err != nil {
		return err
	}
	dev, err := j.AttachLoop(image)
	if err != nil {
		return err
	}
	if err := j.SetAttr(filepath.Join("/sys/block", filepath.Base(dev), "queue", "rotational"), "1"); err != nil {
		return err
	}
	if err := runTool("mkfs.ext4", "-q", "-F", dev); err != nil {
		return err
	}
	if err := j.Mount(dev, "ext4", filepath.Join(stateDir, "mnt")); err != nil {
		return err
	}
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		return err
	}
	if err := j.RecordProcess(sleeper.Process.Pid, "test sleeper"); err != nil {
		return err
	}
	fmt.Println("ready")
	select {}
}

func init() {
	if dir := os.Getenv(journalChildEnv); dir != "" {
		if err := journalChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, "journal child:", err)
			os.Exit(1)
		}
	}
}

func needRootTools(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: it changes vm.dirty_*, swap, cgroups, a loop device and a mount")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s on PATH", tool)
		}
	}
	if _, err := CgroupV1Dir("memory"); err != nil {
		t.Skipf("needs the cgroup v1 memory controller: %v", err)
	}
}

// TestCleanupAfterKill: a process changes the system through a Journal and
// is killed with SIGKILL; Cleanup must restore every change.
func TestCleanupAfterKill(t *testing.T) {
	needRootTools(t, "losetup", "mkfs.ext4", "mkswap", "swapon", "swapoff", "mount", "umount")
	stateDir := t.TempDir()
	origDirty, err := readVMDirty()
	if err != nil {
		t.Fatal(err)
	}
	swapsBefore := ActiveSwaps()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(self, "-test.run=^$")
	child.Env = append(os.Environ(), journalChildEnv+"="+stateDir)
	var stderr strings.Builder
	child.Stderr = &stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		_ = child.Process.Kill()
		_ = child.Wait()
		// Whatever it managed to change must still be undone.
		_, _ = Cleanup(stateDir, true)
		t.Fatalf("child: %q: %s", line, stderr.String())
	}
	state, err := os.ReadFile(filepath.Join(stateDir, fmt.Sprintf("run-%d.json", child.Process.Pid)))
	if err != nil {
		t.Fatal(err)
	}
	if now, _ := readVMDirty(); now == origDirty {
		t.Errorf("the child did not change vm.dirty_*: %s", now)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	reports, err := Cleanup(stateDir, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 1 || reports[0].Err != nil || reports[0].Skipped != "" {
		t.Fatalf("cleanup: %+v", reports)
	}
	kinds := map[string]bool{}
	for _, c := range reports[0].Undone {
		kinds[c.Kind] = true
	}
	for _, k := range []string{ChangeVMDirty, ChangeCgroup, ChangeFile, ChangeSwapon, ChangeLoop, ChangeSysctl, ChangeDir, ChangeMount, ChangeProcess} {
		if !kinds[k] {
			t.Errorf("cleanup did not undo a %s change; state was %s", k, state)
		}
	}
	if now, _ := readVMDirty(); now != origDirty {
		t.Errorf("vm.dirty_* after cleanup = %s, want %s", now, origDirty)
	}
	if !slices.Equal(ActiveSwaps(), swapsBefore) {
		t.Errorf("swaps after cleanup %v, want %v", ActiveSwaps(), swapsBefore)
	}
	for _, c := range reports[0].Undone {
		switch c.Kind {
		case ChangeCgroup, ChangeFile, ChangeDir:
			if _, err := os.Stat(c.Path); err == nil {
				t.Errorf("%s %s still exists", c.Kind, c.Path)
			}
		case ChangeLoop:
			if loopBacking(c.Path) == c.Backing {
				t.Errorf("loop device %s still attached to %s", c.Path, c.Backing)
			}
		case ChangeMount:
			if isMountPoint(c.Path) {
				t.Errorf("%s still mounted", c.Path)
			}
		case ChangeProcess:
			if processAlive(c.PID, c.StartTicks) {
				t.Errorf("process %d still alive", c.PID)
			}
		}
	}
	if left, _ := filepath.Glob(filepath.Join(stateDir, "run-*.json")); len(left) != 0 {
		t.Errorf("state file left: %v", left)
	}
}

// TestJournalUndoSinceKeepsEarlierChanges: a pressure phase undoes its own
// changes only.
func TestJournalUndoSinceKeepsEarlierChanges(t *testing.T) {
	dir := t.TempDir()
	j, err := OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	keep, drop := filepath.Join(dir, "keep"), filepath.Join(dir, "drop")
	for _, p := range []string{keep, drop} {
		if p == drop {
			defer func(m int) {
				if err := j.UndoSince(m); err != nil {
					t.Error(err)
				}
				if _, err := os.Stat(drop); err == nil {
					t.Error("UndoSince left the later file")
				}
				if _, err := os.Stat(keep); err != nil {
					t.Error("UndoSince removed the earlier file")
				}
				if err := j.Undo(); err != nil {
					t.Error(err)
				}
				if _, err := os.Stat(keep); err == nil {
					t.Error("Undo left the earlier file")
				}
				if _, err := os.Stat(j.Path()); err == nil {
					t.Error("Undo left the state file")
				}
			}(j.Mark())
		}
		if err := j.Record(Change{Kind: ChangeFile, Path: p}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRestoreVMDirtyWritesTheNonZeroMember(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: writes vm.dirty_*")
	}
	orig, err := readVMDirty()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := restoreVMDirty(orig); err != nil {
			t.Fatal(err)
		}
	}()
	dir := t.TempDir()
	j, err := OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.SetVMDirty(40<<20, 10<<20); err != nil {
		t.Fatal(err)
	}
	if v, _ := ReadSysctl("vm.dirty_bytes"); v != fmt.Sprint(40<<20) {
		t.Fatalf("vm.dirty_bytes = %s", v)
	}
	if err := j.Undo(); err != nil {
		t.Fatal(err)
	}
	if now, _ := readVMDirty(); now != orig {
		t.Fatalf("after undo %s, want %s", now, orig)
	}
}

func TestParseProcFiles(t *testing.T) {
	f, err := os.Open("/proc/vmstat")
	if err != nil {
		t.Skip("no /proc/vmstat")
	}
	defer f.Close()
	vm, err := ParseVmstat(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"nr_dirty", "nr_writeback", "pswpin", "pswpout", "pgmajfault"} {
		if _, ok := vm[k]; !ok {
			t.Errorf("/proc/vmstat has no %s", k)
		}
	}
	for _, p := range []string{"/proc/pressure/io", "/proc/pressure/memory"} {
		pf, err := os.Open(p)
		if err != nil {
			t.Logf("%s: %v (kernel without PSI)", p, err)
			continue
		}
		some, full, err := ParsePressure(pf)
		pf.Close()
		if err != nil {
			t.Errorf("%s: %v", p, err)
		}
		if some.Avg10 < 0 || some.Avg10 > 100 || full.TotalUs > some.TotalUs {
			t.Errorf("%s: some %+v full %+v", p, some, full)
		}
	}
	some, full, err := ParsePressure(strings.NewReader("some avg10=1.50 avg60=0.25 avg300=0.00 total=123456\nfull avg10=0.75 avg60=0.10 avg300=0.00 total=65432\n"))
	if err != nil || some != (PSI{1.5, 0.25, 0, 123456}) || full != (PSI{0.75, 0.1, 0, 65432}) {
		t.Fatalf("some %+v full %+v err %v", some, full, err)
	}
	if _, _, err := ParsePressure(strings.NewReader("bogus\n")); err == nil {
		t.Error("a file without a some line parsed")
	}
}

func TestSampleDeltas(t *testing.T) {
	t0 := time.Unix(100, 0)
	prev := rawSample{at: t0, vm: map[string]int64{"nr_dirty": 10, "pswpin": 5, "pswpout": 7, "pgmajfault": 100}, ioSome: PSI{TotalUs: 1000}}
	cur := rawSample{at: t0.Add(SampleInterval), vm: map[string]int64{"nr_dirty": 30, "nr_writeback": 4, "pswpin": 9, "pswpout": 7, "pgmajfault": 150},
		ioSome: PSI{Avg10: 2.5, TotalUs: 51000}, memSome: PSI{TotalUs: 10}}
	s := toSample(prev, cur)
	want := Sample{UnixNs: cur.at.UnixNano(), NrDirtyPages: 30, NrWritebackPages: 4, PswpIn: 4, PswpOut: 0, PgMajFault: 50, IOSomeAvg10: 2.5, IOSomeStallUs: 50000, MemSomeStallUs: 10}
	if s != want {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
	// The real files, through the sampler's own reader.
	r1, err := readRaw(DefaultProcFiles)
	if err != nil {
		t.Skipf("/proc: %v", err)
	}
	r2, err := readRaw(DefaultProcFiles)
	if err != nil {
		t.Fatal(err)
	}
	if s := toSample(r1, r2); s.PswpIn < 0 || s.PgMajFault < 0 || s.NrDirtyPages < 0 {
		t.Fatalf("negative sample %+v", s)
	}
}

func TestParetoFront(t *testing.T) {
	pts := []ParetoPoint{
		{"a", 100, 50}, // dominated by c
		{"b", 50, 10},  // front: lowest tail
		{"c", 120, 40}, // front
		{"d", 200, 90}, // front: fastest
		{"e", 200, 95}, // dominated by d (same speed, worse tail)
		{"f", 50, 10},  // equal to b: neither dominates
	}
	got := ParetoFront(pts)
	var labels []string
	for _, i := range got {
		labels = append(labels, pts[i].Label)
	}
	if want := []string{"b", "f", "c", "d"}; !slices.Equal(labels, want) {
		t.Fatalf("front %v, want %v", labels, want)
	}
}

func TestSweepPolicies(t *testing.T) {
	pols, err := SweepPolicies([]string{"flush=async,sync", "flush-interval=100ms,500ms", "flush-least-pages=0,4", "sync-flush-timeout=1s,5s"}, StoreConfig{SegmentSizeBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// async: 2 intervals × 2 least pages; sync: 2 timeouts.
	if len(pols) != 6 {
		t.Fatalf("%d policies: %+v", len(pols), pols)
	}
	if p := pols[3]; p.Flush != "async" || p.Store.FlushInterval != 500*time.Millisecond || p.Store.FlushLeastPages != 4 || p.Name != "async fi=500ms flp=4" {
		t.Fatalf("policy 3: %+v", p)
	}
	if p := pols[5]; p.Flush != "sync" || p.Store.SyncFlushTimeout != 5*time.Second || p.Name != "sync gct=5s" {
		t.Fatalf("policy 5: %+v", p)
	}
	for _, bad := range []string{"flush-interval", "nope=1", "flush-least-pages=x", "flush=maybe"} {
		if _, err := SweepPolicies([]string{bad}, StoreConfig{}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestConsumeE2ERecoveryRun runs the three new workloads end to end on a
// tiny store and checks that each produced its figures.
func TestConsumeE2ERecoveryRun(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Backends, cfg.Sizes, cfg.Flushes, cfg.Peers = []string{"mmap"}, []int{512}, []string{"async"}, nil
	cfg.Workloads = []string{WorkloadConsume, WorkloadE2E, WorkloadRecovery}
	cfg.Duration, cfg.Warmup, cfg.Repeat, cfg.Rate = 200*time.Millisecond, 0, 1, 2000
	cfg.Dir, cfg.Out, cfg.ProfilesRoot = t.TempDir(), t.TempDir(), t.TempDir()
	cfg.NoLimits, cfg.Profile = true, false
	cfg.ConsumeBytes, cfg.RecoveryBytes, cfg.Store.SegmentSizeBytes = 2<<20, 2<<20, 1<<20
	f, _, err := Run(context.Background(), cfg, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range f.Cells {
		if c.Status != StatusOK {
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
			r := c.Repeats[0].Result
			if r.Delivered == 0 || r.Delivered > r.Messages || c.P50Ns <= 0 || c.P999Ns < c.P50Ns {
				t.Errorf("%s: delivered %d of %d, %+v", c.Name, r.Delivered, r.Messages, c.Figures)
			}
		case WorkloadRecovery:
			if c.OpenNs <= 0 || c.MBPerSec <= 0 || c.Repeats[0].Result.PayloadBytes < 3<<19 {
				t.Errorf("%s: %+v", c.Name, c.Figures)
			}
		}
	}
	for _, k := range []string{"consume-hot-copy", "consume-hot-sendfile", "e2e-", "recovery-hot"} {
		if !seen[k] {
			t.Errorf("no ok %s cell", k)
		}
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
	j, err := OpenJournal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n, err := startNeighbour(ctx, j, workerRequest{Kind: workerAnon, Bytes: 1 << 20}, "anonymous-memory toucher", nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &pressureEnv{name: PressureSwap, neighbours: []*neighbour{n}}
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
