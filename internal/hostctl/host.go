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

// --- cgroups (v1) ---

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

// MakeCgroup creates a child cgroup of this process's cgroup in a v1
// controller and writes settings (file → value) into it.
func (j *Journal) MakeCgroup(controller, name string, settings [][2]string) (string, error) {
	parent, err := j.host.CgroupV1Dir(controller)
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
	return RunTool("mount", "-t", fsType, dev, dir)
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
