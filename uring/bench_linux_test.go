package uring

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

var benchBackends = []struct {
	name string
	opts Options
}{
	{"uring", Options{}},
	{"uring-direct", Options{Direct: true}},
}

// durableBackends are the ways a backend can make one commit durable.
var durableBackends = []struct {
	name string
	opts Options
}{
	{"uring/commit+flush", Options{}},
	{"uring/sync-at-commit/pwrite+fdatasync", Options{SyncAtCommit: true, SyncMethod: SyncSyscalls}},
	{"uring/sync-at-commit/write-linked-fsync", Options{SyncAtCommit: true, SyncMethod: SyncLinkedFsync}},
	{"uring-direct/commit+flush", Options{Direct: true}},
	{"uring-direct/sync-at-commit/pwritev2-dsync", Options{Direct: true, SyncAtCommit: true, SyncMethod: SyncSyscalls}},
	{"uring-direct/sync-at-commit/dsync-write", Options{Direct: true, SyncAtCommit: true, SyncMethod: SyncDSync}},
	{"uring-direct/sync-at-commit/write-linked-fsync", Options{Direct: true, SyncAtCommit: true, SyncMethod: SyncLinkedFsync}},
}

// benchSegments opens segment after segment in one directory, deleting the
// previous one, outside the benchmark timer.
type benchSegments struct {
	b       *testing.B
	backend mappedfile.Backend
	dir     string
	size    int64
	n       int
	current mappedfile.MappedFile
}

func (s *benchSegments) next() mappedfile.MappedFile {
	s.b.StopTimer()
	defer s.b.StartTimer()
	if s.current != nil {
		if err := s.current.Delete(); err != nil {
			s.b.Fatal(err)
		}
	}
	s.n++
	mf, err := s.backend.Open(context.Background(), mappedfile.Spec{
		Path: filepath.Join(s.dir, fmt.Sprintf("%020d", s.n)), SizeBytes: s.size})
	if err != nil {
		s.b.Fatal(err)
	}
	s.current = mf
	return mf
}

func (s *benchSegments) close() {
	if s.current != nil {
		_ = s.current.Delete()
	}
}

// BenchmarkAppend measures Append alone: encoding in place into the staging
// buffer (a 128 MiB segment; a new one, outside the timer, when full).
func BenchmarkAppend(b *testing.B) {
	for _, be := range benchBackends[:2] {
		for _, size := range []int{1024, 4096} {
			b.Run(fmt.Sprintf("%s/size=%d", be.name, size), func(b *testing.B) {
				backend := newTestBackend(b, be.opts)
				segs := &benchSegments{b: b, backend: backend, dir: b.TempDir(), size: 128 << 20}
				defer segs.close()
				var enc mappedfile.Encoder = mappedfile.Bytes(make([]byte, size))
				mf := segs.next()
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if _, err := mf.Append(size, enc); err != nil {
						if !errors.Is(err, mappedfile.ErrFull) {
							b.Fatal(err)
						}
						mf = segs.next()
						if _, err := mf.Append(size, enc); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// BenchmarkCommitFlush measures one durable append: batch bytes appended,
// Commit(0), Flush(0), for every way to make a commit durable, on
// fallocated segments and on pre-written ones (PreZero):
//
//	go test -run '^$' -bench CommitFlush ./uring/
func BenchmarkCommitFlush(b *testing.B) {
	for _, batch := range []int{1024, 64 << 10} {
		for _, prezero := range []bool{false, true} {
			for _, be := range durableBackends {
				name := fmt.Sprintf("batch=%d/prewritten=%v/%s", batch, prezero, be.name)
				b.Run(name, func(b *testing.B) {
					opts := be.opts
					opts.PreZero = prezero
					backend := newTestBackend(b, opts)
					segs := &benchSegments{b: b, backend: backend, dir: b.TempDir(), size: 16 << 20}
					defer segs.close()
					var enc mappedfile.Encoder = mappedfile.Bytes(make([]byte, batch))
					ctx := context.Background()
					mf := segs.next()
					b.SetBytes(int64(batch))
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						if mf.WrotePosition()+int64(batch) > mf.SizeBytes() {
							mf = segs.next()
						}
						if _, err := mf.Append(batch, enc); err != nil {
							b.Fatal(err)
						}
						if _, err := mf.Commit(ctx, 0); err != nil {
							b.Fatal(err)
						}
						if _, err := mf.Flush(ctx, 0); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkRingRoundTrip measures one request through the ring and back to
// its waiter: a NOP (the ring's own cost: submit, the reaper's wake-up and
// hand-off), and a 4 KiB O_DIRECT write to a pre-written file, plain and
// with RWF_DSYNC (the device's cost added).
//
//	go test -run '^$' -bench RingRoundTrip ./uring/
func BenchmarkRingRoundTrip(b *testing.B) {
	for _, op := range []string{"nop", "write-4k-direct", "dsync-write-4k-direct"} {
		b.Run("op="+op, func(b *testing.B) {
			r := newTestRing(b, RingOptions{Entries: 8})
			q := Request{Opcode: OpNop}
			if op != "nop" {
				f := durableFile(b, true, unix.O_DIRECT)
				buf := offHeap(b, 4096)
				q = Request{Opcode: OpWrite, Fd: int32(f.Fd()), Addr: addr(buf), Len: 4096}
				if op == "dsync-write-4k-direct" {
					q.OpFlags = RWFDSync
				}
			}
			tickets := make([]Ticket, 1)
			i := 0
			for b.Loop() {
				q.Offset = uint64(i%4096) * 4096
				i++
				if err := r.Submit(context.Background(), []Request{q}, tickets); err != nil {
					b.Fatal(err)
				}
				if c := r.Wait(tickets[0]); c.Res < 0 {
					b.Fatal(c.Err())
				}
			}
		})
	}
}
