//go:build linux

package transientpool

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

// benchSegmentBytes is the segment size of the benchmarks.
const benchSegmentBytes = 64 << 20

// benchLog is a segment sequence for the benchmarks: when the current
// segment is full, roll (outside the timed part) deletes it and opens the
// next, which borrows the buffer the full one gave back.
type benchLog struct {
	backend *Backend
	dir     string
	current mappedfile.MappedFile
	rolls   int
}

func newBenchLog(b *testing.B) *benchLog {
	b.Helper()
	backend, err := New(Options{SegmentSizeBytes: benchSegmentBytes, PoolSize: 2})
	if err != nil {
		b.Fatal(err)
	}
	l := &benchLog{backend: backend, dir: b.TempDir()}
	l.open(b)
	b.Cleanup(func() {
		if err := l.current.Delete(); err != nil {
			b.Error(err)
		}
		if err := backend.Close(); err != nil {
			b.Error(err)
		}
	})
	return l
}

func (l *benchLog) open(b *testing.B) {
	spec := mappedfile.Spec{Path: filepath.Join(l.dir, fmt.Sprintf("%020d", l.rolls*benchSegmentBytes)),
		FromOffset: int64(l.rolls) * benchSegmentBytes, SizeBytes: benchSegmentBytes}
	mf, err := l.backend.Open(context.Background(), spec)
	if err != nil {
		b.Fatal(err)
	}
	l.current = mf
}

// roll replaces the full segment by a new one. Deleting the old segment
// drops its page cache without writing it back, so the benchmark measures
// the commit (pwrite into the page cache), not the device.
func (l *benchLog) roll(b *testing.B) {
	b.StopTimer()
	if _, err := l.current.Commit(context.Background(), 0); err != nil {
		b.Fatal(err)
	}
	if err := l.current.Delete(); err != nil {
		b.Fatal(err)
	}
	l.rolls++
	l.open(b)
	b.StartTimer()
}

// appendOrRoll appends, rolling to a new segment on ErrFull.
func (l *benchLog) appendOrRoll(b *testing.B, size int, enc mappedfile.Encoder) {
	_, err := l.current.Append(size, enc)
	if errors.Is(err, mappedfile.ErrFull) {
		l.roll(b)
		_, err = l.current.Append(size, enc)
	}
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAppend measures an append into the borrowed buffer: the encoder's
// copy plus the position bookkeeping. It must report 0 allocs/op.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{128, 1024, 4096} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			l := newBenchLog(b)
			var enc mappedfile.Encoder = mappedfile.Bytes(record(1, size))
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				l.appendOrRoll(b, size, enc)
			}
		})
	}
}

// BenchmarkCommit appends size bytes and commits them: one pwrite from the
// buffer into the page cache per iteration.
func BenchmarkCommit(b *testing.B) {
	ctx := context.Background()
	for _, size := range []int{4096, 65536, 1 << 20} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			l := newBenchLog(b)
			var enc mappedfile.Encoder = mappedfile.Bytes(record(2, size))
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				l.appendOrRoll(b, size, enc)
				if _, err := l.current.Commit(ctx, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
