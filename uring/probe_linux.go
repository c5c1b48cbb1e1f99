package uring

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// ProbeSequentialWrite measures the device limit for sequential writes: it
// writes totalBytes to a new file in dir with O_DIRECT through io_uring,
// depth requests of blockBytes in flight (fio's --rw=write --direct=1
// --ioengine=io_uring --iodepth=depth --bs=blockBytes). Like fio it
// preallocates the file with fallocate and does not fsync at the end. The
// data is pseudo-random, so compressing devices are not flattered. The
// file is removed afterwards. The time runs from the first submission to
// the last completion.
func ProbeSequentialWrite(ctx context.Context, dir string, totalBytes int64, blockBytes int, depth int) (ProbeResult, error) {
	if blockBytes <= 0 || blockBytes%4096 != 0 || depth <= 0 || totalBytes < int64(blockBytes) {
		return ProbeResult{}, fmt.Errorf("uring: probe: total %d, block %d, depth %d: need a block that is a positive multiple of 4096, total ≥ block, depth ≥ 1: %w",
			totalBytes, blockBytes, depth, mappedfile.ErrInvalidArgument)
	}
	totalBytes -= totalBytes % int64(blockBytes)
	ring, err := NewRing(RingOptions{Entries: uint32(depth)})
	if err != nil {
		return ProbeResult{}, err
	}
	defer ring.Close()
	f, err := createProbeFile(dir, totalBytes, unix.O_DIRECT)
	if err != nil {
		return ProbeResult{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf, err := segfile.MapAnonymous(int64(blockBytes) * int64(depth))
	if err != nil {
		return ProbeResult{}, fmt.Errorf("uring: probe: %w", err)
	}
	defer segfile.Unmap(buf)
	fillRandom(buf)
	target := writeTarget{fd: int32(f.Fd()), bufIndex: -1, align: 4096}
	if ring.RegisterBuffers([][]byte{buf}) == nil {
		target.bufIndex = 0
	}
	blocks := int(totalBytes / int64(blockBytes))
	extents := make([]extent, blocks)
	for i := range extents {
		at := (i % depth) * blockBytes
		extents[i] = extent{fileOff: int64(i) * int64(blockBytes), mem: buf[at : at+blockBytes]}
	}
	w := newWriter(ring, depth, int64(blockBytes))
	if w.depth < depth {
		return ProbeResult{}, fmt.Errorf("uring: probe: the ring allows depth %d, not %d", w.depth, depth)
	}
	start := time.Now()
	end, err := w.write(ctx, target, extents)
	elapsed := time.Since(start)
	if err != nil {
		return newProbeResult(end, elapsed), fmt.Errorf("uring: probe of %s: %w", dir, err)
	}
	return newProbeResult(end, elapsed), nil
}

// ProbeSyncLatency measures the latency of a durable small append: count
// times, a 4 KiB pwrite at the next offset of a preallocated file in dir
// followed by fdatasync (plain system calls: this is the device and file
// system, not the ring). The file is removed afterwards.
func ProbeSyncLatency(ctx context.Context, dir string, count int) ([]time.Duration, error) {
	const blockBytes = 4096
	if count <= 0 {
		return nil, fmt.Errorf("uring: sync probe of %d writes: %w", count, mappedfile.ErrInvalidArgument)
	}
	f, err := createProbeFile(dir, int64(count)*blockBytes, 0)
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, blockBytes)
	fillRandom(block)
	fd := int(f.Fd())
	latencies := make([]time.Duration, 0, count)
	for i := range count {
		if err := ctx.Err(); err != nil {
			return latencies, fmt.Errorf("uring: sync probe: %w", err)
		}
		start := time.Now()
		if _, err := unix.Pwrite(fd, block, int64(i)*blockBytes); err != nil {
			return latencies, fmt.Errorf("uring: sync probe: pwrite: %w", err)
		}
		if err := unix.Fdatasync(fd); err != nil {
			return latencies, fmt.Errorf("uring: sync probe: fdatasync: %w", err)
		}
		latencies = append(latencies, time.Since(start))
	}
	return latencies, nil
}

// createProbeFile creates a new file in dir preallocated to size, opened
// with extraFlags (O_DIRECT).
func createProbeFile(dir string, size int64, extraFlags int) (*os.File, error) {
	tmp, err := os.CreateTemp(dir, "mqstore-probe-*")
	if err != nil {
		return nil, fmt.Errorf("uring: probe file: %w", err)
	}
	name := tmp.Name()
	tmp.Close()
	f, err := os.OpenFile(name, os.O_RDWR|extraFlags, 0)
	if err != nil {
		os.Remove(name)
		if extraFlags&unix.O_DIRECT != 0 {
			return nil, fmt.Errorf("uring: probe file %s with O_DIRECT (tmpfs and some file systems lack it): %w", name, err)
		}
		return nil, fmt.Errorf("uring: probe file: %w", err)
	}
	if err := segfile.Preallocate(f, size); err != nil {
		f.Close()
		os.Remove(name)
		return nil, fmt.Errorf("uring: probe file %s: %w", name, err)
	}
	return f, nil
}

func fillRandom(b []byte) {
	rng := rand.New(rand.NewPCG(0x6d71, 0x73746f7265))
	for i := 0; i+8 <= len(b); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}
