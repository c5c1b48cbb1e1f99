package segfile

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// Extent is one extent of a file as FIEMAP reports it.
type Extent struct {
	Logical, Length int64
	// Physical is where the extent starts on the device, in bytes.
	Physical int64
	// Unwritten: allocated but never written (fallocate): reads as zeros,
	// and the first write into it needs an extent conversion.
	Unwritten bool
	// Delalloc: data in the page cache whose blocks are not allocated yet.
	Delalloc bool
}

// ErrNoExtents: the file system does not report extents (FIEMAP), tmpfs
// for one.
var ErrNoExtents = errors.New("segfile: the file system does not report extents (FIEMAP)")

// FIEMAP ABI (linux/fiemap.h): struct fiemap is 32 bytes, each struct
// fiemap_extent 56.
const (
	fsIocFiemap           = 0xC020660B // _IOWR('f', 11, struct fiemap)
	fiemapFlagSync        = 0x1
	fiemapExtentLast      = 0x1
	fiemapExtentDelalloc  = 0x4
	fiemapExtentUnwritten = 0x800
	fiemapBatch           = 64
)

type fiemapExtent struct {
	Logical, Physical, Length uint64
	_                         [2]uint64
	Flags                     uint32
	_                         [3]uint32
}

type fiemap struct {
	Start, Length                uint64
	Flags, Mapped, Count, Unused uint32
	Extents                      [fiemapBatch]fiemapExtent
}

// Extents returns f's extents in [0, size of the file) from
// ioctl(FS_IOC_FIEMAP). With sync the file's dirty pages are written back
// first (FIEMAP_FLAG_SYNC), so that what the page cache holds is reflected
// (an unwritten extent is converted only when its pages are written back).
// ErrNoExtents where the file system has no FIEMAP. One ioctl per 64
// extents: a 1 GiB segment on ext4 has about 8.
func Extents(f *os.File, sync bool) ([]Extent, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("extents of %s: %w", f.Name(), err)
	}
	var out []Extent
	var m fiemap
	for start := uint64(0); start < uint64(st.Size()); {
		m = fiemap{Start: start, Length: uint64(st.Size()) - start, Count: fiemapBatch}
		if sync {
			m.Flags = fiemapFlagSync
		}
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&m)))
		if errno == unix.EOPNOTSUPP || errno == unix.ENOTTY {
			return nil, fmt.Errorf("extents of %s: %w: %w", f.Name(), ErrNoExtents, errno)
		}
		if errno != 0 {
			return nil, fmt.Errorf("extents of %s: FIEMAP: %w", f.Name(), errno)
		}
		if m.Mapped == 0 {
			break
		}
		last := false
		for _, e := range m.Extents[:m.Mapped] {
			out = append(out, Extent{Logical: int64(e.Logical), Length: int64(e.Length), Physical: int64(e.Physical),
				Unwritten: e.Flags&fiemapExtentUnwritten != 0, Delalloc: e.Flags&fiemapExtentDelalloc != 0})
			start = e.Logical + e.Length
			last = last || e.Flags&fiemapExtentLast != 0
		}
		if last {
			break
		}
	}
	return out, nil
}

// UnwrittenBytes sums the bytes of f in [off, off+n) that lie in unwritten
// extents or in no extent at all (holes): what a write there would first
// have to allocate or convert. Dirty pages are written back first (see
// Extents), so a freshly written range counts as written.
func UnwrittenBytes(f *os.File, off, n int64) (int64, error) {
	if off < 0 || n < 0 {
		return 0, fmt.Errorf("unwritten bytes of %s in [%d,+%d): %w", f.Name(), off, n, mappedfile.ErrInvalidArgument)
	}
	extents, err := Extents(f, true)
	if err != nil {
		return 0, err
	}
	end := off + n
	written := int64(0)
	for _, e := range extents {
		if e.Unwritten {
			continue
		}
		if from, to := max(e.Logical, off), min(e.Logical+e.Length, end); to > from {
			written += to - from
		}
	}
	return n - written, nil
}
