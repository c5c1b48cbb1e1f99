package conformance

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/mqstore/mqstore/internal/disktest"
	"github.com/mqstore/mqstore/mappedfile"
)

// testPrewrittenSegmentStaysWritten: a segment opened with Spec.Prewrite
// has no unwritten extent; appends, commits, a flush and a Truncate that
// discards some of them (committed ones, and ones a buffered backend holds
// in memory only) leave none, the file holding exactly the valid bytes and
// zeros; nor does the Truncate recovery makes after the file is closed and
// opened again as an existing segment (without Prewrite: it knows nothing
// of how the file was made). A segment made without Prewrite has unwritten
// extents after the same steps, so the check can tell — unless the backend
// zeroes every new segment itself, and then that one must stay written too.
func testPrewrittenSegmentStaysWritten(t *testing.T, h *harness) {
	for _, tc := range []struct {
		name      string
		prewrite  bool
		validEnds [2]int64 // the first Truncate's, then the one after reopening
	}{
		{"prewrite/mid", true, [2]int64{100_001, 60_000}},
		{"prewrite/aligned", true, [2]int64{3 * mappedfile.PageSize, 3 * mappedfile.PageSize}},
		{"prewrite/zero", true, [2]int64{0, 0}},
		{"fallocated", false, [2]int64{100_001, 60_000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disktest.NeedExtents(t, h.dir)
			spec := h.spec(fmt.Sprintf("prewrite-%v-%d", tc.prewrite, tc.validEnds[0]))
			spec.Prewrite = tc.prewrite
			mf, err := h.backend.Open(h.ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = mf.Close() }()
			written := tc.prewrite // every block of the segment is written
			if !tc.prewrite && disktest.Unwritten(t, spec.Path, 0, SegmentSizeBytes) == 0 {
				// A backend that zeroes new segments itself (uring's PreZero):
				// they must stay written just the same.
				t.Logf("%s writes every block of a new segment itself", h.backend.Name())
				written = true
			}
			check := func(when string, validEnd int64) {
				t.Helper()
				u := disktest.Unwritten(t, spec.Path, 0, SegmentSizeBytes)
				if written && u != 0 {
					t.Fatalf("%s: %d unwritten bytes in a segment whose every block was written", when, u)
				}
				if !written && u == 0 {
					t.Fatalf("%s: a fallocated segment has no unwritten bytes: the check cannot tell", when)
				}
				checkFileHolds(t, spec.Path, validEnd)
			}
			check("new", 0)
			appendN(t, mf, 120_000)
			commitFlush(t, h.ctx, mf)
			appendN(t, mf, 20_000) // not committed: a buffered backend holds it in memory
			if err := mf.Truncate(h.ctx, tc.validEnds[0]); err != nil {
				t.Fatal(err)
			}
			check("after Truncate", tc.validEnds[0])
			appendN(t, mf, 40_000) // more than the second Truncate keeps
			commitFlush(t, h.ctx, mf)
			if err := mf.Close(); err != nil {
				t.Fatal(err)
			}
			spec.Prewrite = false
			if mf, err = h.backend.Open(h.ctx, spec); err != nil {
				t.Fatal(err)
			}
			if err := mf.Truncate(h.ctx, tc.validEnds[1]); err != nil {
				t.Fatal(err)
			}
			check("after reopening and Truncate", tc.validEnds[1])
		})
	}
}

// checkFileHolds reads the file at path: the pattern below validEnd, zeros
// from there to the end.
func checkFileHolds(t testing.TB, path string, validEnd int64) {
	t.Helper()
	onDisk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checkPattern(t, onDisk[:validEnd], 0)
	if i := slices.IndexFunc(onDisk[validEnd:], func(b byte) bool { return b != 0 }); i >= 0 {
		t.Fatalf("byte %d past the valid end %d is %#x, want 0", validEnd+int64(i), validEnd, onDisk[validEnd+int64(i)])
	}
}

// testTruncateRewritesOnlyDiscardedPages: on a prewritten segment, Truncate
// writes zeros over the discarded bytes' pages — from the valid end, or from
// its page when the backend rewrites that page whole, up to the page after
// the last written byte, not the zeros past it — in order, syncs last, and
// never allocates (a fallocate would bring unwritten extents back).
func testTruncateRewritesOnlyDiscardedPages(t *testing.T, h *harness) {
	const wrote, validEnd = 80_000, 20_001
	spec := h.spec("rewrite")
	spec.Prewrite = true
	mf, err := h.backend.Open(h.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mf.Close() }()
	appendN(t, mf, wrote)
	commitFlush(t, h.ctx, mf)
	mark := len(h.injector.Ops())
	if err := mf.Truncate(h.ctx, validEnd); err != nil {
		t.Fatal(err)
	}
	var ops []Op
	for _, op := range h.injector.Ops()[mark:] {
		if samePath(op.Path, spec.Path) {
			ops = append(ops, op)
		}
	}
	if len(ops) == 0 || !ops[len(ops)-1].Kind.isSync() {
		t.Fatalf("Truncate's operations %v: want a sync last", ops)
	}
	page := int64(mappedfile.PageSize)
	from, to := validEnd&^(page-1), (wrote+page-1)&^(page-1)
	next := int64(-1)
	for _, op := range ops[:len(ops)-1] {
		switch {
		case op.Kind == KindAllocate:
			t.Fatalf("Truncate's operations %v: a prewritten segment is never allocated again", ops)
		case op.Kind.isSync():
			continue
		case !op.Kind.isWrite():
			t.Fatalf("Truncate's operations %v: want only writes of zeros, then a sync", ops)
		case next < 0:
			if op.Offset < from || op.Offset > (validEnd+page-1)&^(page-1) {
				t.Fatalf("Truncate's operations %v: the zeros start at %d, want the valid end %d or its page", ops, op.Offset, validEnd)
			}
		case op.Offset != next:
			t.Fatalf("Truncate's operations %v: want the zeros written in order, without a gap", ops)
		}
		next = op.Offset + op.Length
	}
	if next != to {
		t.Fatalf("Truncate's operations %v: zeros written up to %d, want up to %d (the page after the last written byte)", ops, next, to)
	}
	checkFileHolds(t, spec.Path, validEnd)
}
