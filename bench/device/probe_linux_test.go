package device

import (
	"context"
	"errors"
	"testing"

	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// TestDurableSequentialWrite: the durable probe syncs its file once, after
// the last write, and a failed sync fails the probe.
func TestDurableSequentialWrite(t *testing.T) {
	dir := t.TempDir()
	var synced []int64
	fdatasync = func(fd int) error {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		synced = append(synced, st.Blocks*512)
		return unix.Fdatasync(fd)
	}
	defer func() { fdatasync = unix.Fdatasync }()
	r, err := DurableSequentialWrite(context.Background(), dir, 8<<20, 1<<20, 4)
	if errors.Is(err, mappedfile.ErrUnsupported) {
		testenv.Skip(t, testenv.Uring, "io_uring and O_DIRECT on the temporary directory: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if r.Bytes != 8<<20 || len(synced) != 1 || synced[0] < 8<<20 {
		t.Fatalf("result %+v, syncs of a file of %v bytes: want 8 MiB written, then one sync", r, synced)
	}
	if _, err := SequentialWrite(context.Background(), dir, 8<<20, 1<<20, 4); err != nil || len(synced) != 1 {
		t.Fatalf("the plain probe: %v, %d syncs: want no error and no sync", err, len(synced)-1)
	}
	fdatasync = func(int) error { return unix.EIO }
	if _, err := DurableSequentialWrite(context.Background(), dir, 8<<20, 1<<20, 4); !errors.Is(err, unix.EIO) {
		t.Fatalf("a failed sync: %v, want EIO", err)
	}
	noFilesLeft(t, dir)
}
