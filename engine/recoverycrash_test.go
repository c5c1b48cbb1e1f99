package engine

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/mappedfile"
)

var crashRebuild = flag.Bool("crash.rebuild", false, "run TestPowerLossWhileRecoveryRebuildsTheIndex (a reproduction of a known index loss)")

// TestPowerLossWhileRecoveryRebuildsTheIndex cuts the power at every file
// system operation of a recovering Open that rebuilds index files, and
// checks that the open after it finds every record by its UNIQ_KEY.
//
// The first open after a crash drops the index files the checkpoint did not
// know durable and indexes their records again, into files that are not
// synced until the rebuild ends — among them records below the offset the
// checkpoint claims dispatched. The suspicion (not shown yet): a power loss
// in between leaves such a file with its header written back and its
// entries not, and the next open trusts it because the checkpoint still
// claims those records.
//
// It is a reproduction, behind -crash.rebuild: under -race one run in three
// here lost an entry at one crash point of the 344 (the index misses a
// record's UNIQ_KEY after the second power loss); the cause is not found yet.
func TestPowerLossWhileRecoveryRebuildsTheIndex(t *testing.T) {
	if !*crashRebuild {
		t.Skip("a reproduction of a known index loss after a power loss during recovery: run with -crash.rebuild")
	}
	ctx := context.Background()
	for _, tail := range []mappedfile.TornTail{mappedfile.TornPartialPage, mappedfile.TornRandomPages} {
		t.Run(tail.String(), func(t *testing.T) {
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
			// Then records whose index entries are never flushed before the power goes.
			o.ConsumeQueueFlushInterval, o.ConsumeQueueFlushThoroughInterval = time.Hour, time.Hour
			s = openStore(t, dir, o)
			put(s, 20, 40)
			fs.Crash(tail, rand.New(rand.NewPCG(1, 2)))
			reopenAfter(s, fs)

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
