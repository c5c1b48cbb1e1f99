package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/uring"
)

// Limit names.
const (
	LimitCopyCeiling = "copy-ceiling"
	LimitDeviceSeq   = "device-seq-write"
	LimitDeviceSync  = "device-fdatasync-4k"
	LimitFioSeq      = "fio-seq-write"
	LimitFioSync     = "fio-fdatasync-4k"
)

// DeviceProber measures the device under a directory. The default is
// uring's probes; tests and other platforms may substitute one.
type DeviceProber interface {
	// SequentialWrite writes totalBytes with O_DIRECT, depth blocks of
	// blockBytes in flight, and returns the bytes written and the time.
	SequentialWrite(ctx context.Context, dir string, totalBytes int64, blockBytes, depth int) (int64, time.Duration, error)
	// SyncLatency returns count latencies of a 4 KiB write + fdatasync.
	SyncLatency(ctx context.Context, dir string, count int) ([]time.Duration, error)
}

// UringProber is the built-in device probe: github.com/mqstore/mqstore/uring.
type UringProber struct{}

// SequentialWrite runs uring.ProbeSequentialWrite.
func (UringProber) SequentialWrite(ctx context.Context, dir string, totalBytes int64, blockBytes, depth int) (int64, time.Duration, error) {
	r, err := uring.ProbeSequentialWrite(ctx, dir, totalBytes, blockBytes, depth)
	return r.Bytes, r.Duration, err
}

// SyncLatency runs uring.ProbeSyncLatency (plain pwrite + fdatasync).
func (UringProber) SyncLatency(ctx context.Context, dir string, count int) ([]time.Duration, error) {
	return uring.ProbeSyncLatency(ctx, dir, count)
}

// CopyCeiling measures the page-cache copy ceiling: the records the store
// would write for bodies of sizeBytes, copied one after another by one
// goroutine (the CommitLog appends under one lock) into a freshly
// preallocated, mapped file of fileBytes — page faults included, no engine,
// no flush. MB/s counts body bytes, like the store's figures.
func CopyCeiling(ctx context.Context, dir string, sizeBytes int, fileBytes int64) (Figures, error) {
	recBytes := recordBytes(sizeBytes)
	f, err := os.CreateTemp(dir, "mqbench-copy-*")
	if err != nil {
		return Figures{}, fmt.Errorf("copy ceiling: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := segfile.Preallocate(f, fileBytes); err != nil {
		return Figures{}, fmt.Errorf("copy ceiling: %w", err)
	}
	mem, err := segfile.Map(f, fileBytes, true)
	if err != nil {
		return Figures{}, fmt.Errorf("copy ceiling: %w", err)
	}
	defer segfile.Unmap(mem)
	rec := Body(1, recBytes)
	var n int64
	start := time.Now()
	for off := 0; off+recBytes <= len(mem); off += recBytes {
		copy(mem[off:off+recBytes], rec)
		if n++; n&0xffff == 0 && ctx.Err() != nil {
			return Figures{}, ctx.Err()
		}
	}
	elapsed := time.Since(start)
	r := load.Result{Messages: n, PayloadBytes: n * int64(sizeBytes), ElapsedNs: elapsed.Nanoseconds()}
	return Figures{MsgsPerSec: r.MsgsPerSec(), MBPerSec: r.MBPerSec()}, nil
}

// deviceSeq runs the sequential O_DIRECT probe once.
func deviceSeq(ctx context.Context, p DeviceProber, dir string, totalBytes int64) (Figures, error) {
	n, d, err := p.SequentialWrite(ctx, dir, totalBytes, 1<<20, 32)
	if err != nil {
		return Figures{}, err
	}
	r := load.Result{Messages: n >> 20, PayloadBytes: n, ElapsedNs: d.Nanoseconds()}
	return Figures{MsgsPerSec: r.MsgsPerSec(), MBPerSec: r.MBPerSec()}, nil
}

// deviceSync runs the write+fdatasync probe once.
func deviceSync(ctx context.Context, p DeviceProber, dir string, count int) (Figures, error) {
	lat, err := p.SyncLatency(ctx, dir, count)
	if err != nil {
		return Figures{}, err
	}
	h := load.NewHistogram()
	var total time.Duration
	for _, d := range lat {
		h.Record(d)
		total += d
	}
	pc := h.Percentiles()
	r := load.Result{Messages: int64(len(lat)), PayloadBytes: int64(len(lat)) * 4096, ElapsedNs: total.Nanoseconds()}
	return Figures{MsgsPerSec: r.MsgsPerSec(), MBPerSec: r.MBPerSec(), P50Ns: pc.P50Ns, P90Ns: pc.P90Ns, P99Ns: pc.P99Ns,
		P999Ns: pc.P999Ns, P9999Ns: pc.P9999Ns, MaxNs: pc.MaxNs}, nil
}

// measureLimits runs every limit cfg asks for, repeat times each, into dir.
func (r *runner) measureLimits(ctx context.Context) {
	cfg := r.cfg
	// One unmeasured pass first: the first mapped file of a process pays
	// for page-cache and page-table set-up that later ones do not.
	_, _ = CopyCeiling(ctx, r.work, cfg.Sizes[0], cfg.CopyCeilingBytes/4)
	for _, size := range cfg.Sizes {
		l := Limit{Name: LimitCopyCeiling, Tool: "mqbench (memcpy into a mapped file)", SizeBytes: size, Dir: r.work,
			Params: map[string]string{"fileBytes": strconv.FormatInt(cfg.CopyCeilingBytes, 10), "recordBytes": strconv.Itoa(recordBytes(size)), "goroutines": "1"}}
		r.repeatLimit(ctx, &l, func() (Figures, error) { return CopyCeiling(ctx, r.work, size, cfg.CopyCeilingBytes) })
	}
	seq := Limit{Name: LimitDeviceSeq, Tool: "mqbench uring probe (io_uring, O_DIRECT)", SizeBytes: 1 << 20, Dir: r.work,
		Params: map[string]string{"blockBytes": "1048576", "depth": "32", "totalBytes": strconv.FormatInt(cfg.DeviceProbeBytes, 10)}}
	r.repeatLimit(ctx, &seq, func() (Figures, error) { return deviceSeq(ctx, r.prober, r.work, cfg.DeviceProbeBytes) })
	sync := Limit{Name: LimitDeviceSync, Tool: "mqbench probe (pwrite + fdatasync)", SizeBytes: 4096, Dir: r.work,
		Params: map[string]string{"blockBytes": "4096", "count": strconv.Itoa(cfg.SyncProbeCount)}}
	r.repeatLimit(ctx, &sync, func() (Figures, error) { return deviceSync(ctx, r.prober, r.work, cfg.SyncProbeCount) })
	r.fioLimits(ctx)
}

// repeatLimit measures l cfg.Repeat times and records it.
func (r *runner) repeatLimit(ctx context.Context, l *Limit, measure func() (Figures, error)) {
	for i := range r.cfg.Repeat {
		if ctx.Err() != nil {
			l.Status, l.Reason = StatusInterrupted, "interrupted"
			break
		}
		r.progress.step(fmt.Sprintf("limit %s %s", l.Name, sizeLabel(l.SizeBytes)), i, r.cfg.Repeat, 0)
		f, err := measure()
		if err != nil {
			if ctx.Err() != nil {
				l.Status, l.Reason = StatusInterrupted, "interrupted"
			} else {
				l.Status, l.Reason = StatusFailed, err.Error()
			}
			l.Repeats = nil
			break
		}
		l.Repeats = append(l.Repeats, f)
	}
	finishLimit(l)
	r.file.Limits = append(r.file.Limits, *l)
	r.progress.done(l.Name, l.Status, l.Reason)
}
