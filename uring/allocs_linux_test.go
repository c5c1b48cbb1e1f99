//go:build !race

package uring

import (
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/conformance"
)

// TestAppendAllocs: Append does not allocate, on either backend (the race
// detector allocates: `make test` runs this without -race).
func TestAppendAllocs(t *testing.T) {
	for _, v := range backendVariants {
		t.Run(v.name, func(t *testing.T) {
			conformance.RunAllocs(t, func(t testing.TB) mappedfile.Backend { return newTestBackend(t, v.opts) })
		})
	}
}
