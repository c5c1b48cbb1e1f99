package engine

import (
	"context"
	"testing"
	"time"

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
	return blockingFile{mf}, nil
}

type blockingFile struct{ mappedfile.MappedFile }

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
