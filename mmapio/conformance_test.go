package mmapio_test

import (
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/conformance"
	"github.com/mqstore/mqstore/mmapio"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, func(testing.TB) mappedfile.Backend { return mmapio.New(mmapio.Options{}) })
}

func TestConformanceTouchByWriting(t *testing.T) {
	conformance.Run(t, func(testing.TB) mappedfile.Backend {
		return mmapio.New(mmapio.Options{TouchByWriting: true})
	})
}
