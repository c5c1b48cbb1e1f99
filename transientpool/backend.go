// Package transientpool is mqstore's "transient" I/O backend, RocketMQ's
// TransientStorePool: appends go into an off-heap, mlocked buffer borrowed
// from a fixed pool; Commit writes [committed, wrote) of the buffer into the
// segment file with pwrite(2) at the same offset; Flush is fdatasync(2).
// Readers see only committed bytes, read from the file's shared mapping (or
// sent with sendfile(2) from the page cache), never from the buffer.
//
// Why: an append is a store into locked, already faulted memory, so it never
// takes a page fault or waits on the journal (page_mkwrite), the mmap
// backend's tail-latency risk; the file sees large sequential writes from the
// commit service instead.
//
// Buffer life cycle:
//
//   - A new segment borrows a buffer at Open (an existing one at Truncate,
//     when appends are to continue).
//   - When the pool is empty, WhenEmpty decides: FallbackMmap (the default,
//     RocketMQ's behaviour) writes that segment straight into its shared file
//     mapping, as the mmap backend would, and counts it in Stats.Fallbacks;
//     Wait waits up to BorrowTimeout and then fails with ErrPoolExhausted.
//   - The buffer goes back as soon as the whole segment is committed
//     (committed == SizeBytes, which implies wrote == SizeBytes): from then on
//     every byte is in the page cache and the buffer is never read again, so
//     waiting for the flush would only keep it away from the next segment
//     (RocketMQ returns it at the same point). Close and Delete return it too,
//     once the last reference is released.
//   - Buffers are not zeroed on return; see pool.
package transientpool

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
)

// Name is the backend's name.
const Name = "transient"

// Defaults for zero Options fields.
const (
	DefaultPoolSize      = 5
	DefaultBorrowTimeout = time.Second
)

// WhenEmpty says what Open does when every buffer is borrowed.
type WhenEmpty int

const (
	// FallbackMmap writes the segment directly into its shared file mapping
	// (commit is then a no-op that publishes the written bytes, flush is still
	// fdatasync). RocketMQ's behaviour; the zero value.
	FallbackMmap WhenEmpty = iota
	// Wait waits up to BorrowTimeout (and the context) for a buffer, then
	// fails with ErrPoolExhausted.
	Wait
)

func (w WhenEmpty) String() string {
	switch w {
	case FallbackMmap:
		return "fallback-mmap"
	case Wait:
		return "wait"
	}
	return fmt.Sprintf("WhenEmpty(%d)", int(w))
}

// Options configure a Backend. The zero value of every field but
// SegmentSizeBytes is usable.
type Options struct {
	// SegmentSizeBytes is the size of every buffer and of every segment
	// opened through the backend (Open with another size fails). Required.
	SegmentSizeBytes int64 `json:"segmentSizeBytes,omitempty"`
	// PoolSize is the number of buffers; 0 means DefaultPoolSize.
	PoolSize int `json:"poolSize,omitempty"`
	// MemoryBudgetBytes, when > 0, caps PoolSize*SegmentSizeBytes: New fails
	// rather than allocate (and lock) more than that.
	MemoryBudgetBytes int64 `json:"memoryBudgetBytes,omitempty"`
	// WhenEmpty: what Open does when no buffer is free.
	WhenEmpty WhenEmpty `json:"whenEmpty,omitempty"`
	// BorrowTimeout bounds the wait under Wait; 0 means DefaultBorrowTimeout.
	BorrowTimeout time.Duration `json:"borrowTimeoutNs,omitempty"`
	// NoLock skips mlock of the buffers (they may then be swapped out).
	// The zero value locks, and New fails when RLIMIT_MEMLOCK is too low.
	NoLock bool `json:"noLock,omitempty"`
}

// Stats are the pool's counters, read without locks.
type Stats struct {
	PoolSize       int   // buffers in the pool
	BuffersFree    int   // buffers not borrowed right now
	Borrows        int64 // successful borrows
	BorrowWaits    int64 // borrows that found the pool empty and waited (Wait)
	BorrowTimeouts int64 // waits that ended in ErrPoolExhausted
	Fallbacks      int64 // segments written through the file mapping instead (FallbackMmap)
	Returns        int64 // buffers given back
	BytesLocked    int64 // bytes of buffer memory mlocked
}

// Backend is the transient-pool backend. It implements mappedfile.Backend.
// Close it after every file opened through it is closed or deleted.
type Backend struct {
	pool *pool
}

var _ mappedfile.Backend = (*Backend)(nil)

// New allocates, populates and locks the pool up front (TigerBeetle's
// allocation-at-startup): PoolSize*SegmentSizeBytes bytes, so failures such
// as RLIMIT_MEMLOCK show at startup, not at the first roll.
func New(opts Options) (*Backend, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	p, err := newPool(opts)
	if err != nil {
		return nil, err
	}
	return &Backend{pool: p}, nil
}

func (o Options) withDefaults() (Options, error) {
	if o.SegmentSizeBytes <= 0 {
		return o, fmt.Errorf("transientpool: SegmentSizeBytes is %d, must be > 0: %w",
			o.SegmentSizeBytes, mappedfile.ErrInvalidArgument)
	}
	if o.PoolSize == 0 {
		o.PoolSize = DefaultPoolSize
	}
	if o.PoolSize < 0 {
		return o, fmt.Errorf("transientpool: PoolSize is %d, must be ≥ 0: %w", o.PoolSize, mappedfile.ErrInvalidArgument)
	}
	if o.BorrowTimeout == 0 {
		o.BorrowTimeout = DefaultBorrowTimeout
	}
	if o.BorrowTimeout < 0 {
		return o, fmt.Errorf("transientpool: BorrowTimeout is %v, must be ≥ 0: %w", o.BorrowTimeout, mappedfile.ErrInvalidArgument)
	}
	if o.WhenEmpty != FallbackMmap && o.WhenEmpty != Wait {
		return o, fmt.Errorf("transientpool: unknown %v: %w", o.WhenEmpty, mappedfile.ErrInvalidArgument)
	}
	wanted := int64(o.PoolSize) * o.SegmentSizeBytes
	if wanted/int64(o.PoolSize) != o.SegmentSizeBytes {
		return o, fmt.Errorf("transientpool: PoolSize %d × SegmentSizeBytes %d overflows: %w",
			o.PoolSize, o.SegmentSizeBytes, mappedfile.ErrInvalidArgument)
	}
	if o.MemoryBudgetBytes > 0 && wanted > o.MemoryBudgetBytes {
		return o, fmt.Errorf("transientpool: the pool needs PoolSize %d × SegmentSizeBytes %d = %d bytes, more than MemoryBudgetBytes %d; lower PoolSize or SegmentSizeBytes, or raise MemoryBudgetBytes: %w",
			o.PoolSize, o.SegmentSizeBytes, wanted, o.MemoryBudgetBytes, mappedfile.ErrInvalidArgument)
	}
	return o, nil
}

// Name returns "transient".
func (b *Backend) Name() string { return Name }

// Stats returns the pool's counters.
func (b *Backend) Stats() Stats { return b.pool.stats() }

// LockedBytes implements mappedfile.LockReporter: the pool's buffers.
func (b *Backend) LockedBytes() int64 { return b.pool.stats().BytesLocked }

// Close munlocks and unmaps the pool. It fails with ErrBuffersBorrowed, and
// keeps the pool intact, while any segment file still holds a buffer (a
// buffer in use must never be unmapped); close those files and call Close
// again. Either way new Opens fail with ErrClosed from the first call on.
// Files that fell back to their mapping hold no buffer and do not block Close.
func (b *Backend) Close() error { return b.pool.close() }

// Open opens or creates the segment spec.Path; see mappedfile.Backend.
// A new segment borrows a buffer (or falls back, or waits: WhenEmpty); an
// existing one starts full and borrows at Truncate.
func (b *Backend) Open(ctx context.Context, spec mappedfile.Spec) (mappedfile.MappedFile, error) {
	if spec.SizeBytes != b.pool.segmentSizeBytes {
		return nil, b.sizeError(spec)
	}
	if b.pool.closing.Load() {
		return nil, fmt.Errorf("transientpool: open %s: backend closed: %w", spec.Path, mappedfile.ErrClosed)
	}
	// Borrow before creating: a new file left behind by a failed borrow
	// would reopen as a full segment.
	var buf *poolBuffer
	if _, err := os.Stat(spec.Path); errors.Is(err, fs.ErrNotExist) {
		if buf, err = b.pool.borrow(ctx); err != nil {
			return nil, fmt.Errorf("transientpool: open %s: %w", spec.Path, err)
		}
	}
	return b.openWith(ctx, spec, buf)
}

// openWith opens the file and maps it. buf, the buffer borrowed for a new
// segment (or nil), ends up in the segment or back in the pool.
func (b *Backend) openWith(ctx context.Context, spec mappedfile.Spec, buf *poolBuffer) (mappedfile.MappedFile, error) {
	giveBack := func() {
		if buf != nil {
			b.pool.giveBack(buf)
			buf = nil
		}
	}
	osFile, existed, err := segfile.OpenOrCreate(ctx, spec, 0)
	if err != nil {
		giveBack()
		return nil, fmt.Errorf("transientpool: %w", err)
	}
	if existed {
		// Created by someone else since the Stat: it starts full and
		// borrows at Truncate.
		giveBack()
	}
	f, err := openSegment(b.pool, spec, osFile, existed, buf)
	if err != nil {
		giveBack()
		osFile.Close()
		return nil, fmt.Errorf("transientpool: %w", err)
	}
	return f, nil
}

// sizeError explains an Open whose size is not the pool's: ErrSizeMismatch
// when the file exists with another size than asked (as any backend would
// say), ErrInvalidArgument otherwise.
func (b *Backend) sizeError(spec mappedfile.Spec) error {
	if st, err := os.Stat(spec.Path); err == nil && st.Size() != spec.SizeBytes {
		return fmt.Errorf("transientpool: open %s: file has %d bytes, asked for %d: %w",
			spec.Path, st.Size(), spec.SizeBytes, mappedfile.ErrSizeMismatch)
	}
	return fmt.Errorf("transientpool: open %s: segment size %d differs from the pool's SegmentSizeBytes %d (buffers are that size): %w",
		spec.Path, spec.SizeBytes, b.pool.segmentSizeBytes, mappedfile.ErrInvalidArgument)
}
