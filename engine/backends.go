package engine

import (
	"fmt"
	"strings"

	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mmapio"
	"github.com/mqstore/mqstore/transientpool"
)

// BackendNames lists the backends Options.Backend accepts.
func BackendNames() []string { return []string{"mmap", "transient", "uring", "uring-direct", "mem"} }

// newBackend builds the CommitLog's backend from the options.
func newBackend(o Options) (mappedfile.Backend, error) {
	if o.BackendImpl != nil {
		return o.BackendImpl, nil
	}
	switch o.Backend {
	case "mmap":
		return mmapio.New(mmapio.Options{Logger: o.Logger}), nil
	case "mem":
		return mappedfile.NewMemFS(mappedfile.MemOptions{}), nil
	case "transient":
		when := transientpool.FallbackMmap
		if o.TransientWaitWhenEmpty {
			when = transientpool.Wait
		}
		b, err := transientpool.New(transientpool.Options{SegmentSizeBytes: o.SegmentSizeBytes, PoolSize: o.TransientPoolSize,
			MemoryBudgetBytes: o.TransientMemoryBudget, WhenEmpty: when})
		if err != nil {
			return nil, fmt.Errorf("backend transient: %w", err)
		}
		return b, nil
	case "uring", "uring-direct":
		return newUringBackend(o)
	}
	return nil, fmt.Errorf("backend %q: want one of %s: %w", o.Backend, strings.Join(BackendNames(), ", "), ErrUnknownBackend)
}

// auxBackend is the backend of ConsumeQueue and IndexFile files: mmap, as in
// RocketMQ, whatever the CommitLog uses — except for in-memory stores, where
// everything stays in the same MemFS (crash tests crash it all at once).
func auxBackend(o Options, commitLog mappedfile.Backend) mappedfile.Backend {
	if o.BackendImpl != nil || o.Backend == "mem" {
		return commitLog
	}
	return mmapio.New(mmapio.Options{Logger: o.Logger})
}
