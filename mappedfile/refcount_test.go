package mappedfile_test

import (
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

func TestRefCount(t *testing.T) {
	var r mappedfile.RefCount
	r.Init()
	cleaned := 0
	if !r.Retain() {
		t.Fatal("retain")
	}
	r.Shutdown(func() { cleaned++ })
	if r.Retain() {
		t.Fatal("retain after shutdown")
	}
	if !r.Acquire() {
		t.Fatal("acquire while a reference is held")
	}
	r.Release()
	if cleaned != 0 {
		t.Fatal("cleaned up with a reference held")
	}
	r.Release()
	if cleaned != 1 {
		t.Fatal("not cleaned up at the last release")
	}
	if r.Acquire() {
		t.Fatal("acquire after cleanup")
	}
	if r.Shutdown(func() { cleaned++ }) || cleaned != 1 {
		t.Fatal("second shutdown ran a cleanup")
	}
}
