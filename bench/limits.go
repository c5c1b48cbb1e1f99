package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/mqstore/mqstore/bench/device"
	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
)

// Limit names (runfile's).
const (
	LimitMemcpy     = runfile.LimitMemcpy
	LimitFaults     = runfile.LimitFaults
	LimitDeviceSeq  = runfile.LimitDeviceSeq
	LimitDeviceSync = runfile.LimitDeviceSync
	LimitFioSeq     = runfile.LimitFioSeq
	LimitFioSync    = runfile.LimitFioSync
	// LimitDeviceSyncPrewritten is the 4 KiB write+fdatasync on a
	// pre-written file: the physical cost of one durable append (issue 15's
	// reference).
	LimitDeviceSyncPrewritten = runfile.LimitDeviceSyncPrewritten
	// LimitSegmentFallocated and LimitSegmentPrewritten time making one
	// segment of the run's size, as the allocation service does.
	LimitSegmentFallocated       = runfile.LimitSegmentFallocated
	LimitSegmentPrewritten       = runfile.LimitSegmentPrewritten
	LimitSegmentPrewrittenDirect = runfile.LimitSegmentPrewrittenDirect
)

// DeviceProber measures the device under a directory. The default is the
// built-in probes of bench/device; tests substitute one.
type DeviceProber interface {
	// SequentialWrite writes totalBytes with O_DIRECT, depth blocks of
	// blockBytes in flight, and returns the bytes written and the time.
	SequentialWrite(ctx context.Context, dir string, totalBytes int64, blockBytes, depth int) (int64, time.Duration, error)
	// SyncLatency returns count latencies of a 4 KiB write + fdatasync, on
	// a fallocated file or a pre-written one.
	SyncLatency(ctx context.Context, dir string, count int, prewritten bool) ([]time.Duration, error)
	// CreateSegment returns the time to create (fallocate, optionally
	// pre-write — through the page cache, or with O_DIRECT when direct —,
	// sync) one segment of sizeBytes.
	CreateSegment(ctx context.Context, dir string, sizeBytes int64, prewrite, direct bool) (time.Duration, error)
}

// BuiltinProber is bench/device's io_uring and fdatasync probes.
type BuiltinProber struct{}

// SequentialWrite runs device.SequentialWrite.
func (BuiltinProber) SequentialWrite(ctx context.Context, dir string, totalBytes int64, blockBytes, depth int) (int64, time.Duration, error) {
	r, err := device.SequentialWrite(ctx, dir, totalBytes, blockBytes, depth)
	return r.Bytes, r.Duration, err
}

// SyncLatency runs device.SyncLatency (plain pwrite + fdatasync).
func (BuiltinProber) SyncLatency(ctx context.Context, dir string, count int, prewritten bool) ([]time.Duration, error) {
	return device.SyncLatency(ctx, dir, count, prewritten)
}

// CreateSegment runs device.CreateSegment.
func (BuiltinProber) CreateSegment(ctx context.Context, dir string, sizeBytes int64, prewrite, direct bool) (time.Duration, error) {
	return device.CreateSegment(ctx, dir, sizeBytes, prewrite, direct)
}

// deviceSeq runs the sequential O_DIRECT probe once.
func deviceSeq(ctx context.Context, p DeviceProber, dir string, totalBytes int64) (runfile.Figures, error) {
	n, d, err := p.SequentialWrite(ctx, dir, totalBytes, 1<<20, 32)
	if err != nil {
		return runfile.Figures{}, err
	}
	r := load.Result{Messages: n >> 20, PayloadBytes: n, ElapsedNs: d.Nanoseconds()}
	return runfile.Figures{MsgsPerSec: r.MsgsPerSec(), MBPerSec: r.MBPerSec()}, nil
}

// deviceSync runs the write+fdatasync probe once.
func deviceSync(ctx context.Context, p DeviceProber, dir string, count int, prewritten bool) (runfile.Figures, error) {
	lat, err := p.SyncLatency(ctx, dir, count, prewritten)
	if err != nil {
		return runfile.Figures{}, err
	}
	h := load.NewHistogram()
	var total time.Duration
	for _, d := range lat {
		h.Record(d)
		total += d
	}
	pc := h.Percentiles()
	r := load.Result{Messages: int64(len(lat)), PayloadBytes: int64(len(lat)) * 4096, ElapsedNs: total.Nanoseconds()}
	return runfile.Figures{MsgsPerSec: r.MsgsPerSec(), MBPerSec: r.MBPerSec(), P50Ns: pc.P50Ns, P90Ns: pc.P90Ns, P99Ns: pc.P99Ns,
		P999Ns: pc.P999Ns, P9999Ns: pc.P9999Ns, MaxNs: pc.MaxNs}, nil
}

// segmentCreate times making one segment: its creation time as p50 (one
// sample), and for a pre-written one MB/s: its size over that time.
func segmentCreate(ctx context.Context, p DeviceProber, dir string, sizeBytes int64, prewrite, direct bool) (runfile.Figures, error) {
	d, err := p.CreateSegment(ctx, dir, sizeBytes, prewrite, direct)
	if err != nil {
		return runfile.Figures{}, err
	}
	r := load.Result{Messages: 1, PayloadBytes: sizeBytes, ElapsedNs: d.Nanoseconds()}
	f := runfile.Figures{MsgsPerSec: r.MsgsPerSec(), P50Ns: d.Nanoseconds(), MaxNs: d.Nanoseconds()}
	if prewrite { // a bandwidth only where bytes are written
		f.MBPerSec = r.MBPerSec()
	}
	return f, nil
}

// memcpyCeiling runs the memcpy ceiling once for the records of a message
// kind and body size: MB/s of record bytes (what the cells' writtenMBps
// counts), msgs/s of records.
func memcpyCeiling(ctx context.Context, dir, kind string, sizeBytes int, fileBytes int64, d time.Duration) (runfile.Figures, error) {
	rec := recordBytes(kind, sizeBytes)
	res, err := device.MemcpyCeiling(ctx, dir, rec, fileBytes, d)
	if err != nil {
		return runfile.Figures{}, err
	}
	return runfile.Figures{MBPerSec: res.MBps(), MsgsPerSec: float64(res.Bytes/int64(rec)) / res.Duration.Seconds()}, nil
}

// faultCeiling runs the page-fault rate once: faults/s, and MB/s of the
// pages they brought in.
func faultCeiling(ctx context.Context, dir string, fileBytes int64) (runfile.Figures, error) {
	pages, d, err := device.FaultRate(ctx, dir, fileBytes)
	if err != nil {
		return runfile.Figures{}, err
	}
	perSec := float64(pages) / d.Seconds()
	return runfile.Figures{FaultsPerSec: perSec, MsgsPerSec: perSec, MBPerSec: perSec * 4096 / 1e6}, nil
}

// measureLimits runs every limit, cfg.Repeat measured times each (the
// page-fault rate after one discarded repeat).
func (r *runner) measureLimits(ctx context.Context) {
	cfg := r.cfg
	seq := runfile.Limit{Name: LimitDeviceSeq, Tool: "mqbench device probe (io_uring, O_DIRECT)", SizeBytes: 1 << 20, Dir: r.work,
		Params: map[string]string{"blockBytes": "1048576", "depth": "32", "totalBytes": strconv.FormatInt(cfg.DeviceProbeBytes, 10)}}
	r.repeatLimit(ctx, &seq, false, func() (runfile.Figures, error) { return deviceSeq(ctx, r.prober, r.work, cfg.DeviceProbeBytes) })
	sync := runfile.Limit{Name: LimitDeviceSync, Tool: "mqbench device probe (pwrite + fdatasync)", SizeBytes: 4096, Dir: r.work,
		Params: map[string]string{"blockBytes": "4096", "count": strconv.Itoa(cfg.SyncProbeCount)}}
	r.repeatLimit(ctx, &sync, false, func() (runfile.Figures, error) { return deviceSync(ctx, r.prober, r.work, cfg.SyncProbeCount, false) })
	pre := runfile.Limit{Name: LimitDeviceSyncPrewritten, Tool: "mqbench device probe (pwrite + fdatasync on a pre-written file)", SizeBytes: 4096, Dir: r.work,
		Params: map[string]string{"blockBytes": "4096", "count": strconv.Itoa(cfg.SyncProbeCount),
			"file": "made as the engine makes a pre-written segment (segfile.OpenOrCreate with Prewrite: zeros through the page cache, synced): each fdatasync commits data only, no extent conversion"}}
	r.repeatLimit(ctx, &pre, false, func() (runfile.Figures, error) { return deviceSync(ctx, r.prober, r.work, cfg.SyncProbeCount, true) })
	seg := cfg.Store.SegmentSizeBytes
	for _, k := range []struct {
		name, tool  string
		pre, direct bool
	}{
		{LimitSegmentFallocated, "segfile.OpenOrCreate: create, fallocate, fdatasync, rename, directory sync", false, false},
		{LimitSegmentPrewritten, "segfile.OpenOrCreate with Prewrite: zeros through the page cache (the buffered backends' segments)", true, false},
		{LimitSegmentPrewrittenDirect, "segfile.OpenOrCreate with Prewrite on an O_DIRECT descriptor: O_DIRECT zeros (uring-direct's segments)", true, true},
	} {
		l := runfile.Limit{Name: k.name, Tool: "mqbench device probe (" + k.tool + ")", SizeBytes: int(seg), Dir: r.work,
			Params: map[string]string{"segmentBytes": strconv.FormatInt(seg, 10), "p50": "the time to create one segment (one per repeat)"}}
		if k.pre {
			l.Params["mbPerSec"] = "the segment's bytes over its creation time: the write bandwidth pre-writing takes"
		}
		r.repeatLimit(ctx, &l, false, func() (runfile.Figures, error) { return segmentCreate(ctx, r.prober, r.work, seg, k.pre, k.direct) })
	}
	for _, size := range cfg.Sizes {
		l := runfile.Limit{Name: LimitMemcpy, Tool: "mqbench (memcpy into a pre-populated shared mapping, 1 goroutine)", SizeBytes: size, Dir: r.work,
			Params: map[string]string{"fileBytes": strconv.FormatInt(cfg.MemcpyBytes, 10), "recordBytes": strconv.Itoa(recordBytes(cfg.Store.Message, size)), "message": messageKind(cfg.Store.Message),
				"minDuration": cfg.MemcpyDuration.String()}}
		r.repeatLimit(ctx, &l, false, func() (runfile.Figures, error) {
			return memcpyCeiling(ctx, r.work, cfg.Store.Message, size, cfg.MemcpyBytes, cfg.MemcpyDuration)
		})
	}
	faults := runfile.Limit{Name: LimitFaults, Tool: "mqbench (first write to each page of a fresh fallocated file mapping)", SizeBytes: 4096, Dir: r.work,
		Params: map[string]string{"fileBytes": strconv.FormatInt(cfg.FaultBytes, 10)}}
	r.repeatLimit(ctx, &faults, true, func() (runfile.Figures, error) { return faultCeiling(ctx, r.work, cfg.FaultBytes) })
	r.fioLimits(ctx)
}

// repeatLimit measures l cfg.Repeat times (after one discarded repeat when
// warm) and records it.
func (r *runner) repeatLimit(ctx context.Context, l *runfile.Limit, warm bool, measure func() (runfile.Figures, error)) {
	first := 0
	if warm {
		first = -1
	}
	for i := first; i < r.cfg.Repeat; i++ {
		if ctx.Err() != nil {
			l.Status, l.Reason = runfile.StatusInterrupted, "interrupted"
			break
		}
		r.progress.step(fmt.Sprintf("limit %s %s", l.Name, sizeLabel(l.SizeBytes)), i+1, r.cfg.Repeat, 0)
		f, err := measure()
		r.progress.advance(1)
		if err != nil {
			if ctx.Err() != nil {
				l.Status, l.Reason = runfile.StatusInterrupted, "interrupted"
			} else {
				l.Status, l.Reason = runfile.StatusFailed, err.Error()
			}
			break
		}
		l.Repeats = append(l.Repeats, runfile.LimitRepeat{Warm: i < 0, Figures: f})
	}
	finishLimit(l)
	r.file.Limits = append(r.file.Limits, *l)
	r.progress.cellDone("limit "+l.Name, l.Status, l.Reason)
}

func finishLimit(l *runfile.Limit) {
	if l.Status != "" {
		return
	}
	var fs []runfile.Figures
	for _, rep := range l.Repeats {
		if !rep.Warm {
			fs = append(fs, rep.Figures)
		}
	}
	if len(fs) == 0 {
		l.Status, l.Reason = runfile.StatusFailed, "no measured repeat ran"
		return
	}
	l.Status = runfile.StatusOK
	s := runfile.Summarize(fs)
	l.Figures, l.CILow, l.CIHigh, l.Min, l.Max, l.CILevel = s.Median, s.CILow, s.CIHigh, s.Min, s.Max, s.CILevel
}
