package uring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
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
	// Logger receives the ring's rare error reports (a broken ring, a
	// resubmitted request); nil means slog.Default().
	Logger *slog.Logger
}

// Request is one operation to submit. Addr must point to memory the Go
// runtime never moves or frees (segfile.MapAnonymous, a staging buffer),
// and that memory must stay mapped until the completion arrives. For
// OpWritev and OpWritevFixed, Addr is an array of Len iovecs in such
// memory.
type Request struct {
	Opcode   uint8
	Flags    uint8  // Flag* (IOSQE_*)
	Fd       int32  // file descriptor, or registered file index with FlagFixedFile
	Offset   uint64 // file offset
	Addr     uint64 // buffer address
	Len      uint32 // buffer length (iovec count for the vectored opcodes)
	OpFlags  uint32 // rw_flags (RWFDSync) or fsync_flags (FsyncDataSync)
	BufIndex uint16 // registered buffer index for the *_FIXED opcodes
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

// ErrRingBroken is wrapped by the errors of a ring whose io_uring_enter
// failed with an errno it cannot recover from (see Ring).
var ErrRingBroken = errors.New("uring: ring broken")

// stopUserData marks the NOP that tells the reaper to exit; it is never a slot.
const stopUserData = ^uint64(0)

// maxBusyRetries bounds how often a submit retries EAGAIN/EBUSY before failing.
const maxBusyRetries = 10000

// maxRescues bounds how often one request is submitted again after the
// kernel cancelled it on its own (see Ring).
const maxRescues = 3

// brokenDrainFor bounds how long a broken ring keeps collecting the
// completions of requests already in the kernel before failing them.
const brokenDrainFor = 5 * time.Second

// Ring is an io_uring instance shared by many goroutines.
//
// Submission: any goroutine may Submit. A submitter first takes one slot per
// request from a fixed table (blocking while all are in flight, which keeps
// the requests in flight ≤ the CQ size, so the CQ cannot overflow), then,
// under submitMu, writes the SQEs, store-releases the SQ tail and calls
// io_uring_enter itself. The SQ is empty whenever submitMu is free. A
// caller that already holds tickets must not block for more (every holder
// could be waiting for the others): it uses TrySubmit and, when that finds
// no room, waits for its own oldest ticket first.
//
// Completion: one reaper goroutine waits in io_uring_enter(GETEVENTS),
// load-acquires the CQ tail, copies each CQE out, store-releases the CQ head
// and hands each result to the channel of the slot named by user_data; then
// it yields (runtime.Gosched), so the goroutine it just readied runs on its
// P at once instead of waiting for the scheduler to take the P back from
// the reaper's next blocking io_uring_enter. Wait takes the result and
// returns the slot to the table. user_data is a slot number, never a Go
// pointer.
//
// Requests cancelled by the kernel on its own: the kernel ties a request to
// the thread that submitted it. When that thread exits (a goroutine that
// ends while locked with runtime.LockOSThread ends its thread — and any Go
// thread may be the one such a goroutine locks), its pending io-wq work and
// the rest of its link chains complete with -ECANCELED without having run.
// This package never cancels a request, so the reaper treats such a
// -ECANCELED (on a request outside a chain, or in a chain whose earlier
// members all completed in full) as "never ran" and submits the request —
// or the rest of its chain — again from the ring's rescue goroutine, which
// stays locked to its own thread for the ring's whole life. Writes and
// fsyncs are idempotent, so even a request that did run is safe to repeat.
// Submitting everything from one dedicated thread would avoid the case
// altogether but costs a thread hand-off on every request (measured: a
// direct 4 KiB RWF_DSYNC write 20–60 % slower on a loaded 2-core VM).
//
// A broken ring: if the reaper's io_uring_enter fails with an errno other
// than EINTR, EAGAIN and EBUSY, the ring is broken: the error is logged
// once, every later Submit returns it (wrapping ErrRingBroken and the
// errno), and the requests still in the kernel are waited for (reading the
// CQ without entering the kernel) for brokenDrainFor and then completed
// with that errno.
//
// SINGLE_ISSUER and DEFER_TASKRUN are not used: they bind the ring to one
// OS thread, and here submitters are arbitrary goroutines.
type Ring struct {
	fd        int
	features  uint32
	sqEntries uint32
	cqEntries uint32
	logger    *slog.Logger

	ringMem []byte // SQ ring (and CQ ring with FeatSingleMmap)
	cqMem   []byte // CQ ring when mapped apart, else nil
	sqeMem  []byte // the SQE array

	sqHead, sqTail, sqFlags *uint32
	sqMask                  uint32
	cqHead, cqTail          *uint32
	cqMask                  uint32
	cqes                    []byte

	submitMu sync.Mutex // guards the SQ tail and the SQE array

	acquireMu sync.Mutex  // one blocking Submit at a time gathers slots
	free      chan uint32 // free slot numbers
	slots     []chan Completion
	// meta describes each slot's request for the reaper: written by the
	// slot's owner before it publishes the SQE, read by the reaper after
	// the completion. published orders the two for the Go memory model.
	meta      []slotMeta
	published atomic.Uint64
	inKernel  []atomic.Bool // the kernel holds the slot's request

	cqMu       sync.Mutex // guards the CQ head and the chain state in meta
	reaperDone chan struct{}
	stop       chan struct{} // closed by Close for a broken ring's reaper
	closed     atomic.Bool
	broken     atomic.Pointer[error]

	// The rescue goroutine submits requests the kernel cancelled (see
	// Ring); started on first use.
	rescueOnce sync.Once
	rescueCh   chan []uint32
	rescueDone chan struct{}
	rescued    atomic.Int64

	// regMu guards scratch, off-heap memory for io_uring_register
	// arguments: the kernel must never read Go heap or stack memory
	// through an address stored in a struct.
	regMu   sync.Mutex
	scratch []byte

	supported [256]bool // opcodes from IORING_REGISTER_PROBE
}

// slotMeta is what the reaper needs to know about a slot's request to
// tell a kernel-initiated cancellation from a broken link chain.
type slotMeta struct {
	req      Request
	prev     int32 // slot of the previous member of its link chain, or -1
	next     int32 // slot of the next member, or -1
	head     int32 // slot of the chain's first member (itself when alone)
	waiting  int32 // at the head: members whose completion has not arrived
	res      Completion
	rescues  int32
	hardlink bool
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
	r := &Ring{fd: fd, features: p.features, sqEntries: p.sqEntries, cqEntries: p.cqEntries, logger: opts.Logger}
	if r.logger == nil {
		r.logger = slog.Default()
	}
	fail := func(err error) (*Ring, error) {
		r.unmap()
		unix.Close(fd)
		return nil, err
	}
	if err := r.mapRings(&p); err != nil {
		return fail(err)
	}
	if r.scratch, err = unix.Mmap(-1, 0, scratchBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
		return fail(fmt.Errorf("uring: map the ring's scratch memory: %w", err))
	}
	if err := r.probeOps(); err != nil {
		return fail(err)
	}
	r.free = make(chan uint32, r.cqEntries)
	r.slots = make([]chan Completion, r.cqEntries)
	r.meta = make([]slotMeta, r.cqEntries)
	r.inKernel = make([]atomic.Bool, r.cqEntries)
	for i := range r.slots {
		r.slots[i] = make(chan Completion, 1)
		r.free <- uint32(i)
	}
	r.reaperDone = make(chan struct{})
	r.stop = make(chan struct{})
	go r.reap()
	return r, nil
}

// scratchBytes is the size of the ring's off-heap register-argument memory.
const (
	scratchBytes    = 64 << 10
	scratchArgsFrom = 0
)

// call runs a register operation with the scratch memory to itself.
func (r *Ring) call(fn func() error) error {
	r.regMu.Lock()
	defer r.regMu.Unlock()
	if r.closed.Load() {
		return ErrRingClosed
	}
	return fn()
}

// sysSetup is io_uring_setup(2). It is a variable so that a test can make
// setup fail with a chosen errno (the "io_uring unavailable" paths) without
// changing anything outside its own process; nothing else assigns it.
var sysSetup = func(entries uint32, p *params) (int, unix.Errno) {
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(p)), 0)
	return int(fd), e
}

// setupRing calls io_uring_setup, dropping SUBMIT_ALL on kernels that do
// not know it, and classifies a refusal.
func setupRing(entries, cqEntries uint32, p *params) (int, error) {
	flags := []uint32{setupCQSize | setupClamp | setupSubmitAll, setupCQSize | setupClamp}
	var errno unix.Errno
	for _, f := range flags {
		*p = params{flags: f, cqEntries: cqEntries}
		fd, e := sysSetup(entries, p)
		if e == 0 {
			return fd, nil
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
	for _, m := range [][]byte{r.sqeMem, r.cqMem, r.ringMem, r.scratch} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	r.sqeMem, r.cqMem, r.ringMem, r.scratch = nil, nil, nil, nil
}

// Features returns IORING_FEAT_* bits the kernel reported.
func (r *Ring) Features() uint32 { return r.features }

// SQEntries and CQEntries return the sizes the kernel chose.
func (r *Ring) SQEntries() uint32 { return r.sqEntries }

// CQEntries is the CQ size: the most requests in flight.
func (r *Ring) CQEntries() uint32 { return r.cqEntries }

// Supports reports whether the kernel supports opcode op (IORING_REGISTER_PROBE).
func (r *Ring) Supports(op uint8) bool { return r.supported[op] }

// Err returns the error that broke the ring, or nil.
func (r *Ring) Err() error {
	if p := r.broken.Load(); p != nil {
		return *p
	}
	return nil
}

// Rescued returns how many requests the ring submitted again after the
// kernel cancelled them on its own (see Ring).
func (r *Ring) Rescued() int64 { return r.rescued.Load() }

// Submit queues reqs as one batch (in order and contiguous, so IOSQE_IO_LINK
// chains stay intact) and writes one ticket per request into tickets. It
// blocks while the slot table is full, until ctx is done: call it only while
// holding no uncollected ticket (see TrySubmit). Every ticket must be
// collected with Wait. On error no ticket is outstanding: requests the
// kernel had already taken were waited for inside Submit.
func (r *Ring) Submit(ctx context.Context, reqs []Request, tickets []Ticket) error {
	n, err := r.checkBatch(reqs, tickets)
	if n == 0 || err != nil {
		return err
	}
	if err := r.acquire(ctx, tickets[:n]); err != nil {
		return err
	}
	return r.push(reqs, tickets[:n])
}

// TrySubmit is Submit without blocking for slots: when fewer than len(reqs)
// slots are free it submits nothing and returns false. A caller that holds
// tickets uses it and, on false, waits for its own oldest ticket before
// trying again, so that slot holders never wait for each other.
func (r *Ring) TrySubmit(reqs []Request, tickets []Ticket) (bool, error) {
	n, err := r.checkBatch(reqs, tickets)
	if n == 0 || err != nil {
		return err == nil, err
	}
	if r.closed.Load() {
		return false, ErrRingClosed
	}
	if !r.tryAcquire(tickets[:n]) {
		return false, nil
	}
	return true, r.push(reqs, tickets[:n])
}

func (r *Ring) checkBatch(reqs []Request, tickets []Ticket) (int, error) {
	n := len(reqs)
	if n == 0 {
		return 0, nil
	}
	if n > int(r.sqEntries) || len(tickets) < n {
		return 0, fmt.Errorf("uring: submit of %d requests (SQ has %d entries, %d tickets): %w",
			n, r.sqEntries, len(tickets), mappedfile.ErrInvalidArgument)
	}
	if err := r.Err(); err != nil {
		return 0, err
	}
	return n, nil
}

// push submits a batch whose slots are taken.
func (r *Ring) push(reqs []Request, tickets []Ticket) error {
	r.describe(reqs, tickets)
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

// describe records each slot's request and link chain for the reaper.
func (r *Ring) describe(reqs []Request, tickets []Ticket) {
	head := int32(-1)
	for i := range reqs {
		s := int32(tickets[i])
		m := &r.meta[s]
		m.req = reqs[i]
		m.rescues = 0
		m.waiting = 0
		m.res = Completion{}
		m.hardlink = reqs[i].Flags&FlagIOHardLink != 0
		linked := reqs[i].Flags&(FlagIOLink|FlagIOHardLink) != 0
		m.prev, m.next = -1, -1
		if head >= 0 {
			m.prev = int32(tickets[i-1])
		} else {
			head = s
		}
		m.head = head
		if linked && i+1 < len(reqs) {
			m.next = int32(tickets[i+1])
		}
		r.meta[head].waiting++
		if !linked || i+1 == len(reqs) {
			head = -1 // the chain ends here
		}
	}
	r.published.Add(1)
}

// Wait blocks until the request named by t completes and returns its result.
// It does not take a context on purpose: the kernel may still be reading the
// request's buffer, so its owner must not move on before the completion.
func (r *Ring) Wait(t Ticket) Completion {
	c := <-r.slots[t]
	r.free <- uint32(t)
	return c
}

// waitKeep is Wait that keeps the slot: the caller resubmits on it
// (resubmit) or gives it back (release).
func (r *Ring) waitKeep(t Ticket) Completion { return <-r.slots[t] }

// release returns a slot kept by waitKeep.
func (r *Ring) release(t Ticket) { r.free <- uint32(t) }

// resubmit submits reqs on slots the caller holds (collected with waitKeep).
// On error the slots are still the caller's.
func (r *Ring) resubmit(reqs []Request, tickets []Ticket) error {
	if _, err := r.checkBatch(reqs, tickets); err != nil {
		return err
	}
	if r.closed.Load() {
		return ErrRingClosed
	}
	r.describe(reqs, tickets)
	r.submitMu.Lock()
	consumed, err := r.pushLocked(reqs, tickets)
	r.submitMu.Unlock()
	if err != nil {
		for _, t := range tickets[:consumed] {
			r.waitKeep(t)
		}
	}
	return err
}

// acquire fills out with free slots, waiting until ctx is done; the caller
// owns them until Wait. Gathering goes one caller at a time (acquireMu), so
// two gatherers never each hold part of what the other needs.
func (r *Ring) acquire(ctx context.Context, out []Ticket) error {
	if r.closed.Load() {
		return ErrRingClosed
	}
	if r.tryAcquire(out) {
		return nil
	}
	r.acquireMu.Lock()
	defer r.acquireMu.Unlock()
	for i := range out {
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

// tryAcquire takes len(out) slots if they are free now, else none.
func (r *Ring) tryAcquire(out []Ticket) bool {
	for i := range out {
		select {
		case s := <-r.free:
			out[i] = Ticket(s)
		default:
			for _, t := range out[:i] {
				r.free <- uint32(t)
			}
			return false
		}
	}
	return true
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
		r.inKernel[tickets[i]].Store(true)
	}
	n := uint32(len(reqs))
	// Store-release: the kernel sees the SQEs before the new tail.
	atomic.StoreUint32(r.sqTail, tail+n)
	err := r.enterSubmit(tail, n)
	consumed := atomic.LoadUint32(r.sqHead) - tail
	if err != nil && consumed < n {
		atomic.StoreUint32(r.sqTail, tail+consumed)
		for _, t := range tickets[consumed:] {
			r.inKernel[t].Store(false)
		}
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
		_, errno := sysEnter(r.fd, left, 0, 0)
		switch errno {
		case 0, unix.EINTR:
		case unix.EAGAIN, unix.EBUSY:
			if busy++; busy > maxBusyRetries {
				return errno
			}
			r.reapReady()
			runtime.Gosched()
		default:
			return errno
		}
	}
}

// sysEnter is io_uring_enter(2). Syscall6, not RawSyscall: it may block, and
// the scheduler must be told so other goroutines keep running.
func sysEnter(fd int, toSubmit, minComplete, flags uint32) (int, unix.Errno) {
	n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(fd), uintptr(toSubmit),
		uintptr(minComplete), uintptr(flags), 0, 0)
	return int(n), errno
}

// reap is the reaper goroutine: it delivers completions until it sees the
// stop NOP that Close submits once every slot is back. After delivering it
// yields, so the waiters it readied run now on this P rather than after the
// scheduler takes the P back from its next blocking io_uring_enter (a NOP
// round trip went from 14–21 µs to about 2.5 µs with the yield).
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
			runtime.Gosched()
			continue
		}
		// Waiting also flushes an overflowed CQ back into the ring.
		_, errno := sysEnter(r.fd, 0, 1, enterGetEvents)
		switch errno {
		case 0, unix.EINTR, unix.EAGAIN, unix.EBUSY:
		default:
			r.breakRing(errno)
			r.drainBroken()
			return
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
		_, _ = sysEnter(r.fd, 0, 0, enterGetEvents)
	}
}

// drainLocked delivers every CQE between head and tail. cqMu must be held.
func (r *Ring) drainLocked() (delivered int, stop bool) {
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail) // load-acquire: CQEs up to tail are written
	if head == tail {
		return 0, false
	}
	r.published.Load() // every SQE the kernel completed was described before this
	for ; head != tail; head++ {
		off := uintptr(head&r.cqMask) * unsafe.Sizeof(cqe{})
		c := *(*cqe)(unsafe.Pointer(&r.cqes[off]))
		if c.userData == stopUserData {
			stop = true
			continue
		}
		if c.userData >= uint64(len(r.slots)) {
			r.logger.Error("uring: completion outside the slot table, dropped", slog.Uint64("user_data", c.userData), slog.Int("res", int(c.res)))
			continue
		}
		r.complete(uint32(c.userData), Completion{Res: c.res, Flags: c.flags})
		delivered++
	}
	// Store-release: the kernel may reuse the CQEs only after we copied them.
	atomic.StoreUint32(r.cqHead, head)
	return delivered, stop
}

// complete routes one completion: straight to its waiter, or, for a member
// of a link chain, held until the whole chain has completed, so that a
// chain the kernel cancelled on its own can be submitted again as a chain.
func (r *Ring) complete(s uint32, c Completion) {
	m := &r.meta[s]
	r.inKernel[s].Store(false)
	if m.prev < 0 && m.next < 0 {
		if c.Res == -int32(unix.ECANCELED) && m.rescues < maxRescues && r.Err() == nil {
			r.rescue([]uint32{s})
			return
		}
		r.deliver(s, c)
		return
	}
	m.res = c
	h := &r.meta[m.head]
	if h.waiting--; h.waiting > 0 {
		return
	}
	// The whole chain is in: find where the kernel cut it on its own.
	cut := int32(-1)
	for t := m.head; t >= 0; t = r.meta[t].next {
		tm := &r.meta[t]
		if tm.res.Res == -int32(unix.ECANCELED) && tm.rescues < maxRescues && r.Err() == nil {
			cut = t
			break
		}
		if !completedInFull(tm) && !tm.hardlink {
			break // a real failure or a short result: later cancellations are the link's
		}
	}
	// Walk the chain before delivering anything: a delivered slot goes back
	// to its waiter, who frees it, and a submitter may describe it again
	// (its next link included) while this loop would still be reading it.
	var again []uint32
	var members [16]uint32
	chain := members[:0]
	for t := m.head; t >= 0; t = r.meta[t].next {
		chain = append(chain, uint32(t))
	}
	for _, t := range chain {
		if int32(t) == cut || len(again) > 0 {
			again = append(again, t)
			continue
		}
		r.deliver(t, r.meta[t].res)
	}
	if len(again) > 0 {
		r.rescue(again)
	}
}

// completedInFull reports whether a chain member succeeded without a short
// result (a short read or write also cuts an IOSQE_IO_LINK chain).
func completedInFull(m *slotMeta) bool {
	if m.res.Res < 0 {
		return false
	}
	want, ok := transferLength(&m.req)
	return !ok || int64(m.res.Res) == want
}

// transferLength is the byte count a read or write request asks for. For
// the vectored opcodes it is not known here (the iovecs are the caller's):
// a short vectored write followed by a cancelled link is then treated as a
// kernel cancellation and the rest of the chain submitted again, which is
// harmless for what this package chains (writes of the same bytes to the
// same offsets, and fsyncs).
func transferLength(q *Request) (int64, bool) {
	switch q.Opcode {
	case OpRead, OpWrite, OpReadFixed, OpWriteFixed, OpSend:
		return int64(q.Len), true
	}
	return 0, false
}

func (r *Ring) deliver(s uint32, c Completion) {
	select {
	case r.slots[s] <- c:
	default:
		r.logger.Error("uring: second completion for a slot, dropped", slog.Uint64("slot", uint64(s)), slog.Int("res", int(c.Res)))
	}
}

// rescue hands requests (a lone one, or the tail of a chain, in order) to
// the rescue goroutine, which submits them again from its own thread. cqMu
// is held.
func (r *Ring) rescue(slots []uint32) {
	r.rescueOnce.Do(func() {
		r.rescueCh = make(chan []uint32, r.cqEntries)
		r.rescueDone = make(chan struct{})
		go r.rescuer()
	})
	head := int32(slots[0])
	for i, s := range slots {
		m := &r.meta[s]
		m.rescues++
		m.head = head
		if i == 0 {
			m.prev = -1
		}
		m.res = Completion{}
	}
	r.meta[head].waiting = int32(len(slots))
	if r.rescued.Add(int64(len(slots))) == int64(len(slots)) {
		r.logger.Warn("uring: the kernel cancelled requests (their submitting thread ended?); submitting them again from the ring's own thread (logged once per ring; Ring.Rescued counts them)",
			slog.Int("requests", len(slots)), slog.Int("opcode", int(r.meta[head].req.Opcode)))
	}
	r.rescueCh <- slots
}

// rescuer submits cancelled requests again. It stays locked to its thread
// until the ring closes, so what it submits cannot be cancelled the same way.
func (r *Ring) rescuer() {
	runtime.LockOSThread()
	defer close(r.rescueDone)
	reqs := make([]Request, 0, r.sqEntries)
	tickets := make([]Ticket, 0, r.sqEntries)
	for slots := range r.rescueCh {
		reqs, tickets = reqs[:0], tickets[:0]
		for _, s := range slots {
			reqs = append(reqs, r.meta[s].req)
			tickets = append(tickets, Ticket(s))
		}
		r.published.Add(1)
		r.submitMu.Lock()
		consumed, err := r.pushLocked(reqs, tickets)
		r.submitMu.Unlock()
		if err != nil {
			r.logger.Error("uring: resubmitting cancelled requests failed", slog.Any("err", err))
			for _, t := range tickets[consumed:] {
				r.deliver(uint32(t), Completion{Res: -int32(unix.ECANCELED)})
			}
		}
	}
	// The ring is closing: nothing of ours is in flight. Returning while
	// locked ends this thread.
}

// breakRing records the errno that broke the ring.
func (r *Ring) breakRing(errno unix.Errno) {
	err := fmt.Errorf("%w: io_uring_enter(GETEVENTS) on ring fd %d: %w", ErrRingBroken, r.fd, errno)
	if r.broken.CompareAndSwap(nil, &err) {
		r.logger.Error("uring: ring broken; its requests fail from now on", slog.Any("err", err))
	}
}

// drainBroken is the reaper of a broken ring: it collects what the kernel
// still posts for the requests it had taken (reading the CQ without
// entering the kernel), fails those still missing after brokenDrainFor
// with the errno, and then waits for Close.
func (r *Ring) drainBroken() {
	var errno unix.Errno = unix.EIO
	errors.As(r.Err(), &errno)
	deadline := time.Now().Add(brokenDrainFor)
	for time.Now().Before(deadline) && r.outstanding() > 0 {
		r.cqMu.Lock()
		r.drainLocked()
		r.cqMu.Unlock()
		select {
		case <-r.stop:
		case <-time.After(time.Millisecond):
		}
	}
	r.cqMu.Lock()
	r.drainLocked()
	for s := range r.inKernel {
		if r.inKernel[s].Load() {
			r.inKernel[s].Store(false)
			r.deliver(uint32(s), Completion{Res: -int32(errno)})
		}
	}
	r.cqMu.Unlock()
	<-r.stop
}

func (r *Ring) outstanding() int {
	n := 0
	for s := range r.inKernel {
		if r.inKernel[s].Load() {
			n++
		}
	}
	return n
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
	if r.rescueCh != nil {
		r.cqMu.Lock() // no rescue can be under way: every slot is back
		close(r.rescueCh)
		r.cqMu.Unlock()
		<-r.rescueDone
	}
	var err error
	if r.Err() == nil {
		r.submitMu.Lock()
		tail := atomic.LoadUint32(r.sqTail)
		r.writeSQE(tail, &Request{Opcode: OpNop}, stopUserData)
		atomic.StoreUint32(r.sqTail, tail+1)
		if errno := r.enterSubmitStop(tail); errno != 0 {
			err = fmt.Errorf("uring: submit the stop request: %w", errno)
		}
		r.submitMu.Unlock()
	}
	if err != nil {
		// The reaper never got its stop and may still be in the kernel:
		// leave the ring mapped and open rather than pull memory from
		// under it.
		r.breakRing(unix.EIO)
		return err
	}
	close(r.stop)
	<-r.reaperDone
	r.unmap()
	if cerr := unix.Close(r.fd); cerr != nil {
		return fmt.Errorf("uring: close ring: %w", cerr)
	}
	return nil
}

func (r *Ring) enterSubmitStop(tail uint32) unix.Errno {
	if err := r.enterSubmit(tail, 1); err != nil {
		var errno unix.Errno
		if errors.As(err, &errno) {
			return errno
		}
		return unix.EIO
	}
	return 0
}
