package uring

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// TestLinkedCommitCutShortClaimsNothing: with commits durable through a
// write linked to an fsync, a write the kernel completes short cancels the
// linked fsync; when the commit then ends (its context cancelled) it must
// not report the short-written bytes committed, since no sync covered
// them — Flush would publish them as flushed. RLIMIT_FSIZE makes the
// kernel write short, in a child process.
func TestLinkedCommitCutShortClaimsNothing(t *testing.T) {
	if os.Getenv("MQSTORE_URING_LINKED_CHILD") == "1" {
		linkedCutShortChild(t)
		return
	}
	out, err := exec(t, "^TestLinkedCommitCutShortClaimsNothing$", "MQSTORE_URING_LINKED_CHILD=1").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "CHILD-OK") {
		if strings.Contains(string(out), "needs io_uring") || strings.Contains(string(out), "SKIP") {
			testenv.Skip(t, testenv.Uring, "child: %s", out)
		}
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// cancelAfterWrite cancels a context once a write has returned.
type cancelAfterWrite struct{ cancel context.CancelFunc }

func (cancelAfterWrite) Before(segfile.Op) error { return nil }
func (h cancelAfterWrite) After(op segfile.Op, _ error) {
	if op.Kind == segfile.OpPwrite {
		h.cancel()
	}
}

func linkedCutShortChild(t *testing.T) {
	const limit = 10000
	b := newTestBackend(t, Options{SyncAtCommit: true, SyncMethod: SyncLinkedFsync})
	dir := t.TempDir()
	mf, err := b.Open(context.Background(), mappedfile.Spec{Path: filepath.Join(dir, "00000000000000000000"), SizeBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	if _, err := mf.Append(16<<10, fill(7)); err != nil {
		t.Fatal(err)
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: limit, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	uninstall := segfile.Install(dir, cancelAfterWrite{cancel})
	committed, err := mf.Commit(ctx, 0)
	uninstall()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("commit cut short and cancelled: %v, want context.Canceled", err)
	}
	if committed != 0 || mf.CommittedPosition() != 0 {
		t.Fatalf("committed %d (position %d) after a short write no sync covered, want 0", committed, mf.CommittedPosition())
	}
	if flushed, _ := mf.Flush(context.Background(), 0); flushed != 0 {
		t.Fatalf("flushed %d: bytes no sync covered published as flushed", flushed)
	}
	os.Stdout.WriteString("CHILD-OK\n")
}
