package mappedfile_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/mappedfile"
)

func TestFaultyNthAndPastOffset(t *testing.T) {
	ctx := context.Background()
	faults := mappedfile.NewFaults(
		mappedfile.Fault{Op: mappedfile.OpAppend, Nth: 3, Err: syscall.EIO, PathContains: "a"},
		mappedfile.Fault{Op: mappedfile.OpAppend, PastOffset: 1000 + 500, Err: syscall.ENOSPC, PathContains: "b"},
	)
	fb := mappedfile.NewFaulty(mappedfile.NewMemFS(mappedfile.MemOptions{}), faults)
	a, err := fb.Open(ctx, mappedfile.Spec{Path: "/d/a", SizeBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if _, err := a.Append(10, fill(1, 10)); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if _, err := a.Append(10, fill(1, 10)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("third append: %v, want EIO", err)
	}
	if a.WrotePosition() != 20 {
		t.Fatalf("the failed append wrote: %d", a.WrotePosition())
	}
	if _, err := a.Append(10, fill(1, 10)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("append after an injected failure: %v, want the sticky EIO", err)
	}
	b, err := fb.Open(ctx, mappedfile.Spec{Path: "/d/b", FromOffset: 1000, SizeBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(500, fill(2, 500)); err != nil {
		t.Fatalf("append ending at the offset: %v", err)
	}
	if _, err := b.Append(1, fill(2, 1)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("append past the offset: %v, want ENOSPC", err)
	}
	if faults.Hits() != 2 {
		t.Fatalf("hits %d", faults.Hits())
	}
}

func TestFaultyLatency(t *testing.T) {
	ctx := context.Background()
	faults := mappedfile.NewFaults(mappedfile.Fault{Op: mappedfile.OpFlush, Latency: 30 * time.Millisecond})
	fb := mappedfile.NewFaulty(mappedfile.NewMemFS(mappedfile.MemOptions{}), faults)
	mf, err := fb.Open(ctx, mappedfile.Spec{Path: "/d/a", SizeBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	mf.Append(10, fill(1, 10))
	start := time.Now()
	if fl, err := mf.Flush(ctx, 0); err != nil || fl != 10 {
		t.Fatalf("delayed flush: %d, %v", fl, err)
	}
	if time.Since(start) < 30*time.Millisecond {
		t.Fatal("no latency added")
	}
	// The delay obeys the context.
	ctx2, cancel := context.WithCancel(ctx)
	cancel()
	mf.Append(10, fill(1, 10))
	if _, err := mf.Flush(ctx2, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("flush with a cancelled context: %v", err)
	}
}

func TestRefCount(t *testing.T) {
	var r mappedfile.RefCount
	r.Init()
	cleaned := 0
	if !r.Retain() {
		t.Fatal("retain")
	}
	r.Shutdown(func() { cleaned++ })
	if r.Retain() {
		t.Fatal("retain after shutdown")
	}
	if !r.Acquire() {
		t.Fatal("acquire while a reference is held")
	}
	r.Release()
	if cleaned != 0 {
		t.Fatal("cleaned up with a reference held")
	}
	r.Release()
	if cleaned != 1 {
		t.Fatal("not cleaned up at the last release")
	}
	if r.Acquire() {
		t.Fatal("acquire after cleanup")
	}
	if r.Shutdown(func() { cleaned++ }) || cleaned != 1 {
		t.Fatal("second shutdown ran a cleanup")
	}
}

func TestFaultyCancelIsNotSticky(t *testing.T) {
	ctx := context.Background()
	faults := mappedfile.NewFaults(mappedfile.Fault{Op: mappedfile.OpFlush, Nth: 1, Latency: time.Hour})
	mf, err := mappedfile.NewFaulty(mappedfile.NewMemFS(mappedfile.MemOptions{}), faults).Open(ctx, mappedfile.Spec{Path: "/d/a", SizeBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	mf.Append(10, fill(1, 10))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := mf.Flush(cctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("flush with a cancelled context: %v", err)
	}
	if fl, err := mf.Flush(ctx, 0); err != nil || fl != 10 {
		t.Fatalf("flush after a cancelled one: %d, %v", fl, err)
	}
}
