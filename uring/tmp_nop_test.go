package uring

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func BenchmarkTmpNop(b *testing.B) {
	r := newTestRing(b, RingOptions{Entries: 8})
	reqs := []Request{{Opcode: OpNop}}
	t := make([]Ticket, 1)
	for b.Loop() {
		if err := r.Submit(context.Background(), reqs, t); err != nil {
			b.Fatal(err)
		}
		r.Wait(t[0])
	}
}

func tmpDirectFile(b *testing.B) *os.File {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "f"), os.O_RDWR|os.O_CREATE|unix.O_DIRECT, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	buf := offHeap(b, 1<<20)
	for i := 0; i < 16; i++ {
		f.WriteAt(buf, int64(i)<<20)
	}
	f.Sync()
	b.Cleanup(func() { f.Close() })
	return f
}

func BenchmarkTmpIO(b *testing.B) {
	for _, op := range []string{"write", "dsync"} {
		b.Run(op, func(b *testing.B) {
			r := newTestRing(b, RingOptions{Entries: 8})
			f := tmpDirectFile(b)
			buf := offHeap(b, 4096)
			q := Request{Opcode: OpWrite, Fd: int32(f.Fd()), Addr: addr(buf), Len: 4096}
			if op == "dsync" {
				q.OpFlags = RWFDSync
			}
			t := make([]Ticket, 1)
			i := 0
			for b.Loop() {
				q.Offset = uint64(i%4096) * 4096
				i++
				if err := r.Submit(context.Background(), []Request{q}, t); err != nil {
					b.Fatal(err)
				}
				if c := r.Wait(t[0]); c.Res < 0 {
					b.Fatal(c.Res)
				}
			}
		})
	}
}
