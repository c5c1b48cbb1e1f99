//go:build linux

package transientpool

import (
	"path/filepath"
	"testing"

	"github.com/mqstore/mqstore/internal/disktest"
	"github.com/mqstore/mqstore/mappedfile"
)

// These tests read the page cache's flags (root): after a Flush or a
// Truncate no page of the durable range may be dirty. Under
// `strace -f -e inject=fdatasync,fsync,msync:retval=0` they fail.

// TestFlushIsDurable commits and flushes a segment larger than one commit
// chunk, through a pool buffer and through the file mapping (fallback);
// after each Flush the pages below the flushed position are clean.
func TestFlushIsDurable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		size     int64
		fallback bool
		record   int
	}{
		{"buffer/record=1000", 256 << 10, false, 1000},
		{"buffer/record=3MiB", commitChunkBytes*2 + 3*mappedfile.PageSize + 100, false, 3 << 20},
		{"fallback/record=1000", 256 << 10, true, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			size := tc.size
			b := newTestBackend(t, Options{SegmentSizeBytes: size, PoolSize: 1, NoLock: true})
			if tc.fallback {
				buf, err := b.pool.borrow(ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.pool.giveBack(buf) })
			}
			mf := openSeg(t, b, mappedfile.Spec{Path: filepath.Join(disktest.Dir(t), "seg"), SizeBytes: size})
			var checked int64
			for mf.WrotePosition() < size {
				n := min(tc.record, int(size-mf.WrotePosition()))
				if _, err := mf.Append(n, mappedfile.Bytes(record(7, n))); err != nil {
					t.Fatal(err)
				}
				if _, err := mf.Commit(ctx, 4); err != nil {
					t.Fatal(err)
				}
				fl, err := mf.Flush(ctx, 2)
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
			commitAndFlush(t, mf)
			disktest.CheckSynced(t, mf.Path(), 0, size)
		})
	}
}

// TestTruncateMakesValidDataDurable: recovery truncates a segment whose
// bytes are only in the page cache (a killed process committed them but
// did not flush), or still in the buffer; afterwards the whole file is
// clean.
func TestTruncateMakesValidDataDurable(t *testing.T) {
	const size = testSegmentBytes
	for _, tc := range []struct {
		name     string
		reopen   bool // reopen the file (recovery) rather than truncate the open one
		validEnd int64
	}{
		{"reopened/validEnd=5000", true, 5000},
		{"reopened/validEnd=size-100", true, size - 100},
		{"reopened/validEnd=size", true, size},
		{"buffered/validEnd=9000", false, 9000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			b := newTestBackend(t, Options{SegmentSizeBytes: size, PoolSize: 2, NoLock: true})
			spec := mappedfile.Spec{Path: filepath.Join(disktest.Dir(t), "seg"), SizeBytes: size}
			mf := openSeg(t, b, spec)
			if _, err := mf.Append(size, mappedfile.Bytes(record(3, size))); err != nil {
				t.Fatal(err)
			}
			if tc.reopen {
				if _, err := mf.Commit(ctx, 0); err != nil {
					t.Fatal(err)
				}
				if err := mf.Close(); err != nil { // no Flush: as if killed
					t.Fatal(err)
				}
				if len(disktest.Unsynced(t, spec.Path, 0, size)) == 0 {
					t.Fatal("the committed segment is clean before Truncate: the test proves nothing")
				}
				mf = openSeg(t, b, spec)
			}
			if err := mf.Truncate(ctx, tc.validEnd); err != nil {
				t.Fatal(err)
			}
			disktest.CheckSynced(t, spec.Path, 0, size)
			want := make([]byte, size)
			copy(want, record(3, size)[:tc.validEnd])
			checkFile(t, spec.Path, want)
		})
	}
}
