//go:build linux

package mmapio

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mqstore/mqstore/internal/segfile"
	"golang.org/x/sys/unix"
)

// BenchmarkDurablePath compares three ways to make a batch of appended bytes
// durable in a mapped, pre-written segment — what a sync-flush group commit
// of N 1 KiB records costs on this backend's file:
//
//   - msync: the bytes copied into the shared mapping, then msync(MS_SYNC)
//     of the dirty range (the backend's Flush);
//   - fdatasync: the same copy into the mapping, then fdatasync of the
//     file (writeback of the mapping's dirty pages is the same; the call
//     differs);
//   - pwrite: the bytes written through the descriptor with pwrite, then
//     fdatasync, the mapping used only for reads (no write fault, no
//     write-protect of mapped pages after writeback).
//
// The three run interleaved, a batch at a time, on three files made alike,
// so a drift of the shared disk weighs on each alike; it reports the median
// time per batch of each.
//
//	go test -run '^$' -bench DurablePath -benchtime 1x ./mmapio/
func BenchmarkDurablePath(b *testing.B) {
	for _, batch := range []int{4 << 10, 64 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchDurablePath(b, batch) })
	}
}

func benchDurablePath(b *testing.B, batch int) {
	const size = 64 << 20
	dir := b.TempDir()
	type target struct {
		name    string
		f       *os.File
		mapping []byte
		times   []time.Duration
	}
	var targets []*target
	for _, name := range []string{"msync", "fdatasync", "pwrite"} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(size); err != nil {
			b.Fatal(err)
		}
		if err := segfile.Prewrite(context.Background(), f, size); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Munmap(m)
		targets = append(targets, &target{name: name, f: f, mapping: m})
	}
	src := make([]byte, batch)
	for i := range src {
		src[i] = byte(i*7 + 1)
	}
	rounds := size / batch
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		off := int64(r * batch)
		for _, t := range targets {
			start := time.Now()
			var err error
			switch t.name {
			case "msync":
				copy(t.mapping[off:], src)
				err = unix.Msync(t.mapping[off&^(4095):off+int64(batch)], unix.MS_SYNC)
			case "fdatasync":
				copy(t.mapping[off:], src)
				err = unix.Fdatasync(int(t.f.Fd()))
			case "pwrite":
				if _, err = t.f.WriteAt(src, off); err == nil {
					err = unix.Fdatasync(int(t.f.Fd()))
				}
			}
			if err != nil {
				b.Fatalf("%s: %v", t.name, err)
			}
			t.times = append(t.times, time.Since(start))
		}
	}
	b.StopTimer()
	for _, t := range targets {
		slices.Sort(t.times)
		med := t.times[len(t.times)/2]
		b.ReportMetric(float64(med.Microseconds()), t.name+"-µs/batch")
	}
}
