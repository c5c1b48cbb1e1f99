package mappedfile_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

// baseFile is the smallest backend file built on Base: memory only, with
// counters for what Base called.
type baseFile struct {
	mappedfile.Base
	memory            []byte
	cleanups, removes int
	removeErr         error
}

func newBaseFile(t *testing.T, existed bool, sem mappedfile.Semantics) *baseFile {
	t.Helper()
	f := &baseFile{memory: make([]byte, 4*mappedfile.PageSize)}
	f.Init(mappedfile.BaseConfig{
		Spec:    mappedfile.Spec{Path: "/d/seg", SizeBytes: int64(len(f.memory))},
		Backend: "test", Existed: existed, Semantics: sem,
		Cleanup: func() error { f.cleanups++; return nil },
		Remove:  func() error { f.removes++; return f.removeErr },
	})
	return f
}

func (f *baseFile) append(t *testing.T, n int) (int64, error) {
	t.Helper()
	at, err := f.BeginAppend(n, mappedfile.Bytes(make([]byte, n)))
	if err != nil {
		return 0, err
	}
	defer f.Release()
	f.PublishWrote(at + int64(n))
	return at, nil
}

func TestBasePositionsAndSemantics(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name                  string
		sem                   mappedfile.Semantics
		committedAfterAppend  int64
		readableAfterAppend   int64
		committedAfterCommit  int64
		flushedAfterFlushOnly int64
	}{
		{"write-through", mappedfile.Semantics{WriteThrough: true, ReadableUpToWrote: true}, 100, 100, 100, 100},
		{"buffered", mappedfile.Semantics{}, 0, 0, 100, 0},
		{"buffered, readable up to wrote", mappedfile.Semantics{ReadableUpToWrote: true}, 0, 100, 100, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newBaseFile(t, false, tc.sem)
			if _, err := f.append(t, 100); err != nil {
				t.Fatal(err)
			}
			if c, r := f.CommittedPosition(), f.ReadablePosition(); c != tc.committedAfterAppend || r != tc.readableAfterAppend {
				t.Fatalf("after an append: committed %d readable %d, want %d %d", c, r, tc.committedAfterAppend, tc.readableAfterAppend)
			}
			from, to, able, err := f.BeginFlush(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if able {
				f.PublishFlushed(to)
			}
			f.Release()
			if fl := f.FlushedPosition(); fl != tc.flushedAfterFlushOnly || from != 0 {
				t.Fatalf("flush before commit: flushed %d, want %d", fl, tc.flushedAfterFlushOnly)
			}
			if tc.sem.WriteThrough {
				if c, err := f.CommitWriteThrough(); err != nil || c != 100 {
					t.Fatalf("CommitWriteThrough: %d, %v", c, err)
				}
				return
			}
			from, to, able, err = f.BeginCommit(0)
			if err != nil || from != 0 || to != 100 || !able {
				t.Fatalf("BeginCommit: %d %d %v %v", from, to, able, err)
			}
			f.PublishCommitted(to)
			f.Release()
			if c := f.CommittedPosition(); c != tc.committedAfterCommit {
				t.Fatalf("committed %d, want %d", c, tc.committedAfterCommit)
			}
		})
	}
}

func TestBaseAppendErrors(t *testing.T) {
	f := newBaseFile(t, false, mappedfile.Semantics{})
	for _, tc := range []struct {
		n    int
		enc  mappedfile.Encoder
		want error
	}{
		{0, mappedfile.Bytes(nil), mappedfile.ErrInvalidArgument},
		{-1, mappedfile.Bytes(nil), mappedfile.ErrInvalidArgument},
		{10, nil, mappedfile.ErrInvalidArgument},
		{4*mappedfile.PageSize + 1, mappedfile.Bytes(nil), mappedfile.ErrFull},
	} {
		if _, err := f.BeginAppend(tc.n, tc.enc); !errors.Is(err, tc.want) {
			t.Errorf("BeginAppend(%d, %T): %v, want %v", tc.n, tc.enc, err, tc.want)
		}
	}
	full := newBaseFile(t, true, mappedfile.Semantics{}) // existing: full until Truncate
	for _, n := range []int{0, 1, 8} {
		if _, err := full.BeginAppend(n, mappedfile.Bytes(nil)); !errors.Is(err, mappedfile.ErrFull) {
			t.Errorf("BeginAppend(%d) on a full file: %v, want ErrFull", n, err)
		}
	}
	if held := full.Base.Retain(); !held {
		t.Fatal("a refused append kept or dropped a reference")
	} else {
		full.Release()
	}
}

func TestBaseStickyError(t *testing.T) {
	ctx := context.Background()
	f := newBaseFile(t, false, mappedfile.Semantics{})
	if _, err := f.append(t, 100); err != nil {
		t.Fatal(err)
	}
	first := f.Fail(syscall.EIO)
	if second := f.Fail(syscall.ENOSPC); !errors.Is(second, syscall.EIO) || !errors.Is(first, syscall.EIO) {
		t.Fatalf("the first failure must stay: %v, %v", first, second)
	}
	if _, err := f.BeginAppend(1, mappedfile.Bytes{0}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("append after a failure: %v", err)
	}
	if _, _, _, err := f.BeginCommit(0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("commit after a failure: %v", err)
	}
	if _, _, _, err := f.BeginFlush(ctx, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("flush after a failure: %v", err)
	}
	if err := f.BeginTruncate(ctx, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("truncate after a failure: %v", err)
	}
	if err := f.Err(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Err: %v", err)
	}
	// The refused calls above took no reference: Close cleans up at once.
	if err := f.Close(); err != nil || f.cleanups != 1 {
		t.Fatalf("close: %v, cleanups %d", err, f.cleanups)
	}
}

func TestBasePublishAssertsTheOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(f *baseFile)
	}{
		{"wrote backwards", func(f *baseFile) { f.PublishWrote(50) }},
		{"wrote past the size", func(f *baseFile) { f.PublishWrote(1 << 20) }},
		{"committed past wrote", func(f *baseFile) { f.PublishCommitted(101) }},
		{"flushed past committed", func(f *baseFile) { f.PublishFlushed(1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newBaseFile(t, false, mappedfile.Semantics{})
			if _, err := f.append(t, 100); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "/d/seg") {
					t.Fatalf("no panic naming the file: %v", r)
				}
			}()
			tc.do(f)
		})
	}
}

func TestBaseCloseAndDeleteWaitForReaders(t *testing.T) {
	ctx := context.Background()
	for _, del := range []bool{false, true} {
		f := newBaseFile(t, false, mappedfile.Semantics{})
		f.removeErr = syscall.EACCES
		if !f.Base.Retain() {
			t.Fatal("retain")
		}
		var err error
		if del {
			err = f.Delete()
			if !errors.Is(err, syscall.EACCES) || f.removes != 1 {
				t.Fatalf("delete: %v (removes %d), want the remove error", err, f.removes)
			}
		} else if err = f.Close(); err != nil {
			t.Fatal(err)
		}
		if f.cleanups != 0 {
			t.Fatal("cleaned up under a reader")
		}
		if f.Base.Retain() {
			t.Fatal("Retain after close")
		}
		if !f.Acquire() {
			t.Fatal("a reader holding a reference cannot read after close")
		}
		f.Release()
		if _, err := f.BeginAppend(1, mappedfile.Bytes{0}); !errors.Is(err, mappedfile.ErrClosed) {
			t.Fatalf("append after close: %v", err)
		}
		if _, _, _, err := f.BeginFlush(ctx, 0); !errors.Is(err, mappedfile.ErrClosed) {
			t.Fatalf("flush after close: %v", err)
		}
		if _, err := f.CommitWriteThrough(); !errors.Is(err, mappedfile.ErrClosed) {
			t.Fatalf("commit after close: %v", err)
		}
		f.Release()
		if f.cleanups != 1 {
			t.Fatalf("cleanups %d after the last release, want 1", f.cleanups)
		}
		if err := f.Close(); !errors.Is(err, mappedfile.ErrClosed) {
			t.Fatalf("second close: %v", err)
		}
		if err := f.Delete(); !errors.Is(err, mappedfile.ErrClosed) {
			t.Fatalf("delete after close: %v", err)
		}
	}
}
