package engine

import (
	"sync"
	"testing"
)

// TestAppendLockExcludes: many goroutines increment a counter under the
// lock, spinning (async flush) and parking (sync flush); with -race a
// missing exclusion or a missing happens-before edge between an Unlock and
// the next Lock is reported.
func TestAppendLockExcludes(t *testing.T) {
	for _, parks := range []bool{false, true} {
		l := &appendLock{parks: parks}
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
			t.Fatalf("parks %v: counter %d, want %d", parks, n, goroutines*each)
		}
		if !l.TryLock() {
			t.Fatalf("parks %v: free lock not taken", parks)
		}
		if l.TryLock() {
			t.Fatalf("parks %v: held lock taken twice", parks)
		}
		l.Unlock()
		func() {
			defer func() {
				if recover() == nil {
					t.Fatalf("parks %v: unlock of a free lock did not panic", parks)
				}
			}()
			l.Unlock()
		}()
	}
}
