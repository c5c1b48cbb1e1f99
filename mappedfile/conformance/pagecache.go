package conformance

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
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
		n := 1 + rng.IntN(5*mappedfile.PageSize)
		if rng.IntN(4) == 0 { // now and then a record of many pages
			n = 1 + rng.IntN(18*mappedfile.PageSize)
		}
		appendN(t, mf, min(n, int(SegmentSizeBytes-mf.WrotePosition())))
		if _, err := mf.Commit(h.ctx, rng.IntN(2)); err != nil {
			t.Fatal(err)
		}
		fl, err := mf.Flush(h.ctx, rng.IntN(5))
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
		if _, err := mf.Flush(h.ctx, 1000); err != nil { // an overwrite is flushed whatever least-pages says
			t.Fatal(err)
		}
		disktest.CheckSynced(t, mf.Path(), 0, SegmentSizeBytes)
	}
}

// testTruncateLeavesNoDirtyPage: after a crash the valid bytes may be only
// in the page cache; Truncate must leave the whole file clean, the valid
// bytes intact and zeros after them. The same for a Truncate of an open
// file whose tail was never committed (a buffered backend holds it in
// memory only).
func testTruncateLeavesNoDirtyPage(t *testing.T, h *harness) {
	for _, tc := range []struct {
		reopen   bool // as recovery does: the bytes were committed, the file closed unflushed
		validEnd int64
	}{
		{true, 0}, {true, 5000}, {true, 8192}, {true, SegmentSizeBytes - 100}, {true, SegmentSizeBytes},
		{false, 9000},
	} {
		name := fmt.Sprintf("reopened/validEnd=%d", tc.validEnd)
		if !tc.reopen {
			name = fmt.Sprintf("open/validEnd=%d", tc.validEnd)
		}
		t.Run(name, func(t *testing.T) {
			spec := h.spec(fmt.Sprintf("truncate-%v-%d", tc.reopen, tc.validEnd))
			mf, err := h.backend.Open(h.ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			appendN(t, mf, SegmentSizeBytes)
			if tc.reopen {
				if _, err := mf.Commit(h.ctx, 0); err != nil { // in the page cache, not synced
					t.Fatal(err)
				}
				if err := mf.Close(); err != nil {
					t.Fatal(err)
				}
				if len(disktest.Unsynced(t, spec.Path, 0, SegmentSizeBytes)) == 0 {
					// A backend whose commit is durable (O_DIRECT, a sync at
					// commit): nothing for Truncate to sync; the contents are
					// still checked.
					t.Logf("%s: the committed segment is clean before Truncate", h.backend.Name())
				}
				if mf, err = h.backend.Open(h.ctx, spec); err != nil {
					t.Fatal(err)
				}
			}
			defer mf.Close()
			if err := mf.Truncate(h.ctx, tc.validEnd); err != nil {
				t.Fatal(err)
			}
			disktest.CheckSynced(t, spec.Path, 0, SegmentSizeBytes)
			onDisk, err := os.ReadFile(spec.Path)
			if err != nil {
				t.Fatal(err)
			}
			checkPattern(t, onDisk[:tc.validEnd], 0)
			if i := slices.IndexFunc(onDisk[tc.validEnd:], func(b byte) bool { return b != 0 }); i >= 0 {
				t.Fatalf("byte %d past the valid end %d is %#x, want 0", tc.validEnd+int64(i), tc.validEnd, onDisk[tc.validEnd+int64(i)])
			}
		})
	}
}
