// Package disktest helps tests prove durability on a real file system: a
// temporary directory whose pages are written back to a device (not tmpfs),
// and a check that a range of a file has no dirty page left
// (internal/pagecache), which fails when a sync was skipped — for instance
// when the test runs under `strace -f -e inject=fdatasync,fsync,msync:retval=0`.
package disktest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mqstore/mqstore/internal/pagecache"
	"github.com/mqstore/mqstore/internal/testenv"
)

// Need is the testenv need of a directory on a file system with writeback.
const Need = "disk"

// Dir returns a temporary directory on a file system that writes pages back
// to a device: t.TempDir() unless that is in memory (tmpfs, ramfs: pages
// there never become clean, so no sync can be observed) or on FUSE (the
// write-through FUSE page cache is never dirty), else a directory under the
// working directory (the package's, inside the checkout), removed when the
// test ends.
func Dir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if !inMemory(t, dir) && !testenv.OnFUSE(dir) {
		return dir
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	alt, err := os.MkdirTemp(wd, ".disktest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(alt) })
	if inMemory(t, alt) || testenv.OnFUSE(alt) {
		testenv.Skip(t, Need, "both %s and %s are in memory or on FUSE: no sync can be observed there", dir, alt)
	}
	return alt
}

// CheckSynced fails the test when any page of [off, off+n) of path is dirty
// or under writeback. Reading page flags needs root (testenv.Root).
func CheckSynced(t testing.TB, path string, off, n int64) {
	t.Helper()
	if n <= 0 {
		return
	}
	if inMemory(t, filepath.Dir(path)) {
		t.Fatalf("%s is on an in-memory file system, where pages never become clean: use disktest.Dir", path)
	}
	testenv.SkipOnFUSE(t, path, "page flags")
	err := pagecache.CheckSynced(path, off, n)
	if errors.Is(err, pagecache.ErrNoAccess) {
		testenv.Skip(t, testenv.Root, "page flags: %v", err)
	}
	if err != nil {
		t.Fatalf("not durable: %v", err)
	}
}

// Unsynced returns the pending pages of [off, off+n) of path (for tests
// that must see a range dirty first, to prove the check can fail).
func Unsynced(t testing.TB, path string, off, n int64) []pagecache.Page {
	t.Helper()
	testenv.SkipOnFUSE(t, path, "page flags")
	pages, err := pagecache.Unsynced(path, off, n)
	if errors.Is(err, pagecache.ErrNoAccess) {
		testenv.Skip(t, testenv.Root, "page flags: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return pages
}
