package device

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// preallocate reserves size bytes with fallocate(2) (ftruncate where the
// file system lacks it).
func preallocate(f *os.File, size int64) error {
	err := unix.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		err = f.Truncate(size)
	}
	if err != nil {
		return fmt.Errorf("preallocate %d bytes: %w", size, err)
	}
	return nil
}
