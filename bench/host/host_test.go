package host

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseProcFiles(t *testing.T) {
	some, full, err := ParsePressure(strings.NewReader("some avg10=1.50 avg60=0.25 avg300=0.00 total=123456\nfull avg10=0.75 avg60=0.10 avg300=0.00 total=65432\n"))
	if err != nil || some != (PSI{1.5, 0.25, 0, 123456}) || full != (PSI{0.75, 0.1, 0, 65432}) {
		t.Fatalf("some %+v full %+v err %v", some, full, err)
	}
	if _, _, err := ParsePressure(strings.NewReader("bogus\n")); err == nil {
		t.Error("a file without a some line parsed")
	}
	cpu, err := ParseProcStat(strings.NewReader("cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 50 2 25 400 10 1 1 5 0 0\n"))
	if err != nil || cpu != (CPUTimes{Total: 990, Steal: 10}) {
		t.Errorf("proc stat %+v %v", cpu, err)
	}
	if l, err := ParseLoadAvg([]byte("1.25 0.90 0.50 2/180 1234\n")); err != nil || l != 1.25 {
		t.Errorf("loadavg %v %v", l, err)
	}
	vm, err := ParseVmstat(strings.NewReader("nr_dirty 12\npgmajfault 7\n"))
	if err != nil || vm["nr_dirty"] != 12 || vm["pgmajfault"] != 7 {
		t.Errorf("vmstat %v %v", vm, err)
	}
}

func TestSampleDeltas(t *testing.T) {
	t0 := time.Unix(100, 0)
	prev := rawSample{at: t0, vm: map[string]int64{"nr_dirty": 10, "pswpin": 5, "pswpout": 7, "pgmajfault": 100}, ioSome: PSI{TotalUs: 1000},
		cpu: CPUTimes{Total: 1000, Steal: 10}}
	cur := rawSample{at: t0.Add(SampleInterval), vm: map[string]int64{"nr_dirty": 30, "nr_writeback": 4, "pswpin": 9, "pswpout": 7, "pgmajfault": 150},
		ioSome: PSI{Avg10: 2.5, TotalUs: 51000}, memSome: PSI{TotalUs: 10}, load1: 3.5, cpu: CPUTimes{Total: 1200, Steal: 20}}
	s := toSample(prev, cur)
	want := Sample{UnixNs: cur.at.UnixNano(), IntervalNs: SampleInterval.Nanoseconds(), NrDirtyPages: 30, NrWritebackPages: 4, PswpIn: 4, PswpOut: 0, PgMajFault: 50, IOSomeAvg10: 2.5, IOSomeStallUs: 50000,
		MemSomeStallUs: 10, Load1: 3.5, StealPct: 5}
	if s != want {
		t.Fatalf("got %+v\nwant %+v", s, want)
	}
	// The real files, through the sampler's own reader.
	r1, err := readRaw(DefaultProcFiles)
	if err != nil {
		t.Fatalf("/proc: %v", err)
	}
	r2, err := readRaw(DefaultProcFiles)
	if err != nil {
		t.Fatal(err)
	}
	if s := toSample(r1, r2); s.PswpIn < 0 || s.PgMajFault < 0 || s.NrDirtyPages < 0 || s.StealPct < 0 || s.Load1 < 0 {
		t.Fatalf("negative sample %+v", s)
	}
}

func TestDeviceKind(t *testing.T) {
	yes := true
	for _, c := range []struct {
		name, driver string
		rot          *bool
		want         string
	}{
		{"vda", "virtio_blk", &yes, "virtual disk (virtio-blk"},
		{"nvme0n1", "nvme", nil, "NVMe SSD"},
		{"sda", "sd", &yes, "rotational disk"},
		{"loop3", "", &yes, "loop device"},
	} {
		if got := deviceKind(c.name, c.driver, c.rot); !strings.HasPrefix(got, c.want) {
			t.Errorf("deviceKind(%s) = %q, want %q…", c.name, got, c.want)
		}
	}
}

// TestSelectedSetting: the bracketed choice of a sysfs setting, as the
// kernel lists transparent_hugepage/enabled.
func TestSelectedSetting(t *testing.T) {
	for in, want := range map[string]string{
		"always [madvise] never": "madvise",
		"[always] madvise never": "always",
		"always madvise [never]": "never",
		"":                       "",
		"madvise":                "madvise",
	} {
		if got := selected(in); got != want {
			t.Errorf("selected(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestFreePageReporting: a virtio balloon whose features have bit 5
// (VIRTIO_BALLOON_F_REPORTING) set reports free pages; one without it,
// or no balloon, does not.
func TestFreePageReporting(t *testing.T) {
	root := t.TempDir()
	if freePageReporting(root) {
		t.Fatal("no balloon device, yet free page reporting")
	}
	dev := filepath.Join(root, "sys/bus/virtio/drivers/virtio_balloon/virtio0")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	for features, want := range map[string]bool{
		"0110010100000000\n": true,  // the reference VM's: stats, deflate on OOM, reporting
		"0110000100000000\n": false, // no reporting
		"01100":              false, // too short to say
	} {
		if err := os.WriteFile(filepath.Join(dev, "features"), []byte(features), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := freePageReporting(root); got != want {
			t.Errorf("features %q: free page reporting %v, want %v", features, got, want)
		}
	}
}

// TestCPUIdle: the cpuidle driver is read, and with haltpoll its guest
// halt polling; without cpuidle, nothing.
func TestCPUIdle(t *testing.T) {
	root := t.TempDir()
	if d, p := cpuIdle(root); d != "" || p != "" {
		t.Fatalf("no cpuidle, yet driver %q, halt poll %q", d, p)
	}
	write := func(rel, text string) {
		path := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sys/module/haltpoll/parameters/guest_halt_poll_ns", "0\n")
	write("sys/devices/system/cpu/cpuidle/current_driver", "intel_idle\n")
	if d, p := cpuIdle(root); d != "intel_idle" || p != "" {
		t.Errorf("intel_idle: driver %q, halt poll %q; want intel_idle and nothing", d, p)
	}
	write("sys/devices/system/cpu/cpuidle/current_driver", "haltpoll\n")
	if d, p := cpuIdle(root); d != "haltpoll" || p != "0" {
		t.Errorf("haltpoll: driver %q, halt poll %q; want haltpoll and 0", d, p)
	}
}
