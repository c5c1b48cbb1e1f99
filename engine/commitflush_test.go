package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
)

// blockCommitKey marks a context whose Commit blocks in blockingFile until
// the context ends; the channel is told when the commit is inside.
type blockCommitKey struct{}

// blockingBackend is MemFS whose files' Commit can be held open by the
// caller's context (the store's own services never carry the key).
type blockingBackend struct{ *mappedfile.MemFS }

func (b blockingBackend) Inner() mappedfile.Backend { return b.MemFS }

func (b blockingBackend) Open(ctx context.Context, spec mappedfile.Spec) (mappedfile.MappedFile, error) {
	mf, err := b.MemFS.Open(ctx, spec)
	if err != nil {
		return nil, err
	}
	if ow, ok := mf.(mappedfile.Overwriter); ok { // the index overwrites its slots and header
		return blockingOverwriter{blockingFile{mf}, ow}, nil
	}
	return blockingFile{mf}, nil
}

type blockingFile struct{ mappedfile.MappedFile }

type blockingOverwriter struct {
	blockingFile
	mappedfile.Overwriter
}

func (f blockingFile) Commit(ctx context.Context, leastPages int) (int64, error) {
	if inside, ok := ctx.Value(blockCommitKey{}).(chan struct{}); ok {
		inside <- struct{}{}
		<-ctx.Done()
		return f.CommittedPosition(), ctx.Err()
	}
	return f.MappedFile.Commit(ctx, leastPages)
}

// TestFlushIsNotHeldBackByACommit: a commit pass that takes long (a large
// backlog, a starved commit service) must not stop the flusher from syncing
// what is already committed. When commit and flush shared one mutex, the
// flush below waited for the blocked commit to end, and async durability fell
// ever further behind a buffered backend's accepted bytes (mqbench: transient
// async made 42 of 453 MB/s durable in a window).
func TestFlushIsNotHeldBackByACommit(t *testing.T) {
	o := smallLogicsOptions(Options{BackendImpl: blockingBackend{mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: true})},
		FlushMode: FlushAsync})
	s := openStore(t, t.TempDir(), o)
	ctx := context.Background()
	for i := range 40 {
		if _, err := s.Put(ctx, testMessage("T", 0, i, 500)); err != nil {
			t.Fatal(err)
		}
	}
	inside := make(chan struct{}, 1)
	commitCtx, cancelCommit := context.WithCancel(context.WithValue(ctx, blockCommitKey{}, inside))
	defer cancelCommit()
	committing := make(chan error, 1)
	go func() {
		_, err := s.log.commit(commitCtx, 0)
		committing <- err
	}()
	deadline := time.After(time.Minute)
	select {
	case <-inside: // a commit pass is in progress and holds the commit lock
	case err := <-committing:
		t.Fatalf("the commit returned before it was held: %v", err)
	case <-deadline:
		t.Fatal("the commit never reached the segment")
	}
	flushed := make(chan error, 1)
	go func() {
		_, err := s.log.flush(ctx, 0, false)
		flushed <- err
	}()
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatalf("flush during a commit: %v", err)
		}
	case <-deadline:
		cancelCommit()
		<-flushed
		t.Fatal("a flush waited a minute for a commit in progress: commit and flush share a lock")
	}
	cancelCommit()
	<-committing
}

// holdPwrites blocks every pwrite under its directory while held.
type holdPwrites struct {
	held    atomic.Bool
	inside  chan struct{}
	release chan struct{}
}

func (h *holdPwrites) Before(op segfile.Op) error {
	if op.Kind == segfile.OpPwrite && h.held.Load() {
		select {
		case h.inside <- struct{}{}:
		default:
		}
		<-h.release
	}
	return nil
}

func (h *holdPwrites) After(segfile.Op, error) {}

// TestDispatchStopsAtTheCommittedPosition: uring serves reads of records
// still in its staging ring, but a process crash loses what no commit wrote
// to the file. Consumers must not see such a record: after a restart its
// queue offset would belong to another message. Before the scan bound was
// the committed position, dispatch indexed the uncommitted record below.
func TestDispatchStopsAtTheCommittedPosition(t *testing.T) {
	dir := t.TempDir()
	hold := &holdPwrites{inside: make(chan struct{}, 1), release: make(chan struct{})}
	defer segfile.Install(dir, hold)()
	o := smallLogicsOptions(Options{Backend: "uring", FlushMode: FlushAsync})
	o.FlushInterval, o.FlushThoroughInterval = time.Hour, time.Hour
	s := openStore(t, dir, o)
	defer close(hold.release) // before the store's cleanup closes it
	ctx := context.Background()
	hold.held.Store(true)
	res, err := s.Put(ctx, testMessage("T", 0, 1, 300))
	if err != nil {
		t.Fatal(err)
	}
	select { // the commit service is inside the pwrite of that record
	case <-hold.inside:
	case <-time.After(time.Minute):
		t.Fatal("no commit started within a minute of the Put")
	}
	if s.log.queue.Last().ReadablePosition() == 0 {
		t.Fatal("the backend does not serve uncommitted records (the test needs uring's staging ring)")
	}
	if err := s.dispatcher.dispatchAvailable(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.DispatchedOffset(); got != 0 {
		t.Fatalf("dispatched up to %d while the record [%d, %d) was not committed", got, res.PhysicalOffset, res.PhysicalOffset+int64(res.Size))
	}
	hold.held.Store(false)
	hold.release <- struct{}{}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.WaitDispatched(wctx, res.PhysicalOffset+int64(res.Size)); err != nil {
		t.Fatalf("once committed the record is not dispatched: %v", err)
	}
}

// TestAPutWakesACommitOfEverything: a buffered backend's record becomes
// visible once committed; the commit service woken by a Put commits it even
// when fewer than CommitLeastPages are pending. Before, a lone small record
// waited for the thorough interval (here an hour; by default 200 ms).
func TestAPutWakesACommitOfEverything(t *testing.T) {
	o := smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: true}), FlushMode: FlushAsync})
	o.CommitInterval, o.CommitThoroughInterval, o.CommitLeastPages = time.Hour, time.Hour, 4
	s := openStore(t, t.TempDir(), o)
	ctx := context.Background()
	res, err := s.Put(ctx, testMessage("T", 0, 1, 100))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.WaitDispatched(wctx, res.PhysicalOffset+int64(res.Size)); err != nil {
		t.Fatalf("a lone record below CommitLeastPages was not committed and dispatched after the Put's wake-up: %v", err)
	}
}

// TestSyncFlushHasOneDurableWriter: with sync flush the group commit's owner
// commits and syncs every batch, so the committer, ticking every
// millisecond and told to commit any byte, commits nothing while a sync Put
// is in progress — for uring and uring-direct its commit would be a second
// durable write on the commit lock. Once none is, it still commits a
// record no Put waits for.
func TestSyncFlushHasOneDurableWriter(t *testing.T) {
	for _, b := range testBackends {
		t.Run(b.name, func(t *testing.T) {
			o := b.opts(t)
			o.FlushMode = FlushSync
			o.Logger = quietLogger
			o.SegmentSizeBytes = 1 << 20
			o.CommitInterval, o.CommitThoroughInterval, o.CommitLeastPages = time.Millisecond, time.Millisecond, LeastPagesAny
			s := openStore(t, t.TempDir(), o)
			defer s.Close()
			ctx := context.Background()

			// A Put in progress throughout, as under steady load (each
			// producer's own Puts leave the count between two of them).
			s.group.enter()
			var wg sync.WaitGroup
			for p := range 4 {
				wg.Go(func() {
					for i := range 100 {
						if _, err := s.Put(ctx, testMessage("T", int32(p), i, 1000)); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			time.Sleep(20 * time.Millisecond) // twenty of the committer's ticks
			if n := s.Stats().Commits; n != 0 {
				t.Fatalf("the committer committed %d times beside the group commit's owner while sync Puts were in progress", n)
			}
			s.group.leave()

			// A record whose Put did not wait (appended, no waiter queued).
			s.closeMu.RLock()
			_, st, err := s.appendMessage(ctx, testMessage("T", 0, 100, 1000), time.Now())
			s.closeMu.RUnlock()
			if err != nil || st != PutOK {
				t.Fatalf("append: %v, %v", st, err)
			}
			waitFor(t, "the committer commits a record no Put waits for", func() bool { return s.Stats().Commits > 0 })
		})
	}
}
