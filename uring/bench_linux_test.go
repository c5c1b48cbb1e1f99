package uring

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

var benchBackends = []struct {
	name string
	opts Options
}{
	{"uring", Options{}},
	{"uring-direct", Options{Direct: true}},
	{"uring-direct-prezero", Options{Direct: true, PreZero: true}},
}

// benchSegments opens segment after segment in one directory, deleting the
// previous one, outside the benchmark timer.
type benchSegments struct {
	b       *testing.B
	backend mappedfile.Backend
	dir     string
	size    int64
	n       int
	current mappedfile.MappedFile
}

func (s *benchSegments) next() mappedfile.MappedFile {
	s.b.StopTimer()
	defer s.b.StartTimer()
	if s.current != nil {
		if err := s.current.Delete(); err != nil {
			s.b.Fatal(err)
		}
	}
	s.n++
	mf, err := s.backend.Open(context.Background(), mappedfile.Spec{
		Path: filepath.Join(s.dir, fmt.Sprintf("%020d", s.n)), SizeBytes: s.size})
	if err != nil {
		s.b.Fatal(err)
	}
	s.current = mf
	return mf
}

func (s *benchSegments) close() {
	if s.current != nil {
		_ = s.current.Delete()
	}
}

// BenchmarkAppend measures Append alone: encoding in place into the staging
// buffer (a 128 MiB segment; a new one, outside the timer, when full).
func BenchmarkAppend(b *testing.B) {
	for _, be := range benchBackends[:2] {
		for _, size := range []int{1024, 4096} {
			b.Run(fmt.Sprintf("%s/size=%d", be.name, size), func(b *testing.B) {
				backend := newTestBackend(b, be.opts)
				segs := &benchSegments{b: b, backend: backend, dir: b.TempDir(), size: 128 << 20}
				defer segs.close()
				var enc mappedfile.Encoder = mappedfile.Bytes(make([]byte, size))
				mf := segs.next()
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if _, err := mf.Append(size, enc); err != nil {
						if !errors.Is(err, mappedfile.ErrFull) {
							b.Fatal(err)
						}
						mf = segs.next()
						if _, err := mf.Append(size, enc); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// BenchmarkCommitFlush measures one durable batch: append 64 KiB (64
// records of 1 KiB), Commit(0), Flush(0).
func BenchmarkCommitFlush(b *testing.B) {
	const record, batch = 1024, 64
	for _, be := range benchBackends {
		b.Run(be.name+"/batch=64KiB", func(b *testing.B) {
			backend := newTestBackend(b, be.opts)
			segs := &benchSegments{b: b, backend: backend, dir: b.TempDir(), size: 64 << 20}
			defer segs.close()
			var enc mappedfile.Encoder = mappedfile.Bytes(make([]byte, record))
			ctx := context.Background()
			mf := segs.next()
			b.SetBytes(record * batch)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if mf.WrotePosition()+record*batch > mf.SizeBytes() {
					mf = segs.next()
				}
				for range batch {
					if _, err := mf.Append(record, enc); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := mf.Commit(ctx, 0); err != nil {
					b.Fatal(err)
				}
				if _, err := mf.Flush(ctx, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
