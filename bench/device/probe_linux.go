package device

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/uring"
	"golang.org/x/sys/unix"
)

// SequentialWrite measures the device limit for sequential writes: it
// writes totalBytes (whole blocks) to a new preallocated file in dir with
// O_DIRECT through io_uring, depth requests of blockBytes in flight, and
// removes the file. Like fio it does not fsync at the end: a device with a
// volatile write cache (a virtio disk over the host's page cache) completes
// the writes faster than it makes them durable. The data is pseudo-random,
// so compressing devices are not flattered. The time runs from the first
// submission to the last completion.
func SequentialWrite(ctx context.Context, dir string, totalBytes int64, blockBytes, depth int) (Result, error) {
	return sequentialWrite(ctx, dir, totalBytes, blockBytes, depth, false)
}

// DurableSequentialWrite is SequentialWrite followed by an fdatasync of the
// file, timed to the sync's return: the bandwidth at which the device makes
// sequential writes durable (its cache emptied, the written extents'
// conversion committed) — what an async log's durable MB/s can reach.
func DurableSequentialWrite(ctx context.Context, dir string, totalBytes int64, blockBytes, depth int) (Result, error) {
	return sequentialWrite(ctx, dir, totalBytes, blockBytes, depth, true)
}

// fdatasync is unix.Fdatasync; tests see through it that the durable
// probe syncs after its writes, and that a failed sync fails it.
var fdatasync = unix.Fdatasync

func sequentialWrite(ctx context.Context, dir string, totalBytes int64, blockBytes, depth int, durable bool) (Result, error) {
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
	w := &seqWriter{ring: ring, fd: int32(f.Fd()), buf: buf, op: op, block: blockBytes, tickets: make([]uring.Ticket, depth), inFlight: make([]bool, depth)}
	start := time.Now()
	w.run(ctx, int(totalBytes/int64(blockBytes)))
	if durable && w.firstErr == nil {
		if err := fdatasync(int(f.Fd())); err != nil {
			w.firstErr = fmt.Errorf("device: fdatasync after the sequential writes: %w", err)
		}
	}
	r := Result{Bytes: w.written, Duration: time.Since(start)}
	if w.firstErr != nil {
		return r, fmt.Errorf("%w (in %s)", w.firstErr, dir)
	}
	return r, nil
}

// seqWriter keeps one request of block bytes in flight per slot of buf,
// writing block after block of the file at fd.
type seqWriter struct {
	ring     *uring.Ring
	fd       int32
	buf      []byte
	op       uint8
	block    int
	tickets  []uring.Ticket
	inFlight []bool
	written  int64
	firstErr error
}

// wait collects slot's completion; the kernel may read the slot's memory
// until then, so every submitted request is waited for.
func (w *seqWriter) wait(slot int) {
	c := w.ring.Wait(w.tickets[slot])
	w.inFlight[slot] = false
	switch {
	case c.Err() != nil && w.firstErr == nil:
		w.firstErr = fmt.Errorf("device: O_DIRECT write: %w", c.Err())
	case c.Err() == nil && int(c.Res) != w.block && w.firstErr == nil:
		w.firstErr = fmt.Errorf("device: short O_DIRECT write: %d of %d bytes", c.Res, w.block)
	case c.Err() == nil:
		w.written += int64(c.Res)
	}
}

// run writes blocks blocks, then waits for every request in flight.
func (w *seqWriter) run(ctx context.Context, blocks int) {
	depth := len(w.inFlight)
	for i := 0; i < blocks && w.firstErr == nil; i++ {
		slot := i % depth
		if w.inFlight[slot] {
			w.wait(slot)
			if w.firstErr != nil {
				break
			}
		}
		mem := w.buf[slot*w.block : (slot+1)*w.block]
		req := []uring.Request{{Opcode: w.op, Fd: w.fd, Offset: uint64(i) * uint64(w.block),
			Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Len: uint32(w.block)}}
		// The probe holds tickets while it submits, so it never blocks for
		// a slot (Submit would, and a holder that blocks may wait for
		// itself): TrySubmit, and when the ring has no free slot, collect
		// the oldest of its own requests first.
		if err := submitHolding(ctx, w.ring, req, w.tickets[slot:slot+1], func() bool {
			for j := 1; j < depth; j++ {
				if s := (slot + j) % depth; w.inFlight[s] {
					w.wait(s)
					return true
				}
			}
			return false
		}); err != nil {
			w.firstErr = err
			break
		}
		w.inFlight[slot] = true
	}
	for slot := range w.inFlight {
		if w.inFlight[slot] {
			w.wait(slot)
		}
	}
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

// SyncWrites runs p in a new file in dir (plain system calls: the device
// and file system, not a ring), removed afterwards.
func SyncWrites(ctx context.Context, dir string, p SyncProbe) (SyncResult, error) {
	if err := p.check(); err != nil {
		return SyncResult{}, err
	}
	per, starts, largest := p.layout()
	if p.Direct {
		return directSyncWrites(ctx, dir, p, per, starts[1])
	}
	size := (starts[p.InFlight] + 4095) &^ 4095
	f, err := probeSegment(ctx, dir, size, p.Prewritten, false)
	if err != nil {
		return SyncResult{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, largest)
	fillRandom(block)
	fd := int(f.Fd())
	lat := make([][]time.Duration, p.InFlight)
	errs := make([]error, p.InFlight)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range p.InFlight {
		wg.Go(func() { lat[w], errs[w] = syncWriter(ctx, fd, block[:p.writeBytes(w)], starts[w], per) })
	}
	wg.Wait()
	res := SyncResult{Latencies: slices.Concat(lat...), Elapsed: time.Since(start)}
	for w := range p.InFlight {
		res.Bytes += int64(len(lat[w])) * int64(p.writeBytes(w))
	}
	return res, errors.Join(errs...)
}

// syncWriter writes block count times from offset on, each write followed
// by fdatasync, and returns each one's latency.
func syncWriter(ctx context.Context, fd int, block []byte, offset int64, count int) ([]time.Duration, error) {
	latencies := make([]time.Duration, 0, count)
	for i := range count {
		if err := ctx.Err(); err != nil {
			return latencies, fmt.Errorf("device: sync probe: %w", err)
		}
		start := time.Now()
		if _, err := unix.Pwrite(fd, block, offset+int64(i)*int64(len(block))); err != nil {
			return latencies, fmt.Errorf("device: sync probe: pwrite: %w", err)
		}
		if err := unix.Fdatasync(fd); err != nil {
			return latencies, fmt.Errorf("device: sync probe: fdatasync: %w", err)
		}
		latencies = append(latencies, time.Since(start))
	}
	return latencies, nil
}

// directSyncWrites runs a Direct probe: one writer, count ops of n bytes
// each (total bytes in all), each one pwritev2(RWF_DSYNC) of the aligned
// blocks covering its bytes in an O_DIRECT file.
func directSyncWrites(ctx context.Context, dir string, p SyncProbe, count int, total int64) (SyncResult, error) {
	n := p.writeBytes(0)
	// Room for the last op's whole blocks at any alignment up to maxAlign.
	const maxAlign = 64 << 10
	size := (total+4095)&^4095 + 2*maxAlign
	f, err := probeSegment(ctx, dir, size, p.Prewritten, true)
	if err != nil {
		return SyncResult{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	offAlign, memAlign := segfile.DirectIOAlignment(f.Name())
	align := max(offAlign, memAlign, 512)
	if align > maxAlign || align&(align-1) != 0 {
		return SyncResult{}, fmt.Errorf("device: direct sync probe: O_DIRECT alignment %d bytes on %s: want a power of two up to %d: %w", align, dir, maxAlign, ErrUnsupported)
	}
	// The most one op writes: its bytes and the start of the block the
	// last one ended in. Anonymous memory is page-aligned.
	span := (int64(n) + 2*align - 1) &^ (align - 1)
	mem, err := unix.Mmap(-1, 0, int(span), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return SyncResult{}, fmt.Errorf("device: direct sync probe: a buffer of %d bytes: %w", span, err)
	}
	defer unix.Munmap(mem)
	fillRandom(mem)
	start := time.Now()
	lat, err := directWriter(ctx, int(f.Fd()), mem, n, count, align)
	return SyncResult{Latencies: lat, Bytes: int64(len(lat)) * int64(n), Elapsed: time.Since(start)}, err
}

// directWriter makes count ops of n bytes each at consecutive offsets from
// 0, each one pwritev2(RWF_DSYNC) of the aligned blocks that cover it, and
// returns each one's latency.
func directWriter(ctx context.Context, fd int, buf []byte, n, count int, align int64) ([]time.Duration, error) {
	latencies := make([]time.Duration, 0, count)
	var end int64
	for range count {
		if err := ctx.Err(); err != nil {
			return latencies, fmt.Errorf("device: direct sync probe: %w", err)
		}
		lo := end &^ (align - 1)
		end += int64(n)
		hi := (end + align - 1) &^ (align - 1)
		start := time.Now()
		w, err := unix.Pwritev2(fd, [][]byte{buf[:hi-lo]}, lo, unix.RWF_DSYNC)
		if err == nil && int64(w) != hi-lo {
			err = fmt.Errorf("wrote %d of %d bytes: %w", w, hi-lo, io.ErrShortWrite)
		}
		if err != nil {
			return latencies, fmt.Errorf("device: direct sync probe: pwritev2(RWF_DSYNC) [%d,+%d): %w", lo, hi-lo, err)
		}
		latencies = append(latencies, time.Since(start))
	}
	return latencies, nil
}

// probeSegment creates a file of size bytes in dir the way the engine's
// allocation service creates a segment — segfile.OpenOrCreate: a temporary
// file, fallocated, with prewrite written with zeros (through the page
// cache for a buffered descriptor, with O_DIRECT for a direct one: direct,
// as uring-direct's segments), synced, renamed, the directory synced —
// and returns it open (with O_DIRECT when direct). The caller removes it.
func probeSegment(ctx context.Context, dir string, size int64, prewrite, direct bool) (*os.File, error) {
	tmp, err := os.CreateTemp(dir, "mqbench-segment-*")
	if err != nil {
		return nil, fmt.Errorf("device: probe segment: %w", err)
	}
	name := tmp.Name()
	tmp.Close()
	if err := os.Remove(name); err != nil { // a unique name that OpenOrCreate creates
		return nil, fmt.Errorf("device: probe segment: %w", err)
	}
	extra := 0
	if direct {
		extra = unix.O_DIRECT
	}
	f, _, err := segfile.OpenOrCreate(ctx, mappedfile.Spec{Path: name, SizeBytes: size, Prewrite: prewrite}, extra)
	if err != nil {
		os.Remove(name)
		return nil, fmt.Errorf("device: probe segment: %w", err)
	}
	return f, nil
}

// CreateSegment measures what the engine's allocation service pays to make
// one segment of sizeBytes in dir (segfile.OpenOrCreate, its own code):
// fallocated, or — with prewrite — written with zeros and synced, through
// the page cache (the buffered backends' segments) or with O_DIRECT when
// direct (uring-direct's). The time runs from the create to the directory
// sync after the rename; the file is removed afterwards (untimed). A
// pre-written segment's size over its time is the write bandwidth
// pre-writing takes.
func CreateSegment(ctx context.Context, dir string, sizeBytes int64, prewrite, direct bool) (time.Duration, error) {
	if sizeBytes <= 0 || sizeBytes%4096 != 0 {
		return 0, fmt.Errorf("device: a segment of %d bytes: want a positive multiple of 4096: %w", sizeBytes, ErrInvalidArgument)
	}
	start := time.Now()
	f, err := probeSegment(ctx, dir, sizeBytes, prewrite, direct)
	if err != nil {
		return 0, err
	}
	took := time.Since(start)
	f.Close()
	os.Remove(f.Name())
	return took, nil
}
