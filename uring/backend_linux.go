package uring

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// backend opens segments written through one shared ring, with staging
// buffers from one bounded pool. It implements io.Closer: Close it after
// every file it opened is closed.
type backend struct {
	opts   Options
	ring   *Ring
	pool   *stagingPool
	logger *slog.Logger
	closed atomic.Bool

	zeroOnce sync.Once
	zeros    []byte // off-heap zeros for PreZero writes, never written
	zerosErr error
}

// NewBackend returns the "uring" backend (buffered) or, with opts.Direct,
// the "uring-direct" backend (O_DIRECT). It creates the backend's ring now,
// so an io_uring that cannot run here is reported at once with an error
// wrapping ErrUnsupported that names the reason and the backends to use
// instead; with opts.SegmentSizeBytes it also maps and registers the
// staging buffers now, so their limits are reported at once too. The
// returned value also implements io.Closer and StagingReporter.
func NewBackend(opts Options) (mappedfile.Backend, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	entries := max(opts.RingEntries, uint32(opts.QueueDepth))
	r, err := NewRing(RingOptions{Entries: entries, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	b := &backend{opts: opts, ring: r, logger: opts.Logger,
		pool: newStagingPool(r, opts.StagingBuffers, opts.StagingBytes, opts.RequireRegistered, opts.Logger)}
	if opts.SegmentSizeBytes > 0 {
		if err := b.prepare(opts.SegmentSizeBytes); err != nil {
			_ = b.pool.close()
			_ = r.Close()
			return nil, err
		}
	}
	return b, nil
}

// prepare maps (and registers) every staging buffer for segments of
// sizeBytes now, so that Open never maps memory and a limit is reported
// by NewBackend.
func (b *backend) prepare(sizeBytes int64) error {
	ringBytes := b.pool.ringBytesFor(sizeBytes)
	bufs := make([]*stagingBuffer, 0, b.opts.StagingBuffers)
	defer func() {
		for _, buf := range bufs {
			b.pool.giveBack(buf)
		}
	}()
	for range b.opts.StagingBuffers {
		buf, err := b.pool.borrow(context.Background(), ringBytes)
		if err != nil {
			return fmt.Errorf("uring (%s): staging buffers: %w", b.Name(), err)
		}
		bufs = append(bufs, buf)
	}
	return nil
}

func (b *backend) Name() string {
	if b.opts.Direct {
		return NameDirect
	}
	return NameBuffered
}

// Staging reports the staging buffers: their size and whether the kernel
// registered them, or why not (see StagingReporter).
func (b *backend) Staging() StagingInfo { return b.pool.info() }

// MemoryReadBytes is mappedfile.MemoryReads: uring-direct serves reads of
// the last ring's worth of a segment from its staging ring and older bytes
// from the device (O_DIRECT leaves nothing in the page cache); the buffered
// uring's older bytes are in the page cache (0: no bound).
func (b *backend) MemoryReadBytes() int64 {
	if !b.opts.Direct {
		return 0
	}
	return b.pool.info().RingBytes
}

// Settings reports what the backend runs with (see Settings).
func (b *backend) Settings() Settings {
	s := Settings{Name: b.Name(), SyncAtCommit: b.opts.SyncAtCommit, SyncMethod: b.opts.SyncMethod,
		PreZero: b.opts.PreZero, Staging: b.Staging(), WritevFixed: b.opts.Direct && b.ring.Supports(OpWritevFixed)}
	return s
}

// Close releases the staging buffers and the ring. Every file must be
// closed first; while one is open Close fails and the backend stays usable.
func (b *backend) Close() error {
	if !b.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("uring: backend: %w", mappedfile.ErrClosed)
	}
	if err := b.pool.close(); err != nil {
		b.closed.Store(false)
		return err
	}
	if b.zeros != nil {
		_ = segfile.Unmap(b.zeros)
	}
	return b.ring.Close()
}

// Open opens or creates a segment (see mappedfile.Backend).
func (b *backend) Open(ctx context.Context, spec mappedfile.Spec) (mappedfile.MappedFile, error) {
	if b.closed.Load() {
		return nil, fmt.Errorf("uring: open %s: backend: %w", spec.Path, mappedfile.ErrClosed)
	}
	flags := 0
	if b.opts.Direct {
		flags = unix.O_DIRECT
	}
	// A new segment needs a staging buffer: wait for one before creating
	// the file, so a timeout leaves no empty segment behind.
	var buf *stagingBuffer
	if _, err := os.Lstat(spec.Path); errors.Is(err, os.ErrNotExist) && spec.SizeBytes > 0 {
		if buf, err = b.pool.borrow(ctx, b.pool.ringBytesFor(spec.SizeBytes)); err != nil {
			return nil, fmt.Errorf("uring (%s): open %s: %w", b.Name(), spec.Path, err)
		}
	}
	f, err := b.openFile(ctx, spec, flags, buf)
	if err != nil {
		if buf != nil {
			b.pool.giveBack(buf)
		}
		return nil, err
	}
	return f, nil
}

func (b *backend) openFile(ctx context.Context, spec mappedfile.Spec, flags int, buf *stagingBuffer) (*file, error) {
	osf, existed, err := segfile.OpenOrCreate(ctx, spec, flags)
	if err != nil {
		return nil, fmt.Errorf("uring (%s): %w", b.Name(), err)
	}
	f := &file{
		backend:    b,
		name:       b.Name(),
		direct:     b.opts.Direct,
		syncCommit: b.opts.SyncAtCommit,
		syncMethod: b.opts.SyncMethod,
		writeFile:  osf,
		readFile:   osf,
		fd:         int32(osf.Fd()),
		align:      1,
	}
	f.Init(mappedfile.BaseConfig{
		Spec:      spec,
		Backend:   b.Name(),
		Existed:   existed,
		Semantics: mappedfile.Semantics{ReadableUpToWrote: true},
		Cleanup:   f.cleanup,
		Remove:    func() error { return segfile.Remove(spec.Path) },
		Logger:    b.logger,
	})
	fail := func(err error) (*file, error) {
		_ = f.closeFiles()
		if !existed {
			_ = segfile.Remove(spec.Path)
		}
		return nil, err
	}
	if err := f.openDirect(); err != nil {
		return fail(err)
	}
	if existed {
		// Created by someone else between the Lstat and the open: its
		// positions start at the end, and it needs no buffer until Truncate.
		if buf != nil {
			b.pool.giveBack(buf)
		}
		f.fileReadable.Store(spec.SizeBytes)
		f.reserved.Store(spec.SizeBytes)
		return f, nil
	}
	if buf == nil {
		return fail(fmt.Errorf("uring (%s): %s appeared between the check and the open: %w", b.Name(), spec.Path, mappedfile.ErrInvalidArgument))
	}
	if b.opts.PreZero {
		if err := b.zeroNewFile(ctx, f); err != nil {
			return fail(err)
		}
	}
	l := &lease{buf: buf}
	l.refs.Init()
	f.lease.Store(l)
	return f, nil
}

// openDirect, for O_DIRECT, works out the block size and opens a second,
// buffered descriptor for reads of the bytes in the file and for zeroing.
func (f *file) openDirect() error {
	if !f.direct {
		return nil
	}
	path := f.Path()
	align, why := directBlock(path)
	if align > pageSize || align&(align-1) != 0 {
		return fmt.Errorf("uring-direct: open %s: O_DIRECT block %d (%s) not supported (at most the page size %d, a power of two): %w",
			path, align, why, pageSize, ErrUnsupported)
	}
	if f.SizeBytes()%align != 0 {
		return fmt.Errorf("uring-direct: open %s: segment size %d is not a multiple of the O_DIRECT block %d (%s): %w",
			path, f.SizeBytes(), align, why, mappedfile.ErrInvalidArgument)
	}
	f.align = align
	rf, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("uring-direct: open %s for reads: %w", path, err)
	}
	f.readFile = rf
	return nil
}

// directBlock is the block uring-direct writes in: the largest of the
// O_DIRECT alignment (statx DIOALIGN: offset and memory), the file
// system's block and the device's physical block. Writing less than a file
// system block makes the kernel zero the rest of a newly used block under
// an exclusive inode lock, in an io-wq worker; writing less than a physical
// block makes the device read-modify-write. why names the sizes.
func directBlock(path string) (int64, string) {
	offsetAlign, memAlign := segfile.DirectIOAlignment(path)
	align := max(offsetAlign, memAlign)
	why := fmt.Sprintf("dio offset %d, memory %d", offsetAlign, memAlign)
	var st unix.Statfs_t
	if unix.Statfs(path, &st) == nil && st.Bsize > 0 {
		align = max(align, st.Bsize)
		why += fmt.Sprintf(", fs block %d", st.Bsize)
	}
	if phys := physicalBlock(path); phys > 0 {
		align = max(align, phys)
		why += fmt.Sprintf(", physical block %d", phys)
	}
	return align, why
}

// physicalBlock reads the physical block size of the device holding path
// from sysfs (0 when there is no such device: tmpfs, overlay, …).
func physicalBlock(path string) int64 {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return 0
	}
	dev := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	for _, p := range []string{dev + "/queue/physical_block_size", dev + "/../queue/physical_block_size"} {
		if b, err := os.ReadFile(p); err == nil {
			if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 {
				return n
			}
		}
	}
	return 0
}

// zeroBytes is the size of the backend's zero source for PreZero.
const zeroBytes = 1 << 20

// zeroNewFile writes zeros over the whole new segment and fdatasyncs it
// and its directory, so its extents are written: later writes are
// overwrites, and a durable write needs no journal commit for an extent
// conversion (on a pre-written file a durable commit is one write and one
// device flush).
func (b *backend) zeroNewFile(ctx context.Context, f *file) error {
	b.zeroOnce.Do(func() {
		b.zeros, b.zerosErr = segfile.MapAnonymous(zeroBytes)
	})
	if b.zerosErr != nil {
		return fmt.Errorf("%s: pre-zero %s: %w", f.name, f.Path(), b.zerosErr)
	}
	size := f.SizeBytes()
	if f.direct {
		n := (size + zeroBytes - 1) / zeroBytes
		extents := make([]extent, 0, n)
		for off := int64(0); off < size; off += zeroBytes {
			extents = append(extents, extent{fileOff: off, mem: b.zeros[:min(zeroBytes, size-off)]})
		}
		w := newWriter(b.ring, b.opts.QueueDepth, int64(b.opts.WriteChunkBytes))
		if _, err := w.write(ctx, writeTarget{fd: f.fd, bufIndex: -1, align: f.align, path: f.Path()}, extents); err != nil {
			return fmt.Errorf("%s: pre-zero %s: %w", f.name, f.Path(), err)
		}
	} else {
		// Through the page cache, a page at a time: the pages stay cached
		// (an append into a written block that is not cached would read it
		// from the disk first), and in single-page folios (a small append
		// into a large folio dirties, and the next sync writes, all of it).
		for off := int64(0); off < size; off += pageSize {
			if off%(64<<20) == 0 {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("%s: pre-zero %s: %w", f.name, f.Path(), err)
				}
			}
			if err := segfile.Pwrite(f.Path(), int(f.fd), b.zeros[:min(pageSize, size-off)], off); err != nil {
				return fmt.Errorf("%s: pre-zero: %w", f.name, err)
			}
		}
	}
	if err := segfile.Fdatasync(f.Path(), int(f.fd)); err != nil {
		return fmt.Errorf("%s: pre-zero: %w", f.name, err)
	}
	if err := segfile.SyncDir(dirOf(f.Path())); err != nil {
		return fmt.Errorf("%s: pre-zero %s: %w", f.name, f.Path(), err)
	}
	return nil
}

// zeroChunk is how much zeroTail reads at a time.
const zeroChunk = 1 << 20

var zeroChunks = sync.Pool{New: func() any { b := make([]byte, zeroChunk); return &b }}

// zeroTail makes [from, to) of f zeros by writing zeros over the 4 KiB
// blocks there that hold anything else (it reads the range; holes and
// unwritten extents, skipped with SEEK_DATA, read as zeros already). It
// never deallocates or converts extents. It does not sync. It returns how
// many bytes it wrote.
func zeroTail(ctx context.Context, f *os.File, from, to int64) (int64, error) {
	fd := int(f.Fd())
	bp := zeroChunks.Get().(*[]byte)
	defer zeroChunks.Put(bp)
	buf := *bp
	var written int64
	for pos := from; pos < to; {
		if err := ctx.Err(); err != nil {
			return written, err
		}
		data, err := unix.Seek(fd, pos, unix.SEEK_DATA)
		if err == unix.ENXIO {
			return written, nil // no data from pos on
		}
		if err == nil {
			if data >= to {
				return written, nil
			}
			pos = max(pos, data)
		}
		n := min(int64(len(buf)), to-pos)
		if _, err := f.ReadAt(buf[:n], pos); err != nil && !errors.Is(err, io.EOF) {
			return written, fmt.Errorf("read [%d,%d) to zero it: %w", pos, pos+n, err)
		}
		chunk := buf[:n]
		runStart := int64(-1)
		flush := func(end int64) error {
			if runStart < 0 {
				return nil
			}
			clear(chunk[runStart:end])
			if err := segfile.Pwrite(f.Name(), fd, chunk[runStart:end], pos+runStart); err != nil {
				return fmt.Errorf("write zeros: %w", err)
			}
			written += end - runStart
			runStart = -1
			return nil
		}
		// Blocks are aligned to the file, the first one may start mid-block.
		for b := int64(0); b < n; {
			e := min(n, (pos+b+4096)&^4095-pos)
			if allZero(chunk[b:e]) {
				if err := flush(b); err != nil {
					return written, err
				}
			} else if runStart < 0 {
				runStart = b
			}
			b = e
		}
		if err := flush(n); err != nil {
			return written, err
		}
		pos += n
	}
	return written, nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
