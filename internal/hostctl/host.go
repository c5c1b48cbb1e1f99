package hostctl

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Host says where the host's settings live. Production code uses Default;
// tests point the roots at a temporary directory.
type Host struct {
	// ProcSys is /proc/sys (sysctls, drop_caches).
	ProcSys string
	// CgroupRoot is where the cgroup v1 controllers are mounted
	// (/sys/fs/cgroup); SelfCgroup is /proc/self/cgroup.
	CgroupRoot string
	SelfCgroup string
}

// Default is the real host.
func Default() Host {
	return Host{ProcSys: "/proc/sys", CgroupRoot: "/sys/fs/cgroup", SelfCgroup: "/proc/self/cgroup"}
}

// --- sysctls ---

// SysctlPath is the file of a sysctl named with dots (vm.dirty_bytes).
func (h Host) SysctlPath(name string) string {
	return filepath.Join(h.ProcSys, strings.ReplaceAll(name, ".", "/"))
}

// ReadSysctl reads a sysctl by its dotted name.
func (h Host) ReadSysctl(name string) (string, error) {
	b, err := os.ReadFile(h.SysctlPath(name))
	return strings.TrimSpace(string(b)), err
}

func writeFile(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		return fmt.Errorf("write %s=%s: %w", path, value, err)
	}
	return nil
}

// VMDirtyNames are the four sysctls vm-dirty changes and restores, in the
// order of a vm-dirty change's Original.
var VMDirtyNames = []string{"dirty_bytes", "dirty_background_bytes", "dirty_ratio", "dirty_background_ratio"}

func readVMDirty(vmDir string) (string, error) {
	vals := make([]string, len(VMDirtyNames))
	for i, n := range VMDirtyNames {
		b, err := os.ReadFile(filepath.Join(vmDir, n))
		if err != nil {
			return "", err
		}
		vals[i] = strings.TrimSpace(string(b))
	}
	return strings.Join(vals, ","), nil
}

// restoreVMDirty writes back the four values into vmDir: the kernel keeps
// either the bytes or the ratio of each pair (writing one zeroes the other,
// and 0 bytes cannot be written), so the non-zero member of each pair is
// written, the background pair first.
func restoreVMDirty(vmDir, original string) error {
	v := strings.Split(original, ",")
	if len(v) != 4 {
		return fmt.Errorf("vm-dirty original %q: want 4 values", original)
	}
	var errs []error
	for _, pair := range [][2]int{{1, 3}, {0, 2}} {
		bytesIdx, ratioIdx := pair[0], pair[1]
		if v[bytesIdx] != "0" {
			errs = append(errs, writeFile(filepath.Join(vmDir, VMDirtyNames[bytesIdx]), v[bytesIdx]))
		} else {
			errs = append(errs, writeFile(filepath.Join(vmDir, VMDirtyNames[ratioIdx]), v[ratioIdx]))
		}
	}
	return errors.Join(errs...)
}

// SetVMDirty lowers vm.dirty_bytes and vm.dirty_background_bytes (recorded
// first, with the four original values).
func (j *Journal) SetVMDirty(dirtyBytes, backgroundBytes int64) error {
	vmDir := filepath.Join(j.host.ProcSys, "vm")
	orig, err := readVMDirty(vmDir)
	if err != nil {
		return err
	}
	val := fmt.Sprintf("%d,%d", dirtyBytes, backgroundBytes)
	if err := j.Record(Change{Kind: ChangeVMDirty, Path: vmDir, Original: orig, Value: val}); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(vmDir, "dirty_bytes"), strconv.FormatInt(dirtyBytes, 10)); err != nil {
		return err
	}
	return writeFile(filepath.Join(vmDir, "dirty_background_bytes"), strconv.FormatInt(backgroundBytes, 10))
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
	return writeFile(path, value)
}

// DropCaches writes back dirty pages and drops the clean page cache, dentries
// and inodes (sync, then vm.drop_caches=3): every process's cache, not a
// setting — nothing to undo, but root only and never from a test.
func (h Host) DropCaches() error {
	syscall.Sync()
	return writeFile(h.SysctlPath("vm.drop_caches"), "3")
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
	err = allocate(f, sizeBytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("swapfile fallocate: %w", err)
	}
	if err := RunTool("mkswap", path); err != nil {
		return err
	}
	if err := j.Record(Change{Kind: ChangeSwapon, Path: path}); err != nil {
		return err
	}
	return RunTool("swapon", path)
}

// --- cgroups (v1 and v2) ---

// Cgroup is a child cgroup a run made, and the cgroup version it is in.
type Cgroup struct {
	Dir     string
	Version int
}

// String names the cgroup with its version.
func (c Cgroup) String() string { return fmt.Sprintf("%s (cgroup v%d)", c.Dir, c.Version) }

// v1Names are the v1 hierarchies of the controllers (v2 names): io is
// blkio in v1.
var v1Names = map[string]string{"memory": "memory", "io": "blkio"}

// CgroupV1Dir returns the directory of this process's cgroup in a v1
// hierarchy (memory, blkio), or an error when that controller is not
// mounted as v1.
func (h Host) CgroupV1Dir(controller string) (string, error) {
	root := filepath.Join(h.CgroupRoot, controller)
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		return "", fmt.Errorf("cgroup v1 %s controller not mounted at %s", controller, root)
	}
	b, err := os.ReadFile(h.SelfCgroup)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[0] != "0" && slices.Contains(strings.Split(parts[1], ","), controller) {
			return filepath.Join(root, parts[2]), nil
		}
	}
	return root, nil
}

// cgroupV2Dir returns the directory of this process's cgroup in the v2
// hierarchy — mounted at CgroupRoot (v2 only) or CgroupRoot/unified (the
// hybrid layout) — when the controller is available there.
func (h Host) cgroupV2Dir(controller string) (string, error) {
	for _, root := range []string{h.CgroupRoot, filepath.Join(h.CgroupRoot, "unified")} {
		b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
		if err != nil {
			continue
		}
		if !slices.Contains(strings.Fields(string(b)), controller) {
			return "", fmt.Errorf("cgroup v2 at %s does not offer the %s controller (%s)", root, controller, strings.TrimSpace(string(b)))
		}
		self, err := os.ReadFile(h.SelfCgroup)
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(string(self), "\n") {
			if rest, ok := strings.CutPrefix(line, "0::"); ok {
				return filepath.Join(root, rest), nil
			}
		}
		return root, nil
	}
	return "", fmt.Errorf("no cgroup v2 hierarchy at %s or %s/unified", h.CgroupRoot, h.CgroupRoot)
}

// CgroupDir returns this process's cgroup for a controller (memory or io)
// and the version it runs under: v1 where the controller is mounted as
// v1, else v2.
func (h Host) CgroupDir(controller string) (string, int, error) {
	v1, err1 := h.CgroupV1Dir(v1Names[controller])
	if err1 == nil {
		return v1, 1, nil
	}
	v2, err2 := h.cgroupV2Dir(controller)
	if err2 == nil {
		return v2, 2, nil
	}
	return "", 0, fmt.Errorf("no %s cgroup: %v; %v", controller, err1, err2)
}

// makeCgroup creates a child cgroup of this process's cgroup for a
// controller and writes the settings the version takes. In v2 the parent
// must delegate the controller to its children: when its
// cgroup.subtree_control lacks it, it is enabled (recorded, and disabled
// again on undo), after this process moved into a leaf of its own when
// it was in the parent (a v2 cgroup with processes cannot delegate); the
// kernel still refuses while other processes share the parent (run
// mqbench in a cgroup of its own then).
func (j *Journal) makeCgroup(controller, name string, v1, v2 [][2]string) (Cgroup, error) {
	parent, version, err := j.host.CgroupDir(controller)
	if err != nil {
		return Cgroup{}, err
	}
	settings := v1
	if version == 2 {
		settings = v2
		ctl := filepath.Join(parent, "cgroup.subtree_control")
		cur, err := os.ReadFile(ctl)
		if err != nil {
			return Cgroup{}, fmt.Errorf("cgroup v2 %s: %w", parent, err)
		}
		if !slices.Contains(strings.Fields(string(cur)), controller) {
			// A v2 cgroup that holds processes cannot delegate a
			// controller ("no internal processes"): this process moves
			// into a leaf of its own first (moved back on undo).
			if procs, _ := os.ReadFile(filepath.Join(parent, "cgroup.procs")); slices.Contains(strings.Fields(string(procs)), strconv.Itoa(os.Getpid())) {
				leaf := filepath.Join(parent, fmt.Sprintf("mqbench-%d-main", os.Getpid()))
				if err := j.Record(Change{Kind: ChangeCgroup, Path: leaf}); err != nil {
					return Cgroup{}, err
				}
				if err := os.Mkdir(leaf, 0o755); err != nil {
					return Cgroup{}, fmt.Errorf("cgroup v2 %s: %w", leaf, err)
				}
				if err := JoinCgroup(leaf, os.Getpid()); err != nil {
					return Cgroup{}, fmt.Errorf("cgroup v2: %w", err)
				}
			}
			if err := j.Record(Change{Kind: ChangeSubtree, Path: ctl, Value: controller}); err != nil {
				return Cgroup{}, err
			}
			if err := os.WriteFile(ctl, []byte("+"+controller), 0o644); err != nil {
				return Cgroup{}, fmt.Errorf("cgroup v2: enable %s for the children of %s: %w (a cgroup that holds processes cannot delegate it: run mqbench in a cgroup of its own, e.g. under systemd-run --scope)", controller, parent, err)
			}
		}
	}
	cg := Cgroup{Dir: filepath.Join(parent, name), Version: version}
	if err := j.Record(Change{Kind: ChangeCgroup, Path: cg.Dir}); err != nil {
		return cg, err
	}
	if err := os.Mkdir(cg.Dir, 0o755); err != nil {
		return cg, fmt.Errorf("cgroup %s: %w", cg, err)
	}
	for _, s := range settings {
		file, optional := strings.CutPrefix(s[0], "?")
		if _, err := os.Stat(filepath.Join(cg.Dir, file)); optional && err != nil {
			continue // an optional knob this kernel does not have
		}
		if err := os.WriteFile(filepath.Join(cg.Dir, file), []byte(s[1]), 0o644); err != nil {
			return cg, fmt.Errorf("cgroup %s: %s=%s: %w", cg, s[0], s[1], err)
		}
	}
	return cg, nil
}

// MakeMemoryCgroup creates a memory cgroup limited to limitBytes whose
// members may swap: v1 memory.limit_in_bytes with memory.swappiness 100;
// v2 memory.max with memory.swap.max "max" where the kernel accounts swap
// (v2 has no per-cgroup swappiness: the system's applies).
func (j *Journal) MakeMemoryCgroup(name string, limitBytes int64) (Cgroup, error) {
	l := strconv.FormatInt(limitBytes, 10)
	return j.makeCgroup("memory", name, [][2]string{{"memory.limit_in_bytes", l}, {"memory.swappiness", "100"}},
		[][2]string{{"memory.max", l}, {"?memory.swap.max", "max"}})
}

// MakeIOCgroup creates an io cgroup throttling device majMin ("8:16") to
// bps bytes and iops operations per second each way: v1 blkio.throttle.*,
// v2 io.max. v2's limit covers buffered writeback too (v1's does not).
func (j *Journal) MakeIOCgroup(name, majMin string, bps, iops int64) (Cgroup, error) {
	b, o := strconv.FormatInt(bps, 10), strconv.FormatInt(iops, 10)
	return j.makeCgroup("io", name, [][2]string{
		{"blkio.throttle.write_bps_device", majMin + " " + b}, {"blkio.throttle.read_bps_device", majMin + " " + b},
		{"blkio.throttle.write_iops_device", majMin + " " + o}, {"blkio.throttle.read_iops_device", majMin + " " + o}},
		[][2]string{{"io.max", fmt.Sprintf("%s rbps=%s wbps=%s riops=%s wiops=%s", majMin, b, b, o, o)}})
}

// OOMKills is how many processes the cgroup's OOM killer has killed
// (v1 memory.oom_control, v2 memory.events), and its memory limit.
func (c Cgroup) OOMKills() (kills int64, limit string, err error) {
	file, limitFile := "memory.oom_control", "memory.limit_in_bytes"
	if c.Version == 2 {
		file, limitFile = "memory.events", "memory.max"
	}
	b, err := os.ReadFile(filepath.Join(c.Dir, file))
	if err != nil {
		return 0, "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			kills, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	l, _ := os.ReadFile(filepath.Join(c.Dir, limitFile))
	return kills, strings.TrimSpace(string(l)), nil
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

// Mount mounts dev (fsType) on a new directory dir, with mount(8)'s -o
// options when there are any.
func (j *Journal) Mount(dev, fsType, dir string, options ...string) error {
	if err := j.Record(Change{Kind: ChangeDir, Path: dir}); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if err := j.Record(Change{Kind: ChangeMount, Path: dir}); err != nil {
		return err
	}
	args := []string{"-t", fsType}
	if len(options) > 0 {
		args = append(args, "-o", strings.Join(options, ","))
	}
	return RunTool("mount", append(args, dev, dir)...)
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
