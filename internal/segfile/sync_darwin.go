package segfile

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// macOS: fsync(2) hands the data to the drive but does not flush the
// drive's cache; fcntl(F_FULLFSYNC) does, which is what Linux's fdatasync
// promises on a device that honours cache flushes. So Fdatasync is
// F_FULLFSYNC here, and Msync, whose MS_SYNC stops at the drive too, is
// msync then F_FULLFSYNC of the file. There is no fallocate: Fallocate
// reports EOPNOTSUPP, and Preallocate falls back to ftruncate.

// Fdatasync makes the data of the file at path durable: F_FULLFSYNC.
func Fdatasync(path string, fd int) error {
	err := retryEINTR(func() error {
		return run(Op{Kind: OpFdatasync, Path: path}, func() error { return fullFsync(fd) })
	})
	if err != nil {
		return fmt.Errorf("fcntl(F_FULLFSYNC) %s: %w", path, err)
	}
	return nil
}

func fullFsync(fd int) error {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_FULLFSYNC, 0)
	return err
}

// Msync writes back [from, to) of mapping — the whole file at path mapped
// from offset 0 — with msync(MS_SYNC), then flushes the drive's cache for
// the file (F_FULLFSYNC on a descriptor opened for it). The range is
// widened to whole pages.
func Msync(path string, mapping []byte, from, to int64) error {
	from, to = PageRange(from, to, int64(len(mapping)))
	if to <= from {
		return nil
	}
	err := retryEINTR(func() error {
		return run(Op{Kind: OpMsync, Path: path, Offset: from, Length: to - from}, func() error {
			if err := unix.Msync(mapping[from:to], unix.MS_SYNC); err != nil {
				return err
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			return fullFsync(int(f.Fd()))
		})
	})
	if err != nil {
		return fmt.Errorf("msync %s [%d,%d): %w", path, from, to, err)
	}
	return nil
}

// Fallocate: macOS has no fallocate(2); EOPNOTSUPP (Preallocate then
// extends the file with ftruncate).
func Fallocate(path string, fd int, mode uint32, off, n int64) error {
	return run(Op{Kind: OpFallocate, Path: path, Offset: off, Length: n, Mode: mode}, func() error { return unix.EOPNOTSUPP })
}
