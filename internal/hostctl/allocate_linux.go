package hostctl

import (
	"os"
	"syscall"
)

// allocate gives f sizeBytes of allocated blocks (swapon refuses holes).
func allocate(f *os.File, sizeBytes int64) error {
	return syscall.Fallocate(int(f.Fd()), 0, 0, sizeBytes)
}
