//go:build !linux && !darwin

package segfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/mqstore/mqstore/mappedfile"
)

// The backends built on this package run on Linux and macOS (mmap, msync,
// fsync). Elsewhere (Windows) every function fails with an error wrapping
// mappedfile.ErrUnsupported, so that everything above builds and the
// in-memory backend still runs.

func unsupported(what string) error {
	return fmt.Errorf("segfile: %s: the disk backends run on Linux and macOS (use the mem backend here): %w", what, mappedfile.ErrUnsupported)
}

// ErrNoPopulateWrite: the kernel has no MADV_POPULATE_WRITE.
var ErrNoPopulateWrite = errors.New("segfile: madvise(MADV_POPULATE_WRITE) is not supported here")

func Map(*os.File, int64, bool) ([]byte, error)         { return nil, unsupported("mmap") }
func MapAnonymous(int64) ([]byte, error)                { return nil, unsupported("anonymous mmap") }
func Unmap(b []byte) error                              { return unsupported("munmap") }
func Lock(string, []byte) error                         { return unsupported("mlock") }
func Mlock([]byte) error                                { return unsupported("mlock") }
func Unlock([]byte) error                               { return unsupported("munlock") }
func AdviseWrite([]byte) error                          { return unsupported("madvise") }
func AdviseCold([]byte) error                           { return unsupported("madvise") }
func PopulateWrite([]byte) error                        { return ErrNoPopulateWrite }
func Preallocate(*os.File, int64) error                 { return unsupported("fallocate") }
func ZeroRange(*os.File, int64, int64) error            { return unsupported("zeroing") }
func Pwrite(string, int, []byte, int64) error           { return unsupported("pwrite") }
func Fdatasync(string, int) error                       { return unsupported("fdatasync") }
func Fsync(string, int) error                           { return unsupported("fsync") }
func Msync(string, []byte, int64, int64) error          { return unsupported("msync") }
func Fallocate(string, int, uint32, int64, int64) error { return unsupported("fallocate") }
func Ftruncate(string, int, int64) error                { return unsupported("ftruncate") }
func Create(string, int, os.FileMode) (*os.File, error) { return nil, unsupported("create") }
func Rename(string, string) error                       { return unsupported("rename") }
func Unlink(string) error                               { return unsupported("unlink") }
func Remove(string) error                               { return unsupported("remove") }
func SyncDir(string) error                              { return unsupported("fsync of a directory") }
func DropCache(string) error                            { return nil }

func OpenOrCreate(_ context.Context, spec mappedfile.Spec, _ int) (*os.File, bool, error) {
	return nil, false, fmt.Errorf("open segment %s: %w", spec.Path, unsupported("segment files"))
}

func SendFile(context.Context, io.Writer, *os.File, int64, int64) (int64, error) {
	return 0, unsupported("sendfile")
}

func DirectIOAlignment(string) (offsetAlign, memAlign int64) { return 4096, 4096 }

func MemlockError(what string, wanted int64, err error) error {
	return fmt.Errorf("%s: mlock of %d bytes: %w", what, wanted, err)
}

// Extent is one extent of a file as FIEMAP reports it.
type Extent struct {
	Logical, Length int64
	Physical        int64
	Unwritten       bool
	Delalloc        bool
}

// ErrNoExtents: the file system does not report extents (FIEMAP).
var ErrNoExtents = errors.New("segfile: the file system does not report extents (FIEMAP)")

func Prewrite(context.Context, *os.File, int64) error { return unsupported("prewrite") }
func PrewritePaced(context.Context, *os.File, int64, func() bool) (mappedfile.Zeros, error) {
	return 0, unsupported("prewrite")
}

func ZeroRangeContext(context.Context, *os.File, int64, int64) error {
	return unsupported("zeroing")
}

func SyncFileRange(string, int, int64, int64, int) error { return unsupported("sync_file_range") }

func Extents(*os.File, bool) ([]Extent, error) { return nil, ErrNoExtents }

func UnwrittenBytes(*os.File, int64, int64) (int64, error) { return 0, ErrNoExtents }
