package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mqstore/mqstore/mappedfile"
)

// dispatchGate keeps producers within DispatchLagLimitBytes of dispatch.
//
// Producers append faster than one dispatch goroutine reads back what they
// wrote when they are many and the CPUs few: with 16 producers on 2 CPUs the
// scheduler gives dispatch about a seventeenth of the time. Dispatch then
// falls behind without bound, and on a backend whose older bytes are not in
// memory (an O_DIRECT backend: its staging ring, then the device) every read past
// the ring is a read from the device — measured, a quarter of the process's
// CPU in pread and the device reading back most of what it wrote, beside
// consumers that see a message seconds late. So a Put that ends more than
// the limit ahead of the dispatched offset waits (after its append, before
// it returns) until dispatch catches up, for at most maxDispatchWait: its
// CPU goes to dispatch instead. It waits only when dispatch really lags, so
// a Put pays one atomic load otherwise.
//
// A held-back Put dispatches itself (help) rather than wait for the
// dispatch service to run: with many producers on few CPUs the service,
// made runnable by a wake-up, waits behind the producers in the run queue
// (measured: 16 producers, uring-direct async, the service spent several
// times its running time runnable and not running, and the process used
// 0.6 of its 2 CPUs while the Puts waited). Only when someone else is
// dispatching, or nothing committed is left to dispatch, does the Put wait
// for the offset to move.
//
// The wait is flow control, not an error: after maxDispatchWait the Put
// returns as it would have (a dispatch that stalls must not stall writes;
// the record is stored either way).
type dispatchGate struct {
	limit      int64
	dispatched *atomic.Int64
	waiting    atomic.Int32
	mu         sync.Mutex
	progress   chan struct{} // closed when dispatch moves while someone waits
	waits      atomic.Uint64 // Puts that waited
	waitedNs   atomic.Int64  // time they waited in all
}

// maxDispatchWait bounds a Put's wait for dispatch.
const maxDispatchWait = time.Second

// dispatchLagLimit is the limit a store runs with: the option, or, when
// it is 0, what the backend serves from memory (mappedfile.MemoryReads; no
// segment holds more than its size) — half of it when dispatch reads every
// record back from the log — or none.
//
// With the dispatch feed, dispatch reads nothing in steady state: it needs
// the bytes in memory only at a gap in the feed, so the whole ring may lie
// between producers and dispatch. Half of it held producers back at every
// slow device write (the commit the ring waits for), with no read to save.
func dispatchLagLimit(o Options, b mappedfile.Backend) int64 {
	switch {
	case o.DispatchLagLimitBytes > 0:
		return o.DispatchLagLimitBytes
	case o.DispatchLagLimitBytes < 0:
		return 0
	}
	if m, ok := b.(mappedfile.MemoryReads); ok {
		if n := min(m.MemoryReadBytes(), o.SegmentSizeBytes); n > 0 {
			if o.dispatchFromLog {
				return max(n/2, 1)
			}
			return n
		}
	}
	return 0
}

// newDispatchGate returns the store's gate, nil when it runs without a limit.
func newDispatchGate(limit int64, dispatched *atomic.Int64) *dispatchGate {
	if limit <= 0 {
		return nil
	}
	return &dispatchGate{limit: limit, dispatched: dispatched, progress: make(chan struct{})}
}

// ahead reports whether a record ending at end is more than the limit
// ahead of dispatch.
func (g *dispatchGate) ahead(end int64) bool { return end-g.dispatched.Load() > g.limit }

// wait waits until a record ending at end is within the limit, ctx ends,
// stopped reports true (dispatch stopped for good), or maxDispatchWait has
// passed. help dispatches on the caller's goroutine, reporting whether the
// dispatched offset moved (false: someone else is dispatching, or nothing
// was left); wake asks the dispatch service to run.
func (g *dispatchGate) wait(ctx context.Context, end int64, help func() bool, wake func(), stopped func() bool) {
	start := time.Now()
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		g.waits.Add(1)
		g.waitedNs.Add(int64(time.Since(start)))
	}()
	for {
		g.mu.Lock()
		ch := g.progress
		g.mu.Unlock()
		// Checked after taking the channel: a move of the offset after this
		// load sees waiting > 0 and closes ch.
		if !g.ahead(end) || stopped() {
			return
		}
		if help() {
			continue
		}
		wake()
		if timer == nil {
			timer = time.NewTimer(maxDispatchWait)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-timer.C:
			return
		}
	}
}

// moved is called by dispatch after it moved the dispatched offset (or
// stopped): it wakes the waiting Puts.
func (g *dispatchGate) moved() {
	if g == nil || g.waiting.Load() == 0 {
		return
	}
	g.mu.Lock()
	close(g.progress)
	g.progress = make(chan struct{})
	g.mu.Unlock()
}
