package hddfs

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/mqstore/mqstore/internal/pagecache"
	"github.com/mqstore/mqstore/internal/testenv"
)

// resident counts the pages of [off, off+n) of path in the page cache.
func resident(t *testing.T, path string, off, n int64) int {
	t.Helper()
	c, err := pagecache.Resident(path, off, n)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The daemon's writes must not dirty the page cache: under dirty
// pressure the kernel would throttle them behind the loop device's own
// writeback, which waits for the daemon.
func TestBackingWritesPastThePageCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk.img")
	const size = 8 << 20
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	b, err := openBacking(path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.direct == nil {
		testenv.Skip(t, testenv.Extents, "the file system of %s refuses O_DIRECT", path)
	}
	data := bytes.Repeat([]byte{0xa5}, 1<<20)
	const off = 2 << 20
	if n, err := b.WriteAt(data, off); err != nil || n != len(data) {
		t.Fatalf("WriteAt: %d, %v", n, err)
	}
	if r := resident(t, path, off, int64(len(data))); r != 0 {
		t.Fatalf("%d pages of an aligned 1 MiB write are in the page cache: the write was buffered", r)
	}
	got := make([]byte, len(data))
	if n, err := b.ReadAt(got, off); err != nil || n != len(got) || !bytes.Equal(got, data) {
		t.Fatalf("ReadAt after an aligned write: %d, %v, equal %v", n, err, bytes.Equal(got, data))
	}

	// An unaligned request goes through the page cache and stays coherent
	// with the direct descriptor.
	odd := []byte("not aligned for O_DIRECT")
	if _, err := b.WriteAt(odd, off+100); err != nil {
		t.Fatal(err)
	}
	if n, err := b.ReadAt(got, off); err != nil || n != len(got) {
		t.Fatalf("ReadAt after an unaligned write: %d, %v", n, err)
	}
	copy(data[100:], odd)
	if !bytes.Equal(got, data) {
		t.Fatal("a direct read does not see an unaligned (buffered) write before it")
	}
}
