package uring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/mqstore/mqstore/internal/segfile"
	"golang.org/x/sys/unix"
)

// pageSize is the memory page size: staging rings and their pieces are
// mapped in whole pages.
var pageSize = int64(os.Getpagesize())

// stagingBuffer is the off-heap memory one segment appends into while it is
// written: a ring of ringBytes holding the segment's bytes that are not yet
// readable from the file. Before the ring sit a bounce page (the
// zero-padded tail block of an O_DIRECT commit) and an iovec page (the
// iovec arrays of vectored writes). Layout, each piece page aligned, the
// ring on a huge-page boundary:
//
//	[bounce][iovecs][ring ……………]
//
// The ring is anonymous memory backed by transparent huge pages where the
// kernel gives them (segfile.MapAnonymousHuge): appends and commits walk
// through all of it, and in 4 KiB pages every new page costs a TLB miss —
// on a virtual machine a two-dimensional page walk, in the appender's copy
// and in the kernel's page pinning of each commit alike. An append that
// wraps round the ring's end is encoded into wrapScratch and copied in two
// pieces; reads and commits take the two pieces as they are.
//
// The bounce page, the iovec page and the ring are one registered buffer
// when the kernel allows it.
type stagingBuffer struct {
	all       []byte // the whole mapping
	bounce    []byte
	iovecs    []byte
	ring      []byte // ringBytes
	ringBytes int64
	hugeBytes int64 // bytes of the ring in transparent huge pages
	index     int   // slot in the ring's buffer table
	fixed     bool  // registered: usable with the *_FIXED opcodes
	// wrapScratch is where an append that wraps is encoded (grown to the
	// largest such append, then reused: appends of one buffer are serial).
	wrapScratch []byte
}

// registered returns the registered span (bounce, iovecs, ring).
func (b *stagingBuffer) registered() []byte {
	return b.all
}

// wrapBuffer returns n bytes of the buffer's wrap scratch.
func (b *stagingBuffer) wrapBuffer(n int) []byte {
	if cap(b.wrapScratch) < n {
		b.wrapScratch = make([]byte, n)
	}
	return b.wrapScratch[:n:n]
}

// mapStaging maps a staging buffer with a ring of ringBytes (a multiple of
// the page size), populated now, so appends do not fault.
func mapStaging(ringBytes int64) (*stagingBuffer, error) {
	if ringBytes <= 0 || ringBytes%pageSize != 0 {
		return nil, fmt.Errorf("uring: staging ring of %d bytes: not a positive multiple of the page size %d", ringBytes, pageSize)
	}
	all, err := segfile.MapAnonymousHuge(2*pageSize, ringBytes)
	if err != nil {
		return nil, fmt.Errorf("uring: staging buffer of %d bytes: %w", ringBytes, err)
	}
	b := &stagingBuffer{all: all, ringBytes: ringBytes}
	b.bounce = all[:pageSize:pageSize]
	b.iovecs = all[pageSize : 2*pageSize : 2*pageSize]
	b.ring = all[2*pageSize:]
	b.hugeBytes, _ = segfile.HugeBytes(b.ring) // 0 when smaps cannot be read: reported as such
	return b, nil
}

func (b *stagingBuffer) unmap() error {
	if b.all == nil {
		return nil
	}
	err := segfile.UnmapHuge(b.all)
	b.all, b.ring, b.bounce, b.iovecs, b.wrapScratch = nil, nil, nil, nil, nil
	if err != nil {
		return fmt.Errorf("uring: unmap a staging buffer: %w", err)
	}
	return nil
}

// maxRegisteredBytes is the kernel's limit on one registered buffer.
const maxRegisteredBytes = 1 << 30

// stagingPool lends staging buffers, one per segment being written
// (RocketMQ's TransientStorePool, but sized for what is in flight rather
// than for a whole segment). It holds at most maxBuffers; a buffer is
// mapped the first time it is needed, with a ring of the size the pool was
// asked for (at most Options.StagingBytes), and reused after — never
// cleared: appends clear what they reserve, and no byte past the write
// position ever reaches a file.
//
// Buffers are registered with the ring (a sparse table, one slot per
// buffer) when the kernel allows it: each must stay within the kernel's
// 1 GiB per buffer, and, without CAP_IPC_LOCK, all of them within
// RLIMIT_MEMLOCK. When registration fails the pool either refuses
// (Options.RequireRegistered) with an error that says which limit and how
// to raise it, or logs once and writes those buffers with the plain
// opcodes; Info reports which.
//
// A registered buffer's pages are pinned by the kernel: the pool never
// madvise(DONTNEED)s them.
type stagingPool struct {
	ring     *Ring
	logger   *slog.Logger
	require  bool
	maxRing  int64
	tokens   chan int // free slot numbers; a slot is lent while its token is out
	table    bool     // the sparse buffer table is registered
	tableErr error

	mu         sync.Mutex
	slots      []*stagingBuffer // by slot number; nil until first needed
	notReg     string
	memlock    int64
	pinned     int64
	warnedOnce bool
}

func newStagingPool(r *Ring, maxBuffers int, maxRing int64, require bool, logger *slog.Logger) *stagingPool {
	p := &stagingPool{ring: r, logger: logger, require: require, maxRing: maxRing,
		tokens: make(chan int, maxBuffers), slots: make([]*stagingBuffer, maxBuffers), memlock: memlockLimit()}
	for i := range maxBuffers {
		p.tokens <- i
	}
	if p.tableErr = r.RegisterBufferTable(maxBuffers); p.tableErr == nil {
		p.table = true
	}
	return p
}

// ringBytesFor is the ring a segment of sizeBytes needs: the whole segment
// when it is smaller than the pool's maximum, else the maximum; a multiple
// of the page size (and so of any O_DIRECT block this backend accepts).
func (p *stagingPool) ringBytesFor(sizeBytes int64) int64 {
	n := (sizeBytes + pageSize - 1) / pageSize * pageSize
	return min(n, p.maxRing)
}

// borrow lends a buffer whose ring has at least ringBytes, waiting for one
// to be returned until ctx is done.
func (p *stagingPool) borrow(ctx context.Context, ringBytes int64) (*stagingBuffer, error) {
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
	if b := p.slots[slot]; b != nil && b.ringBytes >= ringBytes {
		return b, nil
	}
	b, err := p.replaceLocked(slot, ringBytes)
	if err != nil {
		p.tokens <- slot
		return nil, err
	}
	return b, nil
}

// replaceLocked maps a new buffer with a ring of ringBytes into slot.
func (p *stagingPool) replaceLocked(slot int, ringBytes int64) (*stagingBuffer, error) {
	if old := p.slots[slot]; old != nil {
		if old.fixed {
			if err := p.ring.UpdateBuffer(slot, nil); err != nil {
				return nil, err
			}
			p.pinned -= int64(len(old.registered()))
		}
		if err := old.unmap(); err != nil {
			return nil, err
		}
		p.slots[slot] = nil
	}
	b, err := mapStaging(ringBytes)
	if err != nil {
		return nil, err
	}
	b.index = slot
	if err := p.registerLocked(b); err != nil {
		_ = b.unmap()
		return nil, err
	}
	p.slots[slot] = b
	return b, nil
}

// registerLocked registers b, or records why not (and fails when
// registration is required).
func (p *stagingPool) registerLocked(b *stagingBuffer) error {
	span := b.registered()
	var why error
	switch {
	case !p.table:
		why = fmt.Errorf("the kernel refused a sparse buffer table (IORING_REGISTER_BUFFERS2, Linux 5.19+): %w", p.tableErr)
	case len(span) > maxRegisteredBytes:
		why = fmt.Errorf("%d bytes exceed the kernel's 1 GiB limit for one registered buffer; lower StagingBytes", len(span))
	default:
		if err := p.ring.UpdateBuffer(b.index, span); err != nil {
			why = fmt.Errorf("%w (RLIMIT_MEMLOCK %s, %d bytes pinned already)", err, limitString(p.memlock), p.pinned)
		}
	}
	if why == nil {
		b.fixed = true
		p.pinned += int64(len(span))
		return nil
	}
	if p.require {
		return fmt.Errorf("uring: register a staging buffer (RequireRegistered): %w", why)
	}
	p.notReg = why.Error()
	if !p.warnedOnce {
		p.warnedOnce = true
		p.logger.Warn("uring: staging buffer not registered; writing it without fixed buffers (the kernel pins its pages per request)",
			slog.Any("reason", why))
	}
	return nil
}

// giveBack returns a buffer to the pool.
func (p *stagingPool) giveBack(b *stagingBuffer) {
	p.tokens <- b.index
}

// info reports the pool's state.
func (p *stagingPool) info() StagingInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	in := StagingInfo{Buffers: cap(p.tokens), RingBytes: p.maxRing, MemlockLimit: p.memlock, PinnedBytes: p.pinned}
	in.Registered = true
	for _, b := range p.slots {
		if b != nil {
			in.Mapped++
			in.RingBytes = b.ringBytes
			in.HugeBytes += b.hugeBytes
			in.Registered = in.Registered && b.fixed
		}
	}
	if in.Mapped == 0 {
		in.Registered = p.table
		if !p.table {
			in.NotRegistered = fmt.Sprintf("no sparse buffer table: %v", p.tableErr)
		}
	}
	if !in.Registered && in.NotRegistered == "" {
		in.NotRegistered = p.notReg
	}
	return in
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
	for i, b := range p.slots {
		if b != nil {
			if err := b.unmap(); err != nil && first == nil {
				first = err
			}
			p.slots[i] = nil
		}
	}
	return first
}

// errBusy says a resource is still in use.
var errBusy = errors.New("in use")

// memlockLimit returns RLIMIT_MEMLOCK (-1 for unlimited, 0 if unknown).
func memlockLimit() int64 {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) != nil {
		return 0
	}
	if lim.Cur == unix.RLIM_INFINITY {
		return -1
	}
	return int64(lim.Cur)
}

func limitString(n int64) string {
	switch {
	case n < 0:
		return "unlimited"
	case n == 0:
		return "unknown"
	}
	return fmt.Sprintf("%d bytes", n)
}
