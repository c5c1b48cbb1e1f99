//go:build linux || darwin

package segfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The system calls the backends make on their files, each through the seam
// (run) and retried on EINTR: a signal (the Go runtime's preemption signal
// among them) may interrupt fallocate, msync or a sync before it did
// anything, and the call is then simply issued again. Only EINTR is retried:
// any other failure of a sync is returned once and never retried by the
// caller (the data's state is unknown after it).

// retryEINTR calls f until it returns something other than EINTR.
func retryEINTR(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}

// Pwrite writes all of p at off of the file at path (descriptor fd),
// continuing after short writes.
func Pwrite(path string, fd int, p []byte, off int64) error {
	for len(p) > 0 {
		var n int
		op := Op{Kind: OpPwrite, Path: path, Offset: off, Length: int64(len(p))}
		err := retryEINTR(func() error {
			return run(op, func() error {
				var err error
				n, err = unix.Pwrite(fd, p, off)
				return err
			})
		})
		if err != nil {
			return fmt.Errorf("pwrite %s [%d,%d): %w", path, off, off+int64(len(p)), err)
		}
		if n <= 0 {
			return fmt.Errorf("pwrite %s [%d,%d): %w", path, off, off+int64(len(p)), io.ErrShortWrite)
		}
		p = p[n:]
		off += int64(n)
	}
	return nil
}

// Fsync makes the data and metadata of the file at path durable.
func Fsync(path string, fd int) error {
	err := retryEINTR(func() error {
		return run(Op{Kind: OpFsync, Path: path}, func() error { return unix.Fsync(fd) })
	})
	if err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}

// Ftruncate sets the size of the file at path.
func Ftruncate(path string, fd int, size int64) error {
	err := retryEINTR(func() error {
		return run(Op{Kind: OpFtruncate, Path: path, Length: size}, func() error { return unix.Ftruncate(fd, size) })
	})
	if err != nil {
		return fmt.Errorf("ftruncate %s to %d: %w", path, size, err)
	}
	return nil
}

// Create creates path (O_CREAT|O_TRUNC, read-write, plus flags).
func Create(path string, flags int, perm os.FileMode) (*os.File, error) {
	var f *os.File
	err := run(Op{Kind: OpCreate, Path: path}, func() error {
		var err error
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC|flags, perm)
		return err
	})
	return f, err
}

// Rename renames from to to; it does not sync the directory (SyncDir).
func Rename(from, to string) error {
	return run(Op{Kind: OpRename, Path: from, NewPath: to}, func() error { return os.Rename(from, to) })
}

// Unlink removes path; it does not sync the directory.
func Unlink(path string) error {
	return run(Op{Kind: OpRemove, Path: path}, func() error { return os.Remove(path) })
}

// Remove removes path durably: unlink, then fsync of its directory, so the
// file does not come back after a power loss.
func Remove(path string) error {
	if err := Unlink(path); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir fsyncs a directory so a create, rename or remove in it is durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	defer d.Close()
	fd := int(d.Fd())
	err = retryEINTR(func() error {
		return run(Op{Kind: OpSyncDir, Path: filepath.Clean(dir)}, func() error { return unix.Fsync(fd) })
	})
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
