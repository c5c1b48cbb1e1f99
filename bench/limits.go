package bench

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench/device"
	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/internal/segfile"
)

// DeviceProber measures the device under a directory. The default is the
// built-in probes of bench/device; tests substitute one.
type DeviceProber interface {
	// SequentialWrite writes totalBytes with O_DIRECT, depth blocks of
	// blockBytes in flight, and returns the bytes written and the time.
	SequentialWrite(ctx context.Context, dir string, totalBytes int64, blockBytes, depth int) (int64, time.Duration, error)
	// DurableSequentialWrite is SequentialWrite with an fdatasync at the
	// end, inside the time.
	DurableSequentialWrite(ctx context.Context, dir string, totalBytes int64, blockBytes, depth int) (int64, time.Duration, error)
	// SyncWrites runs a write + fdatasync probe (device.SyncProbe); its
	// result's Bytes (everything written) makes the probe's msgs/s and MB/s.
	SyncWrites(ctx context.Context, dir string, p device.SyncProbe) (device.SyncResult, error)
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

// DurableSequentialWrite runs device.DurableSequentialWrite.
func (BuiltinProber) DurableSequentialWrite(ctx context.Context, dir string, totalBytes int64, blockBytes, depth int) (int64, time.Duration, error) {
	r, err := device.DurableSequentialWrite(ctx, dir, totalBytes, blockBytes, depth)
	return r.Bytes, r.Duration, err
}

// SyncWrites runs device.SyncWrites (plain pwrite + fdatasync).
func (BuiltinProber) SyncWrites(ctx context.Context, dir string, p device.SyncProbe) (device.SyncResult, error) {
	return device.SyncWrites(ctx, dir, p)
}

// CreateSegment runs device.CreateSegment.
func (BuiltinProber) CreateSegment(ctx context.Context, dir string, sizeBytes int64, prewrite, direct bool) (time.Duration, error) {
	return device.CreateSegment(ctx, dir, sizeBytes, prewrite, direct)
}

// deviceSeq runs the sequential O_DIRECT probe once.
func deviceSeq(ctx context.Context, p DeviceProber, dir string, totalBytes int64, durable bool) (runfile.Figures, error) {
	write := p.SequentialWrite
	if durable {
		write = p.DurableSequentialWrite
	}
	n, d, err := write(ctx, dir, totalBytes, 1<<20, 32)
	if err != nil {
		return runfile.Figures{}, err
	}
	r := load.Result{Messages: n >> 20, PayloadBytes: n, ElapsedNs: d.Nanoseconds()}
	return runfile.Figures{MsgsPerSec: r.MsgsPerSec(), MBPerSec: r.MBPerSec()}, nil
}

// deviceSync runs a write+fdatasync probe once: its ops/s (every writer's
// together, over the probe's elapsed time), msgs/s (the bytes written in
// records of recordBytes, per second), MB/s and the latency of one op. A
// probe that reports latencies but no bytes is an error, not a zero.
func deviceSync(ctx context.Context, p DeviceProber, dir string, probe device.SyncProbe, recordBytes int) (runfile.Figures, error) {
	res, err := p.SyncWrites(ctx, dir, probe)
	if err != nil {
		return runfile.Figures{}, err
	}
	if res.Bytes <= 0 && len(res.Latencies) > 0 {
		return runfile.Figures{}, fmt.Errorf("sync probe: %d writes and no bytes written reported", len(res.Latencies))
	}
	h := load.NewHistogram()
	for _, d := range res.Latencies {
		h.Record(d)
	}
	pc := h.Percentiles()
	ops := load.Result{Messages: int64(len(res.Latencies)), ElapsedNs: res.Elapsed.Nanoseconds()}
	r := load.Result{Messages: res.Bytes / int64(recordBytes), PayloadBytes: res.Bytes, ElapsedNs: res.Elapsed.Nanoseconds()}
	return runfile.Figures{OpsPerSec: ops.MsgsPerSec(), MsgsPerSec: r.MsgsPerSec(), MBPerSec: r.MBPerSec(),
		P50Ns: pc.P50Ns, P90Ns: pc.P90Ns, P99Ns: pc.P99Ns, P999Ns: pc.P999Ns, P9999Ns: pc.P9999Ns, MaxNs: pc.MaxNs}, nil
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

// measureLimits runs every limit, cfg.Repeat measured times each.
func (r *runner) measureLimits(ctx context.Context) {
	cfg := r.cfg
	seq := runfile.Limit{Name: runfile.LimitDeviceSeq, Tool: "mqbench device probe (io_uring, O_DIRECT)", SizeBytes: 1 << 20, Dir: r.work,
		Params: map[string]string{"blockBytes": "1048576", "depth": "32", "totalBytes": strconv.FormatInt(cfg.DeviceProbeBytes, 10)}}
	r.repeatLimit(ctx, &seq, func() (runfile.Figures, error) { return deviceSeq(ctx, r.prober, r.work, cfg.DeviceProbeBytes, false) })
	durable := runfile.Limit{Name: runfile.LimitDeviceSeqDurable, Tool: "mqbench device probe (io_uring, O_DIRECT, then fdatasync)", SizeBytes: 1 << 20, Dir: r.work,
		Params: maps.Clone(seq.Params)}
	durable.Params["sync"] = "one fdatasync after the last write, inside the time"
	r.repeatLimit(ctx, &durable, func() (runfile.Figures, error) {
		return deviceSeq(ctx, r.prober, r.work, cfg.DeviceProbeBytes, true)
	})
	sync := runfile.Limit{Name: runfile.LimitDeviceSync, Tool: "mqbench device probe (pwrite + fdatasync)", SizeBytes: 4096, Dir: r.work,
		Params: map[string]string{"blockBytes": "4096", "count": strconv.Itoa(cfg.SyncProbeCount)}}
	probe := device.SyncProbe{WriteBytes: 4096, Count: cfg.SyncProbeCount, InFlight: 1}
	r.repeatLimit(ctx, &sync, func() (runfile.Figures, error) { return deviceSync(ctx, r.prober, r.work, probe, probe.WriteBytes) })
	pre := runfile.Limit{Name: runfile.LimitDeviceSyncPrewritten, Tool: "mqbench device probe (pwrite + fdatasync on a pre-written file)", SizeBytes: 4096, Dir: r.work,
		Params: map[string]string{"blockBytes": "4096", "count": strconv.Itoa(cfg.SyncProbeCount), "file": prewrittenFile}}
	probe.Prewritten = true
	r.repeatLimit(ctx, &pre, func() (runfile.Figures, error) { return deviceSync(ctx, r.prober, r.work, probe, probe.WriteBytes) })
	r.groupCommitLimits(ctx)
	seg := cfg.Store.SegmentSizeBytes
	for _, k := range []struct {
		name, tool  string
		pre, direct bool
	}{
		{runfile.LimitSegmentFallocated, "segfile.OpenOrCreate: create, fallocate, fdatasync, rename, directory sync", false, false},
		{runfile.LimitSegmentPrewritten, "segfile.OpenOrCreate with Prewrite: zeros through the page cache at full speed (the buffered backends' segments; with Options.PacePrewrite one made ahead goes in " + pacedSteps + ")", true, false},
		{runfile.LimitSegmentPrewrittenDirect, "segfile.OpenOrCreate with Prewrite on an O_DIRECT descriptor: O_DIRECT zeros at full speed (uring-direct's segments; with Options.PacePrewrite one made ahead goes in " + pacedSteps + ")", true, true},
	} {
		l := runfile.Limit{Name: k.name, Tool: "mqbench device probe (" + k.tool + ")", SizeBytes: int(seg), Dir: r.work,
			Params: map[string]string{"segmentBytes": strconv.FormatInt(seg, 10), "p50": "the time to create one segment (one per repeat)"}}
		if k.pre {
			l.Params["mbPerSec"] = "the segment's bytes over its creation time: the write bandwidth pre-writing takes at full speed"
		}
		r.repeatLimit(ctx, &l, func() (runfile.Figures, error) { return segmentCreate(ctx, r.prober, r.work, seg, k.pre, k.direct) })
	}
	r.fioLimits(ctx)
}

// pacedSteps says how Options.PacePrewrite writes a segment made ahead.
var pacedSteps = "synced " + runfile.SizeLabel(segfile.PrewriteStepBytes) + " steps"

// prewrittenFile says how the sync probes' pre-written file is made.
const prewrittenFile = "made as the engine makes a pre-written segment (segfile.OpenOrCreate with Prewrite: zeros through the page cache, synced): each fdatasync commits data only, no extent conversion"

// groupCommitVariant is one way the group-commit limit writes its N
// records per op.
type groupCommitVariant struct {
	name         string // a runfile.LimitGroupCommit… name: it says the way (runfile.GroupCommitLimit)
	short        string // the method, in the tool's name
	method, file string
}

// way is how the variant writes: direct or not, on which file.
func (v groupCommitVariant) way() runfile.GroupCommitWay {
	w, _ := runfile.GroupCommitLimit(v.name)
	return w
}

// groupCommitVariants are the group-commit limits: N records per op
// through the page cache (pwrite + fdatasync: the buffered backends'
// sync) and with O_DIRECT (one pwritev2 with RWF_DSYNC of the blocks that
// cover them: uring-direct's), each on a pre-written file (written
// extents: what a pre-written or a reused segment gives, a sync commits
// data only) and on a fallocated one (what a new segment that is not
// pre-written gives: each sync also commits an extent conversion). Only
// the first also runs with two in flight: two O_DIRECT writes of a shared
// tail block cannot be.
var groupCommitVariants = []groupCommitVariant{
	{runfile.LimitGroupCommit, "pwrite + fdatasync", "pwrite + fdatasync", prewrittenFile},
	{runfile.LimitGroupCommitDirect, "O_DIRECT pwritev2 RWF_DSYNC", "pwritev2 with RWF_DSYNC of the aligned blocks covering the N records, O_DIRECT (uring-direct's commit; the next op starts in the block where the last one ended)",
		"made as the engine makes uring-direct's pre-written segment (segfile.OpenOrCreate with Prewrite on an O_DIRECT descriptor: O_DIRECT zeros, synced): a write commits data only"},
	{runfile.LimitGroupCommitFallocated, "pwrite + fdatasync", "pwrite + fdatasync", fallocatedFile},
	{runfile.LimitGroupCommitDirectFallocated, "O_DIRECT pwritev2 RWF_DSYNC", "pwritev2 with RWF_DSYNC of the aligned blocks covering the N records, O_DIRECT (uring-direct's commit)", fallocatedFile},
}

// fallocatedFile says how the group-commit limits' fallocated file is made.
const fallocatedFile = "made as the engine makes a segment it does not pre-write (segfile.OpenOrCreate: fallocated, unwritten extents): each sync also commits the extent conversion of the blocks it wrote"

// groupCommitProbe is one group-commit limit of a run.
type groupCommitProbe struct {
	variant  groupCommitVariant
	size, n  int   // body size, producers
	split    []int // records per writer
	recBytes int
}

// groupCommitProbes are the run's group-commit limits: for each body size
// and producer count N, every variant with all N records in one op, and,
// from two producers on, the page-cache variant with them split over two
// writers in flight (⌈N/2⌉ and ⌊N/2⌋: N closed-loop producers never have
// more than N records outstanding, so two syncs of N records each would
// be no bound of theirs); none when the run has no sync store cells in
// the closed loop.
func groupCommitProbes(c *Config) []groupCommitProbe {
	if !hasFlush(c, "sync") || !hasWorkload(c, string(load.Throughput)) || len(c.Backends) == 0 {
		return nil
	}
	var out []groupCommitProbe
	for _, size := range c.Sizes {
		rec := storeRecordBytes(c.Store, size)
		for _, n := range c.Producers {
			for _, v := range groupCommitVariants {
				out = append(out, groupCommitProbe{variant: v, size: size, n: n, split: []int{n}, recBytes: rec})
				if v.name == runfile.LimitGroupCommit && n >= 2 {
					out = append(out, groupCommitProbe{variant: v, size: size, n: n, split: []int{n - n/2, n / 2}, recBytes: rec})
				}
			}
		}
	}
	return out
}

// groupCommitLimits measures the run's group-commit limits
// (groupCommitProbes): the device's bound on a group commit of N producers
// (msgs/s = records written per second), each way a commit can write.
func (r *runner) groupCommitLimits(ctx context.Context) {
	cfg := r.cfg
	for _, g := range groupCommitProbes(&cfg) {
		probe := device.SyncProbe{Count: max(cfg.SyncProbeCount, len(g.split)), InFlight: len(g.split), Prewritten: g.variant.way().Written, Direct: g.variant.way().Direct}
		var perOp, writeBytes []string
		for _, records := range g.split {
			probe.WriterBytes = append(probe.WriterBytes, records*g.recBytes)
			perOp, writeBytes = append(perOp, strconv.Itoa(records)), append(writeBytes, strconv.Itoa(records*g.recBytes))
		}
		writers := "one op at a time"
		if len(g.split) > 1 {
			writers = "two goroutines at once, each on its own part of the one file (two syncs in flight on one segment), the N records split between them"
		}
		file := "pre-written file"
		if !g.variant.way().Written {
			file = "fallocated file"
		}
		l := runfile.Limit{Name: g.variant.name, Tool: "mqbench device probe (N records per " + g.variant.short + ", " + file + ")",
			SizeBytes: g.size, RecordBytes: g.recBytes, Producers: g.n, InFlight: len(g.split), Dir: r.work,
			Params: map[string]string{"writeBytes": strings.Join(writeBytes, " and "), "recordsPerOp": strings.Join(perOp, " and "), "count": strconv.Itoa(probe.Count),
				"message": messageKind(cfg.Store.Message), "writers": writers, "method": g.variant.method, "file": g.variant.file}}
		r.repeatLimit(ctx, &l, func() (runfile.Figures, error) { return deviceSync(ctx, r.prober, r.work, probe, g.recBytes) })
	}
}

// repeatLimit measures l cfg.Repeat times and records it.
func (r *runner) repeatLimit(ctx context.Context, l *runfile.Limit, measure func() (runfile.Figures, error)) {
	for i := range r.cfg.Repeat {
		if ctx.Err() != nil {
			l.Status, l.Reason = runfile.StatusInterrupted, "interrupted"
			break
		}
		what := fmt.Sprintf("limit %s %s", l.Name, runfile.SizeLabel(l.SizeBytes))
		if l.Producers > 0 {
			what += fmt.Sprintf(" ×%d, %d in flight", l.Producers, l.InFlight)
		}
		r.progress.step(what, i+1, r.cfg.Repeat, 0)
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
		l.Repeats = append(l.Repeats, runfile.LimitRepeat{Figures: f})
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
		fs = append(fs, rep.Figures)
	}
	if len(fs) == 0 {
		l.Status, l.Reason = runfile.StatusFailed, "no measured repeat ran"
		return
	}
	l.Status = runfile.StatusOK
	s := runfile.Summarize(fs)
	l.Figures, l.CILow, l.CIHigh, l.Min, l.Max, l.CILevel = s.Median, s.CILow, s.CIHigh, s.Min, s.Max, s.CILevel
}
