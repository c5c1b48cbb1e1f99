package gomod

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRequired(t *testing.T) {
	path := filepath.Join(t.TempDir(), "go.mod")
	text := "module example.com/m\n\ngo 1.26.0\n\nrequire example.com/one v1.2.3\n\nrequire (\n\texample.com/two v0.0.0-20250101000000-abcdef123456 // indirect\n\texample.com/three v3.0.0+incompatible\n)\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Required(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"example.com/one": "v1.2.3", "example.com/two": "v0.0.0-20250101000000-abcdef123456", "example.com/three": "v3.0.0+incompatible"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for m, v := range want {
		if got[m] != v {
			t.Errorf("%s: %q, want %q", m, got[m], v)
		}
	}
	if _, err := Required(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a missing go.mod read without an error")
	}
}
