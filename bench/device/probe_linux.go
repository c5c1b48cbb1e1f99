package device

import (
	"context"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/mqstore/mqstore/uring"
	"golang.org/x/sys/unix"
)

// SequentialWrite measures the device limit for sequential writes: it
// writes totalBytes (whole blocks) to a new preallocated file in dir with
// O_DIRECT through io_uring, depth requests of blockBytes in flight, and
// removes the file. Like fio it does not fsync at the end. The data is
// pseudo-random, so compressing devices are not flattered. The time runs
// from the first submission to the last completion.
func SequentialWrite(ctx context.Context, dir string, totalBytes int64, blockBytes, depth int) (Result, error) {
	if blockBytes <= 0 || blockBytes%4096 != 0 || depth <= 0 || totalBytes < int64(blockBytes) {
		return Result{}, fmt.Errorf("device: sequential write of %d bytes in %d-byte blocks at depth %d: need a block that is a positive multiple of 4096, total ≥ block, depth ≥ 1: %w",
			totalBytes, blockBytes, depth, ErrInvalidArgument)
	}
	totalBytes -= totalBytes % int64(blockBytes)
	ring, err := uring.NewRing(uring.RingOptions{Entries: uint32(depth)})
	if err != nil {
		return Result{}, fmt.Errorf("device: %w", err)
	}
	defer ring.Close()
	if int(ring.SQEntries()) < depth {
		return Result{}, fmt.Errorf("device: the ring allows depth %d, not %d: %w", ring.SQEntries(), depth, ErrInvalidArgument)
	}
	f, err := createProbeFile(dir, totalBytes, unix.O_DIRECT)
	if err != nil {
		return Result{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	// Off-heap memory: the kernel reads it while the Go runtime runs.
	buf, err := unix.Mmap(-1, 0, blockBytes*depth, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return Result{}, fmt.Errorf("device: probe buffer: %w", err)
	}
	defer unix.Munmap(buf)
	fillRandom(buf)
	op := uring.OpWrite
	if ring.RegisterBuffers([][]byte{buf}) == nil {
		op = uring.OpWriteFixed
	}
	blocks := int(totalBytes / int64(blockBytes))
	tickets := make([]uring.Ticket, depth)
	inFlight := make([]bool, depth)
	var written int64
	var firstErr error
	// wait collects slot's completion; the kernel may read the slot's
	// memory until then, so every submitted request is waited for.
	wait := func(slot int) {
		c := ring.Wait(tickets[slot])
		inFlight[slot] = false
		switch {
		case c.Err() != nil && firstErr == nil:
			firstErr = fmt.Errorf("device: O_DIRECT write: %w", c.Err())
		case c.Err() == nil && int(c.Res) != blockBytes && firstErr == nil:
			firstErr = fmt.Errorf("device: short O_DIRECT write: %d of %d bytes", c.Res, blockBytes)
		case c.Err() == nil:
			written += int64(c.Res)
		}
	}
	start := time.Now()
	for i := 0; i < blocks && firstErr == nil; i++ {
		slot := i % depth
		if inFlight[slot] {
			wait(slot)
			if firstErr != nil {
				break
			}
		}
		mem := buf[slot*blockBytes : (slot+1)*blockBytes]
		req := []uring.Request{{Opcode: op, Fd: int32(f.Fd()), Offset: uint64(i) * uint64(blockBytes),
			Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Len: uint32(blockBytes)}}
		if err := ring.Submit(ctx, req, tickets[slot:slot+1]); err != nil {
			firstErr = fmt.Errorf("device: submit: %w", err)
			break
		}
		inFlight[slot] = true
	}
	for slot := range inFlight {
		if inFlight[slot] {
			wait(slot)
		}
	}
	elapsed := time.Since(start)
	if firstErr != nil {
		return Result{Bytes: written, Duration: elapsed}, fmt.Errorf("%w (in %s)", firstErr, dir)
	}
	return Result{Bytes: written, Duration: elapsed}, nil
}

// SyncLatency measures the latency of a durable small append: count times,
// a 4 KiB pwrite at the next offset of a preallocated file in dir followed
// by fdatasync (plain system calls: the device and file system, not a
// ring). The file is removed afterwards.
func SyncLatency(ctx context.Context, dir string, count int) ([]time.Duration, error) {
	const blockBytes = 4096
	if count <= 0 {
		return nil, fmt.Errorf("device: sync probe of %d writes: %w", count, ErrInvalidArgument)
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
			return latencies, fmt.Errorf("device: sync probe: %w", err)
		}
		start := time.Now()
		if _, err := unix.Pwrite(fd, block, int64(i)*blockBytes); err != nil {
			return latencies, fmt.Errorf("device: sync probe: pwrite: %w", err)
		}
		if err := unix.Fdatasync(fd); err != nil {
			return latencies, fmt.Errorf("device: sync probe: fdatasync: %w", err)
		}
		latencies = append(latencies, time.Since(start))
	}
	return latencies, nil
}
