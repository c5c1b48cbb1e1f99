package bench

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// Machine describes where a run ran.
type Machine struct {
	Host          string `json:"host"`
	OS            string `json:"os"`
	Arch          string `json:"arch"`
	CPUs          int    `json:"cpus"`
	CPUModel      string `json:"cpuModel"`
	MemTotalBytes int64  `json:"memTotalBytes"`
	Kernel        string `json:"kernel"`
	GoVersion     string `json:"goVersion"`
	Commit        string `json:"commit"`
	CommitDirty   bool   `json:"commitDirty"`
}

// Device describes the block device under a target directory, from /sys.
type Device struct {
	Dir                string `json:"dir"`
	Device             string `json:"device"`
	FSType             string `json:"fsType"`
	MountSource        string `json:"mountSource"`
	Model              string `json:"model,omitempty"`
	Rotational         *bool  `json:"rotational,omitempty"`
	Scheduler          string `json:"scheduler,omitempty"`
	LogicalBlockBytes  int    `json:"logicalBlockBytes,omitempty"`
	PhysicalBlockBytes int    `json:"physicalBlockBytes,omitempty"`
	WriteCache         string `json:"writeCache,omitempty"`
	FUA                *bool  `json:"fua,omitempty"`
	Emulated           bool   `json:"emulated"`
	// Label names the target in cell names and tables; Note says how an
	// emulated device is made (or why a target was skipped).
	Label string `json:"label,omitempty"`
	Note  string `json:"note,omitempty"`
}

// DescribeMachine collects the machine's description.
func DescribeMachine() Machine {
	m := Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	m.Host, _ = os.Hostname()
	m.CPUModel = procField("/proc/cpuinfo", "model name")
	if kb, err := strconv.ParseInt(strings.Fields(procField("/proc/meminfo", "MemTotal") + " 0")[0], 10, 64); err == nil {
		m.MemTotalBytes = kb << 10
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
			m.CommitDirty = len(strings.TrimSpace(string(st))) > 0
		}
	} else {
		m.Commit = "unknown (not a git checkout)"
	}
	return m
}

// procField returns the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// DescribeDevice describes the device holding dir (best effort: fields it
// cannot read stay empty).
func DescribeDevice(dir string) Device {
	abs, _ := filepath.Abs(dir)
	d := Device{Dir: abs}
	d.MountSource, d.FSType = mountOf(abs)
	var st syscall.Stat_t
	if err := syscall.Stat(abs, &st); err != nil {
		return d
	}
	major, minor := (st.Dev>>8)&0xfff|(st.Dev>>32)&^0xfff, st.Dev&0xff|(st.Dev>>12)&^0xff
	sys, err := filepath.EvalSymlinks(filepath.Join("/sys/dev/block", strconv.FormatUint(major, 10)+":"+strconv.FormatUint(minor, 10)))
	if err != nil {
		return d
	}
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		sys = filepath.Dir(sys) // a partition: the queue is its disk's
	}
	d.Device = filepath.Base(sys)
	read := func(rel string) string {
		b, _ := os.ReadFile(filepath.Join(sys, rel))
		return strings.TrimSpace(string(b))
	}
	d.Model = read("device/model")
	if r := read("queue/rotational"); r != "" {
		rot := r == "1"
		d.Rotational = &rot
	}
	d.Scheduler = read("queue/scheduler")
	d.LogicalBlockBytes, _ = strconv.Atoi(read("queue/logical_block_size"))
	d.PhysicalBlockBytes, _ = strconv.Atoi(read("queue/physical_block_size"))
	d.WriteCache = read("queue/write_cache")
	if f := read("queue/fua"); f != "" {
		fua := f == "1"
		d.FUA = &fua
	}
	return d
}

// mountOf returns the source and file system type of the mount holding path.
func mountOf(path string) (source, fsType string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", ""
	}
	defer f.Close()
	best := -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 2 {
			continue
		}
		mnt := fields[4]
		if (path == mnt || strings.HasPrefix(path, strings.TrimSuffix(mnt, "/")+"/")) && len(mnt) > best {
			best, fsType, source = len(mnt), tail[0], tail[1]
		}
	}
	return source, fsType
}
