package engine

import (
	"sync"
	"testing"
)

// TestSpinMutexExcludes: many goroutines increment a counter under the
// lock; with -race a missing exclusion or a missing happens-before edge
// between an Unlock and the next Lock is reported.
func TestSpinMutexExcludes(t *testing.T) {
	var l spinMutex
	var wg sync.WaitGroup
	n := 0
	const goroutines, each = 32, 2000
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				l.Lock()
				n++
				l.Unlock()
			}
		}()
	}
	wg.Wait()
	if n != goroutines*each {
		t.Fatalf("counter %d, want %d", n, goroutines*each)
	}
	if !l.TryLock() {
		t.Fatal("free lock not taken")
	}
	if l.TryLock() {
		t.Fatal("held lock taken twice")
	}
	l.Unlock()
	defer func() {
		if recover() == nil {
			t.Fatal("unlock of a free lock did not panic")
		}
	}()
	l.Unlock()
}
