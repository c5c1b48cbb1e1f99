package uring

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/mqstore/mqstore/internal/segfile"
)

// stagingBuffer is off-heap memory a segment appends into. Its index is
// its slot in the ring's registered-buffer table (fixed, when the pool
// registered it).
type stagingBuffer struct {
	mem   []byte
	index int
	fixed bool // registered: write it with WRITE_FIXED
}

// stagingPool lends segment-sized, off-heap buffers (RocketMQ's
// TransientStorePool). It holds at most maxBuffers, so the memory is
// bounded by maxBuffers × the largest segment size; a buffer is mapped
// (MAP_POPULATE) the first time it is needed and reused after, and replaced
// only when a larger segment needs it. Borrowing blocks while all are lent.
//
// Buffers are registered with the ring (a sparse table, one slot per
// buffer) when the kernel allows it, so commits use WRITE_FIXED without
// per-request page pinning; when registration fails (RLIMIT_MEMLOCK) the
// buffer is still off-heap and written with plain WRITE.
//
// A registered buffer's pages are pinned by the kernel: the pool never
// madvise(DONTNEED)s them (that would make the mapping and the pinned pages
// diverge).
type stagingPool struct {
	ring   *Ring
	tokens chan int // free slot numbers; a slot is lent while its token is out
	table  bool     // the sparse buffer table is registered

	mu    sync.Mutex
	slots []stagingBuffer // by slot number; mem nil until first needed
}

func newStagingPool(r *Ring, maxBuffers int) *stagingPool {
	p := &stagingPool{ring: r, tokens: make(chan int, maxBuffers), slots: make([]stagingBuffer, maxBuffers)}
	for i := range maxBuffers {
		p.slots[i].index = i
		p.tokens <- i
	}
	p.table = r.RegisterBufferTable(maxBuffers) == nil
	return p
}

// borrow lends a buffer of at least size bytes, waiting for one to be
// returned until ctx is done. zero clears the bytes the borrower will see
// (a reused buffer holds an earlier segment's data).
func (p *stagingPool) borrow(ctx context.Context, size int64, zero bool) (*stagingBuffer, error) {
	var slot int
	select {
	case slot = <-p.tokens:
	default:
		select {
		case slot = <-p.tokens:
		case <-ctx.Done():
			return nil, fmt.Errorf("uring: waiting for a staging buffer (all %d are lent): %w", cap(p.tokens), ctx.Err())
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b := &p.slots[slot]
	if int64(len(b.mem)) >= size {
		if zero {
			clear(b.mem[:size])
		}
		return b, nil
	}
	if err := p.replaceLocked(b, size); err != nil {
		p.tokens <- slot
		return nil, err
	}
	return b, nil
}

// replaceLocked maps a new buffer of size bytes into b's slot.
func (p *stagingPool) replaceLocked(b *stagingBuffer, size int64) error {
	if b.mem != nil {
		if b.fixed {
			if err := p.ring.UpdateBuffer(b.index, nil); err != nil {
				return err
			}
		}
		if err := segfile.Unmap(b.mem); err != nil {
			return fmt.Errorf("uring: staging buffer: %w", err)
		}
		b.mem, b.fixed = nil, false
	}
	mem, err := segfile.MapAnonymous(size)
	if err != nil {
		return fmt.Errorf("uring: staging buffer: %w", err)
	}
	b.mem = mem
	b.fixed = p.table && size <= 1<<30 && p.ring.UpdateBuffer(b.index, mem) == nil
	return nil
}

// giveBack returns a buffer to the pool.
func (p *stagingPool) giveBack(b *stagingBuffer) {
	p.tokens <- b.index
}

// close unmaps every buffer. It fails, changing nothing, while a buffer is
// lent (a file is still open).
func (p *stagingPool) close() error {
	taken := 0
	for range cap(p.tokens) {
		select {
		case slot := <-p.tokens:
			defer func() { p.tokens <- slot }()
			taken++
		default:
		}
	}
	if lent := cap(p.tokens) - taken; lent > 0 {
		return fmt.Errorf("uring: %d staging buffers are still lent: close every file first: %w", lent, errBusy)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	for i := range p.slots {
		if p.slots[i].mem != nil {
			if err := segfile.Unmap(p.slots[i].mem); err != nil && first == nil {
				first = err
			}
			p.slots[i].mem = nil
		}
	}
	return first
}

// errBusy says a resource is still in use.
var errBusy = errors.New("in use")
