package engine

import (
	"runtime"
	"sync/atomic"
)

// spinMutex is the append lock (RocketMQ's PutMessageSpinLock): a CAS that
// spins briefly and then yields its CPU, instead of parking. The critical
// section it guards is short (a copy of one record and a few stores), so a
// producer that finds it taken gets it within a few hundred nanoseconds —
// less than a park and the wake-up that ends it cost (sync.Mutex parks at
// once when other goroutines are runnable, and on 2 CPUs with 16 producers
// appending that made a convoy of the lock: ~14 of 16 queued on it).
//
// It is not fair: a producer may be overtaken, which a FIFO order would not
// let happen; Put's OSPageCacheBusy check still bounds how long the lock may
// be held. A holder that is preempted makes the others yield until it runs
// again.
type spinMutex struct {
	state atomic.Int32 // 1 while held
}

// spinsBeforeYield is how many failed attempts a waiter makes before it
// yields its CPU to the holder (or anyone else).
const spinsBeforeYield = 64

func (l *spinMutex) Lock() { l.lock() }

// lock takes the lock and reports whether it had to wait for it.
func (l *spinMutex) lock() (waited bool) {
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

func (l *spinMutex) TryLock() bool { return l.state.CompareAndSwap(0, 1) }

func (l *spinMutex) Unlock() {
	if l.state.Swap(0) != 1 {
		panic("engine: unlock of an unlocked append lock")
	}
}
