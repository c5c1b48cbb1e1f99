//go:build linux

package mmapio

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

const benchSegmentBytes = 64 << 20

// benchSegments opens 64 MiB segments one after the other in one directory,
// deleting the previous one, so a long run does not fill the disk.
type benchSegments struct {
	b       *testing.B
	backend mappedfile.Backend
	dir     string
	warm    *mappedfile.WarmOptions
	next    int64
	current mappedfile.MappedFile
}

func newBenchSegments(b *testing.B, warm *mappedfile.WarmOptions) *benchSegments {
	s := &benchSegments{b: b, backend: New(Options{}), dir: b.TempDir(), warm: warm}
	s.roll()
	b.Cleanup(func() { s.current.Delete() })
	return s
}

// roll replaces the current segment by a fresh one; call it with the timer
// stopped.
func (s *benchSegments) roll() {
	if s.current != nil {
		if err := s.current.Delete(); err != nil {
			s.b.Fatal(err)
		}
	}
	ctx := context.Background()
	spec := mappedfile.Spec{
		Path:       filepath.Join(s.dir, strconv.FormatInt(s.next, 10)),
		FromOffset: s.next,
		SizeBytes:  benchSegmentBytes,
	}
	s.next += benchSegmentBytes
	mf, err := s.backend.Open(ctx, spec)
	if err != nil {
		s.b.Fatal(err)
	}
	if s.warm != nil {
		if err := mappedfile.Warm(ctx, mf, *s.warm); err != nil {
			s.b.Fatal(err)
		}
	}
	s.current = mf
}

// append appends n bytes, rolling to a fresh segment (outside the timer)
// when the current one is full.
func (s *benchSegments) append(n int, enc mappedfile.Encoder) {
	_, err := s.current.Append(n, enc)
	if errors.Is(err, mappedfile.ErrFull) {
		s.b.StopTimer()
		s.roll()
		s.b.StartTimer()
		_, err = s.current.Append(n, enc)
	}
	if err != nil {
		s.b.Fatal(err)
	}
}

// fillEncoder copies a fixed record, like a CommitLog append of an encoded
// message.
type fillEncoder struct{ record []byte }

func (e *fillEncoder) EncodeAt(dst []byte, _ int64) error {
	copy(dst, e.record)
	return nil
}

var benchSizes = []int{128, 1024, 4096}

func newFillEncoder(size int) *fillEncoder {
	record := make([]byte, size)
	for i := range record {
		record[i] = byte(i) | 1
	}
	return &fillEncoder{record: record}
}

// BenchmarkAppend appends into cold segments: the first store into each
// page takes a page fault (and ext4's page_mkwrite), as without a warm-up.
func BenchmarkAppend(b *testing.B) {
	for _, size := range benchSizes {
		b.Run("size="+strconv.Itoa(size), func(b *testing.B) {
			benchmarkAppend(b, size, nil)
		})
	}
}

// BenchmarkAppendWarm appends into segments warmed with Touch before use
// (outside the timer), as the allocation service does.
func BenchmarkAppendWarm(b *testing.B) {
	for _, size := range benchSizes {
		b.Run("size="+strconv.Itoa(size), func(b *testing.B) {
			benchmarkAppend(b, size, &mappedfile.WarmOptions{Touch: true})
		})
	}
}

func benchmarkAppend(b *testing.B, size int, warm *mappedfile.WarmOptions) {
	segments := newBenchSegments(b, warm)
	var enc mappedfile.Encoder = newFillEncoder(size)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		segments.append(size, enc)
	}
}

// BenchmarkFlush is a synchronous flush after every append: msync(MS_SYNC)
// of the one or two pages the record touched.
func BenchmarkFlush(b *testing.B) {
	for _, size := range []int{128, 4096} {
		b.Run("size="+strconv.Itoa(size), func(b *testing.B) {
			segments := newBenchSegments(b, nil)
			var enc mappedfile.Encoder = newFillEncoder(size)
			ctx := context.Background()
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				segments.append(size, enc)
				if _, err := segments.current.Flush(ctx, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReadAt copies records out of a full segment.
func BenchmarkReadAt(b *testing.B) {
	for _, size := range benchSizes {
		b.Run("size="+strconv.Itoa(size), func(b *testing.B) {
			segments := newBenchSegments(b, nil)
			mf := segments.current
			if _, err := mf.Append(benchSegmentBytes, newFillEncoder(benchSegmentBytes)); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, size)
			var pos int64
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := mf.ReadAt(buf, pos); err != nil {
					b.Fatal(err)
				}
				if pos += int64(size); pos+int64(size) > benchSegmentBytes {
					pos = 0
				}
			}
		})
	}
}
