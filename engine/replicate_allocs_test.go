//go:build !race

package engine

import (
	"context"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

// TestAppendReplicatedAllocs: a slave appending its master's frames does
// not allocate in steady state (every record is decoded and checked; the
// split ones wait in a reused buffer).
func TestAppendReplicatedAllocs(t *testing.T) {
	ctx := context.Background()
	o := Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{}), SegmentSizeBytes: 64 << 20, Logger: quietLogger}
	master := openRole(t, t.TempDir(), o)
	for i := 0; i < 4000; i++ {
		if _, err := master.Put(ctx, testMessage("ReplicatedTopic", int32(i%4), i, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	data := logBytes(t, master, 0, master.MaxOffset())
	// AllocsPerRun counts every goroutine's allocations: the master's
	// services (dispatch of 4000 records, flushes) must be over before the
	// slave is measured, or their allocations are blamed on it.
	if err := master.Close(); err != nil {
		t.Fatal(err)
	}
	so := Options{Backend: "mmap", Role: Slave, SegmentSizeBytes: 64 << 20, Logger: quietLogger}
	slave := openRole(t, t.TempDir(), so)
	defer slave.Close()
	const frame = 32<<10 + 123 // frames end inside records
	off := 0
	appendFrame := func() {
		end := min(off+frame, len(data))
		if _, err := slave.AppendReplicated(ctx, int64(off), data[off:end]); err != nil {
			t.Fatal(err)
		}
		off = end
	}
	for i := 0; i < 20; i++ { // warm up: queues, index file, buffers
		appendFrame()
	}
	if err := slave.WaitDispatched(ctx, int64(off)-frame); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(60, appendFrame); allocs > 0 {
		t.Fatalf("%v allocations per frame", allocs)
	}
}
