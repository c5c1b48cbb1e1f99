package conformance

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mqstore/mqstore/internal/disktest"
	"github.com/mqstore/mqstore/mappedfile"
)

// pageCacheChecks run for backends whose files are OS files: they read the
// page cache's flags, which a skipped sync leaves dirty.
var pageCacheChecks = []check{
	{"FlushLeavesNoDirtyPage", testFlushLeavesNoDirtyPage},
	{"TruncateLeavesNoDirtyPage", testTruncateLeavesNoDirtyPage},
}

// testFlushLeavesNoDirtyPage appends, commits and flushes at random; after
// every Flush no page below the flushed position may be dirty.
func testFlushLeavesNoDirtyPage(t *testing.T, h *harness) {
	mf := h.open(t, "seg")
	rng := rand.New(rand.NewPCG(21, 22))
	for mf.WrotePosition() < SegmentSizeBytes {
		n := min(1+rng.IntN(5*mappedfile.PageSize), int(SegmentSizeBytes-mf.WrotePosition()))
		appendN(t, mf, n)
		if _, err := mf.Commit(h.ctx, rng.IntN(2)); err != nil {
			t.Fatal(err)
		}
		fl, err := mf.Flush(h.ctx, rng.IntN(3))
		if err != nil {
			t.Fatal(err)
		}
		// A page holding both flushed bytes and bytes written after the
		// sync is dirty again: check whole pages below fl then.
		if mf.WrotePosition() > fl {
			fl &^= mappedfile.PageSize - 1
		}
		disktest.CheckSynced(t, mf.Path(), 0, fl)
	}
	commitFlush(t, h.ctx, mf)
	disktest.CheckSynced(t, mf.Path(), 0, SegmentSizeBytes)
	if ow, ok := mf.(mappedfile.Overwriter); ok {
		if _, err := ow.WriteAt([]byte("HEAD"), 100); err != nil {
			t.Fatal(err)
		}
		if _, err := mf.Flush(h.ctx, 0); err != nil {
			t.Fatal(err)
		}
		disktest.CheckSynced(t, mf.Path(), 0, SegmentSizeBytes)
	}
}

// testTruncateLeavesNoDirtyPage: after a crash the valid bytes may be only
// in the page cache; Truncate must leave the whole file clean.
func testTruncateLeavesNoDirtyPage(t *testing.T, h *harness) {
	for _, validEnd := range []int64{0, 5000, 8192, SegmentSizeBytes - 100, SegmentSizeBytes} {
		t.Run(fmt.Sprintf("validEnd=%d", validEnd), func(t *testing.T) {
			spec := h.spec(fmt.Sprintf("truncate-%d", validEnd))
			mf, err := h.backend.Open(h.ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			appendN(t, mf, SegmentSizeBytes)
			if _, err := mf.Commit(h.ctx, 0); err != nil { // in the page cache, not synced
				t.Fatal(err)
			}
			if err := mf.Close(); err != nil {
				t.Fatal(err)
			}
			mf, err = h.backend.Open(h.ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer mf.Close()
			if err := mf.Truncate(h.ctx, validEnd); err != nil {
				t.Fatal(err)
			}
			disktest.CheckSynced(t, spec.Path, 0, SegmentSizeBytes)
		})
	}
}
