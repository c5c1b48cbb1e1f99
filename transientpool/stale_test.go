//go:build linux

package transientpool

import (
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

// headOnly fills only the first 8 bytes of its reservation, as the engine's
// end-of-segment BLANK does (TOTALSIZE and MAGIC, the rest left as it is).
type headOnly struct{}

func (headOnly) EncodeAt(dst []byte, _ int64) error {
	copy(dst, "BLANKHDR")
	return nil
}

// TestPartialEncoderLeavesZerosNotAnotherSegmentsBytes: a pool buffer that
// held one segment's messages goes to the next segment; an encoder that
// fills only the head of its reservation must leave zeros after it in that
// segment's file, never the previous segment's messages. Through a fresh
// Open and through a Truncate that borrows, under both pool policies.
func TestPartialEncoderLeavesZerosNotAnotherSegmentsBytes(t *testing.T) {
	const size = testSegmentBytes
	for _, tc := range []struct {
		name      string
		whenEmpty WhenEmpty
		truncate  bool // the second segment borrows at Truncate (recovery), not at Open
	}{
		{"open/fallback-mmap", FallbackMmap, false},
		{"open/wait", Wait, false},
		{"truncate/fallback-mmap", FallbackMmap, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			b := newTestBackend(t, Options{SegmentSizeBytes: size, PoolSize: 1, NoLock: true, WhenEmpty: tc.whenEmpty})
			dir := t.TempDir()
			first := openSeg(t, b, specIn(dir, "first"))
			if _, err := first.Append(size, mappedfile.Bytes(record(0xA5, size))); err != nil {
				t.Fatal(err)
			}
			commitAndFlush(t, first) // fully committed: the buffer goes back
			if free := b.Stats().BuffersFree; free != 1 {
				t.Fatalf("%d free buffers after the first segment was committed, want 1", free)
			}
			spec := specIn(dir, "second")
			if tc.truncate {
				mf := openSeg(t, b, spec) // creates the file; reopened, it starts full and borrows at Truncate
				if err := mf.Close(); err != nil {
					t.Fatal(err)
				}
				if free := b.Stats().BuffersFree; free != 1 {
					t.Fatalf("%d free buffers, want 1", free)
				}
			}
			second := openSeg(t, b, spec)
			if tc.truncate {
				if err := second.Truncate(ctx, 0); err != nil { // borrows the buffer
					t.Fatal(err)
				}
			}
			if free := b.Stats().BuffersFree; free != 0 {
				t.Fatalf("the second segment did not take the pool's buffer (%d free)", free)
			}
			want := make([]byte, size)
			appendBytes(t, second, want, record(1, 100))
			if _, err := second.Append(size-100, headOnly{}); err != nil {
				t.Fatal(err)
			}
			copy(want[100:], "BLANKHDR")
			commitAndFlush(t, second)
			checkFile(t, spec.Path, want)
		})
	}
}

// TestTruncateForgetsDiscardedBytes: bytes appended past the valid end of a
// segment that still holds its buffer are discarded by Truncate; a later
// partial encoder leaves zeros there, not those bytes.
func TestTruncateForgetsDiscardedBytes(t *testing.T) {
	const size = testSegmentBytes
	ctx := testContext(t)
	b := newTestBackend(t, Options{SegmentSizeBytes: size, PoolSize: 1, NoLock: true})
	spec := specIn(t.TempDir(), "seg")
	mf := openSeg(t, b, spec)
	want := make([]byte, size)
	appendBytes(t, mf, want, record(9, 1000))
	if _, err := mf.Append(4000, mappedfile.Bytes(record(0xA5, 4000))); err != nil {
		t.Fatal(err)
	}
	if err := mf.Truncate(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Append(size-1000, headOnly{}); err != nil {
		t.Fatal(err)
	}
	copy(want[1000:], "BLANKHDR")
	commitAndFlush(t, mf)
	checkFile(t, spec.Path, want)
}
