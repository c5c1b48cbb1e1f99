package uring

import (
	"strings"
	"testing"
)

// TestAsyncStatementWithSyncAtCommit: with every commit durable by itself
// and async flush, the statement says a power loss loses what the commit
// service has not written — its interval, not the flush's — and names the
// durable commit, not an fdatasync by the flush service.
func TestAsyncStatementWithSyncAtCommit(t *testing.T) {
	for _, direct := range []bool{false, true} {
		d, err := durability(Options{Direct: direct, SyncAtCommit: true}, false)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(d.PowerLoss, "up to the commit interval (each commit is durable by itself: SyncAtCommit)") ||
			strings.Contains(d.PowerLoss, "flush interval") || !strings.Contains(d.Mechanism, "by the commit service") ||
			strings.Contains(d.Ack, "group commit") {
			t.Errorf("direct %v, SyncAtCommit, async: %+v", direct, d)
		}
		d, err = durability(Options{Direct: direct}, false)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(d.PowerLoss, "flush interval") || !strings.Contains(d.PowerLoss, "thorough flush interval") {
			t.Errorf("direct %v, async: %+v", direct, d)
		}
	}
}
