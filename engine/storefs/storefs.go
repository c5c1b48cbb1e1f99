// Package storefs is the side of a store directory that is not a segment's
// bytes: directories, listings, removals, renames, the small files at the
// store's root (checkpoint, abort, stored parameters), and the syncs that make
// each of them durable.
//
// The engine never calls the os package for these: it asks the FS of its
// backend (Of). The OS implements FS (OS); so does mappedfile.MemFS, whose
// crash model loses every change that was not synced — an unsynced
// directory entry, a page-cache page never written back — so a missing sync
// in the engine shows up in its crash tests.
package storefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
)

// FS is what the engine does with its directory besides the segment files'
// bytes. Durability follows POSIX: a file's data is durable after it is
// synced (WriteFile syncs; SyncFile syncs a file written through a
// MappedFile); a creation, rename or removal only once its directory is
// synced (SyncDir).
type FS interface {
	// MkdirAll creates dir and its missing parents, and syncs the parent of
	// every directory it creates, so they survive a power loss.
	MkdirAll(dir string) error
	// List returns the names of the regular files in dir, sorted; an error
	// wrapping fs.ErrNotExist when dir does not exist.
	List(dir string) ([]string, error)
	// ListDirs returns the names of the directories in dir, sorted; an error
	// wrapping fs.ErrNotExist when dir does not exist.
	ListDirs(dir string) ([]string, error)
	// Exists reports whether a file or directory exists at path.
	Exists(path string) (bool, error)
	// ReadFile returns the content of a small file; an error wrapping
	// fs.ErrNotExist when there is none.
	ReadFile(path string) ([]byte, error)
	// WriteFile creates (or truncates) path, writes data and syncs it: the
	// data is durable, the name only once the directory is synced.
	WriteFile(path string, data []byte) error
	// Rename renames a file (not durable until the directory is synced).
	Rename(oldPath, newPath string) error
	// Remove removes a file (not durable until the directory is synced).
	Remove(path string) error
	// SyncDir makes the creations, renames and removals in dir durable.
	SyncDir(dir string) error
	// SyncFile makes durable whatever the page cache holds of an existing
	// file (fsync): bytes a process wrote and did not sync before it died.
	SyncFile(path string) error
}

// Of returns the FS a backend's files live in: the backend itself when it
// implements FS (an in-memory file system), looking through wrappers that
// expose Inner() (the fault injector), else the OS.
func Of(b mappedfile.Backend) FS {
	for b != nil {
		if f, ok := b.(FS); ok {
			return f
		}
		w, ok := b.(interface{ Inner() mappedfile.Backend })
		if !ok {
			break
		}
		b = w.Inner()
	}
	return OS()
}

// WriteFileAtomic replaces path durably: the data goes to path+".tmp",
// which is synced and renamed over path, then the directory is synced. A
// crash leaves either the old file or the new one, never a torn one.
func WriteFileAtomic(f FS, path string, data []byte) error {
	tmp := path + ".tmp"
	if err := f.WriteFile(tmp, data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// RemoveDurably removes path and syncs its directory; a missing file is not
// an error.
func RemoveDurably(f FS, path string) error {
	if err := f.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return f.SyncDir(filepath.Dir(path))
}

// OS returns the FS of the operating system. Its system calls that create,
// write, rename, remove or sync go through internal/segfile's seam, like the
// backends', so a test's injector sees (and can fail) the engine's directory
// syncs too. (segfile runs on Linux; elsewhere they fail with
// mappedfile.ErrUnsupported, as the backends do.)
func OS() FS { return osFS{} }

type osFS struct{}

func (osFS) MkdirAll(dir string) error {
	dir = filepath.Clean(dir)
	var missing []string // deepest first
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err == nil {
			if !st.IsDir() {
				return fmt.Errorf("mkdir %s: %s is not a directory", dir, d)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("mkdir %s: %w", dir, err)
		}
		missing = append(missing, d)
		if parent := filepath.Dir(d); parent == d {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("mkdir %s: %w", d, err)
		}
		if err := segfile.SyncDir(filepath.Dir(d)); err != nil {
			return fmt.Errorf("mkdir %s: %w", d, err)
		}
	}
	return nil
}

func (osFS) list(dir string, dirs bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() == dirs {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

func (o osFS) List(dir string) ([]string, error)     { return o.list(dir, false) }
func (o osFS) ListDirs(dir string) ([]string, error) { return o.list(dir, true) }

func (osFS) Exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, fmt.Errorf("stat %s: %w", path, err)
}

func (osFS) ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

func (osFS) WriteFile(path string, data []byte) error {
	f, err := segfile.Create(path, 0, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := segfile.Pwrite(path, int(f.Fd()), data, 0); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := segfile.Fsync(path, int(f.Fd())); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

func (osFS) Rename(oldPath, newPath string) error { return segfile.Rename(oldPath, newPath) }
func (osFS) Remove(path string) error             { return segfile.Unlink(path) }
func (osFS) SyncDir(dir string) error             { return segfile.SyncDir(dir) }

func (osFS) SyncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	defer f.Close()
	// fsync works on the inode: it writes back pages dirtied through any
	// descriptor or shared mapping of the file.
	if err := segfile.Fsync(path, int(f.Fd())); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}
