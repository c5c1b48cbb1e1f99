package uring

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	closed atomic.Bool
}

// NewBackend returns the "uring" backend (buffered writes through io_uring)
// or, with opts.Direct, the "uring-direct" backend (O_DIRECT). It creates
// the backend's ring now, so an io_uring that cannot run here is reported
// at once with an error wrapping ErrUnsupported that names the reason and
// the backends to use instead. The returned value also implements io.Closer.
func NewBackend(opts Options) (mappedfile.Backend, error) {
	opts = opts.withDefaults()
	if opts.PreZero && !opts.Direct {
		return nil, fmt.Errorf("uring: PreZero needs Direct: %w", mappedfile.ErrInvalidArgument)
	}
	if opts.Direct && opts.WriteChunkBytes%maxDirectBlock != 0 {
		return nil, fmt.Errorf("uring-direct: WriteChunkBytes %d is not a multiple of %d (O_DIRECT requests must be whole blocks): %w",
			opts.WriteChunkBytes, maxDirectBlock, mappedfile.ErrInvalidArgument)
	}
	entries := max(opts.RingEntries, uint32(opts.QueueDepth))
	r, err := NewRing(RingOptions{Entries: entries})
	if err != nil {
		return nil, err
	}
	return &backend{opts: opts, ring: r, pool: newStagingPool(r, opts.StagingBuffers)}, nil
}

func (b *backend) Name() string {
	if b.opts.Direct {
		return NameDirect
	}
	return NameBuffered
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
	if _, err := os.Lstat(spec.Path); errors.Is(err, os.ErrNotExist) {
		if buf, err = b.pool.borrow(ctx, b.bufferBytes(spec.SizeBytes), b.opts.Direct); err != nil {
			return nil, fmt.Errorf("uring (%s): open %s: %w", b.Name(), spec.Path, err)
		}
	}
	f, err := b.openFile(ctx, spec, flags, buf)
	if err != nil && buf != nil {
		b.pool.giveBack(buf)
	}
	return f, err
}

// bufferBytes is the staging buffer a segment needs: the segment, and for
// O_DIRECT one more block for the padded tail (the bounce block).
func (b *backend) bufferBytes(sizeBytes int64) int64 {
	if b.opts.Direct {
		return sizeBytes + maxDirectBlock
	}
	return sizeBytes
}

// maxDirectBlock bounds the O_DIRECT block this backend accepts (the bounce
// block at the end of a staging buffer has this size).
const maxDirectBlock = 4096

func (b *backend) openFile(ctx context.Context, spec mappedfile.Spec, flags int, buf *stagingBuffer) (*file, error) {
	osf, existed, err := segfile.OpenOrCreate(ctx, spec, flags)
	if err != nil {
		return nil, fmt.Errorf("uring (%s): %w", b.Name(), err)
	}
	f := &file{
		backend:    b,
		path:       spec.Path,
		fromOffset: spec.FromOffset,
		sizeBytes:  spec.SizeBytes,
		direct:     b.opts.Direct,
		preZero:    b.opts.PreZero,
		writeFile:  osf,
		readFile:   osf,
		fd:         int32(osf.Fd()),
		align:      1,
		writer:     newWriter(b.ring, b.opts.QueueDepth, int64(b.opts.WriteChunkBytes)),
	}
	f.refs.Init()
	fail := func(err error) (*file, error) {
		f.closeFiles()
		if !existed {
			_ = os.Remove(spec.Path)
			_ = segfile.SyncDir(dirOf(spec.Path))
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
		f.wrotePosition.Store(spec.SizeBytes)
		f.committedPosition.Store(spec.SizeBytes)
		f.flushedPosition.Store(spec.SizeBytes)
		return f, nil
	}
	if buf == nil {
		return fail(fmt.Errorf("uring (%s): %s appeared between the check and the open: %w", b.Name(), spec.Path, mappedfile.ErrInvalidArgument))
	}
	l := &lease{buf: buf}
	l.refs.Init()
	f.lease.Store(l)
	if f.preZero {
		if err := f.zeroNewFile(ctx); err != nil {
			f.lease.Store(nil) // the caller gives the buffer back
			return fail(err)
		}
	}
	return f, nil
}

// openDirect, for O_DIRECT, reads the alignment and opens a second,
// buffered descriptor for reads of sealed ranges and for zeroing.
func (f *file) openDirect() error {
	if !f.direct {
		return nil
	}
	offsetAlign, memAlign := segfile.DirectIOAlignment(f.path)
	if memAlign > 4096 || offsetAlign > maxDirectBlock || offsetAlign&(offsetAlign-1) != 0 {
		return fmt.Errorf("uring-direct: open %s: O_DIRECT alignment offset %d memory %d not supported: %w",
			f.path, offsetAlign, memAlign, ErrUnsupported)
	}
	if f.sizeBytes%offsetAlign != 0 {
		return fmt.Errorf("uring-direct: open %s: segment size %d is not a multiple of the O_DIRECT block %d: %w",
			f.path, f.sizeBytes, offsetAlign, mappedfile.ErrInvalidArgument)
	}
	f.align = offsetAlign
	rf, err := os.OpenFile(f.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("uring-direct: open %s for reads: %w", f.path, err)
	}
	f.readFile = rf
	return nil
}

// zeroNewFile writes zeros over the whole new segment from the (zeroed)
// staging buffer, then fdatasyncs it and its directory, so later writes are
// overwrites of allocated, written blocks.
func (f *file) zeroNewFile(ctx context.Context) error {
	l := f.lease.Load()
	f.extents[0] = extent{fileOff: 0, mem: l.buf.mem[:f.sizeBytes]}
	if _, err := f.writer.write(ctx, f.target(l, 0), f.extents[:1]); err != nil {
		return fmt.Errorf("uring-direct: pre-zero %s: %w", f.path, err)
	}
	if err := unix.Fdatasync(int(f.fd)); err != nil {
		return fmt.Errorf("uring-direct: pre-zero %s: fdatasync: %w", f.path, err)
	}
	if err := segfile.SyncDir(dirOf(f.path)); err != nil {
		return fmt.Errorf("uring-direct: pre-zero %s: %w", f.path, err)
	}
	return nil
}
