package engine

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/mappedfile"
)

var crashRebuild = flag.Bool("crash.rebuild", false, "run TestPowerLossWhileRecoveryRebuildsTheIndex (every crash point of a recovering open; about 20 s, 3 min under -race)")

// crashWithIndexUnflushed builds a store whose checkpoint covers its first
// 20 records, puts 20 more whose index entries are never flushed, and cuts
// the power: the next Open recovers and re-dispatches. Index files of 9
// entries and 3 slots make the re-dispatch roll files several times.
func crashWithIndexUnflushed(t *testing.T, tail mappedfile.TornTail) (*mappedfile.MemFS, string, Options) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: true})
	dir := filepath.Join(t.TempDir(), "store")
	o := Options{BackendImpl: fs, FlushMode: FlushSync, Logger: quietLogger, SegmentSizeBytes: 16 * mappedfile.PageSize,
		IndexSlotCount: 3, IndexMaxEntries: 9}
	s := openStore(t, dir, o)
	put := func(s *Store, from, to int) {
		for i := from; i < to; i++ {
			if _, err := s.Put(ctx, testMessage("R", int32(i%2), i, 100)); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(s, 0, 20)
	if err := s.Close(); err != nil { // the index and a checkpoint covering it, durable
		t.Fatal(err)
	}
	o.ConsumeQueueFlushInterval, o.ConsumeQueueFlushThoroughInterval = time.Hour, time.Hour
	s = openStore(t, dir, o)
	put(s, 20, 40)
	fs.Crash(tail, rand.New(rand.NewPCG(1, 2)))
	reopenAfter(s, fs)
	return fs, dir, o
}

// TestRecoveryDistrustsWhatItRedispatches: a recovering Open that
// dispatches records again writes their index entries and units into the
// page cache, unsynced until the rebuild ends. Before it writes any, the
// durable checkpoint must stop claiming those records — else a power loss
// in the middle leaves a rebuilt file, torn, that the next open trusts
// because it ends below the checkpoint's offset (the sweep below found
// exactly that).
func TestRecoveryDistrustsWhatItRedispatches(t *testing.T) {
	fs, dir, o := crashWithIndexUnflushed(t, mappedfile.TornPartialPage)
	cp, err := loadCheckpoint(fs, dir)
	if err != nil {
		t.Fatal(err)
	}
	claimed := cp.logicsOffset.Load()
	if claimed <= 0 {
		t.Fatalf("the checkpoint before the recovering open claims nothing (%d): the test needs a claim", claimed)
	}
	var logs logRecorder
	o.Logger = slog.New(&logs)
	s, err := Open(context.Background(), dir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	from, ok := logs.int64Attr("rebuilding consume queues and index", "from")
	if !ok {
		t.Fatal("the recovering open did not re-dispatch: the test needs it to")
	}
	durable, ok := fs.Durable(filepath.Join(dir, checkpointFileName))
	if !ok || len(durable) < 40 {
		t.Fatalf("no durable checkpoint after the recovering open (%d bytes)", len(durable))
	}
	logicsOffset := int64(binary.BigEndian.Uint64(durable[32:]))
	indexTs := int64(binary.BigEndian.Uint64(durable[16:]))
	if logicsOffset > from {
		t.Errorf("re-dispatched from %d while the durable checkpoint claims every record below %d (it claimed %d before the open)",
			from, logicsOffset, claimed)
	}
	if from <= 0 && indexTs != 0 {
		t.Errorf("re-dispatched from the log's start while the durable checkpoint keeps the index timestamp %d: the next open's timestamp rule would trust rebuilt files", indexTs)
	}
}

// logRecorder is a slog.Handler that keeps every record.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}

// int64Attr returns attribute key of the first record with message msg.
func (h *logRecorder) int64Attr(msg, key string) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if r.Message != msg {
			continue
		}
		var v int64
		found := false
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key && a.Value.Kind() == slog.KindInt64 {
				v, found = a.Value.Int64(), true
				return false
			}
			return true
		})
		return v, found
	}
	return 0, false
}

// TestPowerLossWhileRecoveryRebuildsTheIndex cuts the power at every file
// system operation of a recovering Open that rebuilds index files, and
// checks that the open after it finds every record by its UNIQ_KEY.
//
// Before recovery lowered the checkpoint ahead of re-dispatching
// (TestRecoveryDistrustsWhatItRedispatches checks that part alone), half the
// runs lost an entry at one crash point of about 344: the first open undid
// and re-added the last entries of a file ending below the checkpoint's
// offset and was cut in the middle of that file's flush; the second open
// trusted the torn file, and the lookup of the UNIQ_KEY of its first record
// found nothing. Which crash point meets the flush depends on the order of
// the store's goroutines, so a single run does not always hit it: it runs
// behind -crash.rebuild.
func TestPowerLossWhileRecoveryRebuildsTheIndex(t *testing.T) {
	ctx := context.Background()
	for _, tail := range []mappedfile.TornTail{mappedfile.TornPartialPage, mappedfile.TornRandomPages} {
		t.Run(tail.String(), func(t *testing.T) {
			fs, dir, o := crashWithIndexUnflushed(t, tail)
			clone := fs.Clone()
			oc := o
			oc.BackendImpl = clone
			before := clone.Ops()
			sc, err := Open(ctx, dir, oc)
			if err != nil {
				t.Fatalf("recovering open on a copy: %v", err)
			}
			ops := clone.Ops() - before
			sc.Close()
			failures := 0
			for at := int64(1); at <= ops; at++ {
				if err := powerLossAt(ctx, fs.Clone(), dir, o, at, tail); err != nil {
					failures++
					if failures <= 3 {
						t.Errorf("power loss at operation %d of %d of the recovering open: %v", at, ops, err)
					}
				}
			}
			if failures > 0 {
				t.Errorf("%d of %d crash points lost index entries", failures, ops)
			}
		})
	}
}

// powerLossAt runs a recovering Open on fs that loses power at operation
// at, then opens again and looks every record up by its UNIQ_KEY.
func powerLossAt(ctx context.Context, fs *mappedfile.MemFS, dir string, o Options, at int64, tail mappedfile.TornTail) error {
	o.BackendImpl = fs
	rng := rand.New(rand.NewPCG(uint64(at), 3))
	fs.ArmCrash(at, tail, rng)
	if s, err := Open(ctx, dir, o); err == nil {
		s.Close()
	}
	if fs.Disarm() {
		fs.Crash(tail, rng)
	}
	fs.Restart()
	s, err := Open(ctx, dir, o)
	if err != nil {
		return fmt.Errorf("open after the second power loss: %w", err)
	}
	defer s.Close()
	_, err = s.Scan(ctx, s.MinOffset(), func(offset int64, _ []byte, r *record.Record) error {
		if r == nil {
			return nil
		}
		uniq, _ := r.UniqKey()
		got, err := s.QueryByUniqKey(ctx, r.Topic, uniq)
		if err != nil || got.PhysicalOffset != offset {
			return fmt.Errorf("the record at %d (UNIQ_KEY %s) is in the log, the index lookup: %v", offset, uniq, err)
		}
		return nil
	})
	return err
}
