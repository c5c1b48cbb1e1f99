//go:build !race

package engine

import (
	"context"
	"testing"
)

// TestPutAllocs: a Put allocates nothing in steady state, async or sync
// (the group commit's waiter is pooled; its deadline is the watchdog's), on
// every backend — the record is encoded into a pooled buffer and
// copied once into the segment, and dispatch (ConsumeQueue unit, index
// entries) allocates nothing either. AllocsPerRun counts every allocation
// of the process during the Puts, the background services' included.
// (Built without -race: the race detector allocates.)
func TestPutAllocs(t *testing.T) {
	for _, tc := range []struct {
		backend string
		mode    FlushMode
	}{{"mem", FlushAsync}, {"mmap", FlushAsync}, {"transient", FlushAsync}, {"uring", FlushAsync}, {"uring-direct", FlushAsync},
		{"mem", FlushSync}, {"mmap", FlushSync}, {"transient", FlushSync}, {"uring", FlushSync}, {"uring-direct", FlushSync}} {
		backend := tc.backend
		t.Run(backend+"/"+tc.mode.String(), func(t *testing.T) {
			ctx := context.Background()
			o := Options{Backend: backend, FlushMode: tc.mode, SegmentSizeBytes: 64 << 20,
				IndexSlotCount: 5000, IndexMaxEntries: 1 << 20, Logger: quietLogger}
			s := openStore(t, t.TempDir(), o)
			defer s.Close()
			m := testMessage("AllocTopic", 0, 1, 200)
			put := func() {
				if _, err := s.Put(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			// Warm up: pools, the ConsumeQueue file, the index file.
			for i := 0; i < 1000; i++ {
				put()
			}
			if err := s.WaitDispatched(ctx, s.MaxOffset()); err != nil {
				t.Fatal(err)
			}
			if allocs := testing.AllocsPerRun(5000, put); allocs != 0 {
				t.Fatalf("a Put (%v flush) allocates %.2f times in steady state, want 0", tc.mode, allocs)
			}
		})
	}
}
