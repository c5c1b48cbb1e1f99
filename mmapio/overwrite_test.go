//go:build linux

package mmapio

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

// checkPagesClean fails when /proc/kpageflags shows a dirty page; it returns
// false (after a log line) when the kernel does not tell or the file is on
// tmpfs, whose pages never become clean.
func checkPagesClean(t *testing.T, mf *file, what string) bool {
	t.Helper()
	if onTmpfs(t, filepath.Dir(mf.Path())) {
		t.Logf("%s: segment on tmpfs, pages stay dirty: not checking page flags", what)
		return false
	}
	dirty, ok := dirtyPages(t, mf.mapping)
	if !ok {
		t.Logf("%s: page flags unreadable (needs CAP_SYS_ADMIN): not checking them", what)
		return false
	}
	if dirty != 0 {
		t.Errorf("%s: %d dirty pages, want 0", what, dirty)
	}
	return true
}

// TestOverwriteBelowFlushedIsDurable rewrites bytes in a page flushed
// already; a Flush with nothing appended, and a least-pages threshold far
// above what is pending, must still write that page back.
func TestOverwriteBelowFlushedIsDurable(t *testing.T) {
	ctx := testContext(t)
	const size, written = 256 << 10, 3*mappedfile.PageSize + 100
	dir := t.TempDir()
	mf := openSegment(t, Options{}, dir, "seg", size)
	appendPattern(t, mf, written)
	if flushed, err := mf.Flush(ctx, 0); err != nil || flushed != written {
		t.Fatalf("Flush = %d, %v; want %d", flushed, err, written)
	}
	flagsKnown := checkPagesClean(t, mf, "after the first Flush")
	header := []byte("HEADER-v2")
	if n, err := mf.WriteAt(header, 10); n != len(header) || err != nil {
		t.Fatalf("WriteAt = %d, %v", n, err)
	}
	if n, err := mf.WriteAt([]byte{0xAB}, 2*mappedfile.PageSize+7); n != 1 || err != nil {
		t.Fatalf("WriteAt = %d, %v", n, err)
	}
	if flagsKnown {
		states := pageStates(t, mf.mapping[:4*mappedfile.PageSize])
		if !states[0].dirty || states[1].dirty || !states[2].dirty {
			t.Fatalf("after WriteAt, dirty pages 0..2: %v %v %v; want true false true",
				states[0].dirty, states[1].dirty, states[2].dirty)
		}
	}
	if flushed, err := mf.Flush(ctx, 1000); err != nil || flushed != written {
		t.Fatalf("Flush(least 1000 pages) with overwrites pending = %d, %v; want %d", flushed, err, written)
	}
	checkPagesClean(t, mf, "after flushing the overwrites")
	if mf.overwrittenFrom.Load() != noOverwrite {
		t.Fatalf("overwrite mark %d left after Flush", mf.overwrittenFrom.Load())
	}

	want := make([]byte, written)
	patternEncoder{}.EncodeAt(want, 0)
	copy(want[10:], header)
	want[2*mappedfile.PageSize+7] = 0xAB
	if err := mf.Close(); err != nil {
		t.Fatal(err)
	}
	onDisk, err := os.ReadFile(mf.Path())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk[:written], want) {
		t.Fatal("file content after Close differs from the appended and overwritten bytes")
	}
	reopened := openSegment(t, Options{}, dir, "seg", size)
	got := make([]byte, written)
	if _, err := reopened.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("reopened segment differs from the appended and overwritten bytes")
	}
}

// TestOverwriteIgnoresLeastPages: with appended bytes pending too, an
// overwrite makes Flush act below its least-pages threshold, from the
// overwritten page to the write position.
func TestOverwriteIgnoresLeastPages(t *testing.T) {
	ctx := testContext(t)
	mf := openSegment(t, Options{}, "", "seg", 256<<10)
	appendPattern(t, mf, 5000)
	if _, err := mf.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	appendPattern(t, mf, 1000)
	if flushed, err := mf.Flush(ctx, 4); err != nil || flushed != 5000 {
		t.Fatalf("Flush(least 4) with 1000 bytes pending = %d, %v; want 5000 (no-op)", flushed, err)
	}
	if _, err := mf.WriteAt([]byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if flushed, err := mf.Flush(ctx, 4); err != nil || flushed != 6000 {
		t.Fatalf("Flush(least 4) with an overwrite pending = %d, %v; want 6000", flushed, err)
	}
	checkPagesClean(t, mf, "after Flush")
	if flushed, err := mf.Flush(ctx, 0); err != nil || flushed != 6000 {
		t.Fatalf("idle Flush = %d, %v", flushed, err)
	}
}

func TestOverwriteBounds(t *testing.T) {
	mf := openSegment(t, Options{}, "", "seg", 64<<10)
	appendPattern(t, mf, 1000)
	for _, r := range []struct {
		pos int64
		n   int
	}{{-1, 1}, {999, 2}, {1000, 1}, {1 << 62, 1}, {64 << 10, 0}} {
		if _, err := mf.WriteAt(make([]byte, r.n), r.pos); !errors.Is(err, mappedfile.ErrOutOfRange) {
			t.Errorf("WriteAt %d bytes at %d with 1000 written: %v, want ErrOutOfRange", r.n, r.pos, err)
		}
	}
	if n, err := mf.WriteAt(nil, 1000); n != 0 || err != nil {
		t.Errorf("empty WriteAt at the write position: %d, %v", n, err)
	}
	if mf.overwrittenFrom.Load() != noOverwrite {
		t.Errorf("refused or empty overwrites left a mark at %d", mf.overwrittenFrom.Load())
	}
	if n, err := mf.WriteAt(bytes.Repeat([]byte{0xCD}, 40), 960); n != 40 || err != nil {
		t.Fatalf("WriteAt up to the write position: %d, %v", n, err)
	}
	buf := make([]byte, 1000)
	if _, err := mf.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	checkPattern(t, buf[:960], 0)
	if !bytes.Equal(buf[960:], bytes.Repeat([]byte{0xCD}, 40)) {
		t.Fatal("overwritten bytes not read back")
	}
	if mf.Err() != nil {
		t.Fatalf("refused overwrites set the sticky error: %v", mf.Err())
	}
}

func TestOverwriteAfterCloseAndFault(t *testing.T) {
	t.Run("closed", func(t *testing.T) {
		mf := openSegment(t, Options{}, "", "seg", 64<<10)
		appendPattern(t, mf, 100)
		if err := mf.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := mf.WriteAt([]byte("x"), 0); !errors.Is(err, mappedfile.ErrClosed) {
			t.Fatalf("WriteAt after Close: %v, want ErrClosed", err)
		}
	})
	t.Run("fault", func(t *testing.T) {
		ctx := testContext(t)
		mf := openSegment(t, Options{}, "", "seg", 1<<20)
		appendPattern(t, mf, 10000)
		if _, err := mf.Flush(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(mf.Path(), 0); err != nil {
			t.Fatal(err)
		}
		_, err := mf.WriteAt([]byte("x"), 8000)
		if !errors.Is(err, ErrFault) {
			t.Fatalf("WriteAt into a shrunk file: %v, want ErrFault", err)
		}
		if mf.Err() != err {
			t.Fatalf("Err() = %v, want the WriteAt's error", mf.Err())
		}
		if _, again := mf.WriteAt([]byte("x"), 0); again != err {
			t.Fatalf("next WriteAt: %v, want the sticky error", again)
		}
		if _, again := mf.Append(1, patternEncoder{}); again != err {
			t.Fatalf("Append: %v, want the sticky error", again)
		}
		if _, again := mf.Flush(ctx, 0); again != err {
			t.Fatalf("Flush: %v, want the sticky error", again)
		}
	})
}

// TestOverwriteRacingFlush: the owner appends and rewrites slots below the
// flushed position while another goroutine flushes; after a last Flush no
// page may be dirty and the file must hold the last value of every slot.
func TestOverwriteRacingFlush(t *testing.T) {
	ctx := testContext(t)
	const size, slots = 1 << 20, 64 // one 8-byte slot at the start of each of 64 pages
	mf := openSegment(t, Options{}, "", "seg", size)
	appendPattern(t, mf, slots*mappedfile.PageSize)
	if _, err := mf.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var flusher sync.WaitGroup
	var flushErr error
	flusher.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := mf.Flush(ctx, 1); err != nil {
				flushErr = err
				return
			}
		}
	})
	var slot [8]byte
	for round := range 2000 {
		page := int64(round*7%slots) * mappedfile.PageSize
		slot[0], slot[1] = byte(round), byte(round>>8)
		if _, err := mf.WriteAt(slot[:], page); err != nil {
			t.Fatal(err)
		}
		if mf.WrotePosition()+100 <= size {
			appendPattern(t, mf, 100)
		}
	}
	close(stop)
	flusher.Wait()
	if flushErr != nil {
		t.Fatal(flushErr)
	}
	if flushed, err := mf.Flush(ctx, 0); err != nil || flushed != mf.WrotePosition() {
		t.Fatalf("last Flush = %d, %v; want %d", flushed, err, mf.WrotePosition())
	}
	checkPagesClean(t, mf, "after the last Flush")
	onDisk, err := os.ReadFile(mf.Path())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk[:mf.WrotePosition()], mf.mapping[:mf.WrotePosition()]) {
		t.Fatal("file differs from the mapping")
	}
}

// TestTruncateSyncsOverwrites: Truncate at the last page (the msync path)
// makes overwrites below the valid end durable too.
func TestTruncateSyncsOverwrites(t *testing.T) {
	ctx := testContext(t)
	const size = 64 << 10
	mf := openSegment(t, Options{}, "", "seg", size)
	appendPattern(t, mf, size)
	if _, err := mf.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.WriteAt([]byte("slot"), 100); err != nil {
		t.Fatal(err)
	}
	if err := mf.Truncate(ctx, size-50); err != nil {
		t.Fatal(err)
	}
	checkPagesClean(t, mf, "after Truncate")
	if mf.overwrittenFrom.Load() != noOverwrite {
		t.Fatalf("overwrite mark %d left after Truncate", mf.overwrittenFrom.Load())
	}
	buf := make([]byte, 4)
	if _, err := mf.ReadAt(buf, 100); err != nil || string(buf) != "slot" {
		t.Fatalf("read after Truncate: %q, %v", buf, err)
	}
}

// BenchmarkWriteAt rewrites a small slot in place, as the IndexFile updates
// a hash slot, without flushing.
func BenchmarkWriteAt(b *testing.B) {
	for _, size := range []int{4, 20, 4096} {
		b.Run("size="+itoa(int64(size)), func(b *testing.B) {
			segments := newBenchSegments(b, nil)
			mf := segments.current
			if _, err := mf.Append(benchSegmentBytes, newFillEncoder(benchSegmentBytes)); err != nil {
				b.Fatal(err)
			}
			ow := mf.(mappedfile.Overwriter)
			p := make([]byte, size)
			var pos int64
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := ow.WriteAt(p, pos); err != nil {
					b.Fatal(err)
				}
				if pos += 4096; pos+int64(size) > benchSegmentBytes {
					pos = 0
				}
			}
		})
	}
}

// TestSwapEachIsFlushed: SwapEach marks its lowest field for the next
// Flush, which writes back every page it dirtied even with nothing
// appended and a least-pages threshold far above what is pending.
func TestSwapEachIsFlushed(t *testing.T) {
	ctx := testContext(t)
	const size, written = 256 << 10, 4 * mappedfile.PageSize
	mf := openSegment(t, Options{}, t.TempDir(), "seg", size)
	appendPattern(t, mf, written)
	if _, err := mf.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	flagsKnown := checkPagesClean(t, mf, "after the first Flush")
	at := []int64{3*mappedfile.PageSize + 8, mappedfile.PageSize + 100}
	if err := mf.SwapEach([]byte("abcdefgh"), make([]byte, 8), 4, at); err != nil {
		t.Fatal(err)
	}
	if got := mf.overwrittenFrom.Load(); got != at[1] {
		t.Fatalf("overwrite mark %d after SwapEach, want its lowest field %d", got, at[1])
	}
	if flagsKnown {
		states := pageStates(t, mf.mapping[:written])
		if states[0].dirty || !states[1].dirty || states[2].dirty || !states[3].dirty {
			t.Fatalf("after SwapEach, dirty pages 0..3: %v %v %v %v; want false true false true",
				states[0].dirty, states[1].dirty, states[2].dirty, states[3].dirty)
		}
	}
	if flushed, err := mf.Flush(ctx, 1000); err != nil || flushed != written {
		t.Fatalf("Flush(least 1000 pages) with swaps pending = %d, %v; want %d", flushed, err, written)
	}
	checkPagesClean(t, mf, "after flushing the swaps")
	if mf.overwrittenFrom.Load() != noOverwrite {
		t.Fatalf("overwrite mark %d left after Flush", mf.overwrittenFrom.Load())
	}
}
