//go:build linux && !race

// Allocation checks: the race detector allocates, so these are built
// without -race only (make test runs them in its own step: -run Allocs).

package transientpool

import (
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/conformance"
)

func TestConformanceAllocs(t *testing.T) {
	conformance.RunAllocs(t, func(t testing.TB) mappedfile.Backend { return newTestBackend(t, Options{}) })
}

func TestAppendAllocs(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		b := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 1})
		dir := t.TempDir()
		mf := openSeg(t, b, specIn(dir, "seg"))
		if fallback {
			mf = openSeg(t, b, specIn(dir, "fallback"))
		}
		var enc mappedfile.Encoder = mappedfile.Bytes(record(1, 64))
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := mf.Append(64, enc); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Fatalf("fallback=%v: Append allocates %.1f times per call", fallback, allocs)
		}
		ctx := testContext(t)
		allocs = testing.AllocsPerRun(20, func() {
			if _, err := mf.Append(64, enc); err != nil {
				t.Fatal(err)
			}
			if _, err := mf.Commit(ctx, 0); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Fatalf("fallback=%v: Append+Commit allocates %.1f times per call", fallback, allocs)
		}
	}
}
