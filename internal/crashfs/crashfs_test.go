//go:build linux

package crashfs

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mqstore/mqstore/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestMain lets the test binary run as the daemon.
func TestMain(m *testing.M) {
	if os.Getenv(EnvDaemon) == "1" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// mountT starts a daemon on a fresh backing directory (or the given one)
// and takes it down when the test ends.
func mountT(t *testing.T, c Config) (*Daemon, Config) {
	t.Helper()
	testenv.NeedFUSE(t, "crashfs mounts a FUSE file system")
	base := t.TempDir()
	if c.Backing == "" {
		c.Backing = filepath.Join(base, "backing")
		if err := os.Mkdir(c.Backing, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if c.State == "" {
		c.State = filepath.Join(base, "state")
	}
	c.Mount = filepath.Join(base, "mnt")
	if err := os.Mkdir(c.Mount, 0o755); err != nil {
		t.Fatal(err)
	}
	if c.Names == "" {
		c.Names = NamesDurable
	}
	d, err := Start(context.Background(), exec.Command(os.Args[0]), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
		if ok, err := Mounted(c.Mount); ok || err != nil {
			t.Errorf("%s still mounted after Close (%v)", c.Mount, err)
		}
	})
	return d, c
}

func pattern(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func readBacking(t *testing.T, c Config, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.Backing, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOnlySyncedSurvives: pwrite, fdatasync, more pwrites and a MAP_SHARED
// store with msync of part of it; after the cut the backing holds exactly
// what the syncs covered, and before it the mount showed everything.
func TestOnlySyncedSurvives(t *testing.T) {
	d, c := mountT(t, Config{})
	if !testenv.OnFUSE(c.Mount) || testenv.OnFUSE(c.Backing) {
		t.Fatalf("OnFUSE: mount %v, backing %v; want true, false", testenv.OnFUSE(c.Mount), testenv.OnFUSE(c.Backing))
	}
	path := filepath.Join(c.Mount, "f")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a, b := pattern(1, 3*pageSize+100), pattern(2, 5000)
	if _, err := f.WriteAt(a, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, 2*pageSize); err != nil { // over synced bytes and past them
		t.Fatal(err)
	}
	if got := readBacking(t, c, "f"); !bytes.Equal(got, a) {
		t.Fatalf("backing has %d bytes before the cut, want the %d synced", len(got), len(a))
	}
	want := append([]byte(nil), a...)
	want = append(want[:2*pageSize], b...)
	seen, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(seen, want) {
		t.Fatalf("the mount shows %d bytes (%v), want the %d written", len(seen), err, len(want))
	}
	// A mapped file: two pages stored, one msynced.
	g, err := os.OpenFile(filepath.Join(c.Mount, "m"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Truncate(2 * pageSize); err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(g.Fd()), 0, 2*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	copy(m, pattern(3, 2*pageSize))
	if err := unix.Msync(m[:pageSize], unix.MS_SYNC); err != nil {
		t.Fatal(err)
	}
	rep, err := d.Crash(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := readBacking(t, c, "f"); !bytes.Equal(got, a) {
		t.Errorf("after the cut the backing has %d bytes, want exactly the %d synced", len(got), len(a))
	}
	wantM := append(pattern(3, 2*pageSize)[:pageSize], make([]byte, pageSize)...)
	if got := readBacking(t, c, "m"); !bytes.Equal(got, wantM) {
		t.Errorf("mapped file after the cut: %d bytes, the msynced page kept: %v, the other zero: %v",
			len(got), bytes.Equal(got[:pageSize], wantM[:pageSize]), bytes.Equal(got[pageSize:], wantM[pageSize:]))
	}
	if len(rep.Files) == 0 || rep.Files[0].Path != "f" || len(rep.Files[0].Dropped) == 0 {
		t.Errorf("the report lists no dropped pages of f: %+v", rep)
	}
}

// TestWritebackSubset: with Writeback the cut keeps some unsynced pages,
// whole or torn at sector boundaries, and the report says which; every
// byte of the backing is either the synced or the written one.
func TestWritebackSubset(t *testing.T) {
	d, c := mountT(t, Config{Writeback: true, Seed: 7})
	f, err := os.OpenFile(filepath.Join(c.Mount, "f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	old, neu := pattern(1, 64*pageSize), pattern(2, 64*pageSize)
	if _, err := f.WriteAt(old, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(neu, 0); err != nil {
		t.Fatal(err)
	}
	rep, err := d.Crash(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := readBacking(t, c, "f")
	if len(got) != len(old) {
		t.Fatalf("size %d, want %d", len(got), len(old))
	}
	var kept, dropped, torn int
	for s := 0; s < len(got); s += sectorSize {
		switch {
		case bytes.Equal(got[s:s+sectorSize], neu[s:s+sectorSize]):
			kept++
		case bytes.Equal(got[s:s+sectorSize], old[s:s+sectorSize]):
			dropped++
		default:
			torn++
		}
	}
	if torn != 0 || kept == 0 || dropped == 0 {
		t.Fatalf("sectors: %d new, %d old, %d neither; want some new, some old, none mixed", kept, dropped, torn)
	}
	if len(rep.Files) != 1 || len(rep.Files[0].Kept)+len(rep.Files[0].Torn) == 0 || len(rep.Files[0].Dropped) == 0 {
		t.Fatalf("report: %+v", rep.Files)
	}
	// The same seed keeps the same pages.
	var ptorn int
	for _, tp := range rep.Files[0].Torn {
		if tp.Sectors != 0xff {
			ptorn++
		}
	}
	if ptorn == 0 {
		t.Errorf("64 pages and no torn one: %+v", rep.Files[0])
	}
}

// TestStrictNames: a file whose directory was not fsynced is gone after
// the cut; a rename over a file whose directory was not synced comes back
// undone; a synced directory keeps its names.
func TestStrictNames(t *testing.T) {
	d, c := mountT(t, Config{Names: NamesStrict})
	mnt := c.Mount
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	syncDir := func(dir string) {
		t.Helper()
		f, err := os.Open(dir)
		must(err)
		defer f.Close()
		must(f.Sync())
	}
	writeSynced := func(p string, b []byte) {
		t.Helper()
		f, err := os.Create(p)
		must(err)
		defer f.Close()
		_, err = f.Write(b)
		must(err)
		must(f.Sync())
	}
	must(os.Mkdir(filepath.Join(mnt, "kept"), 0o755))
	must(os.Mkdir(filepath.Join(mnt, "lost"), 0o755))
	syncDir(mnt)
	writeSynced(filepath.Join(mnt, "kept", "a"), []byte("old"))
	writeSynced(filepath.Join(mnt, "kept", "c"), []byte("c"))
	syncDir(filepath.Join(mnt, "kept"))
	// From here on no directory is synced.
	writeSynced(filepath.Join(mnt, "kept", "a.tmp"), []byte("new"))
	must(os.Rename(filepath.Join(mnt, "kept", "a.tmp"), filepath.Join(mnt, "kept", "a")))
	writeSynced(filepath.Join(mnt, "lost", "b"), []byte("b")) // the file synced, its directory not
	must(os.Mkdir(filepath.Join(mnt, "lost", "sub"), 0o755))
	must(os.Remove(filepath.Join(mnt, "kept", "c")))
	if got, err := os.ReadFile(filepath.Join(mnt, "kept", "a")); err != nil || string(got) != "new" {
		t.Fatalf("the mount shows kept/a = %q (%v), want the renamed file", got, err)
	}
	rep, err := d.Crash(context.Background())
	must(err)
	if got := string(readBacking(t, c, "kept/a")); got != "old" {
		t.Errorf("kept/a = %q after the cut, want the old file (the rename's directory was not synced)", got)
	}
	if _, err := os.Stat(filepath.Join(c.Backing, "kept", "a.tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("kept/a.tmp: %v, want it gone (created after the last directory sync)", err)
	}
	if _, err := os.Stat(filepath.Join(c.Backing, "lost", "b")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lost/b: %v, want it gone", err)
	}
	if _, err := os.Stat(filepath.Join(c.Backing, "lost", "sub")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lost/sub: %v, want it gone", err)
	}
	if got := string(readBacking(t, c, "kept/c")); got != "c" {
		t.Errorf("kept/c = %q, want the unsynced removal undone", got)
	}
	if len(rep.Undone) != 5 {
		t.Errorf("undone %d changes, want 5: %+v", len(rep.Undone), rep.Undone)
	}
	for _, u := range rep.Undone {
		if u.Error != "" {
			t.Errorf("undo %+v failed", u)
		}
	}
}

// TestStrictNamesAfterKill: the same undo when the daemon is SIGKILLed
// (Recover reads the journal).
func TestStrictNamesAfterKill(t *testing.T) {
	d, c := mountT(t, Config{Names: NamesStrict})
	f, err := os.Create(filepath.Join(c.Mount, "x"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	rep, err := d.Kill()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(c.Backing, "x")); !errors.Is(err, os.ErrNotExist) || len(rep.Undone) != 1 {
		t.Fatalf("x after a kill: %v; undone %+v", err, rep.Undone)
	}
}

// TestODirectAlignment: a file opened O_DIRECT refuses a misaligned offset
// or length as a device does; an aligned RWF_DSYNC write is durable.
func TestODirectAlignment(t *testing.T) {
	d, c := mountT(t, Config{DIOAlign: 4096})
	fd, err := unix.Open(filepath.Join(c.Mount, "d"), unix.O_RDWR|unix.O_CREAT|unix.O_DIRECT, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf, err := unix.Mmap(-1, 0, 2*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	copy(buf, pattern(5, len(buf)))
	if _, err := unix.Pwrite(fd, buf[:100], 4096); !errors.Is(err, unix.EINVAL) {
		t.Errorf("100-byte O_DIRECT write: %v, want EINVAL", err)
	}
	if _, err := unix.Pwrite(fd, buf[:pageSize], 512); !errors.Is(err, unix.EINVAL) {
		t.Errorf("O_DIRECT write at 512: %v, want EINVAL", err)
	}
	if _, err := unix.Pwritev2(fd, [][]byte{buf[:pageSize]}, 0, unix.RWF_DSYNC); err != nil {
		t.Fatalf("aligned RWF_DSYNC write: %v", err)
	}
	if _, err := unix.Pwrite(fd, buf[pageSize:], pageSize); err != nil { // aligned, not synced
		t.Fatal(err)
	}
	if _, err := d.Crash(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := readBacking(t, c, "d"); !bytes.Equal(got, buf[:pageSize]) {
		t.Errorf("after the cut: %d bytes, want the RWF_DSYNC page only", len(got))
	}
}

// TestArmedCrash: the second fsync of a matching path is applied, not
// answered, and the daemon dies.
func TestArmedCrash(t *testing.T) {
	d, c := mountT(t, Config{CrashAfterFsync: 2, CrashPath: `^f$`})
	f, err := os.Create(filepath.Join(c.Mount, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i, s := range []string{"one", "two"} {
		if _, err := f.WriteAt([]byte(s), int64(i*3)); err != nil {
			t.Fatal(err)
		}
		err := f.Sync()
		if i == 0 && err != nil {
			t.Fatal(err)
		}
		if i == 1 && err == nil {
			t.Fatal("the armed fsync was answered")
		}
	}
	rep, err := d.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := string(readBacking(t, c, "f")); got != "onetwo" {
		t.Errorf("after the armed crash: %q, want the second fsync applied", got)
	}
	if rep.Fsyncs != 2 {
		t.Errorf("report: %d fsyncs, want 2", rep.Fsyncs)
	}
}
