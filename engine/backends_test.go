package engine

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
)

// TestEveryRegisteredBackend builds every backend of the registry from its
// name with its default options, and with its options decoded from their
// own JSON, and writes, commits, flushes and reads a segment through it.
func TestEveryRegisteredBackend(t *testing.T) {
	const segmentBytes = 1 << 20
	if len(Backends()) == 0 || !reflect.DeepEqual(BackendNames(), mappedfile.Registered().Names()) {
		t.Fatalf("BackendNames %v, registry %v", BackendNames(), mappedfile.Registered().Names())
	}
	for _, name := range []string{"mem", "mmap", "transient", "uring", "uring-direct"} {
		if _, err := mappedfile.Registered().Lookup(name); err != nil {
			t.Errorf("the backends package does not link %s: %v", name, err)
		}
	}
	if def, err := mappedfile.Registered().Default(); err != nil || defaultBackendName() != def.Name {
		t.Fatalf("default backend %q, registry's %+v (%v)", defaultBackendName(), def.Name, err)
	}
	for _, reg := range Backends() {
		t.Run(reg.Name, func(t *testing.T) {
			if reg.Description == "" || reg.Requires == "" {
				t.Fatalf("registration %q lacks a description or its requirements: %+v", reg.Name, reg)
			}
			if reg.Unflushed != nil {
				n, what, err := reg.Unflushed(mappedfile.Config{SegmentSizeBytes: segmentBytes}, nil)
				if err != nil || n <= 0 || what == "" {
					t.Fatalf("Unflushed with the defaults: %d bytes (%q), %v", n, what, err)
				}
			}
			if reg.DirectIO && !reg.Buffered {
				t.Fatalf("%s bypasses the page cache but says it writes through: O_DIRECT writes come from its own buffers", reg.Name)
			}
			var options any
			if reg.NewOptions != nil {
				data, err := json.Marshal(reg.NewOptions())
				if err != nil {
					t.Fatalf("the default options do not marshal to JSON: %v", err)
				}
				if options, err = DecodeBackendOptions(reg.Name, data); err != nil {
					t.Fatalf("decode %s: %v", data, err)
				}
				if again, err := json.Marshal(options); err != nil || string(again) != string(data) {
					t.Fatalf("options %s decode and marshal to %s (%v)", data, again, err)
				}
			}
			for _, opts := range []any{nil, options} {
				b, err := newBackend(Options{Backend: reg.Name, BackendOptions: opts, SegmentSizeBytes: segmentBytes})
				if errors.Is(err, mappedfile.ErrUnsupported) {
					testenv.Skip(t, testenv.Uring, "backend %s cannot run here: %v", reg.Name, err)
				}
				if err != nil {
					t.Fatalf("build %s with options %#v: %v", reg.Name, opts, err)
				}
				if b.Name() != reg.Name {
					t.Fatalf("backend %q reports the name %q", reg.Name, b.Name())
				}
				roundTrip(t, b, segmentBytes)
				if c, ok := b.(interface{ Close() error }); ok {
					if err := c.Close(); err != nil {
						t.Fatalf("close backend: %v", err)
					}
				}
			}
		})
	}
}

func roundTrip(t *testing.T, b mappedfile.Backend, segmentBytes int64) {
	t.Helper()
	ctx := context.Background()
	mf, err := b.Open(ctx, mappedfile.Spec{Path: filepath.Join(t.TempDir(), "00000000000000000000"), SizeBytes: segmentBytes})
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	data := []byte("registered backends write, commit, flush and read")
	if _, err := mf.Append(len(data), mappedfile.Bytes(data)); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Commit(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if fl, err := mf.Flush(ctx, 0); err != nil || fl != int64(len(data)) {
		t.Fatalf("flush: %d, %v", fl, err)
	}
	got := make([]byte, len(data))
	if _, err := mf.ReadAt(got, 0); err != nil || string(got) != string(data) {
		t.Fatalf("read back %q, %v", got, err)
	}
}

// TestBackendOptionsOfAnotherBackend: options of the wrong type are an
// invalid option naming both types, not silently ignored.
func TestBackendOptionsOfAnotherBackend(t *testing.T) {
	_, err := Open(context.Background(), t.TempDir(), Options{Backend: "transient", BackendOptions: mappedfile.MemOptions{}, SegmentSizeBytes: 1 << 20})
	if !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("transient with MemOptions: %v, want ErrInvalidOption", err)
	}
	if _, err := DecodeBackendOptions("floppy", []byte("{}")); !errors.Is(err, ErrUnknownBackend) {
		t.Fatalf("options of an unknown backend: %v, want ErrUnknownBackend", err)
	}
}
