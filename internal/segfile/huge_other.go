//go:build !linux

package segfile

import "os"

// HugePageBytes is the alignment MapAnonymousHuge gives its memory.
const HugePageBytes = 2 << 20

// MapAnonymousHuge maps lead+size bytes of anonymous memory; without
// Linux's transparent huge pages it is MapAnonymous (no alignment is
// promised beyond the page).
func MapAnonymousHuge(lead, size int64) ([]byte, error) {
	if lead < 0 || size <= 0 || (lead+size)%int64(os.Getpagesize()) != 0 {
		return MapAnonymous(-1)
	}
	return MapAnonymous(lead + size)
}

// HugeBytes is 0: no transparent huge pages here.
func HugeBytes([]byte) (int64, error) { return 0, nil }

// UnmapHuge unmaps memory from MapAnonymousHuge.
func UnmapHuge(b []byte) error { return Unmap(b) }

// AdviseHuge does nothing: no transparent huge pages here.
func AdviseHuge([]byte) error { return nil }

// AdviseRandom does nothing: the store runs its index's random access
// without the hint here.
func AdviseRandom([]byte) error { return nil }

// AdviseNormal does nothing, as AdviseRandom.
func AdviseNormal([]byte) error { return nil }
