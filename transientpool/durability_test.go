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

// The conformance suite's page-cache checks cover Flush and Truncate on
// segments smaller than a commit chunk, in every variant (pool buffer,
// fallback, Wait). What only this backend has: a commit split into chunks.

// TestFlushIsDurable commits and flushes a segment larger than two commit
// chunks with records larger than one; after each Flush the pages below the
// flushed position are clean.
func TestFlushIsDurable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		size     int64
		fallback bool
		record   int
	}{
		{"buffer/record=3MiB", commitChunkBytes*2 + 3*mappedfile.PageSize + 100, false, 3 << 20},
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
