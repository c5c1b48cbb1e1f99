package engine

import (
	"context"
	"sync"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

// TestQueueOffsetsWhileQueuesAreMade: producers putting into queues that
// do not exist yet, many at once (a new queue copies the counter table that
// Put reads without the lock), get every queue offset of each queue once,
// in order; after a reopen the queues continue where they were.
func TestQueueOffsetsWhileQueuesAreMade(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	dir := t.TempDir()
	o := Options{BackendImpl: fs, SegmentSizeBytes: 1 << 20, Logger: quietLogger}
	s := openStore(t, dir, o)
	const producers, queues, each = 8, 24, 40
	var mu sync.Mutex
	got := make(map[int32][]int64)
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				q := int32((p*each + i) % queues)
				res, err := s.Put(ctx, testMessage("Q", q, i, 20))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got[q] = append(got[q], res.QueueOffset)
				mu.Unlock()
			}
		}(p)
	}
	wg.Wait()
	for q, offs := range got {
		seen := make(map[int64]bool)
		for _, o := range offs {
			seen[o] = true
		}
		for want := int64(0); want < int64(len(offs)); want++ {
			if !seen[want] {
				t.Fatalf("queue %d: offsets %v miss %d", q, offs, want)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, o)
	defer s.Close()
	for q := int32(0); q < queues; q++ {
		res, err := s.Put(ctx, testMessage("Q", q, 0, 20))
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(len(got[q])); res.QueueOffset != want {
			t.Fatalf("queue %d after reopen: offset %d, want %d", q, res.QueueOffset, want)
		}
	}
}
