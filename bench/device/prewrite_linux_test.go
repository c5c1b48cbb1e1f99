package device

import (
	"context"
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPrewriteWritesTheExtents: a fallocated file is all unwritten extents,
// which SEEK_DATA reports as a hole on ext4 and xfs; after prewrite every
// byte is written data (SEEK_HOLE finds none before the end). The
// pre-written probe is only what its name says if this holds.
func TestPrewriteWritesTheExtents(t *testing.T) {
	const size = 8 << 20
	f, err := createProbeFile(t.TempDir(), size, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if off, err := unix.Seek(fd, 0, unix.SEEK_DATA); err == nil {
		t.Skipf("this file system reports a fallocated file as data from %d (no unwritten extents to tell apart)", off)
	} else if !errors.Is(err, unix.ENXIO) {
		t.Fatalf("SEEK_DATA on a fallocated file: %v", err)
	}
	if err := prewrite(context.Background(), f.Name(), size); err != nil {
		t.Fatal(err)
	}
	if off, err := unix.Seek(fd, 0, unix.SEEK_DATA); err != nil || off != 0 {
		t.Errorf("SEEK_DATA after prewrite: %d, %v; want 0", off, err)
	}
	if off, err := unix.Seek(fd, 0, unix.SEEK_HOLE); err != nil || off != size {
		t.Errorf("SEEK_HOLE after prewrite: %d, %v; want the end, %d", off, err, size)
	}
	if st, err := os.Stat(f.Name()); err != nil || st.Size() != size {
		t.Errorf("size after prewrite: %v, %v", st.Size(), err)
	}
}
