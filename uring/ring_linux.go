package uring

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// RingOptions sizes a ring.
type RingOptions struct {
	// Entries is the SQ size (the kernel rounds it up to a power of two);
	// 0 means 64. One Submit call carries at most this many requests.
	Entries uint32
	// CQEntries is the CQ size and so the most requests in flight at once
	// (the slot table has this many slots); 0 means 4 × Entries.
	CQEntries uint32
}

// Request is one operation to submit. Addr must point to memory the Go
// runtime never moves or frees (segfile.MapAnonymous or a registered
// buffer), and that memory must stay mapped until the completion arrives.
type Request struct {
	Opcode   uint8
	Flags    uint8  // Flag* (IOSQE_*)
	Fd       int32  // file descriptor, or registered file index with FlagFixedFile
	Offset   uint64 // file offset
	Addr     uint64 // buffer address
	Len      uint32 // buffer length
	OpFlags  uint32 // rw_flags (RWFDSync) or fsync_flags (FsyncDataSync)
	BufIndex uint16 // registered buffer index for OpReadFixed / OpWriteFixed
}

// Completion is a CQE's result: Res ≥ 0 is the operation's return value,
// Res < 0 a negated errno.
type Completion struct {
	Res   int32
	Flags uint32
}

// Err returns the errno of a failed operation, nil when Res ≥ 0.
func (c Completion) Err() error {
	if c.Res < 0 {
		return unix.Errno(-c.Res)
	}
	return nil
}

// Ticket names a submitted request until its completion is collected with
// Wait. It is the slot number the kernel carries in user_data.
type Ticket uint32

// ErrRingClosed is returned by a Submit on a closed ring.
var ErrRingClosed = fmt.Errorf("uring: ring closed: %w", mappedfile.ErrClosed)

// stopUserData marks the NOP that tells the reaper to exit; it is never a slot.
const stopUserData = ^uint64(0)

// maxBusyRetries bounds how often a submit retries EAGAIN/EBUSY before failing.
const maxBusyRetries = 10000

// Ring is an io_uring instance shared by many goroutines.
//
// Submission: any goroutine may Submit. A submitter first takes one slot per
// request from a fixed table (blocking while all are in flight, which keeps
// the requests in flight ≤ the CQ size, so the CQ cannot overflow), then,
// under submitMu, writes the SQEs, store-releases the SQ tail and calls
// io_uring_enter itself. The SQ is empty whenever submitMu is free.
//
// Completion: one reaper goroutine waits in io_uring_enter(GETEVENTS),
// load-acquires the CQ tail, copies each CQE out, store-releases the CQ head
// and hands each result to the channel of the slot named by user_data. Wait
// takes the result and returns the slot to the table. user_data is a slot
// number, never a Go pointer.
//
// SINGLE_ISSUER and DEFER_TASKRUN are not used: they bind the ring to one
// OS thread, and here submitters are arbitrary goroutines.
type Ring struct {
	fd        int
	features  uint32
	sqEntries uint32
	cqEntries uint32

	ringMem []byte // SQ ring (and CQ ring with FeatSingleMmap)
	cqMem   []byte // CQ ring when mapped apart, else nil
	sqeMem  []byte // the SQE array

	sqHead, sqTail, sqFlags *uint32
	sqMask                  uint32
	cqHead, cqTail          *uint32
	cqMask                  uint32
	cqes                    []byte

	submitMu sync.Mutex // guards the SQ tail and the SQE array

	acquireMu sync.Mutex  // one goroutine at a time gathers slots
	free      chan uint32 // free slot numbers
	slots     []chan Completion

	cqMu       sync.Mutex // guards the CQ head: the reaper, or a submitter reaping on EBUSY
	reaperDone chan struct{}
	closed     atomic.Bool

	supported [256]bool // opcodes from IORING_REGISTER_PROBE
}

// NewRing creates a ring. When io_uring is unavailable the error wraps
// mappedfile.ErrUnsupported, says why (seccomp, sysctl, kernel) and names
// the backends to use instead.
func NewRing(opts RingOptions) (*Ring, error) {
	entries := opts.Entries
	if entries == 0 {
		entries = 64
	}
	cqEntries := opts.CQEntries
	if cqEntries == 0 {
		cqEntries = 4 * entries
	}
	if cqEntries < entries {
		return nil, fmt.Errorf("uring: CQ entries %d below SQ entries %d: %w", cqEntries, entries, mappedfile.ErrInvalidArgument)
	}
	var p params
	fd, err := setupRing(entries, cqEntries, &p)
	if err != nil {
		return nil, err
	}
	r := &Ring{fd: fd, features: p.features, sqEntries: p.sqEntries, cqEntries: p.cqEntries}
	if err := r.mapRings(&p); err != nil {
		r.unmap()
		unix.Close(fd)
		return nil, err
	}
	if err := r.probeOps(); err != nil {
		r.unmap()
		unix.Close(fd)
		return nil, err
	}
	r.free = make(chan uint32, r.cqEntries)
	r.slots = make([]chan Completion, r.cqEntries)
	for i := range r.slots {
		r.slots[i] = make(chan Completion, 1)
		r.free <- uint32(i)
	}
	r.reaperDone = make(chan struct{})
	go r.reap()
	return r, nil
}

// setupRing calls io_uring_setup, dropping SUBMIT_ALL on kernels that do
// not know it, and classifies a refusal.
func setupRing(entries, cqEntries uint32, p *params) (int, error) {
	flags := []uint32{setupCQSize | setupClamp | setupSubmitAll, setupCQSize | setupClamp}
	var errno unix.Errno
	for _, f := range flags {
		*p = params{flags: f, cqEntries: cqEntries}
		fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(p)), 0)
		if e == 0 {
			return int(fd), nil
		}
		errno = e
		if e != unix.EINVAL {
			break
		}
	}
	return -1, classifySetupError(errno, readIOUringDisabled())
}

func (r *Ring) mapRings(p *params) error {
	sqSize := int(p.sqOff.array + p.sqEntries*4)
	cqSize := int(p.cqOff.cqes + p.cqEntries*uint32(unsafe.Sizeof(cqe{})))
	const prot, flags = unix.PROT_READ | unix.PROT_WRITE, unix.MAP_SHARED | unix.MAP_POPULATE
	var err error
	if p.features&FeatSingleMmap != 0 {
		r.ringMem, err = unix.Mmap(r.fd, offSQRing, max(sqSize, cqSize), prot, flags)
		if err != nil {
			return fmt.Errorf("uring: mmap rings (%d bytes): %w", max(sqSize, cqSize), err)
		}
	} else {
		if r.ringMem, err = unix.Mmap(r.fd, offSQRing, sqSize, prot, flags); err != nil {
			return fmt.Errorf("uring: mmap SQ ring: %w", err)
		}
		if r.cqMem, err = unix.Mmap(r.fd, offCQRing, cqSize, prot, flags); err != nil {
			return fmt.Errorf("uring: mmap CQ ring: %w", err)
		}
	}
	sqeSize := int(p.sqEntries) * int(unsafe.Sizeof(sqe{}))
	if r.sqeMem, err = unix.Mmap(r.fd, offSQEs, sqeSize, prot, flags); err != nil {
		return fmt.Errorf("uring: mmap SQEs: %w", err)
	}
	sq, cq := r.ringMem, r.ringMem
	if r.cqMem != nil {
		cq = r.cqMem
	}
	r.sqHead = word(sq, p.sqOff.head)
	r.sqTail = word(sq, p.sqOff.tail)
	r.sqFlags = word(sq, p.sqOff.flags)
	r.sqMask = *word(sq, p.sqOff.ringMask)
	r.cqHead = word(cq, p.cqOff.head)
	r.cqTail = word(cq, p.cqOff.tail)
	r.cqMask = *word(cq, p.cqOff.ringMask)
	r.cqes = cq[p.cqOff.cqes:cqSize]
	// SQE i always sits in SQ array slot i: fill the indirection once.
	for i := uint32(0); i < p.sqEntries; i++ {
		*word(sq, p.sqOff.array+4*i) = i
	}
	return nil
}

// word returns the uint32 at off in mapped ring memory.
func word(mem []byte, off uint32) *uint32 {
	return (*uint32)(unsafe.Pointer(&mem[off]))
}

func (r *Ring) unmap() {
	for _, m := range [][]byte{r.sqeMem, r.cqMem, r.ringMem} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	r.sqeMem, r.cqMem, r.ringMem = nil, nil, nil
}

// Features returns IORING_FEAT_* bits the kernel reported.
func (r *Ring) Features() uint32 { return r.features }

// SQEntries and CQEntries return the sizes the kernel chose.
func (r *Ring) SQEntries() uint32 { return r.sqEntries }

// CQEntries is the CQ size: the most requests in flight.
func (r *Ring) CQEntries() uint32 { return r.cqEntries }

// Supports reports whether the kernel supports opcode op (IORING_REGISTER_PROBE).
func (r *Ring) Supports(op uint8) bool { return r.supported[op] }

// Submit queues reqs as one batch (in order and contiguous, so IOSQE_IO_LINK
// chains stay intact) and writes one ticket per request into tickets. It
// blocks while the slot table is full, until ctx is done. Every ticket
// must be collected with Wait. On error no ticket is outstanding: requests
// the kernel had already taken were waited for inside Submit.
func (r *Ring) Submit(ctx context.Context, reqs []Request, tickets []Ticket) error {
	n := len(reqs)
	if n == 0 {
		return nil
	}
	if n > int(r.sqEntries) || len(tickets) < n {
		return fmt.Errorf("uring: submit of %d requests (SQ has %d entries, %d tickets): %w",
			n, r.sqEntries, len(tickets), mappedfile.ErrInvalidArgument)
	}
	tickets = tickets[:n]
	if err := r.acquire(ctx, tickets); err != nil {
		return err
	}
	r.submitMu.Lock()
	consumed, err := r.pushLocked(reqs, tickets)
	r.submitMu.Unlock()
	if err != nil {
		for _, t := range tickets[:consumed] {
			r.Wait(t)
		}
		for _, t := range tickets[consumed:] {
			r.free <- uint32(t)
		}
		return err
	}
	return nil
}

// Wait blocks until the request named by t completes and returns its result.
// It does not take a context on purpose: the kernel may still be reading the
// request's buffer, so its owner must not move on before the completion.
func (r *Ring) Wait(t Ticket) Completion {
	c := <-r.slots[t]
	r.free <- uint32(t)
	return c
}

// acquire fills out with free slots; the caller owns them until Wait.
func (r *Ring) acquire(ctx context.Context, out []Ticket) error {
	r.acquireMu.Lock()
	defer r.acquireMu.Unlock()
	if r.closed.Load() {
		return ErrRingClosed
	}
	for i := range out {
		select {
		case s := <-r.free:
			out[i] = Ticket(s)
			continue
		default:
		}
		select {
		case s := <-r.free:
			out[i] = Ticket(s)
		case <-ctx.Done():
			for _, t := range out[:i] {
				r.free <- uint32(t)
			}
			return fmt.Errorf("uring: waiting for a free slot: %w", ctx.Err())
		}
	}
	return nil
}

// pushLocked writes the SQEs, publishes them and enters the kernel until
// all are consumed. It returns how many the kernel took. On failure the
// SQEs the kernel did not take are withdrawn (the tail is moved back, which
// is safe because only this goroutine submits and the reaper enters with
// to_submit = 0), so the SQ is empty again when submitMu is released.
func (r *Ring) pushLocked(reqs []Request, tickets []Ticket) (int, error) {
	tail := atomic.LoadUint32(r.sqTail)
	head := atomic.LoadUint32(r.sqHead)
	if tail != head {
		panic("uring: SQ not empty at the start of a submit")
	}
	for i := range reqs {
		r.writeSQE(tail+uint32(i), &reqs[i], uint64(tickets[i]))
	}
	n := uint32(len(reqs))
	// Store-release: the kernel sees the SQEs before the new tail.
	atomic.StoreUint32(r.sqTail, tail+n)
	err := r.enterSubmit(tail, n)
	consumed := atomic.LoadUint32(r.sqHead) - tail
	if err != nil && consumed < n {
		atomic.StoreUint32(r.sqTail, tail+consumed)
		return int(consumed), fmt.Errorf("uring: io_uring_enter submitted %d of %d: %w", consumed, n, err)
	}
	return int(n), nil
}

func (r *Ring) writeSQE(pos uint32, q *Request, userData uint64) {
	idx := uintptr(pos & r.sqMask)
	e := (*sqe)(unsafe.Pointer(&r.sqeMem[idx*unsafe.Sizeof(sqe{})]))
	*e = sqe{
		opcode:   q.Opcode,
		flags:    q.Flags,
		fd:       q.Fd,
		off:      q.Offset,
		addr:     q.Addr,
		len:      q.Len,
		opFlags:  q.OpFlags,
		userData: userData,
		bufIndex: q.BufIndex,
	}
}

// enterSubmit calls io_uring_enter until the kernel has consumed the n SQEs
// published after tail: EINTR is retried; EAGAIN and EBUSY (no memory for
// requests, or completions backed up) reap what is ready and retry.
func (r *Ring) enterSubmit(tail, n uint32) error {
	busy := 0
	for {
		left := n - (atomic.LoadUint32(r.sqHead) - tail)
		if left == 0 {
			return nil
		}
		_, err := r.enter(left, 0, 0)
		switch {
		case err == nil:
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EBUSY):
			if busy++; busy > maxBusyRetries {
				return err
			}
			r.reapReady()
			runtime.Gosched()
		default:
			return err
		}
	}
}

// enter is io_uring_enter(2). Syscall6, not RawSyscall: it may block, and the
// scheduler must be told so other goroutines keep running.
func (r *Ring) enter(toSubmit, minComplete, flags uint32) (int, error) {
	n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit),
		uintptr(minComplete), uintptr(flags), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// reap is the reaper goroutine: it delivers completions until it sees the
// stop NOP that Close submits once every slot is back.
func (r *Ring) reap() {
	defer close(r.reaperDone)
	for {
		r.cqMu.Lock()
		n, stop := r.drainLocked()
		r.cqMu.Unlock()
		if stop {
			return
		}
		if n > 0 {
			continue
		}
		// Waiting also flushes an overflowed CQ back into the ring.
		_, err := r.enter(0, 1, enterGetEvents)
		if err != nil && !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EBUSY) {
			// Only a broken ring (a closed fd) gets here: a programmer error.
			panic(fmt.Sprintf("uring: io_uring_enter(GETEVENTS) on ring fd %d: %v", r.fd, err))
		}
	}
}

// reapReady delivers the completions already in the CQ, without waiting.
func (r *Ring) reapReady() {
	r.cqMu.Lock()
	r.drainLocked()
	r.cqMu.Unlock()
	if atomic.LoadUint32(r.sqFlags)&sqCQOverflow != 0 {
		// Ask the kernel to move overflowed completions into the CQ.
		_, _ = r.enter(0, 0, enterGetEvents)
	}
}

// drainLocked delivers every CQE between head and tail. cqMu must be held.
func (r *Ring) drainLocked() (delivered int, stop bool) {
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail) // load-acquire: CQEs up to tail are written
	for ; head != tail; head++ {
		off := uintptr(head&r.cqMask) * unsafe.Sizeof(cqe{})
		c := *(*cqe)(unsafe.Pointer(&r.cqes[off]))
		if c.userData == stopUserData {
			stop = true
			continue
		}
		if c.userData >= uint64(len(r.slots)) {
			panic(fmt.Sprintf("uring: completion with user_data %#x outside the slot table", c.userData))
		}
		select {
		case r.slots[c.userData] <- Completion{Res: c.res, Flags: c.flags}:
		default:
			panic(fmt.Sprintf("uring: second completion for slot %d", c.userData))
		}
		delivered++
	}
	// Store-release: the kernel may reuse the CQEs only after we copied them.
	atomic.StoreUint32(r.cqHead, head)
	return delivered, stop
}

// Close waits until every slot is back (so nothing is in flight), stops the
// reaper, unmaps the rings and closes the ring. Requests whose tickets are
// never collected with Wait make Close wait forever.
func (r *Ring) Close() error {
	if !r.closed.CompareAndSwap(false, true) {
		return ErrRingClosed
	}
	r.acquireMu.Lock()
	for range r.cqEntries {
		<-r.free
	}
	r.acquireMu.Unlock()
	r.submitMu.Lock()
	tail := atomic.LoadUint32(r.sqTail)
	r.writeSQE(tail, &Request{Opcode: OpNop}, stopUserData)
	atomic.StoreUint32(r.sqTail, tail+1)
	err := r.enterSubmit(tail, 1)
	r.submitMu.Unlock()
	if err != nil {
		return fmt.Errorf("uring: submit the stop request: %w", err)
	}
	<-r.reaperDone
	r.unmap()
	if err := unix.Close(r.fd); err != nil {
		return fmt.Errorf("uring: close ring: %w", err)
	}
	return nil
}
