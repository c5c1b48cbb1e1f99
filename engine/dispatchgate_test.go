package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqstore/mqstore/mappedfile"
)

// TestPutWaitsForDispatch: with a lag limit of one byte no Put returns
// before dispatch has passed its record, so a consumer finds every
// acknowledged record at once.
func TestPutWaitsForDispatch(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), Options{Backend: "mem", SegmentSizeBytes: 64 << 10, FlushMode: FlushAsync,
		DispatchLagLimitBytes: 1, Logger: quietLogger})
	const producers, each = 4, 50
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				res, err := s.Put(ctx, &Message{Topic: "T", QueueID: int32(p), Body: []byte(fmt.Sprintf("m%d-%d", p, i))})
				if err != nil {
					errs <- err
					return
				}
				end := res.PhysicalOffset + int64(res.Size)
				if d := s.DispatchedOffset(); d < end {
					errs <- fmt.Errorf("put of [%d,%d) returned with dispatch at %d", res.PhysicalOffset, end, d)
					return
				}
				got, err := s.Get(ctx, "g", "T", int32(p), res.QueueOffset, 1, nil)
				if err != nil || len(got.Messages) != 1 {
					errs <- fmt.Errorf("get queue %d offset %d right after its put: %v, %+v", p, res.QueueOffset, err, got)
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
	st := s.Stats()
	if st.DispatchLagLimit != 1 || st.DispatchWaits == 0 {
		t.Errorf("stats: limit %d, %d waits", st.DispatchLagLimit, st.DispatchWaits)
	}
}

// TestHeldBackPutDispatches: a Put the gate holds back dispatches itself,
// so dispatch keeps up even when its service does not run at all (here it
// is stopped; under load it waits in the run queue behind the producers):
// every Put returns with its record dispatched, without waiting out
// maxDispatchWait, and the dispatch service's own runs find nothing left.
func TestHeldBackPutDispatches(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), Options{Backend: "mem", SegmentSizeBytes: 64 << 10, FlushMode: FlushAsync,
		DispatchLagLimitBytes: 1, Logger: quietLogger})
	stopService(t, s)
	const n = 20
	for i := range n {
		res, err := s.Put(ctx, &Message{Topic: "T", QueueID: 0, Body: []byte(fmt.Sprintf("m%d", i))})
		if err != nil {
			t.Fatal(err)
		}
		if d, end := s.DispatchedOffset(), res.PhysicalOffset+int64(res.Size); d < end {
			t.Fatalf("put %d of [%d,%d) returned with dispatch at %d: it waited out the gate instead of dispatching", i, res.PhysicalOffset, end, d)
		}
	}
	got, err := s.Get(ctx, "g", "T", 0, 0, n, nil)
	if err != nil || len(got.Messages) != n {
		t.Fatalf("get the %d records: %v, %d found", n, err, len(got.Messages))
	}
	if st := s.Stats(); st.DispatchWaits == 0 {
		t.Errorf("no Put was held back (limit %d): the test did not test the gate", st.DispatchLagLimit)
	}
}

// stopService stops the store's dispatch service goroutine for the rest of
// the test (Close dispatches what is left itself).
func stopService(t *testing.T, s *Store) {
	t.Helper()
	s.dispatcher.shutdown()
	s.dispatcher.stop = make(chan struct{}) // Close shuts it down again
	s.dispatcher.done = make(chan struct{})
	close(s.dispatcher.done)
}

// TestDispatchLagLimitDefault: what the backend reads from memory (never
// more than a segment), half of it when dispatch reads the log back, none
// without the interface, the option when given, none when negative.
func TestDispatchLagLimitDefault(t *testing.T) {
	mem := memoryReadsBackend{reads: 16 << 20}
	for _, c := range []struct {
		o    Options
		b    mappedfile.Backend
		want int64
	}{
		{Options{SegmentSizeBytes: 64 << 20}, mem, 16 << 20},
		{Options{SegmentSizeBytes: 1 << 20}, mem, 1 << 20},
		{Options{SegmentSizeBytes: 64 << 20, dispatchFromLog: true}, mem, 8 << 20},
		{Options{SegmentSizeBytes: 1 << 20, dispatchFromLog: true}, mem, 512 << 10},
		{Options{SegmentSizeBytes: 64 << 20}, memoryReadsBackend{}, 0},
		{Options{SegmentSizeBytes: 64 << 20, DispatchLagLimitBytes: 4096}, mem, 4096},
		{Options{SegmentSizeBytes: 64 << 20, DispatchLagLimitBytes: -1}, mem, 0},
	} {
		if got := dispatchLagLimit(c.o, c.b); got != c.want {
			t.Errorf("limit %d, backend reads %d from memory, segment %d: got %d, want %d",
				c.o.DispatchLagLimitBytes, c.b.(memoryReadsBackend).reads, c.o.SegmentSizeBytes, got, c.want)
		}
	}
	if got := dispatchLagLimit(Options{SegmentSizeBytes: 64 << 20}, mappedfile.NewMemFS(mappedfile.MemOptions{})); got != 0 {
		t.Errorf("a backend without MemoryReads: limit %d, want none", got)
	}
}

type memoryReadsBackend struct {
	mappedfile.Backend
	reads int64
}

func (b memoryReadsBackend) MemoryReadBytes() int64 { return b.reads }

// TestDispatchGateEnds: a waiting Put leaves when dispatch moves far
// enough, when dispatch stops for good, and when its ctx ends — and not
// before.
func TestDispatchGateEnds(t *testing.T) {
	var dispatched atomic.Int64
	g := newDispatchGate(100, &dispatched)
	var stopped atomic.Bool
	leave := func(ctx context.Context) chan struct{} {
		done := make(chan struct{})
		go func() {
			g.wait(ctx, 1000, func() bool { return false }, func() {}, stopped.Load)
			close(done)
		}()
		for g.waiting.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		return done
	}
	notYet := func(done chan struct{}, what string) {
		select {
		case <-done:
			t.Fatalf("%s: the wait ended early", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
	ended := func(done chan struct{}, what string) {
		select {
		case <-done:
		case <-time.After(maxDispatchWait / 2):
			t.Fatalf("%s: the wait did not end", what)
		}
	}

	done := leave(context.Background())
	dispatched.Store(500) // moved, still more than 100 behind 1000
	g.moved()
	notYet(done, "dispatch 500 bytes behind")
	dispatched.Store(900)
	g.moved()
	ended(done, "dispatch within the limit")

	dispatched.Store(0)
	done = leave(context.Background())
	stopped.Store(true)
	g.moved()
	ended(done, "dispatch stopped")
	stopped.Store(false)

	ctx, cancel := context.WithCancel(context.Background())
	done = leave(ctx)
	notYet(done, "nothing happened")
	cancel()
	ended(done, "ctx ended")
	if g.waits.Load() != 3 {
		t.Errorf("%d waits counted, want 3", g.waits.Load())
	}
}
