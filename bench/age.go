package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/segfile"
)

// The messages that age a store: large bodies, so that filling the
// segments takes few Puts, on a topic of their own.
const (
	agingTopic     = "MqbenchAging"
	agingBodyBytes = 64 << 10
)

// ageStore makes dir a store that has been running, for a cell with
// store.RecycleSegments = N > 0 (nothing otherwise): it opens the store
// with the cell's options but async flush and a retention that deletes
// anything at once (run by hand: the service itself is held off), puts
// messages until the CommitLog holds N full segments and one more, flushes
// it, waits for the dispatch, and runs retention until it deletes nothing
// more, which retires the N full segments into the pool
// (Options.RecycleSegments). It checks the pool holds N and closes the
// store. Reopened with the cell's own options, the store finds the pooled
// files and its allocation service takes them as its next segments. Not
// timed, not profiled, not counted: it runs before the store the cell
// measures is opened.
func ageStore(ctx context.Context, store StoreConfig, dir, backend string) error {
	n := store.RecycleSegments
	if n <= 0 {
		return nil
	}
	o, err := storeOptions(store, backend, "async")
	if err != nil {
		return fmt.Errorf("age the store: %w", err)
	}
	o.DeleteWhen, o.FileReservedTime, o.CleanInterval = "*", time.Nanosecond, time.Hour
	// Pre-written: the segment the window starts in is the ageing's last,
	// which the ageing barely wrote; fallocated, its unwritten extents
	// would make every durable write there commit an extent change too,
	// where a running store's active segment is a reused one.
	o.PrewriteSegments = engine.PrewriteOn
	s, err := engine.Open(ctx, dir, o)
	if err != nil {
		return fmt.Errorf("age the store: open %s: %w", backend, err)
	}
	if err := retireSegments(ctx, s, n); err != nil {
		s.Close()
		return fmt.Errorf("age the store (%d segments of %s): %w", n, runfile.SizeLabel(int(s.Options().SegmentSizeBytes)), err)
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("age the store: close: %w", err)
	}
	// A running store's retired segments were written long before they are
	// reused: their pages are no longer in the page cache.
	pooled, err := filepath.Glob(filepath.Join(dir, "commitlog", "*.recycle"))
	if err != nil {
		return fmt.Errorf("age the store: %w", err)
	}
	for _, p := range pooled {
		if err := segfile.DropCache(p); err != nil {
			return fmt.Errorf("age the store: %w", err)
		}
	}
	return nil
}

// retireSegments fills n segments of s and one more, and lets retention
// retire the n full ones into the pool.
func retireSegments(ctx context.Context, s *engine.Store, n int) error {
	m := &engine.Message{Topic: agingTopic, Body: make([]byte, agingBodyBytes)}
	// Into the segment after the n full ones: retention never deletes the
	// segment being written.
	target := int64(n)*s.Options().SegmentSizeBytes + 1
	for end := int64(0); end < target; {
		r, err := s.Put(ctx, m)
		if err != nil {
			return fmt.Errorf("put: %w", err)
		}
		end = r.PhysicalOffset + int64(r.Size)
	}
	if _, err := s.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if err := s.WaitDispatched(ctx, s.Stats().WroteOffset); err != nil {
		return fmt.Errorf("dispatch: %w", err)
	}
	for {
		deleted, err := s.CleanExpired(ctx)
		if err != nil {
			return fmt.Errorf("retention: %w", err)
		}
		if deleted == 0 {
			break
		}
	}
	if st := s.Stats(); st.SegmentsPooled < n {
		return fmt.Errorf("the pool holds %d segments after retention retired %d, want %d (a disk fuller than the store's DiskMaxUsedRatio empties the pool)", st.SegmentsPooled, st.SegmentsRetired, n)
	}
	return nil
}

// setupFailed is the repeat of a cell whose store could not be made ready
// before its window: interrupted when ctx is done, failed otherwise.
func setupFailed(ctx context.Context, err error) runfile.Repeat {
	if ctx.Err() != nil {
		return runfile.Repeat{Status: runfile.StatusInterrupted, Reason: "interrupted"}
	}
	return failedRepeat(err)
}
