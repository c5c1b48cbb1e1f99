//go:build linux

package mmapio

import (
	"fmt"
	"testing"

	"github.com/mqstore/mqstore/internal/disktest"
)

// The conformance suite's page-cache checks (FlushLeavesNoDirtyPage,
// TruncateLeavesNoDirtyPage) cover Flush and Truncate on whole-page
// segments. What only this backend meets: files whose size is not a whole
// number of pages (a ConsumeQueue file is 300,000 units of 20 bytes).

// TestTruncatePartialLastPageIsDurable: recovery reopens a file with a
// partial last page written by a process that was killed (its bytes are in
// the page cache, not synced) and truncates it; afterwards the whole file —
// the valid bytes below validEnd as well as the zeroed tail — must be clean
// (root: it reads the page cache's flags). Before the fix, Truncate synced
// only [validEnd, size) when validEnd lay in the last page.
func TestTruncatePartialLastPageIsDurable(t *testing.T) {
	const size = 256<<10 + 1000
	for _, validEnd := range []int64{0, 5000, 8192, size - 100, size} {
		t.Run(fmt.Sprintf("validEnd=%d", validEnd), func(t *testing.T) {
			ctx := testContext(t)
			dir := disktest.Dir(t)
			mf := openSegment(t, Options{}, dir, "seg", size)
			appendPattern(t, mf, size)
			if err := mf.Close(); err != nil { // no Flush: as if killed
				t.Fatal(err)
			}
			if len(disktest.Unsynced(t, mf.Path(), 0, size)) == 0 {
				t.Fatal("the written segment is clean before Truncate: the test proves nothing")
			}
			mf = openSegment(t, Options{}, dir, "seg", size)
			if err := mf.Truncate(ctx, validEnd); err != nil {
				t.Fatal(err)
			}
			disktest.CheckSynced(t, mf.Path(), 0, size)
		})
	}
}
