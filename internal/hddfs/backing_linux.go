package hddfs

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"github.com/mqstore/mqstore/internal/segfile"
)

// backing is the file that holds the disk's bytes. The daemon reads and
// writes it with O_DIRECT, past the page cache. A buffered write here
// would be throttled by the kernel's dirty limits (balance_dirty_pages)
// like any writer's, and under dirty pressure those limits are held by
// the pages of the file system on the loop device above, whose writeback
// waits for this very daemon: the emulated disk then crawls for minutes
// (seen as the daemon in balance_dirty_pages while 32 MiB sat in
// writeback). A request not aligned for O_DIRECT goes through a second,
// buffered descriptor; Linux keeps the two coherent (a direct read writes
// back dirty pages of its range first, a direct write drops them).
type backing struct {
	direct   *os.File // nil when the file system refuses O_DIRECT
	buffered *os.File
	offAlign int64
	memAlign int64
	bufs     sync.Pool // *[]byte of bounceBytes, aligned to memAlign
}

// bounceBytes is the size of a pooled bounce buffer: FUSE's largest
// request by default. Larger requests allocate their own.
const bounceBytes = 1 << 20

func openBacking(path string, log *slog.Logger) (*backing, error) {
	buffered, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("hddfs: backing: %w", err)
	}
	b := &backing{buffered: buffered}
	b.offAlign, b.memAlign = segfile.DirectIOAlignment(path)
	direct, err := os.OpenFile(path, os.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		log.Warn("hddfs: the backing file cannot be opened with O_DIRECT; its writes go through the page cache and can stall under dirty pressure",
			"path", path, "err", err)
		return b, nil
	}
	b.direct = direct
	return b, nil
}

func (b *backing) Stat() (os.FileInfo, error) { return b.buffered.Stat() }

func (b *backing) Close() error {
	err := b.buffered.Close()
	if b.direct != nil {
		err = errors.Join(err, b.direct.Close())
	}
	return err
}

// aligned reports whether [off, off+n) can go through O_DIRECT.
func (b *backing) aligned(off int64, n int) bool {
	return b.direct != nil && off%b.offAlign == 0 && int64(n)%b.offAlign == 0
}

// bounce returns a buffer of n bytes aligned to memAlign and the function
// that gives it back.
func (b *backing) bounce(n int) ([]byte, func()) {
	if n <= bounceBytes {
		if p, ok := b.bufs.Get().(*[]byte); ok {
			return (*p)[:n], func() { b.bufs.Put(p) }
		}
		buf := alignedBytes(bounceBytes, int(b.memAlign))
		return buf[:n], func() { b.bufs.Put(&buf) }
	}
	return alignedBytes(n, int(b.memAlign)), func() {}
}

// alignedBytes is n bytes whose first is at a multiple of align (a power
// of two).
func alignedBytes(n, align int) []byte {
	raw := make([]byte, n+align)
	skip := 0
	if r := int(uintptr(unsafe.Pointer(&raw[0])) & uintptr(align-1)); r != 0 {
		skip = align - r
	}
	return raw[skip : skip+n : skip+n]
}

func (b *backing) WriteAt(p []byte, off int64) (int, error) {
	if !b.aligned(off, len(p)) {
		return b.buffered.WriteAt(p, off)
	}
	buf, put := b.bounce(len(p))
	defer put()
	copy(buf, p)
	return b.direct.WriteAt(buf, off)
}

func (b *backing) ReadAt(p []byte, off int64) (int, error) {
	if !b.aligned(off, len(p)) {
		return b.buffered.ReadAt(p, off)
	}
	buf, put := b.bounce(len(p))
	defer put()
	n, err := b.direct.ReadAt(buf, off)
	copy(p, buf[:n])
	return n, err
}
