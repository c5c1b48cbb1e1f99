//go:build unix

package engine

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// errLockHeld: another process holds the store's lock file.
var errLockHeld = errors.New("lock held")

// lockFile takes f's exclusive flock without waiting (errLockHeld when
// another process has it).
func lockFile(f *os.File) error {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("%w: %w", errLockHeld, err)
	}
	return err
}

func unlockFile(f *os.File) error { return unix.Flock(int(f.Fd()), unix.LOCK_UN) }

// diskBlocks returns the used blocks of dir's file system and those still
// available to a non-root process (statfs).
func diskBlocks(dir string) (used, avail float64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return float64(st.Blocks) - float64(st.Bfree), float64(st.Bavail), nil
}
