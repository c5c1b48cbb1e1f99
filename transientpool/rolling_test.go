//go:build linux

package transientpool

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

// posEncoder writes a byte that depends on the segment and the position,
// so a reader can tell stale bytes of a reused buffer from the right ones.
type posEncoder struct{ segment byte }

func (e posEncoder) EncodeAt(dst []byte, filePos int64) error {
	for i := range dst {
		dst[i] = posByte(e.segment, filePos+int64(i))
	}
	return nil
}

func posByte(segment byte, pos int64) byte { return segment*31 + byte(pos*7+pos>>9) }

// TestRollingSegmentsConcurrent writes segments one after another through a
// pool of two buffers (so buffers are reused), while a commit service and
// readers run concurrently, then checks every file on disk.
func TestRollingSegmentsConcurrent(t *testing.T) {
	const segments = 6
	b := newTestBackend(t, Options{SegmentSizeBytes: testSegmentBytes, PoolSize: 2, WhenEmpty: Wait})
	dir := t.TempDir()
	ctx := testContext(t)
	files := make([]mappedfile.MappedFile, segments)
	var opened atomic.Int32 // segments opened so far, published after files[i] is set
	var writerDone atomic.Bool
	errs := make(chan error, 16)
	var wg sync.WaitGroup

	wg.Add(1)
	go func() { // the appender: one segment at a time
		defer wg.Done()
		defer writerDone.Store(true)
		rng := rand.New(rand.NewPCG(11, 12))
		for i := range segments {
			mf, err := b.Open(ctx, specIn(dir, fmt.Sprintf("seg%d", i)))
			if err != nil {
				errs <- err
				return
			}
			files[i] = mf
			opened.Add(1)
			for mf.WrotePosition() < testSegmentBytes {
				n := min(1+rng.IntN(900), int(testSegmentBytes-mf.WrotePosition()))
				if _, err := mf.Append(n, posEncoder{byte(i)}); err != nil {
					errs <- err
					return
				}
			}
		}
	}()
	wg.Add(1)
	go func() { // the commit and flush service
		defer wg.Done()
		for {
			done := writerDone.Load()
			pending := false
			for i := range int(opened.Load()) {
				mf := files[i]
				if _, err := mf.Commit(ctx, 1); err != nil {
					errs <- err
					return
				}
				if _, err := mf.Flush(ctx, 2); err != nil {
					errs <- err
					return
				}
				pending = pending || mf.FlushedPosition() < testSegmentBytes
			}
			if done && !pending && int(opened.Load()) == segments {
				return
			}
		}
	}()
	for r := range 2 {
		wg.Add(1)
		go func(seed uint64) { // readers
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 13))
			buf := make([]byte, 2*mappedfile.PageSize)
			for !writerDone.Load() {
				k := int(opened.Load())
				if k == 0 {
					continue
				}
				i := rng.IntN(k)
				mf := files[i]
				readable := mf.ReadablePosition()
				if readable == 0 {
					continue
				}
				pos := rng.Int64N(readable)
				n, err := mf.ReadAt(buf[:min(int64(len(buf)), readable-pos)], pos)
				if err != nil {
					errs <- err
					return
				}
				for j := range buf[:n] {
					if buf[j] != posByte(byte(i), pos+int64(j)) {
						errs <- fmt.Errorf("segment %d: wrong byte at %d", i, pos+int64(j))
						return
					}
				}
			}
		}(uint64(r))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, mf := range files {
		want := make([]byte, testSegmentBytes)
		_ = posEncoder{byte(i)}.EncodeAt(want, 0)
		checkFile(t, mf.Path(), want)
		if err := mf.Close(); err != nil && !errors.Is(err, mappedfile.ErrClosed) {
			t.Fatal(err)
		}
	}
	if st := b.Stats(); st.Borrows != segments || st.Returns != segments || st.BuffersFree != 2 || st.Fallbacks != 0 {
		t.Fatalf("stats: %+v, want %d borrows and returns, 2 free, no fallback", st, segments)
	}
}
