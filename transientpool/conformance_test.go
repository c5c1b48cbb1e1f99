//go:build linux

package transientpool

import (
	"context"
	"testing"

	"github.com/mqstore/mqstore/internal/faultseam"
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/conformance"
)

// newTestBackend builds a backend sized for the conformance suite and closes
// it when the test ends; the Close fails the test if a file leaked a buffer.
func newTestBackend(t testing.TB, opts Options) *Backend {
	t.Helper()
	if opts.SegmentSizeBytes == 0 {
		opts.SegmentSizeBytes = conformance.SegmentSizeBytes
	}
	b, err := New(opts)
	if err != nil {
		t.Fatalf("New(%+v): %v", opts, err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close backend: %v", err)
		}
	})
	return b
}

// variants are the backend's configurations, each run through the whole
// suite with the seam's injector under it.
var variants = []struct {
	name    string
	backend func(t testing.TB) *Backend
}{
	{"default", func(t testing.TB) *Backend { return newTestBackend(t, Options{}) }},
	{"Wait", func(t testing.TB) *Backend { return newTestBackend(t, Options{PoolSize: 3, WhenEmpty: Wait}) }},
	// Fallback: the pool's only buffer is taken, so every segment writes
	// through its file mapping.
	{"Fallback", func(t testing.TB) *Backend {
		b := newTestBackend(t, Options{PoolSize: 1, NoLock: true})
		buf, err := b.pool.borrow(context.Background())
		if err != nil || buf == nil {
			t.Fatalf("borrow the only buffer: %v, %v", buf, err)
		}
		t.Cleanup(func() { b.pool.giveBack(buf) }) // runs before the Close above
		return b
	}},
}

func TestConformance(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			conformance.Run(t, func(t testing.TB) mappedfile.Backend { return v.backend(t) },
				conformance.WithInjector(faultseam.ForConformance))
		})
	}
}
