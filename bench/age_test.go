package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
)

// agedBackend is the backend the ageing tests run: the one that reuses
// segments (the others write through the page cache and refuse
// RecycleSegments); it needs io_uring and O_DIRECT.
func agedBackend(t *testing.T) string {
	t.Helper()
	const backend = "uring-direct"
	o, err := storeOptions(StoreConfig{SegmentSizeBytes: 1 << 20}, backend, "async")
	if err != nil {
		t.Fatal(err)
	}
	s, err := engine.Open(context.Background(), filepath.Join(t.TempDir(), "probe"), o)
	if errors.Is(err, mappedfile.ErrUnsupported) {
		testenv.Skip(t, testenv.Uring, "the ageing tests run the %s backend: %v", backend, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return backend
}

// TestAgedStoreRepeatReusesSegments: with RecycleSegments a store repeat
// runs on an aged store, and its window takes new segments from the pool
// (SegmentsRecycled); without, a fresh store makes every one.
func TestAgedStoreRepeatReusesSegments(t *testing.T) {
	const pooled = 3
	sp := load.Spec{Workload: load.Throughput, SizeBytes: 1024, Producers: 4, Duration: 300 * time.Millisecond}
	for _, n := range []int{0, pooled} {
		t.Run("recycle-"+strconv.Itoa(n), func(t *testing.T) {
			store := StoreConfig{SegmentSizeBytes: 1 << 20, RecycleSegments: n}
			dir := filepath.Join(t.TempDir(), "s")
			rep, options := storeRepeat(context.Background(), store, dir, agedBackend(t), "async", sp, nil)
			if rep.Status != runfile.StatusOK || rep.Store == nil {
				t.Fatalf("%s: %s (store counters %v)", rep.Status, rep.Reason, rep.Store)
			}
			st := rep.Store
			made := st.SegmentsPrewritten + st.SegmentsFallocated
			switch {
			case options["RecycleSegments"] != strconv.Itoa(n):
				t.Errorf("options record RecycleSegments %q, want %d", options["RecycleSegments"], n)
			case n == 0 && st.SegmentsRecycled != 0:
				t.Errorf("a fresh store reused %d segments", st.SegmentsRecycled)
			case n > 0 && (st.SegmentsRecycled == 0 || st.SegmentsRecycled > pooled):
				t.Errorf("the window took %d segments from a pool of %d (made %d, rolled %d)", st.SegmentsRecycled, pooled, made, st.Rolls)
			case st.Rolls == 0:
				t.Errorf("the window rolled no segment: %+v", st)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("the store's directory was left behind: %v", err)
			}
		})
	}
}

// TestAgeStoreFillsThePool: ageStore leaves a closed store whose pool
// holds the segments asked for, named as the engine names them; with
// RecycleSegments 0 it makes nothing.
func TestAgeStoreFillsThePool(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	if err := ageStore(ctx, StoreConfig{SegmentSizeBytes: 1 << 20}, filepath.Join(root, "fresh"), agedBackend(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "fresh")); !os.IsNotExist(err) {
		t.Errorf("RecycleSegments 0 made a store: %v", err)
	}
	store := StoreConfig{SegmentSizeBytes: 1 << 20, RecycleSegments: 2}
	dir := filepath.Join(root, "aged")
	if err := ageStore(ctx, store, dir, agedBackend(t)); err != nil {
		t.Fatal(err)
	}
	pooled, _ := filepath.Glob(filepath.Join(dir, "commitlog", "*.recycle"))
	if len(pooled) != store.RecycleSegments {
		entries, _ := os.ReadDir(filepath.Join(dir, "commitlog"))
		t.Fatalf("pooled files %v, want %d; commitlog holds %v", pooled, store.RecycleSegments, entries)
	}
	o, err := storeOptions(store, agedBackend(t), "sync")
	if err != nil {
		t.Fatal(err)
	}
	s, err := engine.Open(ctx, dir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := s.Stats(); st.SegmentsPooled+int(st.SegmentsRecycled) != store.RecycleSegments || st.MinOffset < int64(store.RecycleSegments)*store.SegmentSizeBytes {
		t.Errorf("reopened: %d pooled, %d recycled, log from %d", st.SegmentsPooled, st.SegmentsRecycled, st.MinOffset)
	}
}

// TestStoreRecordBytesCountTheRecordChecksum: the record size a cell
// records is the one the store writes, with and without recycling (which
// adds the whole-record checksum to every record).
func TestStoreRecordBytesCountTheRecordChecksum(t *testing.T) {
	ctx := context.Background()
	for _, kind := range MessageKinds() {
		for _, n := range []int{0, 1} {
			store := StoreConfig{SegmentSizeBytes: 1 << 20, RecycleSegments: n, Message: kind}
			o, err := storeOptions(store, agedBackend(t), "async")
			if err != nil {
				t.Fatal(err)
			}
			s, err := engine.Open(ctx, filepath.Join(t.TempDir(), "s"), o)
			if err != nil {
				t.Fatal(err)
			}
			r, err := s.Put(ctx, newProducerMessages(kind, 0, 100).next())
			s.Close()
			if err != nil {
				t.Fatal(err)
			}
			if want := storeRecordBytes(store, 100); r.Size != want {
				t.Errorf("%s, RecycleSegments %d: the store wrote a %d-byte record, storeRecordBytes says %d", kind, n, r.Size, want)
			}
		}
	}
	if storeRecordBytes(StoreConfig{}, 100) != recordBytes(MessageBare, 100) {
		t.Error("without recycling the record is not the message's")
	}
}

// TestRecycleSegmentsRun: --recycle-segments through Run — every measured
// window of the mqstore cells took segments from the pool, run.json
// records the setting and the counts, and summary.md says the stores
// were aged (and, with no peer in the run, nothing of peers).
func TestRecycleSegmentsRun(t *testing.T) {
	cfg := testConfig(t)
	cfg.Backends = []string{agedBackend(t)}
	cfg.Workloads, cfg.Repeat, cfg.AA, cfg.Warmup = []string{"throughput"}, 1, false, 0
	cfg.Store.SegmentSizeBytes, cfg.Store.RecycleSegments = 1<<20, 3
	f, dir, err := Run(context.Background(), cfg, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	back, err := runfile.Read(dir)
	if err != nil || back.Config.Store.RecycleSegments != cfg.Store.RecycleSegments {
		t.Fatalf("run file: %v, recorded store %+v", err, back.Config.Store)
	}
	if len(f.Cells) == 0 {
		t.Fatal("no cell")
	}
	for _, c := range back.Cells {
		if !c.Measured() || c.Options["RecycleSegments"] != "3" || c.RecordBytes != storeRecordBytes(cfg.Store, c.SizeBytes) {
			t.Errorf("%s: %s %s, options RecycleSegments %q, record %d B", c.Name, c.Status, c.Reason, c.Options["RecycleSegments"], c.RecordBytes)
			continue
		}
		for _, r := range c.Repeats {
			if r.Store == nil || r.Store.SegmentsRecycled == 0 {
				t.Errorf("%s repeat %d (warm %v): no segment taken from the pool: %+v", c.Name, r.Index, r.Warm, r.Store)
			}
		}
	}
	summary, err := os.ReadFile(filepath.Join(dir, "summary.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "ran on an aged store: 3 segments retired by retention before the window, reused as new segments (--recycle-segments 3)"; !strings.Contains(string(summary), want) {
		t.Errorf("summary.md lacks %q:\n%s", want, summary)
	}
	if len(back.Peers) == 0 && strings.Contains(string(summary), "Peers:") {
		t.Errorf("summary.md speaks of peers in a run without any:\n%s", summary)
	}
}
