package segfile

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// mapPopulate pre-faults an anonymous mapping at mmap (MAP_POPULATE).
const mapPopulate = unix.MAP_POPULATE

// ErrNoPopulateWrite: the kernel has no MADV_POPULATE_WRITE (before 5.14).
var ErrNoPopulateWrite = errors.New("segfile: madvise(MADV_POPULATE_WRITE) is not supported by this kernel")

// PopulateWrite faults b's pages in writable without storing anything
// (madvise MADV_POPULATE_WRITE, Linux 5.14+); ErrNoPopulateWrite where the
// kernel lacks it.
func PopulateWrite(b []byte) error {
	err := unix.Madvise(b, unix.MADV_POPULATE_WRITE)
	if errors.Is(err, unix.EINVAL) {
		return ErrNoPopulateWrite
	}
	if err != nil {
		return fmt.Errorf("madvise POPULATE_WRITE: %w", err)
	}
	return nil
}
