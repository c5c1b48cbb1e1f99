package device

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/mqstore/mqstore/internal/testenv"

	"golang.org/x/sys/unix"
)

// TestProbeSegmentIsWhatItSays: the fallocated probe file is all unwritten
// extents, which SEEK_DATA reports as a hole on ext4 and xfs; the
// pre-written one (buffered zeros, and O_DIRECT zeros) is written data end
// to end (SEEK_HOLE finds none before its end). The pre-written probes
// measure what their names say only if this holds.
func TestProbeSegmentIsWhatItSays(t *testing.T) {
	const size = 8 << 20
	for _, c := range []struct{ prewrite, direct bool }{{false, false}, {true, false}, {true, true}} {
		f, err := probeSegment(context.Background(), t.TempDir(), size, c.prewrite, c.direct)
		if err != nil {
			t.Fatal(err)
		}
		fd := int(f.Fd())
		off, err := unix.Seek(fd, 0, unix.SEEK_DATA)
		switch {
		case !c.prewrite && err == nil:
			f.Close()
			testenv.Skip(t, testenv.Extents, "this file system reports a fallocated file as data from %d (no unwritten extents to tell apart)", off)
		case !c.prewrite && !errors.Is(err, unix.ENXIO):
			t.Errorf("SEEK_DATA on a fallocated probe file: %d, %v; want ENXIO (all unwritten)", off, err)
		case c.prewrite && (err != nil || off != 0):
			t.Errorf("%+v: SEEK_DATA %d, %v; want 0", c, off, err)
		}
		if c.prewrite {
			if end, err := unix.Seek(fd, 0, unix.SEEK_HOLE); err != nil || end != size {
				t.Errorf("%+v: SEEK_HOLE %d, %v; want the end, %d", c, end, err, size)
			}
		}
		if st, err := f.Stat(); err != nil || st.Size() != size {
			t.Errorf("%+v: size %v, %v", c, st.Size(), err)
		}
		f.Close()
		os.Remove(f.Name())
	}
}
