//go:build linux

package mmapio_test

import (
	"testing"

	"github.com/mqstore/mqstore/internal/faultseam"
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/conformance"
	"github.com/mqstore/mqstore/mmapio"
)

// variants are the backend's configurations, each run through the whole
// suite with the seam's injector under it.
var variants = []struct {
	name string
	opts mmapio.Options
}{
	{"default", mmapio.Options{}},
	{"TouchByWriting", mmapio.Options{TouchByWriting: true}},
}

func TestConformance(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			conformance.Run(t, func(testing.TB) mappedfile.Backend { return mmapio.New(v.opts) },
				conformance.WithInjector(faultseam.ForConformance))
		})
	}
}
