//go:build linux && !race

// Allocation checks: the race detector allocates, so these are built
// without -race only (make test runs them in its own step: -run Allocs).

package mmapio

import (
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/conformance"
)

func TestConformanceAllocs(t *testing.T) {
	for _, v := range []Options{{}, {TouchByWriting: true}} {
		conformance.RunAllocs(t, func(testing.TB) mappedfile.Backend { return New(v) })
	}
}

func TestAppendAllocs(t *testing.T) {
	mf := openSegment(t, Options{}, "", "seg", 4<<20)
	var enc mappedfile.Encoder = patternEncoder{}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := mf.Append(128, enc); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Append allocates %.2f times per call", allocs)
	}
}

func TestOverwriteAllocs(t *testing.T) {
	mf := openSegment(t, Options{}, "", "seg", 64<<10)
	appendPattern(t, mf, 8192)
	slot := []byte{1, 2, 3, 4}
	var pos int64
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := mf.WriteAt(slot, pos); err != nil {
			t.Fatal(err)
		}
		pos = (pos + 4) % 8192
	})
	if allocs != 0 {
		t.Fatalf("WriteAt allocates %.2f times per call", allocs)
	}
	old := make([]byte, len(slot))
	allocs = testing.AllocsPerRun(1000, func() {
		if err := mf.SwapEach(slot, old, len(slot), []int64{pos}); err != nil {
			t.Fatal(err)
		}
		pos = (pos + 4) % 8192
	})
	if allocs != 0 {
		t.Fatalf("SwapEach allocates %.2f times per call", allocs)
	}
}
