package device

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"

	"golang.org/x/sys/unix"
)

// createProbeFile creates a new file in dir preallocated to size, opened
// with extraFlags (O_DIRECT).
func createProbeFile(dir string, size int64, extraFlags int) (*os.File, error) {
	tmp, err := os.CreateTemp(dir, "mqbench-probe-*")
	if err != nil {
		return nil, fmt.Errorf("device: probe file: %w", err)
	}
	name := tmp.Name()
	tmp.Close()
	f, err := os.OpenFile(name, os.O_RDWR|extraFlags, 0)
	if err != nil {
		os.Remove(name)
		if extraFlags != 0 {
			return nil, fmt.Errorf("device: probe file %s with O_DIRECT (tmpfs and some file systems lack it): %w", name, err)
		}
		return nil, fmt.Errorf("device: probe file: %w", err)
	}
	if err := preallocate(f, size); err != nil {
		f.Close()
		os.Remove(name)
		return nil, fmt.Errorf("device: probe file %s: %w", name, err)
	}
	return f, nil
}

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

func fillRandom(b []byte) {
	rng := rand.New(rand.NewPCG(0x6d71, 0x73746f7265))
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
}
