//go:build linux

package pagecache

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mqstore/mqstore/internal/testenv"
	"golang.org/x/sys/unix"
)

func open(t *testing.T) (*os.File, string) {
	t.Helper()
	dir := t.TempDir()
	testenv.SkipOnFUSE(t, dir, "page flags")
	path := filepath.Join(dir, "f")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, path
}

func unsynced(t *testing.T, path string, off, n int64) []Page {
	t.Helper()
	p, err := Unsynced(path, off, n)
	if errors.Is(err, ErrNoAccess) {
		testenv.Skip(t, testenv.Root, "page frame numbers: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestWriteDirtiesSyncCleans is the property the durability tests rely on:
// a pwrite leaves pages dirty until fdatasync, and the check sees both states.
func TestWriteDirtiesSyncCleans(t *testing.T) {
	f, path := open(t)
	data := make([]byte, 4*4096)
	for i := range data {
		data[i] = byte(i)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if got := unsynced(t, path, 0, int64(len(data))); len(got) != 4 {
		t.Fatalf("after pwrite: %d unsynced pages, want 4: %+v", len(got), got)
	}
	if err := CheckSynced(path, 0, int64(len(data))); err == nil {
		t.Fatal("CheckSynced passed over dirty pages")
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	if err := CheckSynced(path, 0, int64(len(data))); err != nil {
		t.Fatalf("after fdatasync: %v", err)
	}
}

// TestMappedStoreDirtiesMsyncCleans: a store through a shared mapping dirties
// its page; msync(MS_SYNC) cleans it.
func TestMappedStoreDirtiesMsyncCleans(t *testing.T) {
	f, path := open(t)
	if err := f.Truncate(2 * 4096); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, 2*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	mem[4096+10] = 7
	got := unsynced(t, path, 0, 2*4096)
	if len(got) != 1 || got[0].Index != 1 {
		t.Fatalf("after a store into page 1: unsynced %+v, want page 1 only", got)
	}
	if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
		t.Fatal(err)
	}
	if err := CheckSynced(path, 0, 2*4096); err != nil {
		t.Fatalf("after msync: %v", err)
	}
}
