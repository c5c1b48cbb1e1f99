//go:build linux

package mmapio

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/mqstore/mqstore/internal/disktest"
	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// BenchmarkMakeWritten compares two ways to give a new mmap segment written
// extents, each ending with every block written and synced, and cached in
// single-page folios (time and process CPU per segment):
//
//   - prewrite: Spec.Prewrite, zeros written with pwrite before the file is
//     mapped (segfile.Prewrite: the page cache, paced writeback, fdatasync);
//   - touch: RocketMQ's warm-up, a store into every page through the
//     mapping (TouchByWriting) or MADV_POPULATE_WRITE (which dirties the
//     pages too), msync every 4096 pages (RocketMQ's
//     flushLeastPagesWhenWarmMapedFile), then an fdatasync of the rest.
//
// Command:
//
//	go test -run '^$' -bench MakeWritten -benchtime 3x ./mmapio/
func BenchmarkMakeWritten(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int64
	}{{"64MiB", 64 << 20}, {"1GiB", 1 << 30}} {
		for _, method := range []string{"prewrite", "touch-populate", "touch-bytes"} {
			b.Run("size="+size.name+"/method="+method, func(b *testing.B) {
				benchmarkMakeWritten(b, size.bytes, method)
			})
		}
	}
}

func benchmarkMakeWritten(b *testing.B, size int64, method string) {
	ctx := context.Background()
	dir := b.TempDir()
	backend := New(Options{TouchByWriting: method == "touch-bytes"})
	b.SetBytes(size)
	i := 0
	var cpu time.Duration
	for b.Loop() {
		spec := mappedfile.Spec{Path: filepath.Join(dir, strconv.Itoa(i)), SizeBytes: size, Prewrite: method == "prewrite"}
		i++
		before := processCPU(b)
		mf, err := backend.Open(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		if method != "prewrite" {
			if err := mappedfile.Warm(ctx, mf, mappedfile.WarmOptions{Touch: true, FlushEveryPages: 4096}); err != nil {
				b.Fatal(err)
			}
			if err := segfile.Fdatasync(spec.Path, int(mf.(*file).osFile.Fd())); err != nil {
				b.Fatal(err)
			}
		}
		cpu += processCPU(b) - before
		b.StopTimer()
		if u := disktest.Unwritten(b, spec.Path, 0, size); u != 0 {
			b.Fatalf("%s left %d unwritten bytes", method, u)
		}
		if err := mf.Delete(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N), "ms/segment")
	b.ReportMetric(cpu.Seconds()*1000/float64(b.N), "cpu-ms/segment")
}

// processCPU is the process's user + system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
