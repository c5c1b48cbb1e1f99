package host

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/internal/hostctl"
)

// vmSettings are the sysctls recorded at the start of every run.
var vmSettings = []string{"vm.dirty_bytes", "vm.dirty_background_bytes", "vm.dirty_ratio", "vm.dirty_background_ratio",
	"vm.dirty_expire_centisecs", "vm.dirty_writeback_centisecs", "vm.swappiness"}

// DescribeMachine collects the machine's description as it is now.
func DescribeMachine(h hostctl.Host) runfile.Machine {
	m := runfile.Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), GOGC: os.Getenv("GOGC"), VM: map[string]string{}}
	m.Host, _ = os.Hostname()
	m.CPUModel = ProcField("/proc/cpuinfo", "model name")
	if kb, err := strconv.ParseInt(strings.Fields(ProcField("/proc/meminfo", "MemTotal") + " 0")[0], 10, 64); err == nil {
		m.MemTotalBytes = kb << 10
	}
	m.Kernel = readTrimmed("/proc/sys/kernel/osrelease")
	m.Clocksource = readTrimmed("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	m.THP = selected(readTrimmed("/sys/kernel/mm/transparent_hugepage/enabled"))
	m.FreePageReporting = freePageReporting("/")
	m.CPUIdleDriver, m.GuestHaltPollNs = cpuIdle("/")
	for _, name := range vmSettings {
		if v, err := h.ReadSysctl(name); err == nil {
			m.VM[name] = v
		}
	}
	m.LoadAvgStart = LoadAvg()
	m.Commit, m.CommitDirty, m.CommitSource = commit()
	return m
}

// balloonReportingBit is VIRTIO_BALLOON_F_REPORTING, the virtio balloon's
// free page reporting feature.
const balloonReportingBit = 5

// freePageReporting reports whether a virtio balloon under root (the file
// system's root: "/") negotiated free page reporting. sysfs lists a
// device's features as a string of 0s and 1s, bit 0 first.
func freePageReporting(root string) bool {
	paths, _ := filepath.Glob(filepath.Join(root, "sys/bus/virtio/drivers/virtio_balloon/*/features"))
	for _, p := range paths {
		if f := readTrimmed(p); len(f) > balloonReportingBit && f[balloonReportingBit] == '1' {
			return true
		}
	}
	return false
}

// cpuIdle is the cpuidle driver under root and, for haltpoll, its
// guest_halt_poll_ns ("" where there is none).
func cpuIdle(root string) (driver, haltPollNs string) {
	driver = readTrimmed(filepath.Join(root, "sys/devices/system/cpu/cpuidle/current_driver"))
	if driver == "haltpoll" {
		haltPollNs = readTrimmed(filepath.Join(root, "sys/module/haltpoll/parameters/guest_halt_poll_ns"))
	}
	return driver, haltPollNs
}

// selected is the bracketed choice of a sysfs setting that lists its
// choices ("always [madvise] never" → "madvise"); the text itself when it
// has no brackets.
func selected(s string) string {
	if _, after, ok := strings.Cut(s, "["); ok {
		if v, _, ok := strings.Cut(after, "]"); ok {
			return v
		}
	}
	return s
}

// LoadAvg is /proc/loadavg's three averages.
func LoadAvg() string {
	if f := strings.Fields(readTrimmed("/proc/loadavg")); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}

// readTrimmed is a small file's content without the surrounding space, ""
// when it cannot be read.
func readTrimmed(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

// commit is the build's VCS revision (vcs.revision, vcs.modified), or the
// working directory's git HEAD when the binary carries none (go run, or
// GOFLAGS=-buildvcs=false).
func commit() (rev string, dirty bool, source string) {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			return rev, dirty, "build info"
		}
	}
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown (no VCS stamp in the build and not in a git checkout)", false, "none"
	}
	rev = strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
		dirty = len(strings.TrimSpace(string(st))) > 0
	}
	return rev, dirty, "git rev-parse HEAD (the build carries no VCS stamp)"
}

// ProcField returns the value of the first "key: value" line of a /proc file.
func ProcField(path, key string) string {
	b, _ := os.ReadFile(path)
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// DescribeDevice describes the device holding dir (best effort: fields it
// cannot read stay empty).
func DescribeDevice(dir string) runfile.Device {
	abs, _ := filepath.Abs(dir)
	d := runfile.Device{Dir: abs}
	d.MountSource, d.FSType, d.MountOptions = mountOf(abs)
	var st syscall.Stat_t
	if err := syscall.Stat(abs, &st); err != nil {
		return d
	}
	major, minor := (uint64(st.Dev)>>8)&0xfff|(uint64(st.Dev)>>32)&^0xfff, uint64(st.Dev)&0xff|(uint64(st.Dev)>>12)&^0xff
	sys, err := filepath.EvalSymlinks(filepath.Join("/sys/dev/block", strconv.FormatUint(major, 10)+":"+strconv.FormatUint(minor, 10)))
	if err != nil {
		return d
	}
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		sys = filepath.Dir(sys) // a partition: the queue is its disk's
	}
	d.Device = filepath.Base(sys)
	read := func(rel string) string { return readTrimmed(filepath.Join(sys, rel)) }
	d.Model = read("device/model")
	if r := read("queue/rotational"); r != "" {
		d.Rotational = new(r == "1")
	}
	d.Scheduler = read("queue/scheduler")
	d.LogicalBlockBytes, _ = strconv.Atoi(read("queue/logical_block_size"))
	d.PhysicalBlockBytes, _ = strconv.Atoi(read("queue/physical_block_size"))
	d.WriteCache = read("queue/write_cache")
	if f := read("queue/fua"); f != "" {
		d.FUA = new(f == "1")
	}
	driver, _ := filepath.EvalSymlinks(filepath.Join(sys, "device", "driver"))
	d.Kind = deviceKind(d.Device, filepath.Base(driver), d.Rotational)
	d.BufferedWritebackThrottled = true
	return d
}

// deviceKind says what a device is. A virtual disk's rotational flag is
// whatever the hypervisor advertises (virtio-blk reports 1 by default): it
// says nothing about the host's storage, so the kind names the virtual
// disk rather than calling it rotational.
func deviceKind(name, driver string, rotational *bool) string {
	switch {
	case driver == "virtio_blk" || strings.HasPrefix(name, "vd"):
		return "virtual disk (virtio-blk; its rotational flag says nothing about the host's storage)"
	case driver == "xen-blkfront" || strings.HasPrefix(name, "xvd"):
		return "virtual disk (Xen; its rotational flag says nothing about the host's storage)"
	case strings.HasPrefix(name, "nvme"):
		return "NVMe SSD"
	case strings.HasPrefix(name, "loop"):
		return "loop device"
	case rotational == nil:
		return "unknown"
	case *rotational:
		return "rotational disk"
	}
	return "SSD"
}

// mountOf returns the source, file system type and mount options of the
// mount holding path.
func mountOf(path string) (source, fsType, options string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	best := -1
	for line := range strings.Lines(string(b)) {
		pre, post, ok := strings.Cut(line, " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 6 || len(tail) < 2 {
			continue
		}
		mnt := fields[4]
		if (path == mnt || strings.HasPrefix(path, strings.TrimSuffix(mnt, "/")+"/")) && len(mnt) > best {
			best, fsType, source = len(mnt), tail[0], tail[1]
			options = fields[5]
			if len(tail) > 2 {
				options += " (super: " + tail[2] + ")"
			}
		}
	}
	return source, fsType, options
}
