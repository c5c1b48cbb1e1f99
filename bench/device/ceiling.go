package device

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Errors the probes wrap.
var (
	ErrInvalidArgument = errors.New("invalid argument")
	ErrUnsupported     = errors.New("not supported here")
)

// Result is what a throughput probe did: bytes in a duration.
type Result struct {
	Bytes    int64
	Duration time.Duration
}

// MBps is the result in 10^6 bytes per second.
func (r Result) MBps() float64 {
	if r.Duration <= 0 {
		return 0
	}
	return float64(r.Bytes) / 1e6 / r.Duration.Seconds()
}

// pageBytes is the page size the ceilings touch pages by.
var pageBytes = os.Getpagesize()

// MemcpyCeiling measures how fast one goroutine can copy records of
// recordBytes into a shared file mapping whose pages are already present
// and dirty: a fresh preallocated file of fileBytes in dir is mapped and
// every page written once (unmeasured), then the record is copied into it
// end to end, round and round, for at least minDuration. No page fault, no
// engine, no flush: the most an append into warmed segments (the mmap
// backend with --warm-segments) or into an mlocked buffer (transient,
// uring) could do.
func MemcpyCeiling(ctx context.Context, dir string, recordBytes int, fileBytes int64, minDuration time.Duration) (Result, error) {
	if recordBytes <= 0 || fileBytes < int64(recordBytes) || minDuration <= 0 {
		return Result{}, fmt.Errorf("device: memcpy ceiling of %d-byte records into %d bytes for %v: %w", recordBytes, fileBytes, minDuration, ErrInvalidArgument)
	}
	mem, done, err := mapProbeFile(dir, fileBytes)
	if err != nil {
		return Result{}, err
	}
	defer done()
	for i := 0; i < len(mem); i += pageBytes {
		mem[i] = 1
	}
	rec := make([]byte, recordBytes)
	fillRandom(rec)
	var copied int64
	start := time.Now()
	deadline := start.Add(minDuration)
	for off, n := 0, 0; ; n++ {
		if off+recordBytes > len(mem) {
			off = 0
		}
		copy(mem[off:off+recordBytes], rec)
		off += recordBytes
		copied += int64(recordBytes)
		if n&0x3fff == 0 {
			if err := ctx.Err(); err != nil {
				return Result{}, err
			}
			if !time.Now().Before(deadline) {
				break
			}
		}
	}
	return Result{Bytes: copied, Duration: time.Since(start)}, nil
}

// FaultRate measures first writes into a fresh file mapping: a new
// preallocated file of fileBytes in dir is mapped and one byte of each page
// written, each write taking the page fault that allocates the page cache
// page (what an append into a cold mmap segment pays per page). It returns
// the pages touched and the time. The first measurement of a process pays
// for set-up later ones do not: callers discard it.
func FaultRate(ctx context.Context, dir string, fileBytes int64) (pages int64, elapsed time.Duration, err error) {
	if fileBytes < int64(pageBytes) {
		return 0, 0, fmt.Errorf("device: fault rate over %d bytes: %w", fileBytes, ErrInvalidArgument)
	}
	mem, done, err := mapProbeFile(dir, fileBytes)
	if err != nil {
		return 0, 0, err
	}
	defer done()
	start := time.Now()
	for i := 0; i < len(mem); i += pageBytes {
		mem[i] = 1
		if pages++; pages&0xfff == 0 && ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
	}
	return pages, time.Since(start), nil
}

// mapProbeFile creates a preallocated file of size bytes in dir, maps it
// shared and writable, and returns the mapping and what undoes it all.
func mapProbeFile(dir string, size int64) ([]byte, func(), error) {
	f, err := createProbeFile(dir, size, 0)
	if err != nil {
		return nil, nil, err
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, nil, fmt.Errorf("device: map %s: %w", f.Name(), err)
	}
	return mem, func() {
		_ = unix.Munmap(mem)
		f.Close()
		os.Remove(f.Name())
	}, nil
}

// createProbeFile creates a new file in dir preallocated to size, opened
// with extraFlags (O_DIRECT).
func createProbeFile(dir string, size int64, extraFlags int) (*os.File, error) {
	tmp, err := os.CreateTemp(dir, "mqbench-probe-*")
	if err != nil {
		return nil, fmt.Errorf("device: probe file: %w", err)
	}
	name := tmp.Name()
	tmp.Close()
	f, err := os.OpenFile(name, os.O_RDWR|extraFlags, 0)
	if err != nil {
		os.Remove(name)
		if extraFlags != 0 {
			return nil, fmt.Errorf("device: probe file %s with O_DIRECT (tmpfs and some file systems lack it): %w", name, err)
		}
		return nil, fmt.Errorf("device: probe file: %w", err)
	}
	if err := preallocate(f, size); err != nil {
		f.Close()
		os.Remove(name)
		return nil, fmt.Errorf("device: probe file %s: %w", name, err)
	}
	return f, nil
}

func fillRandom(b []byte) {
	rng := rand.New(rand.NewPCG(0x6d71, 0x73746f7265))
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
}
