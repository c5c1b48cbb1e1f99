package faultfile_test

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/faultfile"
)

func TestFaultyNthAndPastOffset(t *testing.T) {
	ctx := context.Background()
	faults := faultfile.NewFaults(
		faultfile.Fault{Op: faultfile.OpAppend, Nth: 3, Err: syscall.EIO, PathContains: "a"},
		faultfile.Fault{Op: faultfile.OpAppend, PastOffset: 1000 + 500, Err: syscall.ENOSPC, PathContains: "b"},
	)
	fb := faultfile.NewFaulty(mappedfile.NewMemFS(mappedfile.MemOptions{}), faults)
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
	faults := faultfile.NewFaults(faultfile.Fault{Op: faultfile.OpFlush, Latency: 30 * time.Millisecond})
	fb := faultfile.NewFaulty(mappedfile.NewMemFS(mappedfile.MemOptions{}), faults)
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

func TestFaultyCancelIsNotSticky(t *testing.T) {
	ctx := context.Background()
	faults := faultfile.NewFaults(faultfile.Fault{Op: faultfile.OpFlush, Nth: 1, Latency: time.Hour})
	mf, err := faultfile.NewFaulty(mappedfile.NewMemFS(mappedfile.MemOptions{}), faults).Open(ctx, mappedfile.Spec{Path: "/d/a", SizeBytes: 4096})
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

func fill(b byte, n int) mappedfile.Bytes { return bytes.Repeat([]byte{b}, n) }
