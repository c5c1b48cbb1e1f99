// Package pagecache tells whether a file's pages are dirty (or under
// writeback) in the page cache, through /proc/self/pagemap and
// /proc/kpageflags. Tests use it to prove that a Flush really synced: after a
// sync covering [0, n), no page of that range may still be dirty — which a
// skipped fdatasync or msync (strace -e inject=fdatasync:retval=0) breaks.
//
// Reading page frame numbers needs CAP_SYS_ADMIN (root); without it Dirty
// returns ErrNoAccess and tests skip through internal/testenv.
package pagecache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrNoAccess: the process cannot read page frame numbers or page flags.
var ErrNoAccess = errors.New("pagecache: /proc/self/pagemap page frames or /proc/kpageflags are not readable (needs root)")

const (
	pagemapPresent = 1 << 63
	pfnMask        = (1 << 55) - 1
	kpfDirty       = 1 << 4
	kpfWriteback   = 1 << 8
)

// touched keeps the reads that map each page from being optimised away.
var touched atomic.Uint32

// Page is the state of one page of a file in the page cache.
type Page struct {
	Index     int64 // page number in the file
	Resident  bool  // in the page cache at all
	Dirty     bool
	Writeback bool
}

// Pending reports whether the page's data may not be on the device yet.
func (p Page) Pending() bool { return p.Dirty || p.Writeback }

// State returns the state of every page of path in [off, off+n). It maps the
// file read-only and reads each page once (bringing non-resident pages in,
// clean), so it never dirties anything.
func State(path string, off, n int64) ([]Page, error) {
	if off < 0 || n <= 0 {
		return nil, fmt.Errorf("pagecache: range [%d, %d): %w", off, off+n, os.ErrInvalid)
	}
	pageSize := int64(os.Getpagesize())
	first, last := off/pageSize, (off+n-1)/pageSize
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("pagecache: %w", err)
	}
	defer f.Close()
	length := (last - first + 1) * pageSize
	mem, err := unix.Mmap(int(f.Fd()), first*pageSize, int(length), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("pagecache: mmap %s: %w", path, err)
	}
	defer unix.Munmap(mem)
	resident := make([]byte, len(mem)/int(pageSize))
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)),
		uintptr(unsafe.Pointer(&resident[0]))); e != 0 {
		return nil, fmt.Errorf("pagecache: mincore %s: %w", path, e)
	}
	pagemap, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoAccess, err)
	}
	defer pagemap.Close()
	kflags, err := os.Open("/proc/kpageflags")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoAccess, err)
	}
	defer kflags.Close()
	pages := make([]Page, 0, len(resident))
	var buf [8]byte
	for i := range resident {
		p := Page{Index: first + int64(i), Resident: resident[i]&1 != 0}
		if !p.Resident {
			pages = append(pages, p) // not cached: nothing pending for it
			continue
		}
		touched.Add(uint32(mem[int64(i)*pageSize])) // map the page (a read fault maps it clean)
		vaddr := uintptr(unsafe.Pointer(&mem[int64(i)*pageSize]))
		if _, err := pagemap.ReadAt(buf[:], int64(vaddr/uintptr(pageSize))*8); err != nil {
			return nil, fmt.Errorf("pagecache: read pagemap: %w", err)
		}
		entry := binary.LittleEndian.Uint64(buf[:])
		if entry&pagemapPresent == 0 {
			return nil, fmt.Errorf("pagecache: page %d of %s is resident but not mapped after a read", p.Index, path)
		}
		pfn := entry & pfnMask
		if pfn == 0 {
			return nil, ErrNoAccess // the kernel hides frame numbers without CAP_SYS_ADMIN
		}
		if _, err := kflags.ReadAt(buf[:], int64(pfn)*8); err != nil {
			return nil, fmt.Errorf("%w: read kpageflags: %v", ErrNoAccess, err)
		}
		flags := binary.LittleEndian.Uint64(buf[:])
		p.Dirty = flags&kpfDirty != 0
		p.Writeback = flags&kpfWriteback != 0
		pages = append(pages, p)
	}
	return pages, nil
}

// Unsynced returns the pages of [off, off+n) whose data may not be on the
// device yet (dirty or under writeback); empty when the range is synced.
func Unsynced(path string, off, n int64) ([]Page, error) {
	pages, err := State(path, off, n)
	if err != nil {
		return nil, err
	}
	var pending []Page
	for _, p := range pages {
		if p.Pending() {
			pending = append(pending, p)
		}
	}
	return pending, nil
}

// CheckSynced returns an error naming the first pending page when any page of
// [off, off+n) is dirty or under writeback.
func CheckSynced(path string, off, n int64) error {
	pending, err := Unsynced(path, off, n)
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		p := pending[0]
		return fmt.Errorf("%s: %d page(s) of [%d, %d) not synced, the first at byte %d (dirty %v, writeback %v)",
			path, len(pending), off, off+n, p.Index*int64(os.Getpagesize()), p.Dirty, p.Writeback)
	}
	return nil
}

// Resident counts the pages of path in [off, off+n) that are in the page
// cache (mincore on a read-only mapping: it brings nothing in and needs
// no privilege). off must be page-aligned.
func Resident(path string, off, n int64) (int, error) {
	if off < 0 || n <= 0 || off%int64(os.Getpagesize()) != 0 {
		return 0, fmt.Errorf("pagecache: resident range [%d, %d): %w", off, off+n, os.ErrInvalid)
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("pagecache: %w", err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), off, int(n), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("pagecache: map %s: %w", path, err)
	}
	defer unix.Munmap(mem)
	page := int64(os.Getpagesize())
	vec := make([]byte, (n+page-1)/page)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(n), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return 0, fmt.Errorf("pagecache: mincore %s: %w", path, e)
	}
	count := 0
	for _, v := range vec {
		count += int(v & 1)
	}
	return count, nil
}
