package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/internal/disktest"
	"github.com/mqstore/mqstore/internal/faultseam"
	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
)

// TestPrewriteDefaultFollowsFlushMode: PrewriteSegments resolves at Open —
// auto for sync flush, off for async — and Store.Options reports the resolved
// value (what a run record shows); an explicit choice is kept; a backend
// whose files live in memory is always off; with NoPreallocate the default
// is off and an explicit on or auto is refused; an unknown value is refused.
func TestPrewriteDefaultFollowsFlushMode(t *testing.T) {
	for _, tc := range []struct {
		name          string
		backend       string
		mode          FlushMode
		prewrite      PrewriteMode
		noPreallocate bool
		want          PrewriteMode
		wantErr       error
	}{
		{"async/default", "mmap", FlushAsync, PrewriteDefault, false, PrewriteOff, nil},
		{"sync/default", "mmap", FlushSync, PrewriteDefault, false, PrewriteAuto, nil},
		{"async/on", "mmap", FlushAsync, PrewriteOn, false, PrewriteOn, nil},
		{"sync/off", "transient", FlushSync, PrewriteOff, false, PrewriteOff, nil},
		{"sync/default/transient", "transient", FlushSync, PrewriteDefault, false, PrewriteAuto, nil},
		{"sync/on", "transient", FlushSync, PrewriteOn, false, PrewriteOn, nil},
		{"sync/default/NoPreallocate", "mmap", FlushSync, PrewriteDefault, true, PrewriteOff, nil},
		{"sync/on/NoPreallocate", "mmap", FlushSync, PrewriteOn, true, 0, ErrInvalidOption},
		{"sync/auto/NoPreallocate", "mmap", FlushSync, PrewriteAuto, true, 0, ErrInvalidOption},
		{"mem/sync/default", "mem", FlushSync, PrewriteDefault, false, PrewriteOff, nil},
		{"mem/sync/on", "mem", FlushSync, PrewriteOn, false, PrewriteOff, nil},
		{"unknown", "mmap", FlushSync, PrewriteMode(7), false, 0, ErrInvalidOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Backend: tc.backend, FlushMode: tc.mode, PrewriteSegments: tc.prewrite,
				NoPreallocate: tc.noPreallocate, SegmentSizeBytes: 64 << 10, Logger: quietLogger}
			if tc.backend == "mem" {
				o = memIndexSizes(o)
			}
			s, err := Open(context.Background(), t.TempDir(), o)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Open: %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.Options().PrewriteSegments; got != tc.want {
				t.Fatalf("effective PrewriteSegments %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParsePrewriteMode(t *testing.T) {
	for _, m := range []PrewriteMode{PrewriteDefault, PrewriteOn, PrewriteOff, PrewriteAuto} {
		text, err := m.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back PrewriteMode
		if err := back.UnmarshalText(text); err != nil || back != m {
			t.Fatalf("%v → %q → %v (%v)", m, text, back, err)
		}
	}
	if _, err := ParsePrewriteMode("yes"); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("ParsePrewriteMode(yes): %v", err)
	}
	if _, err := PrewriteMode(9).MarshalText(); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("MarshalText of an unknown mode: %v", err)
	}
}

func TestParseBatchingMode(t *testing.T) {
	for _, m := range []BatchingMode{BatchingAuto, BatchingMerge, BatchingConvoys} {
		text, err := m.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back BatchingMode
		if err := back.UnmarshalText(text); err != nil || back != m {
			t.Fatalf("%v → %q → %v (%v)", m, text, back, err)
		}
	}
	if m, err := ParseBatchingMode(""); err != nil || m != BatchingAuto {
		t.Fatalf(`ParseBatchingMode(""): %v %v, want auto`, m, err)
	}
	if _, err := ParseBatchingMode("fast"); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("ParseBatchingMode(fast): %v", err)
	}
	if _, err := BatchingMode(9).MarshalText(); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("MarshalText of an unknown mode: %v", err)
	}
	if _, err := Open(context.Background(), t.TempDir(), Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{}), GroupCommitBatching: BatchingMode(9)}); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("Open with an unknown batching mode: %v", err)
	}
}

// TestCommitLogSegmentsArePrewritten: with sync flush (prewrite auto by
// default, and one producer's syncs are small) every CommitLog segment on disk — the ones written, rolled past
// and preallocated — has no unwritten extent, and still none after the
// store is closed and reopened (recovery truncates the last one) and more
// is written. With prewrite off the segments have unwritten extents, so
// the check can tell. Stats count each pre-written segment by how its
// zeros were written (mappedfile.Zeros), none with prewrite off.
func TestCommitLogSegmentsArePrewritten(t *testing.T) {
	for _, backend := range []string{"mmap", "transient", "uring-direct"} {
		for _, prewrite := range []PrewriteMode{PrewriteDefault, PrewriteOff} {
			t.Run(backend+"/"+prewrite.String(), func(t *testing.T) {
				dir := t.TempDir()
				disktest.NeedExtents(t, dir)
				o := Options{Backend: backend, FlushMode: FlushSync, PrewriteSegments: prewrite,
					SegmentSizeBytes: 256 << 10, Logger: quietLogger}
				put := func(s *Store, from, n int) {
					for i := from; i < from+n; i++ {
						if _, err := s.Put(context.Background(), testMessage("P", 0, i, 1000)); err != nil {
							t.Fatal(err)
						}
					}
				}
				s := openStore(t, dir, o)
				put(s, 0, 400) // about 1.7 segments
				// Stats say how each pre-written segment's zeros were
				// written: with O_DIRECT (or by the device) for uring-direct,
				// through the page cache for the buffered backends.
				st := s.Stats()
				zeros, other := st.ZerosCached, st.ZerosDirect+st.ZerosByDevice
				if backend == "uring-direct" {
					zeros, other = other, zeros
				}
				// (A segment being made ahead may be counted by its zeros
				// before it is counted made: Open reports them as it returns.)
				if zeros < st.SegmentsPrewritten || zeros > st.SegmentsPrewritten+2 || other != 0 || (prewrite != PrewriteOff) != (zeros > 0) {
					t.Errorf("%d segments pre-written, zeros counted: by the device %d, O_DIRECT %d, cached %d",
						st.SegmentsPrewritten, st.ZerosByDevice, st.ZerosDirect, st.ZerosCached)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				checkSegmentsWritten(t, filepath.Join(dir, commitLogDirName), prewrite != PrewriteOff, 3)
				s = openStore(t, dir, o)
				put(s, 400, 10) // the truncated tail of the last segment stays mostly unused
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				// The segment made ahead was dropped by recovery (it starts
				// past the end) and no roll asked for another.
				checkSegmentsWritten(t, filepath.Join(dir, commitLogDirName), prewrite != PrewriteOff, 2)
			})
		}
	}
}

// TestPrewriteAutoDecidesBySyncSize: PrewriteAuto prewrites a segment while
// the syncs since the last decision covered fewer than
// PrewriteBelowSyncBytes each — and before any sync — keeps its last
// decision when there was no sync since, and fallocates once the syncs are
// large.
func TestPrewriteAutoDecidesBySyncSize(t *testing.T) {
	s := &Store{opts: Options{PrewriteSegments: PrewriteAuto, PrewriteBelowSyncBytes: 128 << 10}, log: &commitLog{}}
	s.log.flushedOffset.Store(1 << 30) // recovered: no sync of this store
	syncs := func(n int, each int64) {
		for range n {
			recordSync(s, each)
		}
	}
	steps := []struct {
		what string
		do   func()
		want bool
	}{
		{"no sync yet", func() {}, true},
		{"1 KiB syncs", func() { syncs(100, 1<<10) }, true},
		{"256 KiB syncs", func() { syncs(10, 256<<10) }, false},
		{"no sync since", func() {}, false},
		{"just below the threshold", func() { syncs(3, 128<<10-1) }, true},
		{"at the threshold", func() { syncs(3, 128<<10) }, false},
	}
	for _, st := range steps {
		st.do()
		if got := s.prewriteNext(context.Background(), nil); got != st.want {
			t.Fatalf("%s: prewrite %v, want %v", st.what, got, st.want)
		}
	}
	for mode, want := range map[PrewriteMode]bool{PrewriteOn: true, PrewriteOff: false} {
		s := &Store{opts: Options{PrewriteSegments: mode}, log: &commitLog{}}
		recordSync(s, 1<<30)
		if got := s.prewriteNext(context.Background(), nil); got != want {
			t.Fatalf("%v: prewrite %v, want %v", mode, got, want)
		}
	}
}

// recordSync counts a sync of n bytes as flushOnce does.
func recordSync(s *Store, n int64) {
	s.log.flushedOffset.Add(n)
	s.stats.flushes.Add(1)
}

// TestPrewriteAutoWaitsForTheFirstSyncs: before any sync, a segment made
// ahead waits for the store's first syncs and decides by them; one that a
// roll needs (or that became needed while it waited) does not wait, and is
// prewritten.
func TestPrewriteAutoWaitsForTheFirstSyncs(t *testing.T) {
	ctx := context.Background()
	newStore := func() *Store {
		return &Store{opts: Options{PrewriteSegments: PrewriteAuto, PrewriteBelowSyncBytes: 128 << 10}, log: &commitLog{}}
	}
	s := newStore()
	go func() {
		time.Sleep(5 * time.Millisecond)
		for range prewriteEvidence {
			recordSync(s, 1<<20)
		}
	}()
	if s.prewriteNext(ctx, func() bool { return true }) {
		t.Fatal("a segment made ahead was prewritten: it did not wait for the first syncs, all of 1 MiB")
	}
	s = newStore()
	if !s.prewriteNext(ctx, func() bool { return false }) {
		t.Fatal("a needed segment with no sync seen was not prewritten")
	}
	if !newStore().prewriteNext(ctx, nil) {
		t.Fatal("a segment a roll waits for, with no sync seen, was not prewritten")
	}
}

// TestPrewriteAutoFallocatesForLargeSyncs: on a real store whose threshold
// every sync passes, the segments made before the first sync are
// prewritten and those made after it only fallocated — on disk (unwritten
// extents) and in Stats.
func TestPrewriteAutoFallocatesForLargeSyncs(t *testing.T) {
	for _, backend := range []string{"mmap", "uring-direct"} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			disktest.NeedExtents(t, dir)
			o := Options{Backend: backend, FlushMode: FlushSync, PrewriteSegments: PrewriteAuto, PrewriteBelowSyncBytes: 1,
				SegmentSizeBytes: 256 << 10, Logger: quietLogger}
			s, err := Open(context.Background(), dir, o)
			if errors.Is(err, mappedfile.ErrUnsupported) {
				testenv.Skip(t, backendNeed(backend), "backend %s cannot run here: %v", backend, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range 1000 { // about 4 segments
				if _, err := s.Put(context.Background(), testMessage("P", 0, i, 1000)); err != nil {
					t.Fatal(err)
				}
			}
			st := s.Stats()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if st.SegmentsPrewritten == 0 || st.SegmentsFallocated == 0 {
				t.Fatalf("segments prewritten %d, fallocated %d: want both (the first before any sync, the rest after)",
					st.SegmentsPrewritten, st.SegmentsFallocated)
			}
			checkSegmentsWritten(t, filepath.Join(dir, commitLogDirName), false, 3)
		})
	}
}

// checkSegmentsWritten checks that dir holds at least minFiles segments and
// that none has unwritten bytes (written), or that some has (not written:
// the segments not yet filled).
func checkSegmentsWritten(t *testing.T, dir string, written bool, minFiles int) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < minFiles {
		t.Fatalf("%d segments in %s, want at least %d", len(entries), dir, minFiles)
	}
	unwrittenSomewhere := false
	for _, e := range entries {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		u, err := segfile.UnwrittenBytes(f, 0, st.Size())
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if written && u != 0 {
			t.Fatalf("segment %s has %d unwritten bytes", e.Name(), u)
		}
		unwrittenSomewhere = unwrittenSomewhere || u > 0
	}
	if !written && !unwrittenSomewhere {
		t.Fatalf("no segment in %s has unwritten bytes with prewrite off: the check cannot tell", dir)
	}
}

// TestSegmentsMadeAheadArePrewrittenInSteps: with PacePrewrite, the
// segment a store needs at once (the first, made while Put waits) is
// prewritten at full speed, its zeros synced once, and the one the
// allocation service makes ahead in synced steps
// (mappedfile.Spec.PrewritePace), so a sync of the log beside it never
// flushes more than a step of zeros. Without it, both go at full speed.
func TestSegmentsMadeAheadArePrewrittenInSteps(t *testing.T) {
	const size = 4 << 20
	for _, backend := range []string{"mmap", "uring-direct"} {
		for _, pace := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/pace=%v", backend, pace), func(t *testing.T) {
				dir := t.TempDir()
				disktest.NeedExtents(t, dir)
				inj := faultseam.New(t, dir)
				o := Options{Backend: backend, FlushMode: FlushSync, PrewriteSegments: PrewriteOn, PacePrewrite: pace,
					SegmentSizeBytes: size, Logger: quietLogger}
				s, err := Open(context.Background(), dir, o)
				if errors.Is(err, mappedfile.ErrUnsupported) {
					testenv.Skip(t, backendNeed(backend), "backend %s cannot run here: %v", backend, err)
				}
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if _, err := s.Put(context.Background(), testMessage("P", 0, 0, 1000)); err != nil {
					t.Fatal(err)
				}
				logDir := filepath.Join(dir, commitLogDirName)
				first, ahead := filepath.Join(logDir, segment.Name(0)), filepath.Join(logDir, segment.Name(size))
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
					if _, err := os.Stat(ahead); err == nil {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the segment made ahead, %s, is not there after 30s", ahead)
					}
				}
				syncs := map[string]int{}
				for _, c := range inj.Calls() {
					if c.Kind == segfile.OpFdatasync {
						syncs[c.Path]++
					}
				}
				if got := syncs[first+".tmp"]; got != 1 {
					t.Fatalf("the first segment's zeros were synced %d times, want once (at full speed)", got)
				}
				want := 1
				if pace {
					want = size/segfile.PrewriteStepBytes + 1 // a step each, then the create's
				}
				if got := syncs[ahead+".tmp"]; got != want {
					t.Fatalf("the segment made ahead was synced %d times while made, want %d", got, want)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
