package disktest

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mqstore/mqstore/internal/testenv"
)

// DirectFile makes the file at path, lets prepare lay out its blocks (nil:
// an empty file), syncs it and opens it again with O_DIRECT, for a
// benchmark of durable writes; it skips (testenv.Extents) where the file
// system refuses O_DIRECT. The descriptor is closed when tb ends.
func DirectFile(tb testing.TB, path string, prepare func(*os.File) error) int {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	if prepare != nil {
		err = prepare(f)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		testenv.Skip(tb, testenv.Extents, "O_DIRECT on %s: %v", path, err)
	}
	tb.Cleanup(func() { unix.Close(fd) })
	return fd
}
