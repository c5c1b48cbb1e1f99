//go:build linux

package mmapio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqstore/mqstore/mappedfile"
)

func TestOpenPositions(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	backend := New(Options{})
	if backend.Name() != "mmap" {
		t.Fatalf("Name() = %q", backend.Name())
	}
	spec := mappedfile.Spec{Path: filepath.Join(dir, "00000000000000000000"), FromOffset: 0, SizeBytes: 1 << 20}
	mf, err := backend.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if mf.WrotePosition() != 0 || mf.CommittedPosition() != 0 || mf.FlushedPosition() != 0 || mf.ReadablePosition() != 0 {
		t.Fatalf("new file positions: %d %d %d %d", mf.WrotePosition(), mf.CommittedPosition(), mf.FlushedPosition(), mf.ReadablePosition())
	}
	if st, err := os.Stat(spec.Path); err != nil || st.Size() != spec.SizeBytes {
		t.Fatalf("stat new segment: %v, %v", st, err)
	}
	appendPattern(t, mf, 1000)
	if err := mf.Close(); err != nil {
		t.Fatal(err)
	}
	mf, err = backend.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	for name, pos := range map[string]int64{"wrote": mf.WrotePosition(), "committed": mf.CommittedPosition(),
		"flushed": mf.FlushedPosition(), "readable": mf.ReadablePosition()} {
		if pos != spec.SizeBytes {
			t.Errorf("existing file: %s position %d, want %d", name, pos, spec.SizeBytes)
		}
	}
	buf := make([]byte, 1000)
	if _, err := mf.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	checkPattern(t, buf, 0)
	spec.SizeBytes *= 2
	if _, err := backend.Open(ctx, spec); !errors.Is(err, mappedfile.ErrSizeMismatch) {
		t.Fatalf("open with another size: %v, want ErrSizeMismatch", err)
	}
}

func TestFlushPutsDataInFile(t *testing.T) {
	ctx := testContext(t)
	const size = 256 << 10
	mf := openSegment(t, Options{}, "", "seg", size)
	appendPattern(t, mf, 3000)
	appendPattern(t, mf, 3000) // wrote = 6000: page 1 of the segment
	if dirty, ok := dirtyPages(t, mf.mapping[:8192]); ok && dirty != 2 {
		t.Errorf("%d dirty pages after appending 6000 bytes, want 2", dirty)
	}
	if flushed, err := mf.Flush(ctx, 4); err != nil || flushed != 0 {
		t.Fatalf("Flush(least 4 pages) with 1 page pending = %d, %v; want 0, nil", flushed, err)
	}
	if committed, err := mf.Commit(ctx, 0); err != nil || committed != 6000 {
		t.Fatalf("Commit = %d, %v; want 6000", committed, err)
	}
	if flushed, err := mf.Flush(ctx, 0); err != nil || flushed != 6000 {
		t.Fatalf("Flush = %d, %v; want 6000", flushed, err)
	}
	if dirty, ok := dirtyPages(t, mf.mapping[:8192]); !ok {
		t.Log("page flags unreadable (needs CAP_SYS_ADMIN): not checking that msync cleaned the pages")
	} else if dirty != 0 {
		t.Errorf("%d dirty pages after Flush, want 0", dirty)
	}
	onDisk, err := os.ReadFile(mf.Path())
	if err != nil {
		t.Fatal(err)
	}
	if len(onDisk) != size {
		t.Fatalf("file has %d bytes, want %d", len(onDisk), size)
	}
	checkPattern(t, onDisk[:6000], 0)
	checkZeros(t, onDisk[6000:], 6000)

	// A second flush with nothing new is a no-op; with only the partial
	// page rewritten it syncs that page.
	if flushed, err := mf.Flush(ctx, 0); err != nil || flushed != 6000 {
		t.Fatalf("idle Flush = %d, %v", flushed, err)
	}
	appendPattern(t, mf, 100)
	if flushed, err := mf.Flush(ctx, 0); err != nil || flushed != 6100 {
		t.Fatalf("Flush = %d, %v; want 6100", flushed, err)
	}
}

func TestAppendFullWritesNothing(t *testing.T) {
	const size = 8192
	mf := openSegment(t, Options{}, "", "seg", size)
	appendPattern(t, mf, 8000)
	pos, err := mf.Append(200, failingEncoder{})
	if !errors.Is(err, mappedfile.ErrFull) {
		t.Fatalf("append past the end: %d, %v; want ErrFull", pos, err)
	}
	if mf.WrotePosition() != 8000 {
		t.Fatalf("wrote moved to %d", mf.WrotePosition())
	}
	checkZeros(t, mf.mapping[8000:], 8000)
	if pos := appendPattern(t, mf, 192); pos != 8000 {
		t.Fatalf("filling append at %d", pos)
	}
	if _, err := mf.Append(1, patternEncoder{}); !errors.Is(err, mappedfile.ErrFull) {
		t.Fatalf("append to a full segment: %v", err)
	}
	if mf.Err() != nil {
		t.Fatalf("ErrFull became sticky: %v", mf.Err())
	}
}

func TestAppendEncoderErrorZeroes(t *testing.T) {
	mf := openSegment(t, Options{}, "", "seg", 64<<10)
	appendPattern(t, mf, 100)
	_, err := mf.Append(500, failingEncoder{})
	if !errors.Is(err, errEncoderFailed) {
		t.Fatalf("append with a failing encoder: %v", err)
	}
	if mf.WrotePosition() != 100 {
		t.Fatalf("wrote moved to %d", mf.WrotePosition())
	}
	checkZeros(t, mf.mapping[100:600], 100)
	if mf.Err() != nil {
		t.Fatalf("an encoder error became sticky: %v", mf.Err())
	}
	if pos := appendPattern(t, mf, 500); pos != 100 {
		t.Fatalf("next append at %d, want 100", pos)
	}
}

func TestTruncateZeroesTail(t *testing.T) {
	dirs := map[string]string{"tempdir": ""}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		// tmpfs: no unwritten extents, its pages are never written back.
		dirs["tmpfs"] = "/dev/shm"
	}
	const size = 256<<10 + 1000 // a partial last page too
	for fsName, dir := range dirs {
		for _, validEnd := range []int64{0, 5000, 8192, size - 100, size} {
			t.Run(fsName+"/validEnd="+itoa(validEnd), func(t *testing.T) {
				segmentDir := dir
				if dir != "" {
					var err error
					if segmentDir, err = os.MkdirTemp(dir, "mmapio-test-"); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { os.RemoveAll(segmentDir) })
				}
				testTruncate(t, segmentDir, size, validEnd)
			})
		}
	}
}

func testTruncate(t *testing.T, dir string, size, validEnd int64) {
	ctx := testContext(t)
	if dir == "" {
		dir = t.TempDir()
	}
	mf := openSegment(t, Options{}, dir, "seg", size)
	appendPattern(t, mf, int(size))
	if _, err := mf.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := mf.Close(); err != nil {
		t.Fatal(err)
	}
	mf = openSegment(t, Options{}, dir, "seg", size)
	if err := mf.Truncate(ctx, validEnd); err != nil {
		t.Fatal(err)
	}
	if mf.WrotePosition() != validEnd || mf.CommittedPosition() != validEnd || mf.FlushedPosition() != validEnd {
		t.Fatalf("positions after Truncate(%d): %d %d %d", validEnd, mf.WrotePosition(), mf.CommittedPosition(), mf.FlushedPosition())
	}
	if dirty, ok := dirtyPages(t, mf.mapping); ok && dirty != 0 && !onTmpfs(t, dir) {
		t.Errorf("%d dirty pages after Truncate", dirty)
	}
	onDisk, err := os.ReadFile(mf.Path())
	if err != nil {
		t.Fatal(err)
	}
	checkPattern(t, onDisk[:validEnd], 0)
	checkZeros(t, onDisk[validEnd:], validEnd)
	// The mapping sees the zeros too: the next appends find clean space.
	if validEnd < size {
		if _, err := mf.Append(int(size-validEnd), zeroCheckEncoder{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := mf.Truncate(ctx, size+1); !errors.Is(err, mappedfile.ErrOutOfRange) {
		t.Fatalf("Truncate past the end: %v", err)
	}
}

func itoa(n int64) string { return string(appendInt(nil, n)) }

func appendInt(b []byte, n int64) []byte {
	if n >= 10 {
		b = appendInt(b, n/10)
	}
	return append(b, byte('0'+n%10))
}

func TestDeleteWhileReaderHolds(t *testing.T) {
	mf := openSegment(t, Options{}, "", "seg", 1<<20)
	appendPattern(t, mf, 50000)
	if !mf.Retain() {
		t.Fatal("Retain failed")
	}
	if err := mf.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mf.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("path still there after Delete: %v", err)
	}
	if !mapsMention(t, mf.Path()) {
		t.Fatal("the mapping is gone while a reader holds a reference")
	}
	buf := make([]byte, 50000)
	if n, err := mf.ReadAt(buf, 0); n != len(buf) || err != nil {
		t.Fatalf("read through the held reference: %d, %v", n, err)
	}
	checkPattern(t, buf, 0)
	var sink bytes.Buffer
	if n, err := mf.SendRange(testContext(t), &sink, 10, 40000); n != 40000 || err != nil {
		t.Fatalf("send through the held reference: %d, %v", n, err)
	}
	checkPattern(t, sink.Bytes(), 10)
	if _, err := mf.Append(10, patternEncoder{}); !errors.Is(err, mappedfile.ErrClosed) {
		t.Fatalf("append after Delete: %v", err)
	}
	mf.Release()
	if mapsMention(t, mf.Path()) {
		t.Fatal("the mapping survived the last Release")
	}
	if _, err := mf.ReadAt(buf, 0); !errors.Is(err, mappedfile.ErrClosed) {
		t.Fatalf("read after the last Release: %v", err)
	}
	if _, err := mf.SendRange(testContext(t), &sink, 0, 1); !errors.Is(err, mappedfile.ErrClosed) {
		t.Fatalf("send after the last Release: %v", err)
	}
}

func TestOperationsAfterClose(t *testing.T) {
	ctx := testContext(t)
	mf := openSegment(t, Options{}, "", "seg", 64<<10)
	appendPattern(t, mf, 100)
	if err := mf.Close(); err != nil {
		t.Fatal(err)
	}
	if mapsMention(t, mf.Path()) {
		t.Fatal("Close with no reader left the mapping in place")
	}
	checks := map[string]error{}
	_, checks["Append"] = mf.Append(1, patternEncoder{})
	_, checks["Commit"] = mf.Commit(ctx, 0)
	_, checks["Flush"] = mf.Flush(ctx, 0)
	_, checks["ReadAt"] = mf.ReadAt(make([]byte, 1), 0)
	_, checks["SendRange"] = mf.SendRange(ctx, io.Discard, 0, 1)
	checks["Warm"] = mf.Warm(ctx, mappedfile.WarmOptions{Touch: true})
	checks["Cool"] = mf.Cool()
	checks["Truncate"] = mf.Truncate(ctx, 0)
	checks["Close"] = mf.Close()
	checks["Delete"] = mf.Delete()
	for op, err := range checks {
		if !errors.Is(err, mappedfile.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", op, err)
		}
	}
	if mf.Retain() {
		t.Error("Retain after Close succeeded")
	}
	if _, err := os.Stat(mf.Path()); err != nil {
		t.Errorf("Close removed the file: %v", err)
	}
}

// TestReadRacingClose closes segments while readers hammer them: every read
// returns either correct bytes or ErrClosed, never touches unmapped memory
// (which would crash the test binary).
func TestReadRacingClose(t *testing.T) {
	const readers, rounds, size = 4, 30, 256 << 10
	dir := t.TempDir()
	for round := range rounds {
		mf := openSegment(t, Options{}, dir, "seg"+itoa(int64(round)), size)
		appendPattern(t, mf, size)
		var reads atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, readers)
		firstRead := make(chan struct{}, readers)
		for r := range readers {
			wg.Go(func() {
				buf := make([]byte, 4096)
				for i := 0; ; i++ {
					pos := int64((i*7919 + r*4096) % (size - len(buf)))
					n, err := mf.ReadAt(buf, pos)
					if errors.Is(err, mappedfile.ErrClosed) {
						return
					}
					if err != nil || n != len(buf) {
						errs <- fmt.Errorf("read %d at %d: %d, %v", len(buf), pos, n, err)
						return
					}
					for j, b := range buf {
						if b != patternByte(pos+int64(j)) {
							errs <- fmt.Errorf("wrong byte read at %d", pos+int64(j))
							return
						}
					}
					if reads.Add(1) <= readers {
						firstRead <- struct{}{}
					}
				}
			})
		}
		// Close once some reads went through, so Close races with reads
		// in flight.
		deadline := time.After(10 * time.Second)
		for range readers {
			select {
			case <-firstRead:
			case err := <-errs:
				t.Fatalf("round %d: %v", round, err)
			case <-deadline:
				t.Fatalf("round %d: readers made no progress in 10 s", round)
			}
		}
		if err := mf.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		if reads.Load() == 0 {
			t.Fatalf("round %d: no read succeeded before Close", round)
		}
	}
}
