package uring

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// newTestRing returns a ring or skips the test saying why io_uring cannot run.
func newTestRing(t testing.TB, opts RingOptions) *Ring {
	t.Helper()
	r, err := NewRing(opts)
	if errors.Is(err, mappedfile.ErrUnsupported) {
		testenv.Skip(t, testenv.Uring, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("close ring: %v", err)
		}
	})
	return r
}

// offHeap returns n bytes of anonymous memory unmapped at the end of the test.
func offHeap(t testing.TB, n int) []byte {
	t.Helper()
	b, err := segfile.MapAnonymous(int64(n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = segfile.Unmap(b) })
	return b
}

func addr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

// do submits reqs as one batch and returns their completions.
func do(t testing.TB, r *Ring, reqs ...Request) []Completion {
	t.Helper()
	tickets := make([]Ticket, len(reqs))
	if err := r.Submit(context.Background(), reqs, tickets); err != nil {
		t.Fatalf("submit: %v", err)
	}
	out := make([]Completion, len(reqs))
	for i, tk := range tickets {
		out[i] = r.Wait(tk)
	}
	return out
}

func tempFile(t testing.TB) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func TestRingSetupFeatures(t *testing.T) {
	r := newTestRing(t, RingOptions{Entries: 8})
	if r.SQEntries() < 8 || r.CQEntries() != 4*r.SQEntries() {
		t.Fatalf("SQ %d CQ %d, want SQ ≥ 8 and CQ = 4×SQ", r.SQEntries(), r.CQEntries())
	}
	for _, feat := range []uint32{FeatSingleMmap, FeatNoDrop} {
		if r.Features()&feat == 0 {
			t.Errorf("kernel %s lacks feature %#x", kernelRelease(), feat)
		}
	}
	for _, op := range []uint8{OpNop, OpWriteFixed, OpReadFixed, OpFsync, OpRead, OpWrite} {
		if !r.Supports(op) {
			t.Errorf("probe says opcode %d unsupported", op)
		}
	}
	if r.Supports(255) {
		t.Errorf("probe claims opcode 255")
	}
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "?"
	}
	return unix.ByteSliceToString(u.Release[:])
}

func TestNopRoundTrip(t *testing.T) {
	r := newTestRing(t, RingOptions{Entries: 4})
	for i := range 100 { // more than the slot table: slots are reused
		c := do(t, r, Request{Opcode: OpNop})
		if c[0].Res != 0 {
			t.Fatalf("NOP %d: res %d", i, c[0].Res)
		}
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	r := newTestRing(t, RingOptions{Entries: 8})
	f := tempFile(t)
	fd := int32(f.Fd())
	const n = 3 * 4096
	src, dst := offHeap(t, n), offHeap(t, n)
	copy(src, pattern(n, 1))
	if c := do(t, r, Request{Opcode: OpWrite, Fd: fd, Offset: 4096, Addr: addr(src), Len: n}); c[0].Res != n {
		t.Fatalf("WRITE: res %d", c[0].Res)
	}
	if c := do(t, r, Request{Opcode: OpRead, Fd: fd, Offset: 4096, Addr: addr(dst), Len: n}); c[0].Res != n {
		t.Fatalf("READ: res %d", c[0].Res)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("READ returned other bytes than WRITE wrote")
	}
	onDisk := make([]byte, n)
	if _, err := f.ReadAt(onDisk, 4096); err != nil || !bytes.Equal(onDisk, src) {
		t.Fatalf("pread after WRITE: %v, equal %v", err, bytes.Equal(onDisk, src))
	}
}

func TestFixedBuffersRoundTrip(t *testing.T) {
	r := newTestRing(t, RingOptions{Entries: 8})
	f := tempFile(t)
	fd := int32(f.Fd())
	const n = 64 << 10
	bufs := [][]byte{offHeap(t, n), offHeap(t, n)}
	if err := r.RegisterBuffers(bufs); err != nil {
		t.Fatal(err)
	}
	copy(bufs[0], pattern(n, 9))
	// Write from the middle of buffer 0: the address may be anywhere inside it.
	w := bufs[0][4096:]
	if c := do(t, r, Request{Opcode: OpWriteFixed, Fd: fd, Addr: addr(w), Len: uint32(len(w)), BufIndex: 0}); c[0].Res != int32(len(w)) {
		t.Fatalf("WRITE_FIXED: res %d (%v)", c[0].Res, c[0].Err())
	}
	if c := do(t, r, Request{Opcode: OpReadFixed, Fd: fd, Addr: addr(bufs[1]), Len: uint32(len(w)), BufIndex: 1}); c[0].Res != int32(len(w)) {
		t.Fatalf("READ_FIXED: res %d (%v)", c[0].Res, c[0].Err())
	}
	if !bytes.Equal(bufs[1][:len(w)], w) {
		t.Fatal("READ_FIXED returned other bytes than WRITE_FIXED wrote")
	}
	// An address outside the registered buffer is refused by the kernel.
	other := offHeap(t, 4096)
	if c := do(t, r, Request{Opcode: OpWriteFixed, Fd: fd, Addr: addr(other), Len: 4096, BufIndex: 0}); c[0].Res != -int32(unix.EFAULT) {
		t.Fatalf("WRITE_FIXED outside the buffer: res %d, want -EFAULT", c[0].Res)
	}
	if err := r.UnregisterBuffers(); err != nil {
		t.Fatal(err)
	}
}

func TestBufferTableUpdate(t *testing.T) {
	r := newTestRing(t, RingOptions{Entries: 8})
	if err := r.RegisterBufferTable(4); err != nil {
		testenv.Skip(t, testenv.Uring, "a sparse buffer table (Linux 5.19+): %v", err)
	}
	f := tempFile(t)
	buf := offHeap(t, 8192)
	copy(buf, pattern(8192, 3))
	req := Request{Opcode: OpWriteFixed, Fd: int32(f.Fd()), Addr: addr(buf), Len: 8192, BufIndex: 2}
	if c := do(t, r, req); c[0].Res >= 0 {
		t.Fatalf("WRITE_FIXED through an empty slot: res %d, want an error", c[0].Res)
	}
	if err := r.UpdateBuffer(2, buf); err != nil {
		t.Fatal(err)
	}
	if c := do(t, r, req); c[0].Res != 8192 {
		t.Fatalf("WRITE_FIXED after update: res %d (%v)", c[0].Res, c[0].Err())
	}
	if err := r.UpdateBuffer(2, nil); err != nil {
		t.Fatal(err)
	}
}

func TestFixedFiles(t *testing.T) {
	r := newTestRing(t, RingOptions{Entries: 8})
	f1, f2 := tempFile(t), tempFile(t)
	if err := r.RegisterFiles([]int32{int32(f1.Fd()), -1}); err != nil {
		t.Fatal(err)
	}
	if err := r.UpdateFiles(1, []int32{int32(f2.Fd())}); err != nil {
		t.Fatal(err)
	}
	buf := offHeap(t, 4096)
	copy(buf, pattern(4096, 5))
	for i, f := range []*os.File{f1, f2} {
		c := do(t, r, Request{Opcode: OpWrite, Flags: FlagFixedFile, Fd: int32(i), Addr: addr(buf), Len: 4096})
		if c[0].Res != 4096 {
			t.Fatalf("WRITE to fixed file %d: res %d (%v)", i, c[0].Res, c[0].Err())
		}
		got := make([]byte, 4096)
		if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, buf) {
			t.Fatalf("fixed file %d holds other bytes (%v)", i, err)
		}
	}
	if err := r.UnregisterFiles(); err != nil {
		t.Fatal(err)
	}
}

func TestLinkedWriteThenFsync(t *testing.T) {
	r := newTestRing(t, RingOptions{Entries: 8})
	f := tempFile(t)
	buf := offHeap(t, 4096)
	copy(buf, pattern(4096, 2))
	c := do(t, r,
		Request{Opcode: OpWrite, Flags: FlagIOLink, Fd: int32(f.Fd()), Addr: addr(buf), Len: 4096},
		Request{Opcode: OpFsync, Fd: int32(f.Fd()), OpFlags: FsyncDataSync})
	if c[0].Res != 4096 || c[1].Res != 0 {
		t.Fatalf("write→fsync chain: %+v", c)
	}
	// A failing head breaks the chain: the fsync completes with -ECANCELED.
	ro, err := os.Open(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	c = do(t, r,
		Request{Opcode: OpWrite, Flags: FlagIOLink, Fd: int32(ro.Fd()), Addr: addr(buf), Len: 4096},
		Request{Opcode: OpFsync, Fd: int32(ro.Fd()), OpFlags: FsyncDataSync})
	if !errors.Is(c[0].Err(), unix.EBADF) || !errors.Is(c[1].Err(), unix.ECANCELED) {
		t.Fatalf("write to a read-only fd → fsync: %v, %v; want EBADF then ECANCELED", c[0].Err(), c[1].Err())
	}
}

func TestBurstLargerThanCQ(t *testing.T) {
	r := newTestRing(t, RingOptions{Entries: 4, CQEntries: 8})
	const goroutines, perGoroutine = 16, 200
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs := make([]Request, 4)
			tickets := make([]Ticket, 4)
			for i := 0; i < perGoroutine; {
				k := 1 + (g+i)%4
				for j := range k {
					reqs[j] = Request{Opcode: OpNop}
				}
				if err := r.Submit(context.Background(), reqs[:k], tickets[:k]); err != nil {
					errs <- err
					return
				}
				for _, tk := range tickets[:k] {
					if c := r.Wait(tk); c.Res != 0 {
						errs <- fmt.Errorf("NOP res %d", c.Res)
						return
					}
				}
				i += k
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a completion was lost: submitters still waiting after 30 s")
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestSubmitWaitsForSlotsWithContext(t *testing.T) {
	r := newTestRing(t, RingOptions{Entries: 2, CQEntries: 2})
	tickets := make([]Ticket, 2)
	ctx := context.Background()
	if err := r.Submit(ctx, []Request{{Opcode: OpNop}, {Opcode: OpNop}}, tickets); err != nil {
		t.Fatal(err)
	}
	// Every slot is out: a third request waits, and gives up with its ctx.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	one := make([]Ticket, 1)
	if err := r.Submit(short, []Request{{Opcode: OpNop}}, one); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("submit with no free slot: %v, want DeadlineExceeded", err)
	}
	r.Wait(tickets[0])
	r.Wait(tickets[1])
	if err := r.Submit(ctx, []Request{{Opcode: OpNop}}, one); err != nil {
		t.Fatal(err)
	}
	r.Wait(one[0])
	if err := r.Submit(ctx, make([]Request, 3), make([]Ticket, 3)); !errors.Is(err, mappedfile.ErrInvalidArgument) {
		t.Fatalf("a batch larger than the SQ: %v, want ErrInvalidArgument", err)
	}
}

func TestConcurrentSubmitters(t *testing.T) {
	r := newTestRing(t, RingOptions{Entries: 16})
	f := tempFile(t)
	const writers, rounds, n = 8, 50, 4096
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		src, dst := offHeap(t, n), offHeap(t, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			tickets := make([]Ticket, 2)
			for i := range rounds {
				copy(src, pattern(n, byte(g*rounds+i)))
				off := uint64((g*rounds + i) * n)
				reqs := []Request{
					{Opcode: OpWrite, Flags: FlagIOLink, Fd: int32(f.Fd()), Offset: off, Addr: addr(src), Len: n},
					{Opcode: OpRead, Fd: int32(f.Fd()), Offset: off, Addr: addr(dst), Len: n},
				}
				if err := r.Submit(context.Background(), reqs, tickets); err != nil {
					errs <- err
					return
				}
				cw, cr := r.Wait(tickets[0]), r.Wait(tickets[1])
				if cw.Res != n || cr.Res != n {
					errs <- fmt.Errorf("writer %d round %d: write %d read %d", g, i, cw.Res, cr.Res)
					return
				}
				if !bytes.Equal(src, dst) {
					errs <- fmt.Errorf("writer %d round %d: read back other bytes", g, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestShortWriteToPipeResubmitted gets real short writes from the kernel: a
// non-blocking attempt to write 256 KiB into an empty 64 KiB pipe writes
// what fits and completes short; the writer resubmits the rest until the
// reader has drained everything.
func TestShortWriteToPipeResubmitted(t *testing.T) {
	r := newTestRing(t, RingOptions{Entries: 8})
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	capacity, err := unix.FcntlInt(uintptr(p[1]), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 4 * capacity
	src := offHeap(t, n)
	copy(src, pattern(n, 11))
	w := newWriter(r, 1, int64(n))
	type result struct {
		end int64
		err error
	}
	res := make(chan result, 1)
	go func() {
		end, err := w.write(context.Background(), writeTarget{fd: int32(p[1]), bufIndex: -1, align: 1}, []extent{{0, src}})
		res <- result{end, err}
	}()
	// Start reading only once the pipe is full, so the first attempt cannot
	// be served whole.
	deadline := time.Now().Add(10 * time.Second)
	for {
		queued, err := unix.IoctlGetInt(p[0], unix.TIOCINQ)
		if err != nil {
			t.Fatal(err)
		}
		if queued == capacity {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pipe never filled: %d of %d bytes queued", queued, capacity)
		}
		time.Sleep(time.Millisecond) // polling a kernel counter, nothing to wait on
	}
	got := make([]byte, 0, n)
	chunk := make([]byte, 32<<10)
	for len(got) < n {
		m, err := unix.Read(p[0], chunk)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, chunk[:m]...)
	}
	out := <-res
	if out.err != nil || out.end != int64(n) {
		t.Fatalf("write: end %d, %v; want %d, nil", out.end, out.err, n)
	}
	if w.shortWrites < 1 {
		t.Fatalf("no short write was resubmitted (the test needs the kernel to complete the first pipe write short)")
	}
	if !bytes.Equal(got, src) {
		t.Fatalf("the reader got other bytes (equal prefix %d of %d)", commonPrefix(got, src), n)
	}
	t.Logf("%d short writes resubmitted", w.shortWrites)
}

func commonPrefix(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// TestShortWriteRegularFile runs in a child process with RLIMIT_FSIZE set
// below the write: the kernel writes up to the limit and completes short;
// the writer resubmits the rest at the right offset, which then fails with
// EFBIG (SIGXFSZ is ignored by the Go runtime).
func TestShortWriteRegularFile(t *testing.T) {
	const limit = 10000
	if os.Getenv("MQSTORE_URING_FSIZE_CHILD") == "1" {
		shortWriteChild(t, limit)
		return
	}
	cmd := exec(t, "^TestShortWriteRegularFile$", "MQSTORE_URING_FSIZE_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CHILD-OK") {
		if strings.Contains(string(out), "needs io_uring") {
			testenv.Skip(t, testenv.Uring, "child: %s", out)
		}
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func shortWriteChild(t *testing.T, limit int) {
	r := newTestRing(t, RingOptions{Entries: 8})
	f := tempFile(t)
	lim := unix.Rlimit{Cur: uint64(limit)}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	lim.Max = old.Max
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	const n = 16384
	src := offHeap(t, n)
	copy(src, pattern(n, 4))
	w := newWriter(r, 4, 4096)
	end, err := w.write(context.Background(), writeTarget{fd: int32(f.Fd()), bufIndex: -1, align: 1}, []extent{{0, src}})
	if !errors.Is(err, unix.EFBIG) {
		t.Fatalf("write past RLIMIT_FSIZE: %v, want EFBIG", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("[%d,", limit)) {
		t.Fatalf("the failing request is not the resubmitted rest at %d: %v", limit, err)
	}
	if w.shortWrites != 1 {
		t.Fatalf("short writes resubmitted: %d, want 1", w.shortWrites)
	}
	if end != 8192 {
		t.Fatalf("written prefix %d, want 8192 (the pieces before the one crossing the limit)", end)
	}
	st, _ := f.Stat()
	if st.Size() != int64(limit) {
		t.Fatalf("file size %d, want %d", st.Size(), limit)
	}
	fmt.Println("CHILD-OK")
}

func TestCloseWithNothingInFlight(t *testing.T) {
	r, err := NewRing(RingOptions{Entries: 4})
	if errors.Is(err, mappedfile.ErrUnsupported) {
		testenv.Skip(t, testenv.Uring, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	do(t, r, Request{Opcode: OpNop})
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Submit(context.Background(), []Request{{Opcode: OpNop}}, make([]Ticket, 1)); !errors.Is(err, mappedfile.ErrClosed) {
		t.Fatalf("submit after close: %v, want ErrClosed", err)
	}
	if err := r.Close(); !errors.Is(err, mappedfile.ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
}

// TestRequestsOfAnExitedThreadComplete: the kernel ties a request to the
// thread that submitted it, and when that thread exits (here: a goroutine
// that ends while locked to it) its queued io-wq work and the rest of its
// link chains are cancelled. Every request must still complete with its
// real result and the data must reach the file.
func TestRequestsOfAnExitedThreadComplete(t *testing.T) {
	cases := []struct {
		name   string
		direct bool
		flags  uint8 // extra SQE flags on every write
		link   bool  // write → write → … → fsync as one chain
	}{
		{"buffered/async", false, FlagAsync, false},
		{"buffered/chain", false, 0, true},
		{"buffered/async-chain", false, FlagAsync, true},
		{"direct/async", true, FlagAsync, false},
		{"direct/chain", true, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newTestRing(t, RingOptions{Entries: 64})
			flags := os.O_RDWR | os.O_CREATE
			if c.direct {
				flags |= unix.O_DIRECT
			}
			f, err := os.OpenFile(filepath.Join(t.TempDir(), "f"), flags, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			const n, size = 32, 256 << 10
			buf := offHeap(t, n*size)
			copy(buf, pattern(n*size, 6))
			reqs := make([]Request, 0, n+1)
			for i := range n {
				q := Request{Opcode: OpWrite, Flags: c.flags, Fd: int32(f.Fd()), Offset: uint64(i * size), Addr: addr(buf[i*size:]), Len: size}
				if c.link {
					q.Flags |= FlagIOLink
				}
				reqs = append(reqs, q)
			}
			reqs = append(reqs, Request{Opcode: OpFsync, Fd: int32(f.Fd()), OpFlags: FsyncDataSync})
			tickets := make([]Ticket, len(reqs))
			submitted := make(chan error)
			go func() {
				runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
				submitted <- r.Submit(context.Background(), reqs, tickets)
			}()
			if err := <-submitted; err != nil {
				t.Fatal(err)
			}
			for i, tk := range tickets {
				want := int32(size)
				if i == n {
					want = 0
				}
				if got := r.Wait(tk); got.Res != want {
					t.Errorf("request %d (opcode %d): res %d (%v), want %d", i, reqs[i].Opcode, got.Res, got.Err(), want)
				}
			}
			onDisk := make([]byte, n*size)
			if _, err := f.ReadAt(onDisk, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(onDisk, buf) {
				t.Fatalf("file differs at %d", commonPrefix(onDisk, buf))
			}
			t.Logf("requests submitted again after a kernel cancellation: %d", r.Rescued())
		})
	}
}

// TestWritersDoNotHoldAndWait: many writers share one ring whose slot table
// is smaller than their windows together (16 × depth 64 against 256
// slots). A writer that held slots and blocked for more would wait for the
// others doing the same, for ever.
func TestWritersDoNotHoldAndWait(t *testing.T) {
	r := newTestRing(t, RingOptions{Entries: 64})
	const writers, depth, piece, total = 16, 64, 4096, 2 << 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		f := tempFile(t)
		src := offHeap(t, total)
		copy(src, pattern(total, byte(g)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := newWriter(r, depth, piece)
			for round := range 4 {
				end, err := w.write(context.Background(), writeTarget{fd: int32(f.Fd()), bufIndex: -1, align: 1}, []extent{{0, src}})
				if err != nil || end != total {
					errs <- fmt.Errorf("writer %d round %d: end %d, %v", g, round, end, err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("writers still blocked after a minute: hold-and-wait on the slot table")
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestRingSurvivesUnexpectedErrno: the reaper meets an errno it cannot
// recover from (its ring fd now names /dev/null: EOPNOTSUPP). The process
// must not crash: the request it was waiting for is still delivered, later
// submissions fail with an error naming the errno, and Close returns.
func TestRingSurvivesUnexpectedErrno(t *testing.T) {
	r, err := NewRing(RingOptions{Entries: 4})
	if errors.Is(err, mappedfile.ErrUnsupported) {
		testenv.Skip(t, testenv.Uring, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	dst := offHeap(t, 8)
	tickets := make([]Ticket, 1)
	// A read that waits for the pipe: the reaper sleeps in the kernel.
	if err := r.Submit(context.Background(), []Request{{Opcode: OpRead, Fd: int32(p[0]), Addr: addr(dst), Len: 8}}, tickets); err != nil {
		t.Fatal(err)
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	keep, err := unix.Dup(r.fd) // keeps the ring alive
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(keep)
	if err := unix.Dup3(int(devNull.Fd()), r.fd, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(p[1], []byte("12345678")); err != nil {
		t.Fatal(err)
	}
	// The reaper wakes for the read, delivers it, and enters again: on /dev/null.
	if c := r.Wait(tickets[0]); c.Res != 8 {
		t.Fatalf("the read completed with %d (%v), want 8", c.Res, c.Err())
	}
	deadline := time.Now().Add(30 * time.Second)
	for r.Err() == nil && time.Now().Before(deadline) {
		runtime.Gosched() // the reaper reports the errno on its next enter
	}
	err = r.Submit(context.Background(), []Request{{Opcode: OpNop}}, tickets)
	if !errors.Is(err, ErrRingBroken) && !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("submit on a broken ring: %v, want an error naming the errno", err)
	}
	if err == nil {
		r.Wait(tickets[0])
	}
	t.Logf("reported: %v", err)
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close of a broken ring hangs")
	}
}

// TestRegisterAtManyStackDepths runs every register call from stack depths
// around a stack growth (the goroutine's stack is copied, and any address
// of a stack variable taken before is stale): the arguments the kernel
// reads must not live on the Go stack, so every call still registers what
// it was asked to.
func TestRegisterAtManyStackDepths(t *testing.T) {
	r := newTestRing(t, RingOptions{Entries: 8})
	if err := r.RegisterBufferTable(2); err != nil {
		t.Fatalf("sparse buffer table: %v", err)
	}
	f1, f2 := tempFile(t), tempFile(t)
	if err := r.RegisterFiles([]int32{int32(f1.Fd()), -1}); err != nil {
		t.Fatal(err)
	}
	buf := offHeap(t, 4096)
	for depth := range 64 {
		done := make(chan error, 1)
		go func() { done <- atDepth(depth, func() error { return registerRound(t, r, buf, f2, byte(depth)) }) }()
		if err := <-done; err != nil {
			t.Fatalf("depth %d: %v", depth, err)
		}
	}
}

// atDepth calls fn below depth frames of 512 bytes each.
func atDepth(depth int, fn func() error) error {
	var pad [512]byte
	pad[depth%512] = byte(depth)
	if depth == 0 {
		return fn()
	}
	if err := atDepth(depth-1, fn); err != nil {
		return err
	}
	return nil
}

func registerRound(t *testing.T, r *Ring, buf []byte, f *os.File, seed byte) error {
	if err := r.UpdateBuffer(1, buf); err != nil {
		return err
	}
	if err := r.UpdateFiles(1, []int32{int32(f.Fd())}); err != nil {
		return err
	}
	copy(buf, pattern(4096, seed))
	tickets := make([]Ticket, 1)
	q := Request{Opcode: OpWriteFixed, Flags: FlagFixedFile, Fd: 1, Addr: addr(buf), Len: 4096, BufIndex: 1}
	if err := r.Submit(context.Background(), []Request{q}, tickets); err != nil {
		return err
	}
	if c := r.Wait(tickets[0]); c.Res != 4096 {
		return fmt.Errorf("WRITE_FIXED through the updated buffer and file: res %d (%v)", c.Res, c.Err())
	}
	got := make([]byte, 4096)
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, buf) {
		return fmt.Errorf("the fixed file holds other bytes (%v)", err)
	}
	return r.UpdateBuffer(1, nil)
}
