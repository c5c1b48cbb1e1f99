//go:build linux

package transientpool

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

func TestUncommittedBytesInvisible(t *testing.T) {
	b := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 1})
	mf := openSeg(t, b, specIn(t.TempDir(), "seg"))
	want := make([]byte, testSegmentBytes)
	appendBytes(t, mf, want, record(1, 3000))
	if r := mf.ReadablePosition(); r != 0 {
		t.Fatalf("readable %d before any commit", r)
	}
	if n, err := mf.ReadAt(make([]byte, 100), 0); n != 0 || err != io.EOF {
		t.Fatalf("read of uncommitted bytes: %d, %v; want 0, io.EOF", n, err)
	}
	var sink bytes.Buffer
	if _, err := mf.SendRange(testContext(t), &sink, 0, 100); !errors.Is(err, mappedfile.ErrOutOfRange) {
		t.Fatalf("send of uncommitted bytes: %v, want ErrOutOfRange", err)
	}
	checkFile(t, mf.Path(), make([]byte, testSegmentBytes)) // nothing reached the file
	if c, err := mf.Commit(testContext(t), 0); err != nil || c != 3000 {
		t.Fatalf("commit: %d, %v", c, err)
	}
	checkFile(t, mf.Path(), want) // in the page cache before any flush
	appendBytes(t, mf, want, record(2, 500))
	got := make([]byte, 4000)
	n, err := mf.ReadAt(got, 0)
	if n != 3000 || err != io.EOF || !bytes.Equal(got[:n], want[:n]) {
		t.Fatalf("read after commit: %d, %v (want 3000 committed bytes, io.EOF)", n, err)
	}
	if fl := mf.FlushedPosition(); fl != 0 {
		t.Fatalf("flushed %d before Flush", fl)
	}
}

// TestFileEqualsAppendsAfterCommitFlush writes a whole segment in random
// records with commits and flushes at random points (some held back by the
// least-pages rule) and compares the file with os.ReadFile.
func TestFileEqualsAppendsAfterCommitFlush(t *testing.T) {
	b := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 1})
	mf := openSeg(t, b, specIn(t.TempDir(), "seg"))
	ctx := testContext(t)
	want := make([]byte, testSegmentBytes)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := 0; ; i++ {
		n := 1 + rng.IntN(2500)
		if mf.WrotePosition()+int64(n) > testSegmentBytes {
			n = int(testSegmentBytes - mf.WrotePosition())
		}
		appendBytes(t, mf, want, record(byte(i), n))
		if rng.IntN(3) == 0 {
			if _, err := mf.Commit(ctx, rng.IntN(3)); err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(5) == 0 {
			if _, err := mf.Flush(ctx, rng.IntN(2)); err != nil {
				t.Fatal(err)
			}
		}
		if mf.WrotePosition() == testSegmentBytes {
			break
		}
	}
	commitAndFlush(t, mf)
	if mf.FlushedPosition() != testSegmentBytes {
		t.Fatalf("flushed %d of a full segment", mf.FlushedPosition())
	}
	checkFile(t, mf.Path(), want)
}

func TestBufferReturnedAfterFullCommit(t *testing.T) {
	b := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 2})
	mf := openSeg(t, b, specIn(t.TempDir(), "seg"))
	if free := b.Stats().BuffersFree; free != 1 {
		t.Fatalf("free after open: %d, want 1", free)
	}
	want := make([]byte, testSegmentBytes)
	appendBytes(t, mf, want, record(4, testSegmentBytes-100))
	commitAndFlush(t, mf)
	if free := b.Stats().BuffersFree; free != 1 {
		t.Fatalf("free with 100 bytes of room left: %d, want 1", free)
	}
	appendBytes(t, mf, want, record(5, 100))
	if free := b.Stats().BuffersFree; free != 1 {
		t.Fatalf("free with the segment full but not committed: %d, want 1", free)
	}
	if _, err := mf.Commit(testContext(t), 0); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.BuffersFree != 2 || st.Returns != 1 {
		t.Fatalf("after the whole segment is committed: %+v, want 2 free, 1 return", st)
	}
	if fl, err := mf.Flush(testContext(t), 0); err != nil || fl != testSegmentBytes {
		t.Fatalf("flush: %d, %v", fl, err)
	}
	checkFile(t, mf.Path(), want)
	got := make([]byte, testSegmentBytes)
	if n, err := mf.ReadAt(got, 0); n != testSegmentBytes || !bytes.Equal(got, want) {
		t.Fatalf("read back: %d, %v", n, err)
	}
	if err := mf.Close(); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.BuffersFree != 2 || st.Returns != 1 {
		t.Fatalf("close returned the buffer twice: %+v", st)
	}
}

func TestDeleteReturnsBufferAtLastRelease(t *testing.T) {
	b := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 1})
	mf := openSeg(t, b, specIn(t.TempDir(), "seg"))
	want := make([]byte, testSegmentBytes)
	appendBytes(t, mf, want, record(6, 7000))
	commitAndFlush(t, mf)
	if !mf.Retain() {
		t.Fatal("retain")
	}
	if err := mf.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mf.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("path still there after Delete: %v", err)
	}
	if free := b.Stats().BuffersFree; free != 0 {
		t.Fatalf("buffer returned while a reader holds a reference")
	}
	got := make([]byte, 7000)
	if n, err := mf.ReadAt(got, 0); n != 7000 || err != nil || !bytes.Equal(got, want[:7000]) {
		t.Fatalf("read through the held reference: %d, %v", n, err)
	}
	mf.Release()
	if st := b.Stats(); st.BuffersFree != 1 || st.Returns != 1 {
		t.Fatalf("after the last release: %+v, want the buffer back", st)
	}
}

func TestReopenTruncateBorrows(t *testing.T) {
	b := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 1, WhenEmpty: Wait, BorrowTimeout: 20e6})
	dir := t.TempDir()
	spec := specIn(dir, "seg")
	mf := openSeg(t, b, spec)
	want := make([]byte, testSegmentBytes)
	appendBytes(t, mf, want, record(7, 9000))
	commitAndFlush(t, mf)
	if err := mf.Close(); err != nil {
		t.Fatal(err)
	}
	mf = openSeg(t, b, spec)
	if st := b.Stats(); st.Borrows != 1 || st.BuffersFree != 1 {
		t.Fatalf("reopening a full segment borrowed: %+v", st)
	}
	// With the only buffer taken by another segment, Truncate waits, fails
	// and leaves the file as it was.
	other := openSeg(t, b, specIn(dir, "other"))
	if err := mf.Truncate(testContext(t), 5000); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("truncate with the pool empty: %v, want ErrPoolExhausted", err)
	}
	if mf.WrotePosition() != testSegmentBytes {
		t.Fatalf("a failed Truncate moved wrote to %d", mf.WrotePosition())
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if err := mf.Truncate(testContext(t), 5000); err != nil {
		t.Fatal(err)
	}
	clear(want[5000:])
	checkFile(t, spec.Path, want)
	if mf.(*segment).buffer.Load() == nil {
		t.Fatal("Truncate did not borrow a buffer")
	}
	appendBytes(t, mf, want, record(8, 3000))
	if n, _ := mf.ReadAt(make([]byte, 10), 5000); n != 0 {
		t.Fatal("appended bytes readable before commit")
	}
	commitAndFlush(t, mf)
	checkFile(t, spec.Path, want)
}

// TestTruncateCommitsBufferedBytes: bytes recovery declares valid that are
// only in the buffer reach the file.
func TestTruncateCommitsBufferedBytes(t *testing.T) {
	b := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 1})
	mf := openSeg(t, b, specIn(t.TempDir(), "seg"))
	want := make([]byte, testSegmentBytes)
	appendBytes(t, mf, want, record(10, 6000))
	if err := mf.Truncate(testContext(t), 4000); err != nil {
		t.Fatal(err)
	}
	clear(want[4000:])
	checkFile(t, mf.Path(), want)
	if p := [3]int64{mf.WrotePosition(), mf.CommittedPosition(), mf.FlushedPosition()}; p != [3]int64{4000, 4000, 4000} {
		t.Fatalf("positions after Truncate(4000): %v", p)
	}
	if err := mf.Truncate(testContext(t), -1); !errors.Is(err, mappedfile.ErrOutOfRange) {
		t.Fatalf("truncate to -1: %v", err)
	}
}

// TestStickyCommitError makes pwrite fail by putting a read-only descriptor
// under the segment's descriptor number.
func TestStickyCommitError(t *testing.T) {
	b := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 1})
	mf := openSeg(t, b, specIn(t.TempDir(), "seg"))
	want := make([]byte, testSegmentBytes)
	appendBytes(t, mf, want, record(11, 2000))
	commitAndFlush(t, mf)
	readOnly, err := os.Open(mf.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer readOnly.Close()
	if err := unix.Dup3(int(readOnly.Fd()), mf.(*segment).fd, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	appendBytes(t, mf, want, record(12, 2000))
	_, commitErr := mf.Commit(testContext(t), 0)
	if !errors.Is(commitErr, unix.EBADF) {
		t.Fatalf("commit through a read-only descriptor: %v, want EBADF", commitErr)
	}
	if mf.CommittedPosition() != 2000 {
		t.Fatalf("a failed commit moved committed to %d", mf.CommittedPosition())
	}
	if _, err := mf.Flush(testContext(t), 0); err != commitErr {
		t.Fatalf("flush after a failed commit: %v, want the same error", err)
	}
	if _, err := mf.Append(1, mappedfile.Bytes{1}); err != commitErr {
		t.Fatalf("append after a failed commit: %v, want the same error", err)
	}
	if _, err := mf.Commit(testContext(t), 0); err != commitErr {
		t.Fatalf("second commit: %v, want the same error", err)
	}
	if mf.Err() != commitErr {
		t.Fatalf("Err(): %v", mf.Err())
	}
}

func TestWarmCool(t *testing.T) {
	b := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 1, NoLock: true})
	dir := t.TempDir()
	for _, name := range []string{"buffered", "fallback"} {
		mf := openSeg(t, b, specIn(dir, name))
		want := make([]byte, testSegmentBytes)
		appendBytes(t, mf, want, record(13, 100)) // touch starts at the next page
		if err := mappedfile.Warm(testContext(t), mf, mappedfile.WarmOptions{Touch: true, FlushEveryPages: 4, Lock: true, Advise: true}); err != nil {
			t.Fatalf("%s: warm: %v", name, err)
		}
		if !mf.(*segment).mappingLocked.Load() {
			t.Fatalf("%s: mapping not marked locked", name)
		}
		appendBytes(t, mf, want, record(14, 5000))
		commitAndFlush(t, mf)
		if err := mappedfile.Cool(mf); err != nil {
			t.Fatalf("%s: cool: %v", name, err)
		}
		checkFile(t, mf.Path(), want)
		got := make([]byte, 5100)
		if _, err := mf.ReadAt(got, 0); err != nil || !bytes.Equal(got, want[:5100]) {
			t.Fatalf("%s: read after cool: %v", name, err)
		}
	}
}
