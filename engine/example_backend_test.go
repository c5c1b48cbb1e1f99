package engine_test

import (
	"bytes"
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/mappedfile"
)

// What a fifth backend takes: a package like this file's first half (a
// Backend, a Registration, an init that registers it) and one blank import
// of that package in package backends. The engine, the commands and the
// engine's registry-ranging tests (TestEveryRegisteredBackend runs this one
// too) then know it by name; nothing names it anywhere else.

// countingBackend is an example backend: the MemFS, counting the segment
// files it opens.
type countingBackend struct {
	inner *mappedfile.MemFS
	opens *atomic.Int64
}

func (b countingBackend) Name() string { return countingName }

// Inner exposes the MemFS, so the store keeps its directory files in it too.
func (b countingBackend) Inner() mappedfile.Backend { return b.inner }

func (b countingBackend) Open(ctx context.Context, spec mappedfile.Spec) (mappedfile.MappedFile, error) {
	b.opens.Add(1)
	return b.inner.Open(ctx, spec)
}

const countingName = "example-counting"

// countingOpens counts the files every example-counting backend opened.
var countingOpens atomic.Int64

var countingRegistration = mappedfile.Registration{
	Name:        countingName,
	Description: "an example: the in-memory MemFS, counting appends",
	Requires:    "nothing",
	Volatile:    true,
	Rank:        90,
	New: func(_ mappedfile.Config, options any) (mappedfile.Backend, error) {
		if _, err := mappedfile.OptionsAs[struct{}](countingName, options); err != nil {
			return nil, err
		}
		return countingBackend{inner: mappedfile.NewMemFS(mappedfile.MemOptions{}), opens: &countingOpens}, nil
	},
	Durability: func(cfg mappedfile.Config, options any) (mappedfile.Durability, error) {
		return mappedfile.MemRegistration.Durability(cfg, nil)
	},
}

func init() { mappedfile.Register(countingRegistration) }

// TestExampleBackendByName opens a store on the example backend by its name
// alone, puts a message and gets it back through the backend.
func TestExampleBackendByName(t *testing.T) {
	ctx := context.Background()
	before := countingOpens.Load()
	s, err := engine.Open(ctx, t.TempDir(), engine.Options{Backend: countingName, SegmentSizeBytes: 1 << 20})
	if err != nil {
		t.Fatalf("open on the example backend: %v", err)
	}
	defer s.Close()
	body := []byte("a fifth backend is one package and one import")
	if _, err := s.Put(ctx, &engine.Message{Topic: "T", QueueID: 0, Body: body}); err != nil {
		t.Fatalf("put: %v", err)
	}
	if countingOpens.Load() == before {
		t.Fatal("the store opened no file through the example backend")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := s.Get(ctx, "G", "T", 0, 0, 1, nil)
		if err != nil {
			t.Fatalf("get: %v", err)
		}
		if res.Status == engine.Found && len(res.Messages) == 1 {
			rec, err := res.Message(0)
			res.Release()
			if err != nil || !bytes.Equal(rec.Body, body) {
				t.Fatalf("got %q, %v; want %q", rec.Body, err, body)
			}
			break
		}
		res.Release()
		if time.Now().After(deadline) {
			t.Fatalf("the message was not dispatched within 10 s: %+v", res)
		}
		time.Sleep(time.Millisecond)
	}
	if !slices.Contains(engine.BackendNames(), countingName) {
		t.Fatalf("BackendNames %v lacks the example backend", engine.BackendNames())
	}
}
