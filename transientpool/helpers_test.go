//go:build linux

package transientpool

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mqstore/mqstore/mappedfile"
)

// testSegmentBytes is the segment size of the package's own tests.
const testSegmentBytes = 16 * mappedfile.PageSize

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func specIn(dir, name string) mappedfile.Spec {
	return mappedfile.Spec{Path: filepath.Join(dir, name), SizeBytes: testSegmentBytes}
}

// openSeg opens a segment and closes it when the test ends (a second Close
// after the test's own is harmless: it returns ErrClosed).
func openSeg(t testing.TB, b *Backend, spec mappedfile.Spec) mappedfile.MappedFile {
	t.Helper()
	mf, err := b.Open(testContext(t), spec)
	if err != nil {
		t.Fatalf("open %s: %v", spec.Path, err)
	}
	t.Cleanup(func() { _ = mf.Close() })
	return mf
}

// record returns n bytes that depend on seed and position.
func record(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>8)
	}
	return b
}

// appendBytes appends data and records it in the expected file image.
func appendBytes(t testing.TB, mf mappedfile.MappedFile, want []byte, data []byte) {
	t.Helper()
	pos, err := mf.Append(len(data), mappedfile.Bytes(data))
	if err != nil {
		t.Fatalf("append %d bytes at %d: %v", len(data), mf.WrotePosition(), err)
	}
	copy(want[pos:], data)
}

func commitAndFlush(t testing.TB, mf mappedfile.MappedFile) {
	t.Helper()
	ctx := testContext(t)
	if _, err := mf.Commit(ctx, 0); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if _, err := mf.Flush(ctx, 0); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// checkFile compares the file on disk, read with os.ReadFile, to want.
func checkFile(t testing.TB, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s: %d bytes on disk, want %d; first difference at %d", path, len(got), len(want), i)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
