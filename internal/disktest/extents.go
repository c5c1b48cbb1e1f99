package disktest

import (
	"os"
	"testing"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/internal/testenv"
)

// NeedExtents skips (or fails, under MQSTORE_TEST_REQUIRE=extents) unless
// dir's file system reports fallocated blocks as unwritten extents (FIEMAP):
// the tests of pre-written segments count unwritten bytes.
func NeedExtents(t testing.TB, dir string) {
	t.Helper()
	testenv.SkipOnFUSE(t, dir, "FIEMAP")
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := segfile.Preallocate(f, 1<<20); err != nil {
		testenv.Skip(t, testenv.Extents, "fallocate in %s: %v", dir, err)
	}
	if n, err := segfile.UnwrittenBytes(f, 0, 1<<20); err != nil || n != 1<<20 {
		testenv.Skip(t, testenv.Extents, "%s: a fallocated MiB has %d unwritten bytes (%v)", dir, n, err)
	}
}

// Unwritten returns how many bytes of [off, off+n) of the file at path are
// in unwritten extents.
func Unwritten(t testing.TB, path string, off, n int64) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u, err := segfile.UnwrittenBytes(f, off, n)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
