package segfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// zeroChunkBytes is the size of one write of zeros (and one read of a
// range to zero) on macOS.
const zeroChunkBytes = 1 << 20

var zeroChunk [zeroChunkBytes]byte

// PrewritePaced is Prewrite on macOS: its syncs (F_FULLFSYNC) cost too much
// to take one per step, so pace is not asked.
func PrewritePaced(ctx context.Context, f *os.File, size int64, _ func() bool) (mappedfile.Zeros, error) {
	return mappedfile.ZerosCached, Prewrite(ctx, f, size)
}

// Prewrite writes zeros over [0, size) of f, so its blocks are allocated
// and written before use (macOS has neither unwritten extents to convert
// nor O_DIRECT: buffered zeros, made durable by the caller's sync).
func Prewrite(ctx context.Context, f *os.File, size int64) error {
	path, fd := f.Name(), int(f.Fd())
	for off := int64(0); off < size; off += zeroChunkBytes {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("prewrite %s: %w", path, err)
		}
		n := min(zeroChunkBytes, size-off)
		if err := Pwrite(path, fd, zeroChunk[:n], off); err != nil {
			return fmt.Errorf("prewrite %s: %w", path, noSpaceHint(err, size))
		}
	}
	return nil
}

// SyncFileRange: macOS has no sync_file_range(2); the writeback it paces
// is started by Fdatasync instead, so it does nothing.
func SyncFileRange(string, int, int64, int64, int) error { return nil }

func noSpaceHint(err error, size int64) error {
	if errors.Is(err, unix.ENOSPC) {
		return fmt.Errorf("writing a %d-byte segment: %w: %w", size, mappedfile.ErrNoSpace, err)
	}
	return err
}

// ZeroRange makes [off, off+n) of f read as zeros, durably, and makes
// every other byte of it durable (see the Linux version). It is
// ZeroRangeContext without a deadline.
func ZeroRange(f *os.File, off, n int64) error {
	return ZeroRangeContext(context.Background(), f, off, n)
}

// ZeroRangeContext is ZeroRange with a context, checked between chunks:
// each 1 MiB chunk of the range is read and, unless it already is all
// zeros, written with zeros; then the file is synced.
func ZeroRangeContext(ctx context.Context, f *os.File, off, n int64) error {
	path, fd := f.Name(), int(f.Fd())
	if off < 0 || n < 0 {
		return fmt.Errorf("zero [%d,+%d) of %s: %w", off, n, path, mappedfile.ErrInvalidArgument)
	}
	buf := make([]byte, zeroChunkBytes)
	for pos, end := off, off+n; pos < end; pos += zeroChunkBytes {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("zero [%d,%d) of %s: %w", off, end, path, err)
		}
		c := buf[:min(zeroChunkBytes, end-pos)]
		// A short or failed read writes the zeros anyway: always correct.
		if m, _ := f.ReadAt(c, pos); m == len(c) && bytes.Equal(c, zeroChunk[:len(c)]) {
			continue
		}
		if err := Pwrite(path, fd, zeroChunk[:len(c)], pos); err != nil {
			return fmt.Errorf("zero [%d,%d): %w", off, end, err)
		}
	}
	if err := Fdatasync(path, fd); err != nil {
		return fmt.Errorf("after zeroing [%d,%d): %w", off, off+n, err)
	}
	return nil
}
