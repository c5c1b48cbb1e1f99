//go:build linux

package transientpool

import (
	"path/filepath"
	"testing"

	"github.com/mqstore/mqstore/internal/disktest"
	"github.com/mqstore/mqstore/internal/faultseam"
	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
)

// TestPrewrittenSegmentStaysWritten: a segment opened with Spec.Prewrite has
// no unwritten extent; commits, a flush and a Truncate that discards some
// of them (committed, and still in the buffer) leave none, the file holding
// exactly the valid bytes and zeros; nor does the Truncate recovery makes
// after the file is closed and opened again as an existing segment (with no
// Prewrite: it knows nothing of how the file was made). Without Prewrite the
// same steps leave unwritten extents, so the check can tell.
func TestPrewrittenSegmentStaysWritten(t *testing.T) {
	ctx := testContext(t)
	const size = 1 << 20
	for _, tc := range []struct {
		name      string
		prewrite  bool
		validEnds []int64 // the first Truncate's, then the one after reopening
	}{
		{"prewrite/mid", true, []int64{300_001, 200_000}},
		{"prewrite/aligned", true, []int64{3 * 4096, 3 * 4096}},
		{"prewrite/zero", true, []int64{0, 0}},
		{"fallocated", false, []int64{300_001, 200_000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			disktest.NeedExtents(t, dir)
			b := newTestBackend(t, Options{SegmentSizeBytes: size, PoolSize: 2, NoLock: true})
			spec := mappedfile.Spec{Path: filepath.Join(dir, "seg"), SizeBytes: size, Prewrite: tc.prewrite}
			want := make([]byte, size)
			check := func(when string, validEnd int64) {
				t.Helper()
				u := disktest.Unwritten(t, spec.Path, 0, size)
				if tc.prewrite && u != 0 {
					t.Fatalf("%s: %d unwritten bytes in a prewritten segment", when, u)
				}
				if !tc.prewrite && u == 0 {
					t.Fatalf("%s: a fallocated segment has no unwritten bytes: the check cannot tell", when)
				}
				clear(want[validEnd:])
				checkFile(t, spec.Path, want)
			}
			mf := openSeg(t, b, spec)
			check("new", 0)
			appendBytes(t, mf, want, record(1, 350_000))
			commitAndFlush(t, mf)
			appendBytes(t, mf, want, record(2, 50_000)) // in the buffer only
			if err := mf.Truncate(ctx, tc.validEnds[0]); err != nil {
				t.Fatal(err)
			}
			check("after Truncate", tc.validEnds[0])
			appendBytes(t, mf, want, record(3, 100_000)) // more than the second Truncate keeps
			commitAndFlush(t, mf)
			if err := mf.Close(); err != nil {
				t.Fatal(err)
			}
			spec.Prewrite = false
			mf = openSeg(t, b, spec)
			if err := mf.Truncate(ctx, tc.validEnds[1]); err != nil {
				t.Fatal(err)
			}
			check("after reopening and Truncate", tc.validEnds[1])
			if err := mf.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTruncateRewritesOnlyDiscardedBytes: on a prewritten segment, Truncate
// writes zeros over exactly the discarded bytes' pages from the valid end
// (the rest of its page, then whole pages) — not the zeros past them — then
// fdatasyncs; it never fallocates.
func TestTruncateRewritesOnlyDiscardedBytes(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	const size, wrote, validEnd = 1 << 20, 200_000, 50_001
	b := newTestBackend(t, Options{SegmentSizeBytes: size, PoolSize: 1, NoLock: true})
	mf := openSeg(t, b, mappedfile.Spec{Path: filepath.Join(dir, "seg"), SizeBytes: size, Prewrite: true})
	appendBytes(t, mf, make([]byte, size), record(9, wrote))
	commitAndFlush(t, mf)
	inj := faultseam.New(t, dir)
	if err := mf.Truncate(ctx, validEnd); err != nil {
		t.Fatal(err)
	}
	calls := inj.Calls()
	if len(calls) == 0 || calls[len(calls)-1].Kind != segfile.OpFdatasync {
		t.Fatalf("calls %v: want an fdatasync last", calls)
	}
	to := int64(wrote+4095) &^ 4095
	next := int64(validEnd)
	for _, c := range calls[:len(calls)-1] {
		if c.Kind != segfile.OpPwrite || c.Offset != next {
			t.Fatalf("calls %v: want zeros written over [%d,%d) in order, nothing else", calls, validEnd, to)
		}
		next += c.Length
	}
	if next != to {
		t.Fatalf("zeros written over [%d,%d), want [%d,%d)", validEnd, next, validEnd, to)
	}
}
