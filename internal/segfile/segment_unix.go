//go:build linux || darwin

package segfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// OpenOrCreate opens spec.Path read-write. When the file does not exist it is
// created under a temporary name, preallocated with fallocate to
// spec.SizeBytes, with spec.Prewrite written with zeros end to end (see
// PrewritePaced, for spec.PrewritePace), synced, renamed into place and the directory synced (etcd's WAL
// file lifecycle), so a crash never leaves a short or half-written segment
// behind and a power loss never loses the new name. The returned file is
// named spec.Path. existed reports whether the file was already there; its
// size must then be spec.SizeBytes. extraFlags are added to O_RDWR
// (O_DIRECT, for example: a prewrite then bypasses the page cache too).
// With spec.RecycleFrom, a missing spec.Path is that file renamed (see
// mappedfile.Spec), reported as not existed: a new segment.
//
// A backend that creates its files some other way gets the same result from
// Prewrite(ctx, f, size) on its new file before the sync and rename.
func OpenOrCreate(ctx context.Context, spec mappedfile.Spec, extraFlags int) (f *os.File, existed bool, err error) {
	if spec.SizeBytes <= 0 {
		return nil, false, fmt.Errorf("open segment %s: size %d: %w", spec.Path, spec.SizeBytes, mappedfile.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return nil, false, fmt.Errorf("open segment %s: %w", spec.Path, err)
	}
	f, err = os.OpenFile(spec.Path, os.O_RDWR|extraFlags, 0)
	if err == nil {
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, false, fmt.Errorf("open segment %s: stat: %w", spec.Path, err)
		}
		if st.Size() != spec.SizeBytes {
			f.Close()
			return nil, false, fmt.Errorf("open segment %s: file has %d bytes, segment size is %d: %w",
				spec.Path, st.Size(), spec.SizeBytes, mappedfile.ErrSizeMismatch)
		}
		return f, true, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("open segment %s: %w", spec.Path, directIOHint(err, extraFlags))
	}
	recycled := false
	if spec.RecycleFrom != "" {
		if recycled, err = recycle(spec); err != nil {
			return nil, false, fmt.Errorf("create segment %s: %w", spec.Path, err)
		}
	}
	if !recycled {
		if err := create(ctx, spec, extraFlags); err != nil {
			return nil, false, fmt.Errorf("create segment %s: %w", spec.Path, err)
		}
	}
	// Open the renamed file by its name, so that it (and every operation
	// the seam reports on it) carries the segment's path, not the
	// temporary one.
	if f, err = os.OpenFile(spec.Path, os.O_RDWR|extraFlags, 0); err != nil {
		return nil, false, fmt.Errorf("open segment %s after creating it: %w", spec.Path, err)
	}
	return f, false, nil
}

// recycle renames spec.RecycleFrom to spec.Path and syncs the directory,
// so the name survives a power loss before anything is written under it.
// It reports false, with no error, when the file is gone. A file of the
// wrong size is refused (and left where it is).
func recycle(spec mappedfile.Spec) (bool, error) {
	st, err := os.Stat(spec.RecycleFrom)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("recycle %s: %w", spec.RecycleFrom, err)
	}
	if st.Size() != spec.SizeBytes {
		return false, fmt.Errorf("recycle %s: file has %d bytes, segment size is %d: %w",
			spec.RecycleFrom, st.Size(), spec.SizeBytes, mappedfile.ErrSizeMismatch)
	}
	if filepath.Dir(spec.RecycleFrom) != filepath.Dir(spec.Path) {
		return false, fmt.Errorf("recycle %s as %s: not in the same directory (one directory sync must cover the rename): %w",
			spec.RecycleFrom, spec.Path, mappedfile.ErrInvalidArgument)
	}
	if err := Rename(spec.RecycleFrom, spec.Path); err != nil {
		return false, fmt.Errorf("recycle: %w", err)
	}
	if err := SyncDir(filepath.Dir(spec.Path)); err != nil {
		// The new name may not survive a power loss: do not use it.
		_ = Unlink(spec.Path)
		return false, fmt.Errorf("recycle %s: %w", spec.RecycleFrom, err)
	}
	return true, nil
}

// create makes spec.Path durably: a temporary file, preallocated (and
// prewritten when asked) and synced, renamed into place, the directory
// synced. A failure removes the temporary file (or the segment, when the
// rename happened but the directory sync failed: a name that may not survive
// a power loss must not be used). A crash before the rename leaves only the
// temporary file, which the segment queue removes when it lists the
// directory (IsSegmentTemp).
func create(ctx context.Context, spec mappedfile.Spec, extraFlags int) error {
	tmp := spec.Path + ".tmp"
	f, err := Create(tmp, extraFlags, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %w", tmp, directIOHint(err, extraFlags))
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := Preallocate(f, spec.SizeBytes); err != nil {
		_ = Unlink(tmp)
		return fmt.Errorf("preallocate: %w", err)
	}
	var zeros mappedfile.Zeros
	if spec.Prewrite {
		if zeros, err = PrewritePaced(ctx, f, spec.SizeBytes, spec.PrewritePace); err != nil {
			_ = Unlink(tmp)
			return err
		}
	}
	if err := Fdatasync(tmp, fd); err != nil {
		_ = Unlink(tmp)
		return err
	}
	if err := Rename(tmp, spec.Path); err != nil {
		_ = Unlink(tmp)
		return fmt.Errorf("rename: %w", err)
	}
	if err := SyncDir(filepath.Dir(spec.Path)); err != nil {
		_ = Unlink(spec.Path)
		return err
	}
	if zeros != 0 && spec.Prewrote != nil {
		spec.Prewrote(zeros)
	}
	return nil
}

// Preallocate reserves size bytes for f with fallocate(2), falling back to
// ftruncate on file systems without it (the mmap backend then risks SIGBUS
// on a full disk, which is why fallocate comes first).
func Preallocate(f *os.File, size int64) error {
	path, fd := f.Name(), int(f.Fd())
	err := Fallocate(path, fd, 0, 0, size)
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return Ftruncate(path, fd, size)
	}
	if errors.Is(err, unix.ENOSPC) {
		return fmt.Errorf("fallocate %d bytes: %w: %w", size, mappedfile.ErrNoSpace, err)
	}
	return fmt.Errorf("fallocate %d bytes: %w", size, err)
}

func copyRange(ctx context.Context, w io.Writer, f *os.File, off, n int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m, err := io.Copy(w, io.NewSectionReader(f, off, n))
	if err == nil && m < n {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return m, fmt.Errorf("copy [%d,%d): %w", off, off+n, err)
	}
	return m, nil
}

// MemlockError explains a failed mlock: the bytes wanted, RLIMIT_MEMLOCK,
// and how to raise it.
func MemlockError(what string, wanted int64, err error) error {
	var lim unix.Rlimit
	limit := "unknown"
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil {
		if lim.Cur == unix.RLIM_INFINITY {
			limit = "unlimited"
		} else {
			limit = fmt.Sprintf("%d bytes", lim.Cur)
		}
	}
	hint := "raise it with `ulimit -l unlimited`, LimitMEMLOCK= in a systemd unit, memlock in /etc/security/limits.conf, or run with CAP_IPC_LOCK"
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%s: mlock of %d bytes failed: RLIMIT_MEMLOCK is %s; %s: %w", what, wanted, limit, hint, err)
	}
	return fmt.Errorf("%s: mlock of %d bytes: %w", what, wanted, err)
}
