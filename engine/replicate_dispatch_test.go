package engine

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

// TestAppendReplicatedRefusedAfterDispatchStopped: like Put, a slave whose
// ConsumeQueues stopped being built refuses further replicated bytes (they
// would never become readable to its consumers), with the dispatch error.
func TestAppendReplicatedRefusedAfterDispatchStopped(t *testing.T) {
	ctx := context.Background()
	master := openRole(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})}))
	for i := range 4 {
		if _, err := master.Put(ctx, testMessage("R", 0, i, 100)); err != nil {
			t.Fatal(err)
		}
	}
	data := logBytes(t, master, 0, master.MaxOffset())
	if err := master.Close(); err != nil {
		t.Fatal(err)
	}
	h := newHooked(mappedfile.NewMemFS(mappedfile.MemOptions{}))
	slave := openRole(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: h, Role: Slave}))
	defer slave.Close()
	h.set(on("open", consumeQueueDirName, func(string) error { return syscall.EIO }))
	half := len(data) / 2
	n, err := slave.AppendReplicated(ctx, 0, data[:half])
	if err != nil {
		t.Fatal(err)
	}
	if err := slave.WaitDispatched(ctx, n); !errors.Is(err, syscall.EIO) {
		t.Fatalf("WaitDispatched: %v, want the dispatch error", err)
	}
	if _, err := slave.AppendReplicated(ctx, n, data[n:]); !errors.Is(err, ErrServiceNotAvailable) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("AppendReplicated after dispatch stopped: %v, want ErrServiceNotAvailable with the dispatch error", err)
	}
}
