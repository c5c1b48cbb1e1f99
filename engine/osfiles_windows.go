package engine

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/windows"
)

// errLockHeld: another process holds the store's lock file.
var errLockHeld = errors.New("lock held")

// lockFile locks f's first byte exclusively without waiting (LockFileEx;
// errLockHeld when another process has it).
func lockFile(f *os.File) error {
	ol := new(windows.Overlapped)
	err := windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, ol)
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return fmt.Errorf("%w: %w", errLockHeld, err)
	}
	return err
}

func unlockFile(f *os.File) error {
	return windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, new(windows.Overlapped))
}

// diskBlocks returns the used bytes of dir's volume and those still
// available to the caller (GetDiskFreeSpaceEx).
func diskBlocks(dir string) (used, avail float64, err error) {
	p, err := windows.UTF16PtrFromString(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("disk space of %s: %w", dir, err)
	}
	var freeToCaller, total, free uint64
	if err := windows.GetDiskFreeSpaceEx(p, &freeToCaller, &total, &free); err != nil {
		return 0, 0, fmt.Errorf("disk space of %s: %w", dir, err)
	}
	return float64(total - free), float64(freeToCaller), nil
}
