package device

import (
	"context"
	"errors"
	"os"
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

// TestDirectWriterCoversItsBytes: a direct probe's ops write whole aligned
// blocks that cover their bytes, each starting in the block where the last
// one ended, and nothing past the last op's last block.
func TestDirectWriterCoversItsBytes(t *testing.T) {
	const n, count, align = 1290, 7, 4096
	f, err := probeSegment(context.Background(), t.TempDir(), 64<<10, true, true)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf, err := unix.Mmap(-1, 0, 2*align, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	for i := range buf {
		buf[i] = 0xab
	}
	lat, err := directWriter(context.Background(), int(f.Fd()), buf, n, count, align)
	if err != nil || len(lat) != count {
		t.Fatalf("%d ops, %v: want %d and no error", len(lat), err, count)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	end := (n*count + align - 1) &^ (align - 1)
	for i, c := range got {
		if want := byte(0xab); i >= end {
			want = 0
			if c != want {
				t.Fatalf("byte %d is %#x past the last op's blocks (end %d): want 0", i, c, end)
			}
		} else if c != want {
			t.Fatalf("byte %d is %#x: want %#x, the ops' blocks cover [0, %d)", i, c, want, end)
		}
	}
}
