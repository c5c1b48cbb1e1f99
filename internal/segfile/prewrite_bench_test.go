//go:build linux

package segfile_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/mqstore/mqstore/internal/disktest"
	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

var benchSegmentSizes = []struct {
	name  string
	bytes int64
}{{"64MiB", 64 << 20}, {"1GiB", 1 << 30}}

// BenchmarkCreateSegment is the time to create one segment (create,
// fallocate, [zeros], fdatasync, rename, directory sync), the CPU time it
// takes (user + system, of the whole process) and, with SetBytes, the write
// bandwidth a prewrite takes from the device (MB/s). prewrite=on is a
// segment opened buffered (mmap, transient, uring: its zeros go through a
// second, O_DIRECT descriptor), on-direct one opened with O_DIRECT
// (uring-direct). Each iteration makes a new file and removes it afterwards
// (outside the timer).
//
//	go test -run '^$' -bench CreateSegment -benchtime 1x ./internal/segfile/
func BenchmarkCreateSegment(b *testing.B) {
	for _, size := range benchSegmentSizes {
		for _, mode := range []string{"off", "on", "on-direct"} {
			b.Run("size="+size.name+"/prewrite="+mode, func(b *testing.B) {
				dir := b.TempDir()
				flags := 0
				if mode == "on-direct" {
					flags = unix.O_DIRECT
				}
				if mode != "off" {
					b.SetBytes(size.bytes)
				}
				ctx := context.Background()
				i := 0
				var cpu time.Duration
				for b.Loop() {
					spec := mappedfile.Spec{Path: filepath.Join(dir, strconv.Itoa(i)), SizeBytes: size.bytes, Prewrite: mode != "off"}
					i++
					before := processCPU(b)
					f, _, err := segfile.OpenOrCreate(ctx, spec, flags)
					if err != nil {
						b.Fatal(err)
					}
					cpu += processCPU(b) - before
					b.StopTimer()
					f.Close()
					if err := os.Remove(spec.Path); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N), "ms/segment")
				b.ReportMetric(cpu.Seconds()*1000/float64(b.N), "cpu-ms/segment")
			})
		}
	}
}

// processCPU is the process's user + system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkZeroRangeTail is recovery's Truncate of a segment with nothing
// written (validEnd 0, the worst case for a prewritten segment: its whole
// tail is data to read), cached or not (cold: the file's pages dropped with
// fadvise DONTNEED before each run, so the scan reads the device), against
// a fallocated segment (nothing to read).
//
//	go test -run '^$' -bench ZeroRangeTail -benchtime 3x ./internal/segfile/
func BenchmarkZeroRangeTail(b *testing.B) {
	for _, size := range benchSegmentSizes {
		for _, kind := range []string{"fallocated", "prewritten/cached", "prewritten/cold"} {
			b.Run("size="+size.name+"/file="+kind, func(b *testing.B) {
				spec := mappedfile.Spec{Path: filepath.Join(b.TempDir(), "seg"), SizeBytes: size.bytes, Prewrite: kind != "fallocated"}
				f, _, err := segfile.OpenOrCreate(context.Background(), spec, 0)
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				b.SetBytes(size.bytes)
				for b.Loop() {
					if kind == "prewritten/cold" {
						b.StopTimer()
						if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					if err := segfile.ZeroRange(f, 0, size.bytes); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkExtents is the cost of asking whether a segment has unwritten
// extents: FIEMAP (without and with FLAG_SYNC) and lseek(SEEK_DATA).
func BenchmarkExtents(b *testing.B) {
	spec := mappedfile.Spec{Path: filepath.Join(b.TempDir(), "seg"), SizeBytes: 1 << 30}
	f, _, err := segfile.OpenOrCreate(context.Background(), spec, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("x"), 300<<20); err != nil { // split the extents
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"fiemap", func() error { _, err := segfile.Extents(f, false); return err }},
		{"fiemap-sync", func() error { _, err := segfile.Extents(f, true); return err }},
		{"seek-data", func() error { _, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA); return err }},
	} {
		b.Run("size=1GiB/call="+tc.name, func(b *testing.B) {
			for b.Loop() {
				if err := tc.call(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDurableWrite is one durable append into each kind of segment
// file: a run of O_DIRECT writes of 160 KiB (what a 256-producer group
// commit of 1 KiB records carries) at consecutive offsets, each made
// durable by pwritev2 RWF_DSYNC or by pwrite + fdatasync, into a file
// pre-written with zeros (written extents: what a pre-written or a reused
// segment gives), fallocated (unwritten extents: each sync also writes the
// extent change), fallocated with KEEP_SIZE, or growing (no preallocation).
// It reports the p50 and the mean per write; the file (b.N writes long)
// is made and synced outside the timer.
//
//	go test -run '^$' -bench DurableWrite -benchtime 1500x ./internal/segfile/
func BenchmarkDurableWrite(b *testing.B) {
	const write = 160 << 10
	for _, kind := range []string{"prewritten", "fallocated", "keep-size", "growing"} {
		for _, method := range []string{"dsync", "fdatasync"} {
			b.Run("file="+kind+"/sync="+method, func(b *testing.B) {
				size := int64(b.N+1) * write
				fd := disktest.DirectFile(b, filepath.Join(b.TempDir(), "segment"), func(f *os.File) error {
					switch kind {
					case "prewritten":
						return segfile.Prewrite(context.Background(), f, size)
					case "fallocated":
						return unix.Fallocate(int(f.Fd()), 0, 0, size)
					case "keep-size":
						return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, size)
					}
					return nil
				})
				buf, err := segfile.MapAnonymous(write) // page-aligned, as O_DIRECT needs
				if err != nil {
					b.Fatal(err)
				}
				defer segfile.Unmap(buf)
				for i := range buf {
					buf[i] = byte(i)
				}
				took := make([]time.Duration, 0, b.N)
				var off int64
				b.ResetTimer()
				for range b.N {
					start := time.Now()
					if method == "dsync" {
						_, err = unix.Pwritev2(fd, [][]byte{buf}, off, unix.RWF_DSYNC)
					} else if _, err = unix.Pwrite(fd, buf, off); err == nil {
						err = unix.Fdatasync(fd)
					}
					if err != nil {
						b.Fatal(err)
					}
					took = append(took, time.Since(start))
					off += write
				}
				slices.Sort(took)
				b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "mean-µs")
			})
		}
	}
}
