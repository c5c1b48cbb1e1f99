package segfile

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// HugePageBytes is the size of a transparent huge page (x86-64 and arm64
// with 4 KiB base pages): the alignment MapAnonymousHuge gives its memory.
const HugePageBytes = 2 << 20

// MapAnonymousHuge returns lead+size bytes of off-heap, zeroed, populated
// memory whose byte at offset lead starts on a HugePageBytes boundary, and
// asks the kernel to back [lead, lead+size) with transparent huge pages
// (madvise MADV_HUGEPAGE, before the pages are faulted in) — for memory
// the store writes at high rate and wide spread (a staging ring, a
// transient pool buffer). Each 4 KiB page of such memory costs a TLB miss
// when it is first written in a while, and on a virtual machine a miss is
// a two-dimensional page walk (the uring package's doc gives what it cost
// on this project's reference VM).
//
// Where the kernel has no transparent huge pages or they are switched off
// ("never"), the memory is the same, in 4 KiB pages: HugeBytes tells. The
// lead bytes (a few pages of bookkeeping before the aligned part) are
// ordinary pages. size must be a positive multiple of the page size.
func MapAnonymousHuge(lead, size int64) ([]byte, error) {
	page := int64(os.Getpagesize())
	if size <= 0 || size%page != 0 || lead < 0 || lead%page != 0 || lead > HugePageBytes {
		return nil, fmt.Errorf("map %d+%d anonymous bytes: not whole pages (or a lead over %d bytes)", lead, size, HugePageBytes)
	}
	// Reserve enough address space to find the aligned start, then give
	// back what lies outside [start−lead, start+size). Raw mappings (not
	// unix.Mmap, which tracks whole mappings only): UnmapHuge unmaps.
	reserve := size + 2*HugePageBytes
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(reserve), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("reserve %d bytes of address space: %w", reserve, err)
	}
	base := uintptr(p)
	start := (base + uintptr(lead) + HugePageBytes - 1) &^ (HugePageBytes - 1)
	head := int(start - uintptr(lead) - base) // bytes before the memory kept
	if head > 0 {
		_ = unix.MunmapPtr(p, uintptr(head))
	}
	if tail := int(reserve) - head - int(lead+size); tail > 0 {
		_ = unix.MunmapPtr(unsafe.Add(p, head+int(lead+size)), uintptr(tail))
	}
	mem := unsafe.Slice((*byte)(unsafe.Add(p, head)), int(lead+size))
	fail := func(what string, err error) ([]byte, error) {
		_ = UnmapHuge(mem)
		return nil, fmt.Errorf("map %d+%d anonymous bytes: %s: %w", lead, size, what, err)
	}
	if _, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&mem[0]), uintptr(len(mem)), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED); err != nil {
		return fail("mmap", err)
	}
	// EINVAL: a kernel built without transparent huge pages; the memory
	// works the same in small pages.
	if err := unix.Madvise(mem[lead:], unix.MADV_HUGEPAGE); err != nil && err != unix.EINVAL {
		return fail("madvise HUGEPAGE", err)
	}
	if err := PopulateWrite(mem); err == ErrNoPopulateWrite {
		for i := int64(0); i < int64(len(mem)); i += page {
			mem[i] = 0
		}
	} else if err != nil {
		return fail("populate", err)
	}
	return mem, nil
}

// AdviseHuge asks the kernel to back a mapping with transparent huge pages
// (madvise MADV_HUGEPAGE): pages faulted in after it come as huge folios
// where the kernel and, for a file, its file system can make them. A kernel
// without THP is not an error (nothing changes).
func AdviseHuge(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if err := unix.Madvise(b, unix.MADV_HUGEPAGE); err != nil && err != unix.EINVAL {
		return fmt.Errorf("madvise HUGEPAGE: %w", err)
	}
	return nil
}

// AdviseRandom tells the kernel a mapping is accessed at random (madvise
// MADV_RANDOM): a fault reads in no pages around the one it needs, and
// allocates that page alone.
func AdviseRandom(b []byte) error { return madvise(b, unix.MADV_RANDOM, "RANDOM") }

// AdviseNormal takes back AdviseRandom (madvise MADV_NORMAL): faults read
// around again.
func AdviseNormal(b []byte) error { return madvise(b, unix.MADV_NORMAL, "NORMAL") }

// madvise applies advice (named name in its error) to b, when b is not empty.
func madvise(b []byte, advice int, name string) error {
	if len(b) == 0 {
		return nil
	}
	if err := unix.Madvise(b, advice); err != nil {
		return fmt.Errorf("madvise %s: %w", name, err)
	}
	return nil
}

// UnmapHuge unmaps memory from MapAnonymousHuge.
func UnmapHuge(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if err := unix.MunmapPtr(unsafe.Pointer(&b[0]), uintptr(len(b))); err != nil {
		return fmt.Errorf("munmap: %w", err)
	}
	return nil
}

// HugeBytes reports how many bytes of b (anonymous memory of this
// process) are backed by transparent huge pages, from /proc/self/smaps
// (AnonHugePages of every mapping that overlaps b, clipped to b's range).
func HugeBytes(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, nil
	}
	lo := uint64(uintptr(unsafe.Pointer(&b[0])))
	hi := lo + uint64(len(b))
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("huge pages: %w", err)
	}
	var total int64
	var vmLo, vmHi uint64
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Bytes()
		if i := bytes.IndexByte(line, '-'); i > 0 && bytes.IndexByte(line, ' ') > i {
			if a, err := strconv.ParseUint(string(line[:i]), 16, 64); err == nil {
				rest := line[i+1:]
				if b, err := strconv.ParseUint(string(rest[:bytes.IndexByte(rest, ' ')]), 16, 64); err == nil {
					vmLo, vmHi = a, b
					continue
				}
			}
		}
		v, ok := bytes.CutPrefix(line, []byte("AnonHugePages:"))
		if !ok || vmHi <= lo || vmLo >= hi {
			continue
		}
		kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("huge pages: smaps line %q: %w", line, err)
		}
		// A mapping wider than b: count the huge pages within b at most.
		total += min(kb<<10, int64(min(vmHi, hi)-max(vmLo, lo)))
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("huge pages: %w", err)
	}
	return total, nil
}
