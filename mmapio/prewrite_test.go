//go:build linux

package mmapio

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mqstore/mqstore/internal/disktest"
	"github.com/mqstore/mqstore/internal/faultseam"
	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
)

// TestPrewrittenSegmentStaysWritten: a segment opened with Spec.Prewrite has
// no unwritten extent; appends, a flush and a Truncate that discards some of
// them leave none (the discarded bytes are zeros on disk, the valid ones
// intact), and neither does the Truncate recovery makes after the file is
// closed and opened again as an existing segment (without Prewrite: it
// knows nothing of how the file was made). A segment made without Prewrite
// has unwritten extents after the same steps, so the check can tell.
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
			spec := mappedfile.Spec{Path: filepath.Join(dir, "seg"), SizeBytes: size, Prewrite: tc.prewrite}
			mf, err := New(Options{}).Open(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			check := func(when string, validEnd int64) {
				t.Helper()
				u := disktest.Unwritten(t, spec.Path, 0, size)
				if tc.prewrite && u != 0 {
					t.Fatalf("%s: %d unwritten bytes in a prewritten segment", when, u)
				}
				if !tc.prewrite && u == 0 {
					t.Fatalf("%s: a fallocated segment has no unwritten bytes: the check cannot tell", when)
				}
				onDisk, err := os.ReadFile(spec.Path)
				if err != nil {
					t.Fatal(err)
				}
				checkPattern(t, onDisk[:validEnd], 0)
				checkZeros(t, onDisk[validEnd:], validEnd)
			}
			check("new", 0)
			appendPattern(t, mf, 400_000)
			if _, err := mf.Flush(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if err := mf.Truncate(ctx, tc.validEnds[0]); err != nil {
				t.Fatal(err)
			}
			check("after Truncate", tc.validEnds[0])
			appendPattern(t, mf, 100_000) // more than the second Truncate keeps
			if err := mf.Close(); err != nil {
				t.Fatal(err)
			}
			spec.Prewrite = false
			mf, err = New(Options{}).Open(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer mf.Close()
			if err := mf.Truncate(ctx, tc.validEnds[1]); err != nil {
				t.Fatal(err)
			}
			check("after reopening and Truncate", tc.validEnds[1])
		})
	}
}

// TestTruncateRewritesOnlyDiscardedPages: on a prewritten segment, Truncate
// clears the rest of the valid end's page through the mapping and writes
// zeros over exactly the whole pages that held discarded bytes — not the
// zeros past them — then fdatasyncs; it never fallocates.
func TestTruncateRewritesOnlyDiscardedPages(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	const size, wrote, validEnd = 1 << 20, 200_000, 50_001
	mf, err := New(Options{}).Open(ctx, mappedfile.Spec{Path: filepath.Join(dir, "seg"), SizeBytes: size, Prewrite: true})
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	appendPattern(t, mf, wrote)
	if _, err := mf.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	inj := faultseam.New(t, dir)
	if err := mf.Truncate(ctx, validEnd); err != nil {
		t.Fatal(err)
	}
	calls := inj.Calls()
	if len(calls) == 0 || calls[len(calls)-1].Kind != segfile.OpFdatasync {
		t.Fatalf("calls %v: want an fdatasync last", calls)
	}
	from, to := roundUpToPage(validEnd), roundUpToPage(wrote)
	next := from
	for _, c := range calls[:len(calls)-1] {
		if c.Kind != segfile.OpPwrite || c.Offset != next {
			t.Fatalf("calls %v: want zeros written over [%d,%d) in order, nothing else", calls, from, to)
		}
		next += c.Length
	}
	if next != to {
		t.Fatalf("zeros written over [%d,%d), want [%d,%d)", from, next, from, to)
	}
}
