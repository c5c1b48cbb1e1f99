package transientpool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
)

// ErrPoolExhausted: every buffer was borrowed and none came back within
// BorrowTimeout (WhenEmpty == Wait).
var ErrPoolExhausted = errors.New("transientpool: no free buffer")

// ErrBuffersBorrowed: Close was called while segment files still hold
// buffers. Close or delete them, then call Close again.
var ErrBuffersBorrowed = errors.New("transientpool: buffers still borrowed")

// poolBuffer is one off-heap buffer of exactly segmentSizeBytes bytes.
type poolBuffer struct {
	data   []byte
	index  int
	locked bool
	// dirtyBytes: [0, dirtyBytes) may hold a previous segment's bytes; the
	// next borrow clears them. Owned by whoever holds the buffer (the
	// channel hand-over orders the accesses).
	dirtyBytes int64
}

// pool is RocketMQ's TransientStorePool: a fixed set of anonymous, populated
// and (unless NoLock) mlocked buffers, allocated once and reused for the life
// of the store. The free list is a buffered channel, so a borrower can wait on
// it together with a context and a timer.
//
// A borrowed buffer is all zeros, as a fresh fallocated file is: a segment
// writes [committed, wrote) of its buffer to the file, and an encoder that
// does not fill its whole reservation (the 8-byte BLANK that pads a
// segment's tail) must leave zeros there, never another segment's messages.
// So the borrow clears what the previous borrower wrote ([0, dirtyBytes)):
// that costs a memclr of up to a segment per roll, paid by Open — normally
// the allocation service, preallocating ahead of the roll — not by Append.
type pool struct {
	segmentSizeBytes int64
	buffers          []*poolBuffer // all of them, for Close
	free             chan *poolBuffer
	whenEmpty        WhenEmpty
	borrowTimeout    time.Duration
	locked           bool

	closing   atomic.Bool
	closeOnce sync.Once
	closed    chan struct{} // closed by Close: wakes waiting borrowers
	unmapMu   sync.Mutex
	unmapped  bool

	borrows        atomic.Int64
	borrowWaits    atomic.Int64
	borrowTimeouts atomic.Int64
	fallbacks      atomic.Int64
	returns        atomic.Int64
	bytesLocked    atomic.Int64
}

func newPool(opts Options) (*pool, error) {
	p := &pool{
		segmentSizeBytes: opts.SegmentSizeBytes,
		free:             make(chan *poolBuffer, opts.PoolSize),
		whenEmpty:        opts.WhenEmpty,
		borrowTimeout:    opts.BorrowTimeout,
		locked:           !opts.NoLock,
		closed:           make(chan struct{}),
	}
	totalBytes := int64(opts.PoolSize) * opts.SegmentSizeBytes
	for i := 0; i < opts.PoolSize; i++ {
		// In transparent huge pages where the kernel gives them: appends
		// walk through the whole buffer, and each new 4 KiB page would be a
		// TLB miss (see segfile.MapAnonymousHuge).
		page := int64(os.Getpagesize())
		data, err := segfile.MapAnonymousHuge(0, (opts.SegmentSizeBytes+page-1)/page*page)
		if err != nil {
			p.releaseAll()
			return nil, fmt.Errorf("transientpool: allocate buffer %d of %d (%d bytes each, %d in all): %w",
				i+1, opts.PoolSize, opts.SegmentSizeBytes, totalBytes, err)
		}
		data = data[:opts.SegmentSizeBytes:opts.SegmentSizeBytes]
		buf := &poolBuffer{data: data, index: i}
		p.buffers = append(p.buffers, buf)
		if p.locked {
			if err := segfile.Mlock(data); err != nil {
				p.releaseAll()
				what := fmt.Sprintf("transientpool: lock buffer %d of %d (%d bytes each; set Options.NoLock to run unlocked, at the risk of swapping)",
					i+1, opts.PoolSize, opts.SegmentSizeBytes)
				return nil, segfile.MemlockError(what, totalBytes, err)
			}
			buf.locked = true
			p.bytesLocked.Add(int64(len(data)))
		}
		p.free <- buf
	}
	return p, nil
}

// borrow takes a free buffer. When none is free it returns (nil, nil) under
// FallbackMmap, or waits up to borrowTimeout (and ctx) under Wait.
func (p *pool) borrow(ctx context.Context) (*poolBuffer, error) {
	if p.closing.Load() {
		return nil, fmt.Errorf("transientpool: borrow: %w", mappedfile.ErrClosed)
	}
	select {
	case buf := <-p.free:
		return p.took(buf)
	default:
	}
	if p.whenEmpty == FallbackMmap {
		p.fallbacks.Add(1)
		return nil, nil
	}
	p.borrowWaits.Add(1)
	timer := time.NewTimer(p.borrowTimeout)
	defer timer.Stop()
	select {
	case buf := <-p.free:
		return p.took(buf)
	case <-ctx.Done():
		return nil, fmt.Errorf("transientpool: waiting for a free buffer: %w", ctx.Err())
	case <-p.closed:
		return nil, fmt.Errorf("transientpool: waiting for a free buffer: %w", mappedfile.ErrClosed)
	case <-timer.C:
		p.borrowTimeouts.Add(1)
		return nil, fmt.Errorf("transientpool: all %d buffers borrowed for %v (raise PoolSize, lower the commit interval so full segments return their buffers sooner, or use WhenEmpty=FallbackMmap): %w",
			len(p.buffers), p.borrowTimeout, ErrPoolExhausted)
	}
}

// took finishes a borrow; a buffer taken while Close runs goes straight back.
func (p *pool) took(buf *poolBuffer) (*poolBuffer, error) {
	if p.closing.Load() {
		p.free <- buf
		return nil, fmt.Errorf("transientpool: borrow: %w", mappedfile.ErrClosed)
	}
	clear(buf.data[:buf.dirtyBytes])
	buf.dirtyBytes = 0
	p.borrows.Add(1)
	return buf, nil
}

// giveBack returns a borrowed buffer. It never blocks: the channel has room
// for every buffer.
func (p *pool) giveBack(buf *poolBuffer) {
	p.returns.Add(1)
	p.free <- buf
}

// close refuses new borrows and, when every buffer is back, munlocks and
// unmaps them. With buffers still out it returns ErrBuffersBorrowed and keeps
// them mapped; a later close finishes the job.
func (p *pool) close() error {
	p.closing.Store(true)
	p.closeOnce.Do(func() { close(p.closed) })
	p.unmapMu.Lock()
	defer p.unmapMu.Unlock()
	if p.unmapped {
		return nil
	}
	held := p.drainFree()
	if len(held) < len(p.buffers) {
		for _, buf := range held {
			p.free <- buf
		}
		return fmt.Errorf("transientpool: close: %d of %d buffers are still borrowed by open segment files; close or delete them first, then call Close again: %w",
			len(p.buffers)-len(held), len(p.buffers), ErrBuffersBorrowed)
	}
	p.unmapped = true
	return p.releaseAll()
}

// drainFree takes every buffer currently free, without waiting.
func (p *pool) drainFree() []*poolBuffer {
	held := make([]*poolBuffer, 0, len(p.buffers))
	for {
		select {
		case buf := <-p.free:
			held = append(held, buf)
		default:
			return held
		}
	}
}

// releaseAll munlocks and unmaps every buffer in p.buffers.
func (p *pool) releaseAll() error {
	var errs []error
	for _, buf := range p.buffers {
		if buf.locked {
			if err := segfile.Unlock(buf.data); err != nil {
				errs = append(errs, fmt.Errorf("transientpool: buffer %d: %w", buf.index, err))
			}
			buf.locked = false
			p.bytesLocked.Add(-int64(len(buf.data)))
		}
		if err := segfile.UnmapHuge(buf.data); err != nil {
			errs = append(errs, fmt.Errorf("transientpool: buffer %d: %w", buf.index, err))
		}
		buf.data = nil
	}
	return errors.Join(errs...)
}

func (p *pool) stats() Stats {
	return Stats{
		PoolSize:       len(p.buffers),
		BuffersFree:    len(p.free),
		Borrows:        p.borrows.Load(),
		BorrowWaits:    p.borrowWaits.Load(),
		BorrowTimeouts: p.borrowTimeouts.Load(),
		Fallbacks:      p.fallbacks.Load(),
		Returns:        p.returns.Load(),
		BytesLocked:    p.bytesLocked.Load(),
	}
}
