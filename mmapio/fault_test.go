//go:build linux

package mmapio

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

// TestShrunkFileFaultsBecomeErrors shrinks the file under the mapping, as a
// careless operator or another process might: the SIGBUS every access to the
// mapping then raises must come back as errors, not kill the process.
func TestShrunkFileFaultsBecomeErrors(t *testing.T) {
	ctx := testContext(t)
	mf := openSegment(t, Options{}, "", "seg", 1<<20)
	appendPattern(t, mf, 10000)
	if _, err := mf.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(mf.Path(), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	if _, err := mf.ReadAt(buf, 0); !errors.Is(err, ErrFault) {
		t.Fatalf("read from a shrunk file: %v, want ErrFault", err)
	}
	if mf.Err() != nil {
		t.Fatalf("a read fault became sticky: %v", mf.Err())
	}
	if _, err := mf.SendRange(ctx, &bytes.Buffer{}, 0, 100); !errors.Is(err, ErrFault) {
		t.Fatalf("send from a shrunk file: %v, want ErrFault", err)
	}
	_, appendErr := mf.Append(100, patternEncoder{})
	if !errors.Is(appendErr, ErrFault) {
		t.Fatalf("append to a shrunk file: %v, want ErrFault", appendErr)
	}
	t.Logf("append error: %v", appendErr)
	if mf.WrotePosition() != 10000 {
		t.Fatalf("a faulted append moved wrote to %d", mf.WrotePosition())
	}
	if err := mf.Err(); err != appendErr {
		t.Fatalf("Err() = %v, want the append's error", err)
	}
	if _, err := mf.Append(1, patternEncoder{}); err != appendErr {
		t.Fatalf("next append: %v, want the sticky error", err)
	}
	if _, err := mf.Commit(ctx, 0); err != appendErr {
		t.Fatalf("commit: %v, want the sticky error", err)
	}
	if _, err := mf.Flush(ctx, 0); err != appendErr {
		t.Fatalf("flush: %v, want the sticky error", err)
	}
	if err := mf.Truncate(ctx, 0); err != appendErr {
		t.Fatalf("truncate: %v, want the sticky error", err)
	}
	if err := mf.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestPanicInEncoderIsNotSwallowed: the fault guard recovers only memory
// faults on the mapping; an encoder's own panic goes through.
func TestPanicInEncoderIsNotSwallowed(t *testing.T) {
	mf := openSegment(t, Options{}, "", "seg", 64<<10)
	defer func() {
		if r := recover(); r != "encoder bug" {
			t.Fatalf("recovered %v, want the encoder's panic", r)
		}
	}()
	mf.Append(10, panicEncoder{})
	t.Fatal("Append returned after its encoder panicked")
}

type panicEncoder struct{}

func (panicEncoder) EncodeAt([]byte, int64) error { panic("encoder bug") }

func TestSendRange(t *testing.T) {
	ctx := testContext(t)
	const size = 3 << 20
	mf := openSegment(t, Options{}, "", "seg", size)
	appendPattern(t, mf, size-1000)
	readable := mf.ReadablePosition()

	t.Run("buffer", func(t *testing.T) {
		// More than one chunk of the copy path.
		var sink bytes.Buffer
		n, err := mf.SendRange(ctx, &sink, 100, readable-100)
		if err != nil || n != readable-100 {
			t.Fatalf("send: %d, %v", n, err)
		}
		checkPattern(t, sink.Bytes(), 100)
	})
	t.Run("pipe", func(t *testing.T) {
		// *os.File is a syscall.Conn: sendfile(2) into a pipe.
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		got := make(chan []byte)
		go func() {
			b, _ := io.ReadAll(r)
			got <- b
		}()
		n, err := mf.SendRange(ctx, w, 5000, 2<<20)
		w.Close()
		if err != nil || n != 2<<20 {
			t.Fatalf("send: %d, %v", n, err)
		}
		b := <-got
		if len(b) != 2<<20 {
			t.Fatalf("pipe got %d bytes", len(b))
		}
		checkPattern(t, b, 5000)
	})
	t.Run("bounds", func(t *testing.T) {
		for _, r := range [][2]int64{{-1, 10}, {0, -1}, {readable - 10, 11}, {readable + 1, 0}} {
			if _, err := mf.SendRange(ctx, io.Discard, r[0], r[1]); !errors.Is(err, mappedfile.ErrOutOfRange) {
				t.Errorf("send [%d,+%d) with readable %d: %v, want ErrOutOfRange", r[0], r[1], readable, err)
			}
		}
		if n, err := mf.SendRange(ctx, io.Discard, readable, 0); n != 0 || err != nil {
			t.Errorf("empty send at the readable end: %d, %v", n, err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := mf.SendRange(cancelled, io.Discard, 0, 10); !errors.Is(err, context.Canceled) {
			t.Fatalf("send with a cancelled context: %v", err)
		}
	})
	t.Run("shortWrite", func(t *testing.T) {
		n, err := mf.SendRange(ctx, shortWriter{}, 0, 100)
		if !errors.Is(err, io.ErrShortWrite) || n != 50 {
			t.Fatalf("send to a short writer: %d, %v", n, err)
		}
	})
}

type shortWriter struct{}

func (shortWriter) Write(p []byte) (int, error) { return len(p) / 2, nil }

func TestReadAtBounds(t *testing.T) {
	mf := openSegment(t, Options{}, "", "seg", 64<<10)
	appendPattern(t, mf, 1000)
	buf := make([]byte, 100)
	if n, err := mf.ReadAt(buf, 950); n != 50 || err != io.EOF {
		t.Fatalf("read across the readable end: %d, %v; want 50, io.EOF", n, err)
	}
	checkPattern(t, buf[:50], 950)
	if n, err := mf.ReadAt(buf, 1000); n != 0 || err != io.EOF {
		t.Fatalf("read at the readable end: %d, %v", n, err)
	}
	if _, err := mf.ReadAt(buf, -1); !errors.Is(err, mappedfile.ErrOutOfRange) {
		t.Fatalf("read at -1: %v", err)
	}
}
