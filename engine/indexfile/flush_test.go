package indexfile

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/faultfile"
)

// flushWatch wraps a backend and counts Flush calls that overlap another
// Flush of the same file (a MappedFile takes one flusher at a time).
type flushWatch struct {
	mappedfile.Backend
	overlaps atomic.Int64
}

func (w *flushWatch) Inner() mappedfile.Backend { return w.Backend }

func (w *flushWatch) Open(ctx context.Context, spec mappedfile.Spec) (mappedfile.MappedFile, error) {
	mf, err := w.Backend.Open(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &watchedFile{MappedFile: mf, w: w}, nil
}

type watchedFile struct {
	mappedfile.MappedFile
	w       *flushWatch
	flushes atomic.Int32
}

func (f *watchedFile) Flush(ctx context.Context, leastPages int) (int64, error) {
	if f.flushes.Add(1) > 1 {
		f.w.overlaps.Add(1)
	}
	defer f.flushes.Add(-1)
	return f.MappedFile.Flush(ctx, leastPages)
}

func (f *watchedFile) WriteAt(p []byte, filePos int64) (int, error) {
	return f.MappedFile.(mappedfile.Overwriter).WriteAt(p, filePos)
}

func (f *watchedFile) SwapEach(p, old []byte, width int, filePos []int64) error {
	return f.MappedFile.(mappedfile.Overwriter).SwapEach(p, old, width, filePos)
}

// TestOneFlusherPerFile: Flush runs its file flushes outside the index lock
// while a Put that rolls flushes the full file under it; the two must not
// flush one file at once. (A flush that takes a millisecond, as a disk's
// does, makes them meet.)
func TestOneFlusherPerFile(t *testing.T) {
	ctx := context.Background()
	slow := faultfile.NewFaulty(mappedfile.NewMemFS(mappedfile.MemOptions{}),
		faultfile.NewFaults(faultfile.Fault{Op: faultfile.OpFlush, Latency: time.Millisecond}))
	w := &flushWatch{Backend: slow}
	x, err := Open(ctx, Config{Dir: testDir, Backend: w, SlotCount: 7, MaxEntries: 6, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := x.Flush(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := 0; i < 300; i++ {
		if err := x.Put(ctx, fmt.Sprintf("T#k%d", i), int64(1000+i*100), baseTime.UnixMilli()+int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	if n := w.overlaps.Load(); n > 0 {
		t.Fatalf("%d flushes of a file overlapped another flush of the same file", n)
	}
}
