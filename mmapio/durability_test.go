//go:build linux

package mmapio

import (
	"fmt"
	"testing"

	"github.com/mqstore/mqstore/internal/disktest"
	"github.com/mqstore/mqstore/mappedfile"
)

// These tests read the page cache's flags (root): after a Flush or a
// Truncate no page of the durable range may be dirty. Under
// `strace -f -e inject=fdatasync,fsync,msync:retval=0` they fail.

// TestFlushIsDurable appends records of several sizes and flushes with
// least-pages rules; after each Flush the pages below the flushed position
// are clean, and bytes rewritten in place are clean after the next Flush.
func TestFlushIsDurable(t *testing.T) {
	for _, tc := range []struct {
		name       string
		record     int
		leastPages int
	}{
		{"record=100/leastPages=0", 100, 0},
		{"record=4096/leastPages=4", 4096, 4},
		{"record=70000/leastPages=1", 70000, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			const size = 256 << 10
			mf := openSegment(t, Options{}, disktest.Dir(t), "seg", size)
			var checked int64
			for mf.WrotePosition()+int64(tc.record) <= size {
				appendPattern(t, mf, tc.record)
				fl, err := mf.Flush(ctx, tc.leastPages)
				if err != nil {
					t.Fatal(err)
				}
				if mf.WrotePosition() > fl {
					fl &^= mappedfile.PageSize - 1 // the page of fl may hold unflushed bytes too
				}
				// Pages below checked were clean and nothing wrote there since.
				disktest.CheckSynced(t, mf.Path(), checked, fl-checked)
				checked = max(checked, fl&^(mappedfile.PageSize-1))
			}
			if _, err := mf.Flush(ctx, 0); err != nil {
				t.Fatal(err)
			}
			disktest.CheckSynced(t, mf.Path(), 0, mf.WrotePosition())
			if _, err := mf.WriteAt([]byte("rewritten"), 5000); err != nil {
				t.Fatal(err)
			}
			if _, err := mf.Flush(ctx, 1000); err != nil {
				t.Fatal(err)
			}
			disktest.CheckSynced(t, mf.Path(), 0, size)
		})
	}
}

// TestTruncateMakesValidDataDurable: recovery reopens a segment written by
// a process that was killed (its bytes are in the page cache, not synced)
// and truncates it; afterwards the whole file — the valid bytes below
// validEnd as well as the zeroed tail — must be clean. Before the fix,
// Truncate synced only [validEnd, size) when validEnd lay in the last page.
func TestTruncateMakesValidDataDurable(t *testing.T) {
	const size = 256<<10 + 1000 // a partial last page too
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
