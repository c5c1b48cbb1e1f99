package engine

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// appendLock is the append lock (RocketMQ's putMessageLock). It has two
// ways to wait, chosen when the store opens, by its flush mode:
//
//   - Async flush: it spins on a load and then yields its CPU, instead of
//     parking (RocketMQ's PutMessageSpinLock). The critical section is
//     short (a copy of one record and a few stores), so a producer that
//     finds it taken gets it within a few hundred nanoseconds — less than a
//     park and the wake-up that ends it cost (sync.Mutex parks at once when
//     other goroutines are runnable, and on 2 CPUs with 16 producers
//     appending that made a convoy of the lock: ~14 of 16 queued on it).
//   - Sync flush: it is a sync.Mutex. The group commit's owner parks while
//     it lingers, so both CPUs run producers, and a burst of them, released
//     by one flush, meet at the lock. Yielding, each failed attempt was a
//     pass through the scheduler (one in eight of a 64-producer window's
//     CPU samples went to the lock's yields and the clock reads they made);
//     parked, a waiter costs one wake-up and the batch fills
//     (docs/design.md, "The closed-loop ceiling").
//
// Neither is fair: a producer may be overtaken; Put's OSPageCacheBusy check
// still bounds how long the lock may be held.
type appendLock struct {
	state atomic.Int32 // 1 while held
	parks bool         // sync flush: mu does the waiting
	mu    sync.Mutex
}

// spinsBeforeYield is how many failed attempts a spinning waiter makes
// before it yields its CPU to the holder (or anyone else).
const spinsBeforeYield = 64

func (l *appendLock) Lock() { l.lock() }

// lock takes the lock and reports whether it had to wait for it.
func (l *appendLock) lock() (waited bool) {
	if l.parks {
		if !l.mu.TryLock() {
			l.mu.Lock()
			waited = true
		}
		l.state.Store(1)
		return waited
	}
	for spins := 0; !l.state.CompareAndSwap(0, 1); {
		waited = true
		// Spin on a load, not on the CAS: a read keeps the holder's cache
		// line shared until it is released.
		for l.state.Load() != 0 {
			if spins++; spins >= spinsBeforeYield {
				runtime.Gosched()
				spins = 0
			}
		}
	}
	return waited
}

func (l *appendLock) TryLock() bool {
	if !l.parks {
		return l.state.CompareAndSwap(0, 1)
	}
	if !l.mu.TryLock() {
		return false
	}
	l.state.Store(1)
	return true
}

func (l *appendLock) Unlock() {
	if l.state.Swap(0) != 1 {
		panic("engine: unlock of an unlocked append lock")
	}
	if l.parks {
		l.mu.Unlock()
	}
}
