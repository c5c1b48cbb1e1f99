package segfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// Written extents.
//
// fallocate(2) reserves blocks as unwritten extents: they read as zeros,
// and the first write into each needs an extent conversion that the next
// fdatasync must commit to the file system's journal. On this project's
// reference machine (ext4 on virtio, no FUA) a 4 KiB write + fdatasync into
// a fallocated file runs at about half the rate of the same into a file
// whose blocks were written before. Prewrite writes every block of a new
// segment (zeros) before it is used; ZeroRange never turns a written extent
// back into an unwritten one, so a segment stays written for its whole life.

const (
	// zeroSourceBytes is the size of the zero buffer every zeroing write
	// comes from: one off-heap mapping, never written, shared by all.
	zeroSourceBytes = 1 << 20
	// zeroWriteBytes is the most one zeroing pwritev carries (iovecs that
	// repeat the zero source): large requests, few system calls (O_DIRECT
	// prewrites, ZeroRange's runs of pages already cached).
	zeroWriteBytes = 8 << 20
	// writebackWindowBytes bounds the dirty pages of a buffered prewrite:
	// each window's writeback is started as soon as it is written, and the
	// previous window's is waited for, so at most two windows are dirty
	// (RocksDB's bytes_per_sync) and the final fdatasync has little left.
	writebackWindowBytes = 32 << 20
	// scanChunkBytes is how much ZeroRange reads at a time.
	scanChunkBytes = 1 << 20
	// zeroPageBytes is the unit ZeroRange compares and rewrites.
	zeroPageBytes = 4096
)

var zeroSource struct {
	once sync.Once
	mem  []byte
	err  error
}

// zeros returns the shared zero source: zeroSourceBytes of off-heap,
// page-aligned memory (O_DIRECT writes need the alignment). It is mapped
// once, on first use, and never written or unmapped.
func zeros() ([]byte, error) {
	zeroSource.once.Do(func() {
		zeroSource.mem, zeroSource.err = MapAnonymous(zeroSourceBytes)
	})
	return zeroSource.mem, zeroSource.err
}

// writeZeros writes n zero bytes at off of the file at path through the
// seam (one OpPwrite per system call), continuing after short writes. For a
// file opened with O_DIRECT, off and n must be multiples of its alignment.
func writeZeros(path string, fd int, off, n int64) error {
	src, err := zeros()
	if err != nil {
		return fmt.Errorf("zero source: %w", err)
	}
	var iovs [zeroWriteBytes / zeroSourceBytes][]byte
	for n > 0 {
		want := min(n, zeroWriteBytes)
		k := 0
		for left := want; left > 0; k++ {
			iovs[k] = src[:min(left, zeroSourceBytes)]
			left -= int64(len(iovs[k]))
		}
		var m int
		op := Op{Kind: OpPwrite, Path: path, Offset: off, Length: want}
		err := retryEINTR(func() error {
			return run(op, func() error {
				var err error
				m, err = unix.Pwritev(fd, iovs[:k], off)
				return err
			})
		})
		if err != nil {
			return fmt.Errorf("pwrite %s [%d,%d) (zeros): %w", path, off, off+want, err)
		}
		if m <= 0 {
			return fmt.Errorf("pwrite %s [%d,%d) (zeros): %w", path, off, off+want, io.ErrShortWrite)
		}
		off += int64(m)
		n -= int64(m)
	}
	return nil
}

// Prewrite writes zeros over [0, size) of f, a new file just preallocated,
// as fast as the device takes them; the caller fdatasyncs it. It is
// PrewritePaced without a pace.
func Prewrite(ctx context.Context, f *os.File, size int64) error {
	_, err := PrewritePaced(ctx, f, size, nil)
	return err
}

// PrewritePaced writes zeros over [0, size) of f, a new file just
// preallocated (OpenOrCreate calls it for Spec.Prewrite, with
// Spec.PrewritePace, before the sync and the rename); the caller
// fdatasyncs it. It checks ctx between writes, and returns how the zeros
// were written.
//
// While pace is not nil and returns true (asked before each step), the
// zeros go in steps of PrewriteStepBytes, each fdatasynced before the next
// is written: the device's volatile cache then never holds more than a step
// of zeros, which a concurrent sync of the log would otherwise have to
// flush with its own few kilobytes. Once pace returns false (a roll waits
// for the segment), the rest goes as below, at full speed.
//
// How the zeros go depends on how f was opened, that is, on how the
// backend will write:
//
//   - f opened with O_DIRECT (uring-direct, which writes whole blocks from
//     its own buffer): 8 MiB O_DIRECT writes. Nothing enters the page
//     cache; 1 GiB took 0.6 s and 36 ms of CPU here.
//   - f buffered (mmap, transient, uring): one 4 KiB write per page through
//     the page cache, its writeback started every 32 MiB and the previous
//     window's waited for (sync_file_range), so at most two windows are
//     dirty and the store's own writers are never throttled for them. The
//     pages stay cached, clean after the fdatasync, in single-page folios.
//     Both matter to a backend that writes partial pages: its first write
//     into a page of a written block that is not cached must read the block
//     from the device first (a pwrite of a commit that ends mid-page waits
//     for it; for an unwritten block the kernel just zero-fills), and large
//     writes into the page cache make large folios (this machine's ext4,
//     Linux 6.18), into which a store through a shared mapping dirties the
//     whole folio — each msync of a 1 KiB append then wrote back 2 MiB and
//     ran 3 to 4 times slower than on a fallocated segment. The price is
//     CPU: about 1 s per GiB here (1.1 s of wall time), against 34 ms for
//     O_DIRECT zeros — which, leaving every page uncached, took nearly all
//     the benefit away from the buffered backends (BenchmarkPutPrewrite,
//     sync Puts of 1 KiB by 16 producers, prewrite on/off: mmap ×1.0 with
//     O_DIRECT zeros, ×3.8 with cached pages; transient ×1.2 and ×1.8).
//     Writing the zeros through a mapping of the new file instead
//     (MADV_POPULATE_WRITE, RocketMQ's warm-up done by the kernel) took
//     less CPU in most runs (0.5–0.6 s per GiB) but up to 1.8 s in others,
//     for the same wall time; RocketMQ's one store per page through the
//     mapping, 0.9–1.9 s.
func PrewritePaced(ctx context.Context, f *os.File, size int64, pace func() bool) (mappedfile.Zeros, error) {
	path, fd := f.Name(), int(f.Fd())
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return 0, fmt.Errorf("prewrite %s: fcntl: %w", path, err)
	}
	if flags&unix.O_DIRECT == 0 {
		from, err := prewriteSteps(ctx, path, fd, size, pace, func(off, n int64) error {
			return zeroPages(ctx, path, fd, off, off+n, size)
		})
		if err == nil {
			err = zeroPages(ctx, path, fd, from, size, size)
		}
		return mappedfile.ZerosCached, err
	}
	if align, _ := DirectIOAlignment(path); size%align != 0 {
		return 0, fmt.Errorf("prewrite %s: size %d is not a multiple of the O_DIRECT alignment %d: %w",
			path, size, align, mappedfile.ErrInvalidArgument)
	}
	// The device zeroes the blocks and the file system records them as
	// written (Linux 6.17+, a device with WRITE ZEROES): no zeros cross
	// the bus and no CPU copies them. Only for O_DIRECT files: like
	// O_DIRECT zeros it leaves the pages uncached, which a buffered backend
	// pays for with a read of every page it then writes.
	if err := Fallocate(path, fd, unix.FALLOC_FL_WRITE_ZEROES, 0, size); err == nil {
		return mappedfile.ZerosByDevice, nil
	} else if !writeZeroesUnsupported(err) {
		return 0, fmt.Errorf("prewrite %s: fallocate(FALLOC_FL_WRITE_ZEROES): %w", path, noSpaceHint(err, size))
	}
	const way = mappedfile.ZerosDirect
	off, err := prewriteSteps(ctx, path, fd, size, pace, func(off, n int64) error {
		if err := writeZeros(path, fd, off, n); err != nil {
			return fmt.Errorf("prewrite: %w", noSpaceHint(err, size))
		}
		return nil
	})
	if err != nil {
		return way, err
	}
	for off < size {
		if err := ctx.Err(); err != nil {
			return way, fmt.Errorf("prewrite %s: zeros written up to %d of %d: %w", path, off, size, err)
		}
		n := min(zeroWriteBytes, size-off)
		if err := writeZeros(path, fd, off, n); err != nil {
			return way, fmt.Errorf("prewrite: %w", noSpaceHint(err, size))
		}
		off += n
	}
	return way, nil
}

// prewriteSteps writes [0, size) of the file at path with write (zeros, at
// an offset, n bytes; its error is returned as it is) in steps of
// PrewriteStepBytes, each fdatasynced before the next, while pace returns
// true (nil: not at all), checking ctx before each step. It returns where
// it stopped: size, or the first byte of the step pace said no to.
func prewriteSteps(ctx context.Context, path string, fd int, size int64, pace func() bool, write func(off, n int64) error) (int64, error) {
	off := int64(0)
	for pace != nil && off < size && pace() {
		if err := ctx.Err(); err != nil {
			return off, fmt.Errorf("prewrite %s: zeros written up to %d of %d: %w", path, off, size, err)
		}
		n := min(PrewriteStepBytes, size-off)
		if err := write(off, n); err != nil {
			return off, err
		}
		if err := Fdatasync(path, fd); err != nil {
			return off, fmt.Errorf("prewrite %s: a step's sync: %w", path, err)
		}
		off += n
	}
	return off, nil
}

// writeZeroesUnsupported: the kernel, the file system or the device has no
// FALLOC_FL_WRITE_ZEROES (EOPNOTSUPP here: ext4 on a virtio disk whose
// write_zeroes_max_bytes is 0; EINVAL from kernels that do not know the flag).
func writeZeroesUnsupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS)
}

// zeroPages writes zeros over [from, to) of a segment of size bytes
// through fd, a buffered descriptor, a page per write, pacing the writeback
// by windows (see PrewritePaced). from is a multiple of the page size.
func zeroPages(ctx context.Context, path string, fd int, from, to, size int64) error {
	src, err := zeros()
	if err != nil {
		return fmt.Errorf("prewrite %s: zero source: %w", path, err)
	}
	windowStart, previous := from, int64(-1)
	for off := from; off < to; {
		if off%scanChunkBytes == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("prewrite %s: zeros written up to %d of %d: %w", path, off, size, err)
			}
		}
		n := min(zeroPageBytes, to-off)
		if err := Pwrite(path, fd, src[:n], off); err != nil {
			return fmt.Errorf("prewrite: %w", noSpaceHint(err, size))
		}
		off += n
		if off-windowStart < writebackWindowBytes || off == to {
			continue // the caller's fdatasync writes the last window back
		}
		if err := SyncFileRange(path, fd, windowStart, off-windowStart, unix.SYNC_FILE_RANGE_WRITE); err != nil {
			return fmt.Errorf("prewrite: %w", err)
		}
		if previous >= 0 {
			wait := unix.SYNC_FILE_RANGE_WAIT_BEFORE | unix.SYNC_FILE_RANGE_WRITE | unix.SYNC_FILE_RANGE_WAIT_AFTER
			if err := SyncFileRange(path, fd, previous, windowStart-previous, wait); err != nil {
				return fmt.Errorf("prewrite: %w", err)
			}
		}
		previous, windowStart = windowStart, off
	}
	return nil
}

// SyncFileRange starts (and with the WAIT flags waits for) the writeback of
// [off, off+n) of the file at path: sync_file_range(2). It makes nothing
// durable (no metadata, no device cache flush); it paces writeback.
func SyncFileRange(path string, fd int, off, n int64, flags int) error {
	err := retryEINTR(func() error {
		return run(Op{Kind: OpWriteback, Path: path, Offset: off, Length: n}, func() error {
			return unix.SyncFileRange(fd, off, n, flags)
		})
	})
	if err != nil {
		return fmt.Errorf("sync_file_range %s [%d,%d): %w", path, off, off+n, err)
	}
	return nil
}

func noSpaceHint(err error, size int64) error {
	if errors.Is(err, unix.ENOSPC) {
		return fmt.Errorf("writing a %d-byte segment: %w: %w", size, mappedfile.ErrNoSpace, err)
	}
	return err
}

// ZeroRange makes [off, off+n) of f read as zeros, durably, without
// deallocating anything or turning a written extent back into an unwritten
// one: it writes zeros over the 4 KiB pages there that hold anything else
// and leaves the rest alone, then fdatasyncs the whole file — which also
// makes every other byte of it durable (a caller that declares [0, off)
// valid after a crash relies on that: those bytes may be only in the page
// cache). It is ZeroRangeContext without a deadline.
func ZeroRange(f *os.File, off, n int64) error {
	return ZeroRangeContext(context.Background(), f, off, n)
}

// ZeroRangeContext is ZeroRange with a context, checked between chunks.
//
// Finding the pages to rewrite: lseek(SEEK_DATA / SEEK_HOLE) skips holes
// and unwritten extents with nothing in the page cache (both read as zeros;
// the file system says so without reading the device); the data ranges are
// read in 1 MiB chunks and compared page by page. On a segment that was
// only fallocated, the data past a crash's valid end is the torn write, so
// little is read; on a prewritten segment the whole range is data and is
// read once (from the page cache when it is there). Runs of non-zero pages
// are rewritten with one write each. FALLOC_FL_ZERO_RANGE would be a single
// call, but it makes the range unwritten again: every later append would
// pay the extent conversion that Prewrite paid to avoid.
//
// f must not be opened with O_DIRECT (its reads go through the page cache,
// which holds what the file says after a crash of the process).
func ZeroRangeContext(ctx context.Context, f *os.File, off, n int64) error {
	path, fd := f.Name(), int(f.Fd())
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil && flags&unix.O_DIRECT != 0 {
		return fmt.Errorf("zero [%d,%d) of %s: the descriptor is O_DIRECT; pass a buffered one: %w", off, off+n, path, mappedfile.ErrInvalidArgument)
	}
	if off < 0 || n < 0 {
		return fmt.Errorf("zero [%d,+%d) of %s: %w", off, n, path, mappedfile.ErrInvalidArgument)
	}
	if n > 0 {
		if err := zeroNonZero(ctx, path, fd, off, off+n); err != nil {
			return fmt.Errorf("zero [%d,%d): %w", off, off+n, err)
		}
	}
	if err := Fdatasync(path, fd); err != nil {
		return fmt.Errorf("after zeroing [%d,%d): %w", off, off+n, err)
	}
	return nil
}

// scratch holds ZeroRange's read buffers (Go heap: pread copies into them
// synchronously).
var scratch = sync.Pool{New: func() any { b := make([]byte, scanChunkBytes); return &b }}

// zeroPage is what a page of zeros compares equal to.
var zeroPage [zeroPageBytes]byte

// zeroNonZero rewrites with zeros the non-zero pages of the data ranges in
// [from, to).
func zeroNonZero(ctx context.Context, path string, fd int, from, to int64) error {
	bp := scratch.Get().(*[]byte)
	defer scratch.Put(bp)
	for pos := from; pos < to; {
		data, hole, err := nextData(fd, pos, to)
		if err != nil {
			return fmt.Errorf("find data in %s from %d: %w", path, pos, err)
		}
		if data >= to {
			return nil
		}
		for pos = data; pos < hole; {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("zeroing %s stopped at %d: %w", path, pos, err)
			}
			n := min(hole-pos, int64(len(*bp)))
			if err := preadFull(fd, (*bp)[:n], pos); err != nil {
				return fmt.Errorf("read %s [%d,%d): %w", path, pos, pos+n, err)
			}
			if err := rewriteNonZero(path, fd, (*bp)[:n], pos); err != nil {
				return err
			}
			pos += n
		}
	}
	return nil
}

// nextData returns the first data range [data, hole) at or after pos,
// clipped to end; data ≥ end when there is none. A file system without
// SEEK_DATA has data everywhere.
func nextData(fd int, pos, end int64) (data, hole int64, err error) {
	data, err = unix.Seek(fd, pos, unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO):
		return end, end, nil // no data from pos to the end of the file
	case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP):
		return pos, end, nil
	case err != nil:
		return 0, 0, fmt.Errorf("lseek SEEK_DATA: %w", err)
	}
	if data >= end {
		return end, end, nil
	}
	hole, err = unix.Seek(fd, data, unix.SEEK_HOLE)
	if err != nil {
		return 0, 0, fmt.Errorf("lseek SEEK_HOLE: %w", err)
	}
	return data, min(hole, end), nil
}

// rewriteNonZero writes zeros over the pages of buf (the file's bytes at
// pos) that are not all zeros, one write per run of such pages. Pages are
// 4 KiB of the file; the first and last may be partial (clipped to buf).
func rewriteNonZero(path string, fd int, buf []byte, pos int64) error {
	runStart := int64(-1)
	flush := func(end int64) error {
		if runStart < 0 {
			return nil
		}
		err := writeZeros(path, fd, runStart, end-runStart)
		runStart = -1
		return err
	}
	end := pos + int64(len(buf))
	for p := pos; p < end; {
		next := min((p/zeroPageBytes+1)*zeroPageBytes, end)
		page := buf[p-pos : next-pos]
		if bytes.Equal(page, zeroPage[:len(page)]) {
			if err := flush(p); err != nil {
				return err
			}
		} else if runStart < 0 {
			runStart = p
		}
		p = next
	}
	return flush(end)
}

// preadFull reads len(p) bytes at off; the range must lie inside the file.
func preadFull(fd int, p []byte, off int64) error {
	for len(p) > 0 {
		var n int
		err := retryEINTR(func() error {
			var err error
			n, err = unix.Pread(fd, p, off)
			return err
		})
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		p = p[n:]
		off += int64(n)
	}
	return nil
}
