package segment

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/internal/invariants"
	"github.com/mqstore/mqstore/mappedfile"
)

// rewindingBackend opens MemFS files whose Flush reports a position behind
// the one it reported before: a backend bug the queue's "flushed offset
// only moves forward" invariant must catch.
type rewindingBackend struct{ *mappedfile.MemFS }

func (b rewindingBackend) Open(ctx context.Context, spec mappedfile.Spec) (mappedfile.MappedFile, error) {
	mf, err := b.MemFS.Open(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &rewindingFile{MappedFile: mf}, nil
}

type rewindingFile struct {
	mappedfile.MappedFile
	flushes int
}

func (f *rewindingFile) Flush(ctx context.Context, leastPages int) (int64, error) {
	pos, err := f.MappedFile.Flush(ctx, leastPages)
	if f.flushes++; f.flushes > 1 {
		return pos / 2, err // the bug: half of what the first flush reported
	}
	return pos, err
}

// TestInvariantFlushGoesBack drives a real violation through the exported
// API: the queue is flushed to 4000, then the backend claims 2000. With
// invariants on Flush panics naming the invariant and both offsets; without
// them the bad value passes through (the test then checks it did).
func TestInvariantFlushGoesBack(t *testing.T) {
	ctx := context.Background()
	q, err := Open(ctx, Config{Dir: "/s/commitlog", SegmentSizeBytes: 8192,
		Backend: rewindingBackend{mappedfile.NewMemFS(mappedfile.MemOptions{})}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	mf, err := q.NextForAppend(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Append(4000, mappedfile.Bytes(make([]byte, 4000))); err != nil {
		t.Fatal(err)
	}
	flushed, err := q.Flush(ctx, 0, 0)
	if err != nil || flushed != 4000 {
		t.Fatalf("first flush: %d, %v; want 4000", flushed, err)
	}
	var got any
	func() {
		defer func() { got = recover() }()
		flushed, err = q.Flush(ctx, flushed, 0)
	}()
	if !invariants.Enabled {
		if got != nil || flushed != 2000 {
			t.Fatalf("without invariants: panic %v, flushed %d; want no panic and the backend's 2000", got, flushed)
		}
		return
	}
	var v *invariants.Violation
	if e, _ := got.(error); !errors.As(e, &v) {
		t.Fatalf("second flush: panic %#v, want an invariant violation", got)
	}
	if msg := v.Error(); !strings.Contains(msg, "committed or flushed offset") || !strings.Contains(msg, "4000") || !strings.Contains(msg, "2000") {
		t.Errorf("violation %q does not name the invariant and both offsets", msg)
	}
}
