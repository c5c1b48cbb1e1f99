//go:build linux || darwin

package segfile

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Map maps size bytes of f shared, read-write (or read-only).
func Map(f *os.File, size int64, writable bool) ([]byte, error) {
	prot := unix.PROT_READ
	if writable {
		prot |= unix.PROT_WRITE
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s (%d bytes): %w", f.Name(), size, err)
	}
	return b, nil
}

// MapAnonymous returns size bytes of off-heap, zeroed, populated memory
// (never moved by the Go runtime, so the kernel may read it asynchronously).
func MapAnonymous(size int64) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|mapPopulate)
	if err != nil {
		return nil, fmt.Errorf("mmap %d anonymous bytes: %w", size, err)
	}
	return b, nil
}

// Unmap unmaps memory from Map or MapAnonymous.
func Unmap(b []byte) error {
	if b == nil {
		return nil
	}
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("munmap: %w", err)
	}
	return nil
}

// Lock mlocks b, with an error that explains RLIMIT_MEMLOCK when it fails.
func Lock(what string, b []byte) error {
	if err := Mlock(b); err != nil {
		return MemlockError(what, int64(len(b)), err)
	}
	return nil
}

// Mlock mlocks b and returns the bare errno on failure (see MemlockError).
func Mlock(b []byte) error { return unix.Mlock(b) }

// Unlock munlocks b.
func Unlock(b []byte) error {
	if err := unix.Munlock(b); err != nil {
		return fmt.Errorf("munlock: %w", err)
	}
	return nil
}

// AdviseWrite applies madvise(WILLNEED) and madvise(SEQUENTIAL) to b.
func AdviseWrite(b []byte) error {
	if err := unix.Madvise(b, unix.MADV_WILLNEED); err != nil {
		return fmt.Errorf("madvise WILLNEED: %w", err)
	}
	if err := unix.Madvise(b, unix.MADV_SEQUENTIAL); err != nil {
		return fmt.Errorf("madvise SEQUENTIAL: %w", err)
	}
	return nil
}

// AdviseCold applies madvise(DONTNEED) to b: the pages are dropped from the
// process (file pages stay in the page cache and are re-read on access).
func AdviseCold(b []byte) error {
	if err := unix.Madvise(b, unix.MADV_DONTNEED); err != nil {
		return fmt.Errorf("madvise DONTNEED: %w", err)
	}
	return nil
}
