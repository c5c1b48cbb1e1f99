package uring

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/mqstore/mqstore/internal/testenv"
	"golang.org/x/sys/unix"
)

// The benchmarks in this file measure how a durable append can reach the
// file — the choices behind the backends' commit and flush paths:
//
//	go test -run '^$' -bench 'Durable|CommitOnly' ./uring/
//
// Each iteration appends size bytes at the next offset of a 64 MiB file
// (fallocated, or pre-written with zeros) and makes them durable.

// durableFile creates a 64 MiB file, fallocated or written with zeros and
// synced, opened with extra flags (O_DIRECT).
func durableFile(b *testing.B, prewritten bool, extra int) *os.File {
	b.Helper()
	const size = 64 << 20
	path := filepath.Join(b.TempDir(), "f")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	if prewritten {
		zero := make([]byte, 1<<20)
		for off := int64(0); off < size; off += int64(len(zero)) {
			if _, err := f.WriteAt(zero, off); err != nil {
				b.Fatal(err)
			}
		}
	} else if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	if f, err = os.OpenFile(path, os.O_RDWR|extra, 0); err != nil {
		b.Fatal(err)
	}
	// Drop the file's pages so that every variant starts alike.
	_ = unix.Fadvise(int(f.Fd()), 0, size, unix.FADV_DONTNEED)
	b.Cleanup(func() { f.Close() })
	return f
}

type durableVariant struct {
	name string
	run  func(b *testing.B, f *os.File, buf []byte, size int)
}

func durableVariants() []durableVariant {
	return []durableVariant{
		{"pwrite+fdatasync", func(b *testing.B, f *os.File, buf []byte, size int) {
			fd := int(f.Fd())
			off := int64(0)
			for b.Loop() {
				if _, err := unix.Pwrite(fd, buf[:size], off); err != nil {
					b.Fatal(err)
				}
				if err := unix.Fdatasync(fd); err != nil {
					b.Fatal(err)
				}
				off = (off + int64(size)) % (60 << 20)
			}
		}},
		{"ring-write,ring-fsync", func(b *testing.B, f *os.File, buf []byte, size int) {
			r := newTestRing(b, RingOptions{Entries: 8})
			tk := make([]Ticket, 1)
			off := uint64(0)
			for b.Loop() {
				ringDo(b, r, tk, Request{Opcode: OpWrite, Fd: int32(f.Fd()), Offset: off, Addr: addr(buf), Len: uint32(size)})
				ringDo(b, r, tk, Request{Opcode: OpFsync, Fd: int32(f.Fd()), OpFlags: FsyncDataSync})
				off = (off + uint64(size)) % (60 << 20)
			}
		}},
		{"ring-write→fsync-linked", func(b *testing.B, f *os.File, buf []byte, size int) {
			r := newTestRing(b, RingOptions{Entries: 8})
			tk := make([]Ticket, 2)
			off := uint64(0)
			for b.Loop() {
				reqs := []Request{
					{Opcode: OpWrite, Flags: FlagIOLink, Fd: int32(f.Fd()), Offset: off, Addr: addr(buf), Len: uint32(size)},
					{Opcode: OpFsync, Fd: int32(f.Fd()), OpFlags: FsyncDataSync},
				}
				if err := r.Submit(context.Background(), reqs, tk); err != nil {
					b.Fatal(err)
				}
				if c0, c1 := r.Wait(tk[0]), r.Wait(tk[1]); c0.Res != int32(size) || c1.Res != 0 {
					b.Fatalf("linked write→fsync: %d, %d", c0.Res, c1.Res)
				}
				off = (off + uint64(size)) % (60 << 20)
			}
		}},
		{"ring-write-dsync", func(b *testing.B, f *os.File, buf []byte, size int) {
			r := newTestRing(b, RingOptions{Entries: 8})
			tk := make([]Ticket, 1)
			off := uint64(0)
			for b.Loop() {
				ringDo(b, r, tk, Request{Opcode: OpWrite, Fd: int32(f.Fd()), Offset: off, Addr: addr(buf), Len: uint32(size), OpFlags: RWFDSync})
				off = (off + uint64(size)) % (60 << 20)
			}
		}},
		{"pwritev2-dsync", func(b *testing.B, f *os.File, buf []byte, size int) {
			fd := int(f.Fd())
			off := int64(0)
			for b.Loop() {
				if _, err := unix.Pwritev2(fd, [][]byte{buf[:size]}, off, unix.RWF_DSYNC); err != nil {
					b.Fatal(err)
				}
				off = (off + int64(size)) % (60 << 20)
			}
		}},
		{"thread-ring-linked/plain", threadRingVariant(0)},
		{"thread-ring-linked/single-issuer+defer-taskrun", threadRingVariant(1<<12 | 1<<13)},
		{"thread-ring-linked/sqpoll", threadRingVariant(1 << 1)},
	}
}

func ringDo(b *testing.B, r *Ring, tk []Ticket, q Request) {
	if err := r.Submit(context.Background(), []Request{q}, tk[:1]); err != nil {
		b.Fatal(err)
	}
	if c := r.Wait(tk[0]); c.Res < 0 {
		b.Fatalf("opcode %d: %v", q.Opcode, c.Err())
	}
}

// BenchmarkDurableAppend compares ways to make one append durable, on a
// buffered file and an O_DIRECT one, fallocated and pre-written.
func BenchmarkDurableAppend(b *testing.B) {
	for _, direct := range []bool{false, true} {
		for _, prewritten := range []bool{false, true} {
			for _, size := range []int{4096, 65536} {
				for _, v := range durableVariants() {
					name := fmt.Sprintf("direct=%v/prewritten=%v/size=%d/%s", direct, prewritten, size, v.name)
					b.Run(name, func(b *testing.B) {
						extra := 0
						if direct {
							extra = unix.O_DIRECT
						}
						f := durableFile(b, prewritten, extra)
						buf := offHeap(b, size)
						copy(buf, pattern(size, 1))
						b.SetBytes(int64(size))
						v.run(b, f, buf, size)
					})
				}
			}
		}
	}
}

// BenchmarkCommitOnly compares ways to move an append into the page cache
// (the buffered backend's commit, no sync).
func BenchmarkCommitOnly(b *testing.B) {
	for _, size := range []int{1024, 65536} {
		b.Run(fmt.Sprintf("size=%d/pwrite", size), func(b *testing.B) {
			f := durableFile(b, false, 0)
			buf := offHeap(b, size)
			fd := int(f.Fd())
			off := int64(0)
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := unix.Pwrite(fd, buf, off); err != nil {
					b.Fatal(err)
				}
				off = (off + int64(size)) % (60 << 20)
			}
		})
		b.Run(fmt.Sprintf("size=%d/ring-write", size), func(b *testing.B) {
			f := durableFile(b, false, 0)
			buf := offHeap(b, size)
			r := newTestRing(b, RingOptions{Entries: 8})
			tk := make([]Ticket, 1)
			off := uint64(0)
			b.SetBytes(int64(size))
			for b.Loop() {
				ringDo(b, r, tk, Request{Opcode: OpWrite, Fd: int32(f.Fd()), Offset: off, Addr: addr(buf), Len: uint32(size)})
				off = (off + uint64(size)) % (60 << 20)
			}
		})
		b.Run(fmt.Sprintf("size=%d/thread-ring/single-issuer+defer-taskrun", size), func(b *testing.B) {
			f := durableFile(b, false, 0)
			buf := offHeap(b, size)
			b.SetBytes(int64(size))
			tr := newThreadRing(b, 1<<12|1<<13)
			off := uint64(0)
			for b.Loop() {
				tr.do(b, []Request{{Opcode: OpWrite, Fd: int32(f.Fd()), Offset: off, Addr: addr(buf), Len: uint32(size)}})
				off = (off + uint64(size)) % (60 << 20)
			}
		})
	}
}

// threadRing is a measuring instrument, not a production ring: one locked
// goroutine owns a ring set up with the given flags and, for each job,
// submits it and waits for all its completions in one io_uring_enter. It
// shows the kernel path of SQPOLL and SINGLE_ISSUER+DEFER_TASKRUN plus one
// goroutine hand-off each way.
type threadRing struct {
	jobs chan []Request
	res  chan []int32
	sq   bool
}

func newThreadRing(b *testing.B, flags uint32) *threadRing {
	t := &threadRing{jobs: make(chan []Request), res: make(chan []int32), sq: flags&(1<<1) != 0}
	ready := make(chan error)
	go func() {
		runtime.LockOSThread()
		var p params
		p.flags = flags
		p.sqThreadIdle = 1000 // ms, SQPOLL only
		fd, e := sysSetup(8, &p)
		if e != 0 {
			ready <- e
			return
		}
		r := &Ring{fd: fd, features: p.features, sqEntries: p.sqEntries, cqEntries: p.cqEntries}
		if err := r.mapRings(&p); err != nil {
			ready <- err
			return
		}
		ready <- nil
		defer func() { r.unmap(); unix.Close(fd) }()
		for reqs := range t.jobs {
			tail := atomic.LoadUint32(r.sqTail)
			for i := range reqs {
				r.writeSQE(tail+uint32(i), &reqs[i], uint64(i))
			}
			atomic.StoreUint32(r.sqTail, tail+uint32(len(reqs)))
			flags := uint32(enterGetEvents)
			if t.sq && atomic.LoadUint32(r.sqFlags)&1 != 0 { // IORING_SQ_NEED_WAKEUP
				flags |= 1 << 1 // IORING_ENTER_SQ_WAKEUP
			}
			out := make([]int32, len(reqs))
			got := 0
			for got < len(reqs) {
				if _, e := sysEnter(fd, uint32(len(reqs)), uint32(len(reqs)-got), flags); e != 0 && e != unix.EINTR {
					out[0] = -int32(e)
					break
				}
				head, ctail := atomic.LoadUint32(r.cqHead), atomic.LoadUint32(r.cqTail)
				for ; head != ctail; head++ {
					c := *(*cqe)(unsafe.Pointer(&r.cqes[uintptr(head&r.cqMask)*unsafe.Sizeof(cqe{})]))
					out[c.userData] = c.res
					got++
				}
				atomic.StoreUint32(r.cqHead, head)
				flags &^= 1 << 1
				if t.sq {
					flags = uint32(enterGetEvents)
				}
			}
			t.res <- out
		}
	}()
	if err := <-ready; err != nil {
		testenv.Skip(b, testenv.Uring, "ring with flags %#x: %v", flags, err)
	}
	b.Cleanup(func() { close(t.jobs) })
	return t
}

func (t *threadRing) do(b *testing.B, reqs []Request) []int32 {
	t.jobs <- reqs
	out := <-t.res
	for i, res := range out {
		if res < 0 {
			b.Fatalf("thread ring request %d (opcode %d): %v", i, reqs[i].Opcode, unix.Errno(-res))
		}
	}
	return out
}

func threadRingVariant(flags uint32) func(b *testing.B, f *os.File, buf []byte, size int) {
	return func(b *testing.B, f *os.File, buf []byte, size int) {
		tr := newThreadRing(b, flags)
		off := uint64(0)
		for b.Loop() {
			tr.do(b, []Request{
				{Opcode: OpWrite, Flags: FlagIOLink, Fd: int32(f.Fd()), Offset: off, Addr: addr(buf), Len: uint32(size)},
				{Opcode: OpFsync, Fd: int32(f.Fd()), OpFlags: FsyncDataSync},
			})
			off = (off + uint64(size)) % (60 << 20)
		}
	}
}

// BenchmarkDurableRoundRobin makes one 4 KiB append durable per method in
// turn, every method once per iteration, on its own pre-written file, and
// reports each method's median and 90th percentile: the methods see the
// same moments of a shared, noisy device, which sequential sub-benchmarks
// do not.
//
//	go test -run '^$' -bench DurableRoundRobin -benchtime 2000x ./uring/
func BenchmarkDurableRoundRobin(b *testing.B) {
	for _, direct := range []bool{false, true} {
		b.Run(fmt.Sprintf("direct=%v", direct), func(b *testing.B) {
			const size = 4096
			extra := 0
			if direct {
				extra = unix.O_DIRECT
			}
			r := newTestRing(b, RingOptions{Entries: 8})
			type method struct {
				name string
				do   func(fd int32, buf []byte, off uint64)
			}
			tk := make([]Ticket, 2)
			linked := func(fd int32, buf []byte, off uint64) []Request {
				return []Request{
					{Opcode: OpWrite, Flags: FlagIOLink, Fd: fd, Offset: off, Addr: addr(buf), Len: size},
					{Opcode: OpFsync, Fd: fd, OpFlags: FsyncDataSync},
				}
			}
			defer1 := newThreadRing(b, 1<<12|1<<13)
			methods := []method{
				{"pwrite+fdatasync", func(fd int32, buf []byte, off uint64) {
					if _, err := unix.Pwrite(int(fd), buf, int64(off)); err != nil {
						b.Fatal(err)
					}
					if err := unix.Fdatasync(int(fd)); err != nil {
						b.Fatal(err)
					}
				}},
				{"pwritev2-dsync", func(fd int32, buf []byte, off uint64) {
					if _, err := unix.Pwritev2(int(fd), [][]byte{buf}, int64(off), unix.RWF_DSYNC); err != nil {
						b.Fatal(err)
					}
				}},
				{"ring-write→fsync-linked", func(fd int32, buf []byte, off uint64) {
					if err := r.Submit(context.Background(), linked(fd, buf, off), tk); err != nil {
						b.Fatal(err)
					}
					if c0, c1 := r.Wait(tk[0]), r.Wait(tk[1]); c0.Res != size || c1.Res != 0 {
						b.Fatalf("linked: %d %d", c0.Res, c1.Res)
					}
				}},
				{"ring-write-dsync", func(fd int32, buf []byte, off uint64) {
					ringDo(b, r, tk, Request{Opcode: OpWrite, Fd: fd, Offset: off, Addr: addr(buf), Len: size, OpFlags: RWFDSync})
				}},
				{"thread-ring-linked/single-issuer+defer-taskrun", func(fd int32, buf []byte, off uint64) {
					defer1.do(b, linked(fd, buf, off))
				}},
			}
			files := make([]*os.File, len(methods))
			bufs := make([][]byte, len(methods))
			for i := range methods {
				files[i] = durableFile(b, true, extra)
				bufs[i] = offHeap(b, size)
				copy(bufs[i], pattern(size, byte(i)))
			}
			lat := make([][]time.Duration, len(methods))
			off := uint64(0)
			for b.Loop() {
				for i, m := range methods {
					start := time.Now()
					m.do(int32(files[i].Fd()), bufs[i], off)
					lat[i] = append(lat[i], time.Since(start))
				}
				off = (off + size) % (60 << 20)
			}
			for i, m := range methods {
				slices.Sort(lat[i])
				b.ReportMetric(float64(lat[i][len(lat[i])/2].Microseconds()), "p50-µs/"+m.name)
				b.ReportMetric(float64(lat[i][len(lat[i])*9/10].Microseconds()), "p90-µs/"+m.name)
			}
		})
	}
}
