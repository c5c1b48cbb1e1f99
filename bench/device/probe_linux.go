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
		// The probe holds tickets while it submits, so it never blocks for
		// a slot (Submit would, and a holder that blocks may wait for
		// itself): TrySubmit, and when the ring has no free slot, collect
		// the oldest of its own requests first.
		if err := submitHolding(ctx, ring, req, tickets[slot:slot+1], func() bool {
			for j := 1; j < depth; j++ {
				if s := (slot + j) % depth; inFlight[s] {
					wait(s)
					return true
				}
			}
			return false
		}); err != nil {
			firstErr = err
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

// submitHolding submits req on a ring whose tickets the caller already
// holds: TrySubmit, and when no slot is free, waitOldest (which collects
// the caller's oldest request and reports whether there was one) before
// trying again. With nothing of its own in flight and still no slot, the
// ring is full of someone else's requests: it waits for one with ctx's
// patience instead of spinning.
func submitHolding(ctx context.Context, ring *uring.Ring, req []uring.Request, tickets []uring.Ticket, waitOldest func() bool) error {
	for {
		ok, err := ring.TrySubmit(req, tickets)
		if err != nil {
			return fmt.Errorf("device: submit: %w", err)
		}
		if ok {
			return nil
		}
		if !waitOldest() {
			if err := ring.Submit(ctx, req, tickets); err != nil {
				return fmt.Errorf("device: submit: %w", err)
			}
			return nil
		}
	}
}

// SyncLatency measures the latency of a durable small append: count times,
// a 4 KiB pwrite at the next offset of a preallocated file in dir followed
// by fdatasync (plain system calls: the device and file system, not a
// ring). The file is removed afterwards.
//
// prewritten chooses the file: false, a fallocated one (its extents are
// allocated but unwritten, so each fdatasync also commits the extent
// conversion of the block just written — a journal commit on ext4 and
// xfs); true, a pre-written one (zeros written with O_DIRECT and synced
// before the first sample, so a sync commits data only: the physical cost
// of one durable append, which a store that pre-writes its segments can
// reach).
func SyncLatency(ctx context.Context, dir string, count int, prewritten bool) ([]time.Duration, error) {
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
	if prewritten {
		if err := prewrite(ctx, f.Name(), int64(count)*blockBytes); err != nil {
			return nil, err
		}
	}
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

// prewriteChunk is the size of each zero write of a prewrite.
const prewriteChunk = 1 << 20

// prewrite writes zeros over [0, size) (a multiple of 4096, as O_DIRECT
// needs) of the file at path and fdatasyncs
// it, through a descriptor of its own opened with O_DIRECT: the zeros never
// enter the page cache (buffered zeros can leave large folios behind, and
// a later 4 KiB write into one writes back the whole folio). Where O_DIRECT
// is refused (tmpfs) it writes through the page cache.
func prewrite(ctx context.Context, path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		if f, err = os.OpenFile(path, os.O_WRONLY, 0); err != nil {
			return fmt.Errorf("device: prewrite %s: %w", path, err)
		}
	}
	defer f.Close()
	// Aligned, zeroed, off-heap memory (O_DIRECT needs aligned buffers).
	buf, err := unix.Mmap(-1, 0, prewriteChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("device: prewrite buffer: %w", err)
	}
	defer unix.Munmap(buf)
	for off := int64(0); off < size; off += prewriteChunk {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("device: prewrite %s: %w", path, err)
		}
		n := min(int64(prewriteChunk), size-off)
		if _, err := unix.Pwrite(int(f.Fd()), buf[:n], off); err != nil {
			return fmt.Errorf("device: prewrite %s at %d: %w", path, off, err)
		}
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("device: prewrite %s: fdatasync: %w", path, err)
	}
	return nil
}

// CreateSegment measures what a store pays to make one new segment of
// sizeBytes in dir, as the engine's allocation service does: create the
// file, fallocate it, and — with prewrite — write zeros over all of it
// with O_DIRECT, then fdatasync it and sync the directory. The time runs
// from the create to the last sync; the file is removed afterwards
// (untimed). A prewritten segment's time over its size is the background
// write bandwidth prewriting costs.
func CreateSegment(ctx context.Context, dir string, sizeBytes int64, prewriteIt bool) (time.Duration, error) {
	if sizeBytes <= 0 || sizeBytes%4096 != 0 {
		return 0, fmt.Errorf("device: a segment of %d bytes: want a positive multiple of 4096: %w", sizeBytes, ErrInvalidArgument)
	}
	d, err := os.Open(dir)
	if err != nil {
		return 0, fmt.Errorf("device: segment probe: %w", err)
	}
	defer d.Close()
	start := time.Now()
	f, err := createProbeFile(dir, sizeBytes, 0)
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if prewriteIt {
		if err := prewrite(ctx, f.Name(), sizeBytes); err != nil {
			return 0, err
		}
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return 0, fmt.Errorf("device: segment probe: fdatasync: %w", err)
	}
	if err := unix.Fsync(int(d.Fd())); err != nil {
		return 0, fmt.Errorf("device: segment probe: sync %s: %w", dir, err)
	}
	return time.Since(start), nil
}
