package engine

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/internal/pagecache"
	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/faultfile"
)

// idleServices are options under which neither the flusher nor the commit
// service runs during a test: whatever becomes durable, Flush made so.
func idleServices(o Options) Options {
	o.FlushMode = FlushAsync
	o.FlushInterval, o.FlushThoroughInterval, o.FlushLeastPages = time.Hour, time.Hour, 1<<30
	o.CommitInterval, o.CommitThoroughInterval, o.CommitLeastPages = time.Hour, time.Hour, 1<<30
	o.Logger = quietLogger
	return o
}

// TestFlushCoversWhatWasWritten: on the disk backends, with the store's own
// services idle, Flush returns the write position and every page of the
// CommitLog below it is clean in the page cache (pagemap + kpageflags):
// it fails when Flush skips the commit (the flushed offset stays behind)
// or the sync (the pages stay dirty). Three segments, so the flush crosses
// rolls.
func TestFlushCoversWhatWasWritten(t *testing.T) {
	testenv.NeedRoot(t, "reads page flags from /proc/self/pagemap and /proc/kpageflags")
	const segmentBytes = 128 << 10
	for _, backend := range []string{"mmap", "transient", "uring"} {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			s := openStore(t, dir, idleServices(Options{Backend: backend, SegmentSizeBytes: segmentBytes}))
			defer s.Close()
			for i := 0; i < 300; i++ {
				if _, err := s.Put(ctx, testMessage("A", int32(i%4), i, 1000)); err != nil {
					t.Fatal(err)
				}
			}
			before := s.Stats()
			if before.FlushedOffset >= before.WroteOffset || before.Segments < 3 {
				t.Fatalf("nothing to flush (flushed %d, wrote %d, %d segments): the test cannot see a skipped flush",
					before.FlushedOffset, before.WroteOffset, before.Segments)
			}
			if backend == "mmap" { // the last segment: a roll lets the flusher sync the full ones
				last := before.WroteOffset / segmentBytes * segmentBytes
				if err := pagecache.CheckSynced(filepath.Join(dir, commitLogDirName, segment.Name(last)), 0, before.WroteOffset-last); err == nil {
					t.Fatal("the appended pages are clean before Flush: the test cannot see a skipped sync")
				}
			}
			flushed, err := s.Flush(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if flushed != before.WroteOffset || s.FlushedOffset() != flushed {
				t.Fatalf("Flush returned %d (FlushedOffset %d), want the write position %d", flushed, s.FlushedOffset(), before.WroteOffset)
			}
			for from := int64(0); from < flushed; from += segmentBytes {
				n := min(segmentBytes, flushed-from)
				if err := pagecache.CheckSynced(filepath.Join(dir, commitLogDirName, segment.Name(from)), 0, n); err != nil {
					t.Errorf("after Flush: %v", err)
				}
			}
			if again, err := s.Flush(ctx); err != nil || again != flushed {
				t.Errorf("a second Flush with nothing new: %d, %v", again, err)
			}
		})
	}
}

// TestFlushConcurrentWithPuts: Flush, called over and over while producers
// append, always covers at least what was written before the call; the
// race detector checks it against the flusher and the appends.
func TestFlushConcurrentWithPuts(t *testing.T) {
	for _, mode := range []FlushMode{FlushAsync, FlushSync} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := context.Background()
			o := Options{Backend: "mem", SegmentSizeBytes: 64 << 10, FlushMode: mode, Logger: quietLogger}
			s := openStore(t, t.TempDir(), o)
			defer s.Close()
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for p := 0; p < 4; p++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						if _, err := s.Put(ctx, testMessage("A", int32(p), i, 500)); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			for i := 0; i < 200; i++ {
				wrote := s.Stats().WroteOffset
				flushed, err := s.Flush(ctx)
				if err != nil {
					t.Error(err)
					break
				}
				if flushed < wrote {
					t.Errorf("Flush returned %d, below the write position %d read before it", flushed, wrote)
					break
				}
			}
			close(stop)
			wg.Wait()
		})
	}
}

// TestFlushErrors: after Close, ErrClosed; a failing sync is returned
// wrapped, stops the store's writes, and every later Flush says so.
func TestFlushErrors(t *testing.T) {
	ctx := context.Background()
	faults := faultfile.NewFaults()
	fb := faultfile.NewFaulty(mappedfile.NewMemFS(mappedfile.MemOptions{}), faults)
	s := openStore(t, t.TempDir(), idleServices(Options{BackendImpl: fb, SegmentSizeBytes: 64 << 10}))
	if _, err := s.Put(ctx, testMessage("A", 0, 0, 100)); err != nil {
		t.Fatal(err)
	}
	injected := errors.New("injected EIO")
	faults.Add(faultfile.Fault{Op: faultfile.OpFlush, Err: injected, PathContains: commitLogDirName})
	if _, err := s.Flush(ctx); !errors.Is(err, injected) {
		t.Fatalf("Flush with a failing sync: %v", err)
	}
	faults.Clear()
	if _, err := s.Flush(ctx); !errors.Is(err, injected) {
		t.Errorf("a second Flush after the failure: %v (the error must be sticky)", err)
	}
	if res, err := s.Put(ctx, testMessage("A", 0, 1, 100)); res.Status != ServiceNotAvailable || !errors.Is(err, injected) {
		t.Errorf("Put after a failed Flush: %v %v", res.Status, err)
	}
	s.Close()
	if _, err := s.Flush(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush after Close: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	s2 := openStore(t, t.TempDir(), idleServices(Options{Backend: "mem", SegmentSizeBytes: 64 << 10}))
	defer s2.Close()
	if _, err := s2.Flush(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Flush with a cancelled context: %v", err)
	}
}
