//go:build linux

package hddfs

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/internal/hostctl"
	"github.com/mqstore/mqstore/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestMain lets the test binary run as the daemon.
func TestMain(m *testing.M) {
	RunDaemonIfRequested()
	flag.Parse()
	if !*calibrate { // about 30 s of fio: only with -hddfs.calibrate
		if err := testenv.LeaveOut("TestCalibrate"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

func needDisk(t *testing.T) {
	t.Helper()
	testenv.NeedFUSE(t, "hddfs mounts a FUSE file system")
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, testenv.Loop, "%s: %v", tool, err)
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		testenv.Skip(t, testenv.Loop, "no loop devices: %v", err)
	}
}

// setupT builds an emulated disk for the test and checks, when the test
// ends, that Close left nothing behind.
func setupT(t *testing.T, size int64, m Model, nice *int) *Mounted {
	t.Helper()
	needDisk(t)
	base := t.TempDir()
	j, err := hostctl.OpenJournal(filepath.Join(base, "state"), hostctl.Default())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "disk")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := Setup(context.Background(), Config{Dir: dir, SizeBytes: size, Model: m, Journal: j, DaemonNice: nice})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		checkGone(t, d, dir)
		if err := j.Undo(); err != nil {
			t.Errorf("journal: %v", err)
		}
	})
	return d
}

// checkGone fails unless no mount, loop device or file of d remains.
func checkGone(t *testing.T, d *Mounted, dir string) {
	t.Helper()
	info, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(info), dir) {
		t.Errorf("a mount under %s is left:\n%s", dir, info)
	}
	if d.Device != "" {
		if b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(d.Device), "loop", "backing_file")); err == nil && strings.Contains(string(b), ImageName) {
			t.Errorf("loop device %s is left attached to %s", d.Device, b)
		}
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("%s holds %d entries after Close (%v)", dir, len(ents), err)
	}
}

// TestSetupRoundTrip writes a file on the emulated disk's ext4, syncs it,
// reads it back after dropping it from the page cache, and checks that the
// daemon's counters saw the writes, the flush and the seeks.
func TestSetupRoundTrip(t *testing.T) {
	d := setupT(t, 128<<20, DefaultModel(), nil)
	if !testenv.OnFUSE(d.Image) || testenv.OnFUSE(d.Dir) {
		t.Fatalf("OnFUSE: image %v, ext4 %v; want true, false", testenv.OnFUSE(d.Image), testenv.OnFUSE(d.Dir))
	}
	rot, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(d.Device), "queue", "rotational"))
	if err != nil || strings.TrimSpace(string(rot)) != "1" {
		t.Errorf("%s rotational = %q (%v), want 1", d.Device, rot, err)
	}
	dio, _ := os.ReadFile(filepath.Join("/sys/block", filepath.Base(d.Device), "loop", "dio"))
	t.Logf("%s on %s, loop direct I/O %s", d.Device, d.Image, strings.TrimSpace(string(dio)))
	want := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	path := filepath.Join(d.Dir, "f")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back %v: the bytes differ from those written", err)
	}
	// The same bytes are in the backing image: ext4 wrote them through.
	img, err := os.ReadFile(d.Backing)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(img, want[:64<<10]) {
		t.Errorf("the backing image does not hold the file's bytes")
	}
	f.Close()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	log := d.DaemonLog()
	t.Logf("daemon:\n%s", log)
	for _, k := range []string{"hddfs: unmounted", "flushes=", "seeks="} {
		if !strings.Contains(log, k) {
			t.Errorf("daemon log lacks %q:\n%s", k, log)
		}
	}
	if strings.Contains(log, "flushes=0 ") || strings.Contains(log, "writes=0 ") {
		t.Errorf("daemon counted no writes or flushes:\n%s", log)
	}
}

// TestSetupFailureLeavesNothing: a daemon that never mounts, and a setup
// cancelled from the start, fail Setup and leave nothing behind.
func TestSetupFailureLeavesNothing(t *testing.T) {
	needDisk(t)
	for _, c := range []struct {
		name   string
		ctx    func() context.Context
		daemon *exec.Cmd
	}{
		{"daemon exits", context.Background, exec.Command("/bin/false")},
		{"cancelled", func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			j, err := hostctl.OpenJournal(filepath.Join(base, "state"), hostctl.Default())
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(base, "disk")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			d, err := Setup(c.ctx(), Config{Dir: dir, SizeBytes: 64 << 20, Model: DefaultModel(), Journal: j, Daemon: c.daemon})
			if err == nil {
				d.Close()
				t.Fatal("Setup succeeded")
			}
			t.Logf("Setup: %v", err)
			checkGone(t, &Mounted{}, dir)
			for _, ch := range j.Changes() {
				if !ch.Undone {
					t.Errorf("change not undone: %s", ch)
				}
			}
		})
	}
}

// TestKilledDaemon: the daemon dies under a mounted ext4 (I/O fails from
// then on); Close still takes everything down.
func TestKilledDaemon(t *testing.T) {
	d := setupT(t, 64<<20, DefaultModel(), nil)
	if err := os.WriteFile(filepath.Join(d.Dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.daemon.KillAndWait() // a crash: the dead FUSE mount stays until Close
	f, err := os.OpenFile(filepath.Join(d.Dir, "g"), os.O_CREATE|os.O_WRONLY|os.O_SYNC, 0o644)
	if err == nil {
		_, err = f.Write(make([]byte, 4096))
		f.Close()
	}
	if err == nil {
		t.Errorf("a synchronous write succeeded with the daemon dead")
	}
	// setupT's cleanup closes and checks that nothing is left.
}

// TestModelFlagsReachDaemon: the model given to Setup is the one the
// daemon serves (its counters show no cache with WriteCacheBytes 0).
func TestModelFlagsReachDaemon(t *testing.T) {
	m := DefaultModel()
	m.WriteCacheBytes = 0
	d := setupT(t, 64<<20, m, nil)
	if err := os.WriteFile(filepath.Join(d.Dir, "f"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	s, err := ReadDaemonStats(filepath.Dir(d.Image))
	if err != nil {
		t.Fatal(err)
	}
	if s.Disk.Writes == 0 || s.Disk.DestagedBytes != 0 || s.Answered == 0 {
		t.Errorf("daemon stats %+v: want writes, none through a cache, answers", s)
	}
}
