package segfile

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Fdatasync makes the data of the file at path durable.
func Fdatasync(path string, fd int) error {
	err := retryEINTR(func() error {
		return run(Op{Kind: OpFdatasync, Path: path}, func() error { return unix.Fdatasync(fd) })
	})
	if err != nil {
		return fmt.Errorf("fdatasync %s: %w", path, err)
	}
	return nil
}

// Msync writes back [from, to) of mapping — the whole file at path mapped
// from offset 0 — synchronously (MS_SYNC: a ranged fdatasync). The range is
// widened to whole pages.
func Msync(path string, mapping []byte, from, to int64) error {
	from, to = PageRange(from, to, int64(len(mapping)))
	if to <= from {
		return nil
	}
	err := retryEINTR(func() error {
		return run(Op{Kind: OpMsync, Path: path, Offset: from, Length: to - from}, func() error {
			return unix.Msync(mapping[from:to], unix.MS_SYNC)
		})
	})
	if err != nil {
		return fmt.Errorf("msync %s [%d,%d): %w", path, from, to, err)
	}
	return nil
}

// Fallocate calls fallocate(2) on the file at path.
func Fallocate(path string, fd int, mode uint32, off, n int64) error {
	return retryEINTR(func() error {
		return run(Op{Kind: OpFallocate, Path: path, Offset: off, Length: n, Mode: mode}, func() error {
			return unix.Fallocate(fd, mode, off, n)
		})
	})
}
