package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultStateDir holds one state file per run that changed the system
// (/run is emptied at boot, as are the changes it records).
const DefaultStateDir = "/run/mqbench"

// Change kinds, each with its undo.
const (
	ChangeVMDirty = "vm-dirty" // undo: write back the four original vm.dirty_* values
	ChangeSysctl  = "sysctl"   // undo: write Original to Path
	ChangeFile    = "file"     // undo: remove Path
	ChangeDir     = "dir"      // undo: rmdir Path (never recursive: it may be a mount point)
	ChangeSwapon  = "swapon"   // undo: swapoff Path
	ChangeCgroup  = "cgroup"   // undo: move its processes to the parent, rmdir
	ChangeLoop    = "loop"     // undo: losetup -d Path when its backing file is still Backing
	ChangeMount   = "mount"    // undo: umount Path (lazily when busy)
	ChangeProcess = "process"  // undo: SIGKILL PID when its start time is still StartTicks
)

// Change is one modification of the system, recorded before it is made.
type Change struct {
	Kind string `json:"kind"`
	Path string `json:"path"`
	// Original is the value a sysctl or sysfs attribute had (vm-dirty: the
	// four values as dirty_bytes,dirty_background_bytes,dirty_ratio,dirty_background_ratio).
	Original   string `json:"original,omitempty"`
	Value      string `json:"value,omitempty"`
	Backing    string `json:"backing,omitempty"`
	PID        int    `json:"pid,omitempty"`
	StartTicks uint64 `json:"startTicks,omitempty"`
	Undone     bool   `json:"undone"`
	UndoError  string `json:"undoError,omitempty"`
}

// String says what the change was.
func (c Change) String() string {
	switch c.Kind {
	case ChangeVMDirty:
		return fmt.Sprintf("vm.dirty_bytes,dirty_background_bytes set to %s (were bytes,bg_bytes,ratio,bg_ratio = %s)", c.Value, c.Original)
	case ChangeSysctl:
		return fmt.Sprintf("%s set to %s (was %s)", c.Path, c.Value, c.Original)
	case ChangeProcess:
		return fmt.Sprintf("process %d (%s)", c.PID, c.Value)
	case ChangeLoop:
		return fmt.Sprintf("loop device %s on %s", c.Path, c.Backing)
	}
	return c.Kind + " " + c.Path
}

type journalState struct {
	PID        int       `json:"pid"`
	StartTicks uint64    `json:"startTicks"`
	StartedAt  time.Time `json:"startedAt"`
	Changes    []Change  `json:"changes"`
}

// Journal records every system change of a run in a state file before it is
// made, so Undo (on exit, Ctrl-C or error) and Cleanup (after a killed run)
// can restore the system. Safe for concurrent use.
type Journal struct {
	mu    sync.Mutex
	path  string
	state journalState
}

// OpenJournal creates this process's state file in dir.
func OpenJournal(dir string) (*Journal, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	pid := os.Getpid()
	j := &Journal{path: filepath.Join(dir, fmt.Sprintf("run-%d.json", pid)),
		state: journalState{PID: pid, StartTicks: processStartTicks(pid), StartedAt: time.Now(), Changes: []Change{}}}
	return j, j.save()
}

// Path is the state file.
func (j *Journal) Path() string { return j.path }

func (j *Journal) save() error {
	b, err := json.MarshalIndent(j.state, "", " ")
	if err != nil {
		return err
	}
	tmp := j.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	if err := os.Rename(tmp, j.path); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	return nil
}

// Record adds a change (before it is made) and saves the state file.
func (j *Journal) Record(c Change) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.state.Changes = append(j.state.Changes, c)
	return j.save()
}

// Changes returns a copy of the recorded changes.
func (j *Journal) Changes() []Change {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Change(nil), j.state.Changes...)
}

// Mark is the position of the next change, for UndoSince.
func (j *Journal) Mark() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.state.Changes)
}

// UndoSince undoes the changes recorded at or after mark, newest first.
func (j *Journal) UndoSince(mark int) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.undoLocked(mark)
}

// Undo undoes every change not yet undone, newest first, and removes the
// state file when all succeeded. It returns what it could not undo.
func (j *Journal) Undo() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	err := j.undoLocked(0)
	if err == nil {
		if rerr := os.Remove(j.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return rerr
		}
	}
	return err
}

func (j *Journal) undoLocked(mark int) error {
	var errs []error
	for i := len(j.state.Changes) - 1; i >= mark; i-- {
		c := &j.state.Changes[i]
		if c.Undone {
			continue
		}
		if err := undo(*c); err != nil {
			c.UndoError = err.Error()
			errs = append(errs, fmt.Errorf("undo %s: %w", c, err))
		} else {
			c.Undone, c.UndoError = true, ""
		}
		_ = j.save()
	}
	return errors.Join(errs...)
}

// CleanupReport is what Cleanup did with one state file.
type CleanupReport struct {
	File    string
	Skipped string // why it was left alone (its run is alive)
	Undone  []Change
	Err     error
}

// Cleanup undoes what runs left in dir's state files. A file whose run is
// still alive is skipped unless force.
func Cleanup(dir string, force bool) ([]CleanupReport, error) {
	files, err := filepath.Glob(filepath.Join(dir, "run-*.json"))
	if err != nil {
		return nil, err
	}
	var out []CleanupReport
	for _, f := range files {
		rep := CleanupReport{File: f}
		b, err := os.ReadFile(f)
		if err != nil {
			rep.Err = err
			out = append(out, rep)
			continue
		}
		j := &Journal{path: f}
		if err := json.Unmarshal(b, &j.state); err != nil {
			rep.Err = fmt.Errorf("%s: %w", f, err)
			out = append(out, rep)
			continue
		}
		if !force && j.state.PID != os.Getpid() && processAlive(j.state.PID, j.state.StartTicks) {
			rep.Skipped = fmt.Sprintf("its run (pid %d) is still running; stop it, or pass --force", j.state.PID)
			out = append(out, rep)
			continue
		}
		for _, c := range j.state.Changes {
			if !c.Undone {
				rep.Undone = append(rep.Undone, c)
			}
		}
		rep.Err = j.Undo()
		out = append(out, rep)
	}
	return out, nil
}

// LeftoverStates lists state files of runs that are no longer alive.
func LeftoverStates(dir string) []string {
	files, _ := filepath.Glob(filepath.Join(dir, "run-*.json"))
	var out []string
	for _, f := range files {
		var st journalState
		if b, err := os.ReadFile(f); err == nil && json.Unmarshal(b, &st) == nil && !processAlive(st.PID, st.StartTicks) {
			out = append(out, f)
		}
	}
	return out
}

func undo(c Change) error {
	switch c.Kind {
	case ChangeVMDirty:
		return restoreVMDirty(c.Original)
	case ChangeSysctl:
		if c.Original == "" {
			return nil
		}
		err := os.WriteFile(c.Path, []byte(c.Original), 0)
		if errors.Is(err, os.ErrNotExist) {
			return nil // the device it belonged to is gone
		}
		return err
	case ChangeFile:
		if err := os.Remove(c.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	case ChangeDir:
		if err := os.Remove(c.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	case ChangeSwapon:
		if !swapActive(c.Path) {
			return nil
		}
		return runTool("swapoff", c.Path)
	case ChangeCgroup:
		return removeCgroup(c.Path)
	case ChangeLoop:
		if loopBacking(c.Path) != c.Backing || c.Backing == "" {
			return nil // detached already (or reused for another file: not ours)
		}
		return runTool("losetup", "-d", c.Path)
	case ChangeMount:
		if !isMountPoint(c.Path) {
			return nil
		}
		if err := runTool("umount", c.Path); err != nil {
			return runTool("umount", "-l", c.Path)
		}
	case ChangeProcess:
		if processAlive(c.PID, c.StartTicks) {
			if err := syscall.Kill(c.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return err
			}
			waitGone(c.PID, c.StartTicks, 5*time.Second)
		}
	default:
		return fmt.Errorf("unknown change kind %q", c.Kind)
	}
	return nil
}

func runTool(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// --- sysctls ---

func sysctlPath(name string) string { return "/proc/sys/" + strings.ReplaceAll(name, ".", "/") }

// ReadSysctl reads a sysctl by its dotted name.
func ReadSysctl(name string) (string, error) {
	b, err := os.ReadFile(sysctlPath(name))
	return strings.TrimSpace(string(b)), err
}

func writeSysctl(name, value string) error {
	if err := os.WriteFile(sysctlPath(name), []byte(value), 0); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", name, value, err)
	}
	return nil
}

var vmDirtyNames = []string{"vm.dirty_bytes", "vm.dirty_background_bytes", "vm.dirty_ratio", "vm.dirty_background_ratio"}

func readVMDirty() (string, error) {
	vals := make([]string, len(vmDirtyNames))
	for i, n := range vmDirtyNames {
		v, err := ReadSysctl(n)
		if err != nil {
			return "", err
		}
		vals[i] = v
	}
	return strings.Join(vals, ","), nil
}

// restoreVMDirty writes back the four values: the kernel keeps either the
// bytes or the ratio of each pair (writing one zeroes the other, and 0
// bytes cannot be written), so the non-zero member of each pair is written.
func restoreVMDirty(original string) error {
	v := strings.Split(original, ",")
	if len(v) != 4 {
		return fmt.Errorf("vm-dirty original %q: want 4 values", original)
	}
	var errs []error
	for _, pair := range [][2]int{{1, 3}, {0, 2}} { // background first
		bytesIdx, ratioIdx := pair[0], pair[1]
		if v[bytesIdx] != "0" {
			errs = append(errs, writeSysctl(vmDirtyNames[bytesIdx], v[bytesIdx]))
		} else {
			errs = append(errs, writeSysctl(vmDirtyNames[ratioIdx], v[ratioIdx]))
		}
	}
	return errors.Join(errs...)
}

// SetVMDirty lowers vm.dirty_bytes and vm.dirty_background_bytes (recorded
// first).
func (j *Journal) SetVMDirty(dirtyBytes, backgroundBytes int64) error {
	orig, err := readVMDirty()
	if err != nil {
		return err
	}
	val := fmt.Sprintf("%d,%d", dirtyBytes, backgroundBytes)
	if err := j.Record(Change{Kind: ChangeVMDirty, Path: "/proc/sys/vm", Original: orig, Value: val}); err != nil {
		return err
	}
	if err := writeSysctl("vm.dirty_bytes", strconv.FormatInt(dirtyBytes, 10)); err != nil {
		return err
	}
	return writeSysctl("vm.dirty_background_bytes", strconv.FormatInt(backgroundBytes, 10))
}

// SetAttr writes a sysfs or procfs attribute, recording its original value.
func (j *Journal) SetAttr(path, value string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := j.Record(Change{Kind: ChangeSysctl, Path: path, Original: strings.TrimSpace(string(b)), Value: value}); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// --- swap ---

// ActiveSwaps lists /proc/swaps' entries.
func ActiveSwaps() []string {
	b, _ := os.ReadFile("/proc/swaps")
	var out []string
	for i, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); i > 0 && len(f) > 0 {
			out = append(out, f[0])
		}
	}
	return out
}

func swapActive(path string) bool {
	for _, s := range ActiveSwaps() {
		if s == path {
			return true
		}
	}
	return false
}

// AddSwapfile makes a swapfile of sizeBytes at path and turns it on.
func (j *Journal) AddSwapfile(path string, sizeBytes int64) error {
	if err := j.Record(Change{Kind: ChangeFile, Path: path}); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("swapfile: %w", err)
	}
	err = syscall.Fallocate(int(f.Fd()), 0, 0, sizeBytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("swapfile fallocate: %w", err)
	}
	if err := runTool("mkswap", path); err != nil {
		return err
	}
	if err := j.Record(Change{Kind: ChangeSwapon, Path: path}); err != nil {
		return err
	}
	return runTool("swapon", path)
}

// --- cgroups (v1) ---

// CgroupV1Dir returns the directory of this process's cgroup in a v1
// hierarchy (memory, blkio), or an error when that controller is not
// mounted as v1.
func CgroupV1Dir(controller string) (string, error) {
	root := filepath.Join("/sys/fs/cgroup", controller)
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		return "", fmt.Errorf("cgroup v1 %s controller not mounted at %s", controller, root)
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[0] != "0" && slicesContains(strings.Split(parts[1], ","), controller) {
			return filepath.Join(root, parts[2]), nil
		}
	}
	return root, nil
}

func slicesContains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// MakeCgroup creates a child cgroup of this process's cgroup in a v1
// controller and writes settings (file → value) into it.
func (j *Journal) MakeCgroup(controller, name string, settings [][2]string) (string, error) {
	parent, err := CgroupV1Dir(controller)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(parent, name)
	if err := j.Record(Change{Kind: ChangeCgroup, Path: dir}); err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("cgroup %s: %w", dir, err)
	}
	for _, s := range settings {
		if err := os.WriteFile(filepath.Join(dir, s[0]), []byte(s[1]), 0); err != nil {
			return dir, fmt.Errorf("cgroup %s: %s=%s: %w", dir, s[0], s[1], err)
		}
	}
	return dir, nil
}

// JoinCgroup moves process pid into the cgroup directory dir.
func JoinCgroup(dir string, pid int) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("move %d into %s: %w", pid, dir, err)
	}
	return nil
}

func removeCgroup(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if b, rerr := os.ReadFile(filepath.Join(dir, "cgroup.procs")); rerr == nil {
			for _, p := range strings.Fields(string(b)) {
				_ = os.WriteFile(filepath.Join(filepath.Dir(dir), "cgroup.procs"), []byte(p), 0)
			}
		}
		if err = syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // a dying member still holds it
	}
	return fmt.Errorf("rmdir %s: %w", dir, err)
}

// --- loop devices and mounts ---

func loopBacking(dev string) string {
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// AttachLoop attaches image to a free loop device with direct I/O (so the
// emulated disk's writes are not cached a second time by the host).
func (j *Journal) AttachLoop(image string) (string, error) {
	out, err := exec.Command("losetup", "--find", "--show", "--direct-io=on", image).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("losetup: %w: %s", err, strings.TrimSpace(string(out)))
	}
	dev := strings.TrimSpace(string(out))
	return dev, j.Record(Change{Kind: ChangeLoop, Path: dev, Backing: image})
}

// Mount mounts dev (fsType) on a new directory dir.
func (j *Journal) Mount(dev, fsType, dir string) error {
	if err := j.Record(Change{Kind: ChangeDir, Path: dir}); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if err := j.Record(Change{Kind: ChangeMount, Path: dir}); err != nil {
		return err
	}
	return runTool("mount", "-t", fsType, dev, dir)
}

func isMountPoint(dir string) bool {
	abs, _ := filepath.Abs(dir)
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && unescapeMount(f[4]) == abs {
			return true
		}
	}
	return false
}

func unescapeMount(s string) string { return strings.ReplaceAll(s, `\040`, " ") }

// --- processes ---

// processStartTicks is field 22 of /proc/pid/stat (0 when gone).
func processStartTicks(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// processAlive reports whether pid still runs (a zombie does not) and is
// the same process.
func processAlive(pid int, startTicks uint64) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
		return false
	}
	t := processStartTicks(pid)
	return t != 0 && (startTicks == 0 || t == startTicks)
}

func waitGone(pid int, startTicks uint64, d time.Duration) {
	deadline := time.Now().Add(d)
	for processAlive(pid, startTicks) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// RecordProcess records a started neighbour so a cleanup kills it.
func (j *Journal) RecordProcess(pid int, what string) error {
	return j.Record(Change{Kind: ChangeProcess, PID: pid, StartTicks: processStartTicks(pid), Value: what})
}
