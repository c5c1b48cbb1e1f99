//go:build linux

package transientpool

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/mappedfile"
)

func TestOptionsValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"no segment size", Options{}},
		{"negative segment size", Options{SegmentSizeBytes: -1}},
		{"negative pool size", Options{SegmentSizeBytes: 4096, PoolSize: -1}},
		{"negative timeout", Options{SegmentSizeBytes: 4096, BorrowTimeout: -time.Second}},
		{"unknown WhenEmpty", Options{SegmentSizeBytes: 4096, WhenEmpty: WhenEmpty(7)}},
		{"overflow", Options{SegmentSizeBytes: 1 << 62, PoolSize: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := New(tc.opts)
			if !errors.Is(err, mappedfile.ErrInvalidArgument) {
				if b != nil {
					b.Close()
				}
				t.Fatalf("New(%+v): %v, want ErrInvalidArgument", tc.opts, err)
			}
		})
	}
}

func TestDefaultsAndLockedBytes(t *testing.T) {
	b := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes})
	st := b.Stats()
	want := Stats{PoolSize: DefaultPoolSize, BuffersFree: DefaultPoolSize, BytesLocked: DefaultPoolSize * testSegmentBytes}
	if st != want {
		t.Fatalf("stats of a new pool: %+v, want %+v", st, want)
	}
	if b.Name() != "transient" {
		t.Fatalf("Name() = %q", b.Name())
	}
	unlocked := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 2, NoLock: true})
	if got := unlocked.Stats().BytesLocked; got != 0 {
		t.Fatalf("NoLock pool locked %d bytes", got)
	}
}

func TestMemoryBudget(t *testing.T) {
	opts := Options{SegmentSizeBytes: 1 << 20, PoolSize: 4, MemoryBudgetBytes: 3 << 20}
	b, err := New(opts)
	if err == nil {
		b.Close()
		t.Fatal("New succeeded over the memory budget")
	}
	if !errors.Is(err, mappedfile.ErrInvalidArgument) {
		t.Errorf("error %v does not match ErrInvalidArgument", err)
	}
	for _, want := range []string{strconv.Itoa(4 << 20), strconv.Itoa(3 << 20), "MemoryBudgetBytes", "PoolSize", "SegmentSizeBytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	opts.MemoryBudgetBytes = 4 << 20
	newTestBackend(t, opts) // exactly at the budget: fine
}

func TestFallbackWhenPoolEmpty(t *testing.T) {
	b := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 1})
	dir := t.TempDir()
	first := openSeg(t, b, specIn(dir, "first"))
	second := openSeg(t, b, specIn(dir, "second"))
	if st := b.Stats(); st.Borrows != 1 || st.Fallbacks != 1 || st.BuffersFree != 0 {
		t.Fatalf("stats after two opens with one buffer: %+v, want 1 borrow, 1 fallback, 0 free", st)
	}
	if first.(*segment).buffer.Load() == nil || second.(*segment).buffer.Load() != nil {
		t.Fatal("want the first segment buffered and the second falling back")
	}
	wantFirst := make([]byte, testSegmentBytes)
	wantSecond := make([]byte, testSegmentBytes)
	for i := 0; i < 20; i++ {
		appendBytes(t, first, wantFirst, record(byte(i), 1000+i))
		appendBytes(t, second, wantSecond, record(byte(100+i), 2000-i))
	}
	// The fallen-back segment is buffered in its page cache, but readers
	// still see only committed bytes.
	if n, err := second.ReadAt(make([]byte, 10), 0); n != 0 || err == nil {
		t.Fatalf("read of uncommitted bytes of the fallen-back segment: %d, %v", n, err)
	}
	commitAndFlush(t, first)
	commitAndFlush(t, second)
	checkFile(t, first.Path(), wantFirst)
	checkFile(t, second.Path(), wantSecond)
	got := make([]byte, second.ReadablePosition())
	if _, err := second.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(wantSecond[:len(got)]) {
		t.Fatal("ReadAt of the fallen-back segment differs from what was appended")
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.BuffersFree != 1 || st.Returns != 1 {
		t.Fatalf("stats after closing the buffered segment: %+v", st)
	}
}

func TestWaitTimesOut(t *testing.T) {
	b := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 1, WhenEmpty: Wait, BorrowTimeout: 50 * time.Millisecond})
	dir := t.TempDir()
	first := openSeg(t, b, specIn(dir, "first"))
	start := time.Now()
	_, err := b.Open(testContext(t), specIn(dir, "second"))
	if !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("open with the pool empty: %v, want ErrPoolExhausted", err)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("gave up after %v, before BorrowTimeout", waited)
	}
	if !strings.Contains(err.Error(), "PoolSize") {
		t.Errorf("error %q does not say what to change", err)
	}
	if _, statErr := os.Stat(specIn(dir, "second").Path); !errors.Is(statErr, os.ErrNotExist) {
		t.Fatalf("a failed borrow left the segment file behind: %v", statErr)
	}
	if st := b.Stats(); st.BorrowWaits != 1 || st.BorrowTimeouts != 1 || st.Fallbacks != 0 {
		t.Fatalf("stats: %+v, want 1 wait, 1 timeout, no fallback", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Open(ctx, specIn(dir, "third")); !errors.Is(err, context.Canceled) {
		t.Fatalf("open with a cancelled context and the pool empty: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	openSeg(t, b, specIn(dir, "second")) // the buffer is back
}

func TestWaitWakesWhenBufferReturns(t *testing.T) {
	b := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 1, WhenEmpty: Wait, BorrowTimeout: time.Minute})
	dir := t.TempDir()
	first := openSeg(t, b, specIn(dir, "first"))
	type result struct {
		mf  mappedfile.MappedFile
		err error
	}
	done := make(chan result, 1)
	go func() {
		mf, err := b.Open(context.Background(), specIn(dir, "second"))
		done <- result{mf, err}
	}()
	waitFor(t, "the second Open to wait", func() bool { return b.Stats().BorrowWaits == 1 })
	// Filling and committing the first segment gives its buffer back.
	want := make([]byte, testSegmentBytes)
	appendBytes(t, first, want, record(3, testSegmentBytes))
	if _, err := first.Commit(testContext(t), 0); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("waiting open: %v", r.err)
	}
	defer r.mf.Close()
	if st := b.Stats(); st.Borrows != 2 || st.Returns != 1 || st.BorrowTimeouts != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestCloseWithBorrowedBuffers(t *testing.T) {
	b, err := New(Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mf, err := b.Open(testContext(t), specIn(dir, "seg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); !errors.Is(err, ErrBuffersBorrowed) || !strings.Contains(err.Error(), "1 of 2") {
		t.Fatalf("close with a buffer out: %v, want ErrBuffersBorrowed naming 1 of 2", err)
	}
	if _, err := b.Open(testContext(t), specIn(dir, "other")); !errors.Is(err, mappedfile.ErrClosed) {
		t.Fatalf("open after Close: %v, want ErrClosed", err)
	}
	// The open segment still works: its buffer was not unmapped.
	want := make([]byte, testSegmentBytes)
	appendBytes(t, mf, want, record(9, 5000))
	commitAndFlush(t, mf)
	checkFile(t, mf.Path(), want)
	if err := mf.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("close once every buffer is back: %v", err)
	}
	if st := b.Stats(); st.BytesLocked != 0 {
		t.Fatalf("bytes still locked after Close: %d", st.BytesLocked)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestOpenOtherSize(t *testing.T) {
	b := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 1})
	spec := specIn(t.TempDir(), "seg")
	spec.SizeBytes *= 2
	if _, err := b.Open(testContext(t), spec); !errors.Is(err, mappedfile.ErrInvalidArgument) {
		t.Fatalf("open with a size other than the buffers': %v, want ErrInvalidArgument", err)
	}
	if _, err := os.Stat(spec.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused open created the file: %v", err)
	}
}
