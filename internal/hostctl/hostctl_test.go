package hostctl

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mqstore/mqstore/internal/testenv"
)

// childEnv makes the test binary a child that changes a fake host through a
// Journal and waits to be killed (TestCleanupAfterKill*); its value is the
// state directory, fakeRootEnv the fake /proc/sys, cgroupEnv asks for a
// real cgroup too.
const (
	childEnv    = "HOSTCTL_TEST_CHILD"
	fakeRootEnv = "HOSTCTL_TEST_PROCSYS"
	cgroupEnv   = "HOSTCTL_TEST_CGROUP"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		if err := journalChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, "journal child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeProcSys makes a /proc/sys with vm's dirty settings as a kernel with
// the defaults has them (ratios in use, bytes zero).
func fakeProcSys(t testing.TB, dir string) Host {
	t.Helper()
	vm := filepath.Join(dir, "vm")
	if err := os.MkdirAll(vm, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"dirty_bytes": "0", "dirty_background_bytes": "0", "dirty_ratio": "20", "dirty_background_ratio": "10", "drop_caches": "0"} {
		if err := os.WriteFile(filepath.Join(vm, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := Default()
	h.ProcSys = dir
	return h
}

func readAll(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range VMDirtyNames {
		b, err := os.ReadFile(filepath.Join(dir, "vm", n))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = strings.TrimSpace(string(b))
	}
	return out
}

// TestVMDirtyOnAFakeProcSys: SetVMDirty writes both byte limits and records
// the four originals; the undo writes the non-zero member of each pair —
// what a real kernel needs, since writing a byte limit zeroes its ratio and
// 0 bytes cannot be written back.
func TestVMDirtyOnAFakeProcSys(t *testing.T) {
	for _, c := range []struct {
		name    string
		initial map[string]string
		// after undo, with the kernel's zeroing imitated before it
		want map[string]string
	}{
		{"ratios in use", map[string]string{"dirty_ratio": "20", "dirty_background_ratio": "10"},
			map[string]string{"dirty_bytes": "0", "dirty_background_bytes": "0", "dirty_ratio": "20", "dirty_background_ratio": "10"}},
		{"bytes in use", map[string]string{"dirty_bytes": "33554432", "dirty_background_bytes": "0", "dirty_ratio": "0", "dirty_background_ratio": "10"},
			map[string]string{"dirty_bytes": "33554432", "dirty_background_bytes": "0", "dirty_ratio": "0", "dirty_background_ratio": "10"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			h := fakeProcSys(t, root)
			for n, v := range c.initial {
				if err := os.WriteFile(filepath.Join(root, "vm", n), []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			j, err := OpenJournal(t.TempDir(), h)
			if err != nil {
				t.Fatal(err)
			}
			if err := j.SetVMDirty(40<<20, 10<<20); err != nil {
				t.Fatal(err)
			}
			got := readAll(t, root)
			if got["dirty_bytes"] != fmt.Sprint(40<<20) || got["dirty_background_bytes"] != fmt.Sprint(10<<20) {
				t.Fatalf("after SetVMDirty: %v", got)
			}
			// What the kernel does when the byte limits are written.
			for _, n := range []string{"dirty_ratio", "dirty_background_ratio"} {
				if err := os.WriteFile(filepath.Join(root, "vm", n), []byte("0"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// And when a ratio is written back, it zeroes the bytes: imitate
			// it by clearing them, so only what undo writes remains.
			for _, n := range []string{"dirty_bytes", "dirty_background_bytes"} {
				if err := os.WriteFile(filepath.Join(root, "vm", n), []byte("0"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := j.Undo(); err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, root); !mapsEqual(got, c.want) {
				t.Errorf("after undo %v, want %v", got, c.want)
			}
			if len(j.Changes()) != 1 || !j.Changes()[0].Undone {
				t.Errorf("changes %+v", j.Changes())
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestJournalUndoSinceKeepsEarlierChanges: a pressure phase undoes its own
// changes only.
func TestJournalUndoSinceKeepsEarlierChanges(t *testing.T) {
	dir := t.TempDir()
	j, err := OpenJournal(dir, Default())
	if err != nil {
		t.Fatal(err)
	}
	keep, drop := filepath.Join(dir, "keep"), filepath.Join(dir, "drop")
	record := func(p string) {
		if err := j.Record(Change{Kind: ChangeFile, Path: p}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	record(keep)
	mark := j.Mark()
	record(drop)
	if err := j.UndoSince(mark); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(drop); err == nil {
		t.Error("UndoSince left the later file")
	}
	if _, err := os.Stat(keep); err != nil {
		t.Error("UndoSince removed the earlier file")
	}
	if err := j.Undo(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(keep); err == nil {
		t.Error("Undo left the earlier file")
	}
	if _, err := os.Stat(j.Path()); err == nil {
		t.Error("Undo left the state file")
	}
}

// journalChild changes a fake /proc/sys and real files, a directory, an
// attribute file, a process (and, asked, a child cgroup of its own) through
// a Journal, says "ready" and waits to be killed.
func journalChild(stateDir string) error {
	h := Default()
	h.ProcSys = os.Getenv(fakeRootEnv)
	j, err := OpenJournal(stateDir, h)
	if err != nil {
		return err
	}
	if err := j.SetVMDirty(48<<20, 12<<20); err != nil {
		return err
	}
	attr := filepath.Join(stateDir, "attribute")
	if err := os.WriteFile(attr, []byte("0\n"), 0o644); err != nil {
		return err
	}
	if err := j.SetAttr(attr, "1"); err != nil {
		return err
	}
	file, dir := filepath.Join(stateDir, "made.file"), filepath.Join(stateDir, "made.dir")
	if err := j.Record(Change{Kind: ChangeFile, Path: file}); err != nil {
		return err
	}
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		return err
	}
	if err := j.Record(Change{Kind: ChangeDir, Path: dir}); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if os.Getenv(cgroupEnv) != "" {
		if _, err := j.MakeMemoryCgroup(fmt.Sprintf("hostctl-test-%d", os.Getpid()), 64<<20); err != nil {
			return err
		}
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

// killedChild runs journalChild in a child process, kills it with SIGKILL
// once it is ready, and returns its state directory and fake /proc/sys.
func killedChild(t *testing.T, withCgroup bool) (stateDir, procSys string) {
	t.Helper()
	stateDir, procSys = t.TempDir(), t.TempDir()
	fakeProcSys(t, procSys)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(self, "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+stateDir, fakeRootEnv+"="+procSys)
	if withCgroup {
		child.Env = append(child.Env, cgroupEnv+"=1")
	}
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
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	if strings.TrimSpace(line) != "ready" {
		_, _ = Cleanup(stateDir, true) // undo whatever it managed
		t.Fatalf("child: %q: %s", line, stderr.String())
	}
	return stateDir, procSys
}

// TestCleanupAfterKill: a process changes the (fake) host through a Journal
// and is killed with SIGKILL; Cleanup restores every change from the state
// file alone.
func TestCleanupAfterKill(t *testing.T) {
	stateDir, procSys := killedChild(t, false)
	checkCleanup(t, stateDir, procSys, []string{ChangeVMDirty, ChangeSysctl, ChangeFile, ChangeDir, ChangeProcess})
}

// TestCleanupAfterKillCgroup is the same with a cgroup v1 memory group made
// under the test's own cgroup (root): Cleanup moves its members out and
// removes it.
func TestCleanupAfterKillCgroup(t *testing.T) {
	testenv.NeedRoot(t, "creates a child memory cgroup of its own cgroup")
	if _, err := Default().CgroupV1Dir("memory"); err != nil {
		testenv.Skip(t, testenv.Root, "the cgroup v1 memory controller: %v", err)
	}
	stateDir, procSys := killedChild(t, true)
	checkCleanup(t, stateDir, procSys, []string{ChangeVMDirty, ChangeSysctl, ChangeFile, ChangeDir, ChangeProcess, ChangeCgroup})
}

// TestLeftoverStatesIgnoresARunThatChangedNothing: a run killed before its
// first system change leaves a state file with no change; the next run
// must not be refused for it (the file goes), while a file with a change
// is reported.
func TestLeftoverStatesIgnoresARunThatChangedNothing(t *testing.T) {
	dir := t.TempDir()
	dead := func(name string, changes []Change) string {
		p := filepath.Join(dir, name)
		b, err := json.Marshal(journalState{PID: 1 << 30, StartTicks: 1, Changes: changes})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	empty := dead("run-1.json", nil)
	changed := dead("run-2.json", []Change{{Kind: ChangeFile, Path: filepath.Join(dir, "scratch")}})
	if left := LeftoverStates(dir); len(left) != 1 || left[0] != changed {
		t.Fatalf("leftover states %v, want only %s", left, changed)
	}
	if _, err := os.Stat(empty); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the empty state file is still there: %v", err)
	}
}

func checkCleanup(t *testing.T, stateDir, procSys string, kinds []string) {
	t.Helper()
	if left := LeftoverStates(stateDir); len(left) != 1 {
		t.Fatalf("leftover states %v, want the killed child's", left)
	}
	reports, err := Cleanup(stateDir, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 1 || reports[0].Err != nil || reports[0].Skipped != "" {
		t.Fatalf("cleanup: %+v", reports)
	}
	var undone []string
	for _, c := range reports[0].Undone {
		undone = append(undone, c.Kind)
		switch c.Kind {
		case ChangeCgroup, ChangeFile, ChangeDir:
			if _, err := os.Stat(c.Path); err == nil {
				t.Errorf("%s %s still exists", c.Kind, c.Path)
			}
		case ChangeProcess:
			if ProcessAlive(c.PID, c.StartTicks) {
				t.Errorf("process %d still alive", c.PID)
			}
		case ChangeSysctl:
			if b, _ := os.ReadFile(c.Path); strings.TrimSpace(string(b)) != "0" {
				t.Errorf("attribute %s = %q after cleanup, want 0", c.Path, b)
			}
		}
	}
	for _, k := range kinds {
		if !slices.Contains(undone, k) {
			t.Errorf("cleanup did not undo a %s change (undid %v)", k, undone)
		}
	}
	if got := readAll(t, procSys); got["dirty_ratio"] != "20" || got["dirty_background_ratio"] != "10" {
		t.Errorf("vm after cleanup %v: want the ratios written back", got)
	}
	if left, _ := filepath.Glob(filepath.Join(stateDir, "run-*.json")); len(left) != 0 {
		t.Errorf("state file left: %v", left)
	}
}

func TestReadSysctlAndDropCachesOnAFakeRoot(t *testing.T) {
	root := t.TempDir()
	h := fakeProcSys(t, root)
	if v, err := h.ReadSysctl("vm.dirty_ratio"); err != nil || v != "20" {
		t.Fatalf("ReadSysctl = %q, %v", v, err)
	}
	if err := h.DropCaches(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "vm", "drop_caches")); string(b) != "3" {
		t.Errorf("drop_caches = %q, want 3", b)
	}
}

// fakeCgroupV2 builds a cgroup v2 hierarchy in a temp dir (as the kernel
// lays it out: cgroup.controllers at the root, this process's cgroup from
// the "0::" line of /proc/self/cgroup) with the files a new cgroup gets.
func fakeCgroupV2(t *testing.T, subtree string) (Host, string) {
	t.Helper()
	root := t.TempDir()
	parent := filepath.Join(root, "user.slice", "mqbench.scope")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	for path, content := range map[string]string{
		filepath.Join(root, "cgroup.controllers"):       "cpuset cpu io memory pids\n",
		filepath.Join(parent, "cgroup.subtree_control"): subtree,
		filepath.Join(parent, "cgroup.procs"):           fmt.Sprintf("%d\n", os.Getpid()),
		filepath.Join(root, "self"):                     "0::/user.slice/mqbench.scope\n",
	} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Host{ProcSys: filepath.Join(root, "sys"), CgroupRoot: root, SelfCgroup: filepath.Join(root, "self")}, parent
}

// TestCgroupV2 runs the memory and io cgroups against a v2-shaped
// hierarchy: detected as v2, memory.max and io.max written, the
// controller delegated through the parent's cgroup.subtree_control when it
// was not (and taken back on undo), the cgroup removed on undo.
func TestCgroupV2(t *testing.T) {
	h, parent := fakeCgroupV2(t, "")
	dir, version, err := h.CgroupDir("memory")
	if err != nil || version != 2 || dir != parent {
		t.Fatalf("CgroupDir(memory) = %s, v%d, %v; want %s, v2", dir, version, err, parent)
	}
	j, err := OpenJournal(t.TempDir(), h)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := j.MakeMemoryCgroup("mqbench-test-swap", 512<<20)
	if err != nil {
		t.Fatal(err)
	}
	if mem.Version != 2 || mem.Dir != filepath.Join(parent, "mqbench-test-swap") || !strings.Contains(mem.String(), "cgroup v2") {
		t.Fatalf("memory cgroup %+v", mem)
	}
	if b, _ := os.ReadFile(filepath.Join(mem.Dir, "memory.max")); string(b) != "536870912" {
		t.Errorf("memory.max %q", b)
	}
	if _, err := os.Stat(filepath.Join(mem.Dir, "memory.limit_in_bytes")); err == nil {
		t.Error("a v1 file written in a v2 cgroup")
	}
	if b, _ := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control")); string(b) != "+memory" {
		t.Errorf("the parent's subtree_control %q: memory not delegated", b)
	}
	// This process was in the parent: it moved into a leaf of its own
	// first, so that the parent can delegate.
	leaf := Cgroup{Dir: filepath.Join(parent, fmt.Sprintf("mqbench-%d-main", os.Getpid())), Version: 2}
	if b, _ := os.ReadFile(filepath.Join(leaf.Dir, "cgroup.procs")); strings.TrimSpace(string(b)) != fmt.Sprint(os.Getpid()) {
		t.Errorf("this process not moved into %s: %q", leaf.Dir, b)
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.procs"), nil, 0o644); err != nil { // as the kernel would show it
		t.Fatal(err)
	}
	// memory is delegated now (as the kernel would list it): io is not.
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("memory"), 0o644); err != nil {
		t.Fatal(err)
	}
	io, err := j.MakeIOCgroup("mqbench-test-hdd", "7:0", 150_000_000, 150)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(io.Dir, "io.max")); string(b) != "7:0 rbps=150000000 wbps=150000000 riops=150 wiops=150" {
		t.Errorf("io.max %q", b)
	}
	// An OOM kill shows in memory.events.
	if err := os.WriteFile(filepath.Join(mem.Dir, "memory.events"), []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if kills, limit, err := mem.OOMKills(); err != nil || kills != 2 || limit != "536870912" {
		t.Errorf("OOM kills %d, limit %q, %v", kills, limit, err)
	}
	// The fake's files are not the kernel's: remove them so rmdir works.
	for _, cg := range []Cgroup{mem, io, leaf} {
		ents, _ := os.ReadDir(cg.Dir)
		for _, e := range ents {
			os.Remove(filepath.Join(cg.Dir, e.Name()))
		}
	}
	if err := j.Undo(); err != nil {
		t.Fatal(err)
	}
	for _, cg := range []Cgroup{mem, io, leaf} {
		if _, err := os.Stat(cg.Dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s not removed on undo", cg)
		}
	}
	// Undone in reverse: io taken back, then memory (the last write).
	if b, _ := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control")); string(b) != "-memory" {
		t.Errorf("the parent's subtree_control after undo %q, want -memory", b)
	}
	var taken []string
	for _, c := range j.Changes() {
		if c.Kind == ChangeSubtree && c.Undone {
			taken = append(taken, c.Value)
		}
	}
	if strings.Join(taken, ",") != "memory,io" {
		t.Errorf("subtree delegations undone: %v, want memory,io", taken)
	}
}

// TestCgroupV1Preferred: where the controller is mounted as v1 (the hybrid
// layout, a v2 hierarchy under unified/ beside it), v1 is used.
func TestCgroupV1Preferred(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"memory/mqbench", "unified"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for path, content := range map[string]string{
		filepath.Join(root, "memory", "cgroup.procs"):        "",
		filepath.Join(root, "unified", "cgroup.controllers"): "",
		filepath.Join(root, "self"):                          "4:memory:/mqbench\n0::/\n",
	} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := Host{CgroupRoot: root, SelfCgroup: filepath.Join(root, "self")}
	if dir, v, err := h.CgroupDir("memory"); err != nil || v != 1 || dir != filepath.Join(root, "memory", "mqbench") {
		t.Errorf("memory: %s v%d %v", dir, v, err)
	}
	// io is neither v1 (no blkio mount) nor offered by unified/: a clear error.
	if _, _, err := h.CgroupDir("io"); err == nil || !strings.Contains(err.Error(), "does not offer the io controller") {
		t.Errorf("io: %v", err)
	}
}
