package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// The engine owns flush policy; backends only offer synchronous Commit and
// Flush. Each service below is one goroutine that owns its work.

// service is a goroutine with a stop signal and a wake-up channel.
type service struct {
	wake chan struct{} // capacity 1: a pending wake-up is never lost, never piles up
	stop chan struct{}
	done chan struct{}
}

func newService() service {
	return service{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// Wakeup asks the service to run soon; it never blocks.
func (s *service) Wakeup() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *service) shutdown() {
	close(s.stop)
	<-s.done
}

// periodic runs act every interval and on every wake-up, with leastPages
// normally and 0 ("everything pending") when thorough has passed since the
// last full pass — the shape of RocketMQ's flush, commit and ConsumeQueue
// flush services. It returns when the service is stopped.
func (s *service) periodic(interval, thorough time.Duration, leastPages int, now func() time.Time, act func(leastPages int)) {
	defer close(s.done)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	lastThorough := now()
	for {
		select {
		case <-s.stop:
			return
		case <-ticker.C:
		case <-s.wake:
		}
		least := leastPages
		if t := now(); t.Sub(lastThorough) >= thorough {
			least = 0
			lastThorough = t
		}
		act(least)
	}
}

// asyncFlusher is RocketMQ's FlushRealTimeService: every FlushInterval (and
// when a Put wakes it) it flushes when at least FlushLeastPages pages are
// pending, and fully at least every FlushThoroughInterval.
type asyncFlusher struct {
	service
	store *Store
}

func (f *asyncFlusher) run() {
	s := f.store
	f.periodic(s.opts.FlushInterval, s.opts.FlushThoroughInterval, s.opts.FlushLeastPages, s.opts.now, func(least int) {
		s.flushOnce(context.Background(), least, false)
	})
}

// committer is RocketMQ's CommitRealTimeService for buffered backends: every
// CommitInterval it commits when at least CommitLeastPages are pending (all
// of it every CommitThoroughInterval), then wakes the flusher and dispatch.
type committer struct {
	service
	store *Store
}

func (c *committer) run() {
	s := c.store
	c.periodic(s.opts.CommitInterval, s.opts.CommitThoroughInterval, s.opts.CommitLeastPages, s.opts.now, func(least int) {
		before := s.log.committedOffset.Load()
		start := time.Now()
		after, err := s.log.commit(context.Background(), least)
		if err != nil {
			s.writeFailed("commit", err)
			return
		}
		if after > before {
			s.stats.recordCommit(time.Since(start))
			s.flusher.Wakeup()
			s.dispatcher.Wakeup() // committed bytes are readable now
		}
	})
}

// groupCommitter is the sync flush service (RocketMQ's GroupCommitService):
// one owner goroutine and a bounded queue of waiters.
type groupCommitter struct {
	service
	store *Store

	mu      sync.Mutex
	waiters []*flushWaiter // queued, not yet taken by the owner
	limit   int
}

// flushWaiter is one producer waiting until flushed ≥ offset.
type flushWaiter struct {
	offset int64
	done   chan error // capacity 1: the owner never blocks on a waiter
}

var flushWaiters = sync.Pool{New: func() any { return &flushWaiter{done: make(chan error, 1)} }}

// enqueue adds a waiter; false when the queue is full.
func (g *groupCommitter) enqueue(w *flushWaiter) bool {
	g.mu.Lock()
	if len(g.waiters) >= g.limit {
		g.mu.Unlock()
		return false
	}
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()
	g.Wakeup()
	return true
}

// run is the owner loop.
//
// Why one flush serves every waiter taken before it: a producer enqueues its
// waiter only after its append returned, so its record ends at or below the
// CommitLog's write position at that moment. The loop takes the waiters
// first, and only then flushes, and the flush covers everything written up
// to the moment it reads the write position — which is after the waiters
// were taken, hence after every taken producer's append. Positions only move
// forward, so flushed ≥ every taken waiter's offset when the flush succeeds;
// each waiter is still checked against the flushed offset (twice, as
// RocketMQ does, because a waiter whose record rolled into a new segment
// may need a second pass) before it is released. Waiters that arrive while
// the flush runs wait for the next one: they are never acknowledged by a
// flush that may have read the position before their append.
func (g *groupCommitter) run() {
	defer close(g.done)
	s := g.store
	var taken []*flushWaiter
	for {
		select {
		case <-g.stop:
			g.failAll(ErrClosed)
			return
		case <-g.wake:
		}
		g.mu.Lock()
		taken, g.waiters = g.waiters, taken[:0]
		g.mu.Unlock()
		if len(taken) == 0 {
			continue
		}
		target := int64(0)
		for _, w := range taken {
			target = max(target, w.offset)
		}
		var err error
		var flushed int64
		for pass := 0; pass < 2; pass++ {
			flushed, err = s.flushOnce(context.Background(), 0, true)
			if err != nil || flushed >= target {
				break
			}
		}
		for _, w := range taken {
			switch {
			case err != nil:
				w.done <- err
			case flushed >= w.offset:
				w.done <- nil
			default:
				w.done <- errFlushBehind
			}
		}
		clear(taken)
	}
}

func (g *groupCommitter) failAll(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, w := range g.waiters {
		w.done <- err
	}
	g.waiters = nil
}

// errFlushBehind: a flush succeeded but did not reach the waiter's record
// (it cannot happen while the argument above holds; kept as a check).
var errFlushBehind = errors.New("engine: group commit flushed less than a waiter needed")

// flushOnce flushes the CommitLog (committing first when asked), records the
// timing and the checkpoint's physic timestamp, and returns the flushed offset.
func (s *Store) flushOnce(ctx context.Context, leastPages int, commitFirst bool) (int64, error) {
	before := s.log.flushedOffset.Load()
	ts := s.log.lastStoreTimestamp.Load() // read before the flush: every record with it is below the flushed end
	start := time.Now()
	flushed, err := s.log.flush(ctx, leastPages, commitFirst)
	if commitFirst {
		s.dispatcher.Wakeup() // the commit may have made records readable
	}
	if err != nil {
		s.writeFailed("flush", err)
		return flushed, err
	}
	if flushed > before {
		s.stats.recordFlush(time.Since(start))
		s.checkpoint.setPhysic(ts)
		raise(&s.checkpoint.flushedOffset, flushed)
	}
	return flushed, nil
}

// writeFailed stops writes after an I/O error (the segment's error is
// sticky; RocketMQ marks the store unwritable).
func (s *Store) writeFailed(what string, err error) {
	if s.writeErr.CompareAndSwap(nil, &err) {
		s.opts.Logger.Error("store stops accepting writes", slog.String("after", what), slog.Any("err", err))
	}
}
