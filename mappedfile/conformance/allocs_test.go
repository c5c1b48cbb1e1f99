//go:build !race

// Allocation checks: the race detector allocates, so these are built
// without -race only (make test runs them in its own step: -run Allocs).

package conformance_test

import (
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/conformance"
)

func TestMemFSAllocs(t *testing.T) {
	for _, opts := range []mappedfile.MemOptions{{}, {Buffered: true}} {
		conformance.RunAllocs(t, func(testing.TB) mappedfile.Backend { return mappedfile.NewMemFS(opts) })
	}
}
