package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"github.com/mqstore/mqstore/bench/load"
)

// RunOptions are how a run reports and what it measures the device with.
type RunOptions struct {
	// Progress receives the progress line (nil: none); Terminal rewrites it
	// in place.
	Progress io.Writer
	Terminal bool
	// Prober measures the device (nil: UringProber).
	Prober DeviceProber
	// CommandLine is recorded in run.json.
	CommandLine string
}

// ErrInterrupted is returned (wrapped) by Run when ctx was cancelled; the
// results of what finished are written all the same.
var ErrInterrupted = errors.New("interrupted")

type runner struct {
	cfg      Config
	file     *RunFile
	work     string
	runDir   string
	profDir  string
	prober   DeviceProber
	progress *progress
	peerCmd  string
	peerErr  error
}

// Run runs the matrix cfg describes and writes its results directory
// (cfg.Out/<YYYYMMDD-HHMMSS>-<host>/). It returns the run and that
// directory. When ctx is cancelled it stops the current cell, writes what
// finished and returns an error wrapping ErrInterrupted.
func Run(ctx context.Context, cfg Config, o RunOptions) (*RunFile, string, error) {
	if err := cfg.Validate(); err != nil {
		return nil, "", err
	}
	m := DescribeMachine()
	started := time.Now()
	id := started.Format("20060102-150405") + "-" + safeName(m.Host)
	r := &runner{cfg: cfg, prober: o.Prober, runDir: filepath.Join(cfg.Out, id), profDir: filepath.Join(cfg.ProfilesRoot, id)}
	if r.prober == nil {
		r.prober = UringProber{}
	}
	if err := os.MkdirAll(r.runDir, 0o755); err != nil {
		return nil, "", fmt.Errorf("results: %w", err)
	}
	work, err := os.MkdirTemp(cfg.Dir, "mqbench-")
	if err != nil {
		return nil, "", fmt.Errorf("work directory in %s: %w", cfg.Dir, err)
	}
	defer os.RemoveAll(work)
	if r.work, err = filepath.Abs(work); err != nil {
		return nil, "", err
	}
	r.file = &RunFile{Schema: SchemaVersion, ID: id, Command: o.CommandLine, StartedAt: started, Machine: m,
		Devices: []Device{DescribeDevice(work)}, Config: cfg, Cells: []Cell{}, Peers: []Cell{}, Limits: []Limit{},
		Ratios: []Ratio{}, Profiles: []ProfileSummary{}}
	r.file.Devices[0].Dir = cfg.Dir
	r.progress = newProgress(o.Progress, o.Terminal, r.planned())
	defer r.progress.close()
	r.buildPeers(ctx)
	if !cfg.NoLimits {
		r.measureLimits(ctx)
	}
	for _, backend := range cfg.Backends {
		r.groups(ctx, false, backend)
	}
	for _, peer := range cfg.Peers {
		r.groups(ctx, true, peer)
	}
	r.file.FinishedAt = time.Now()
	r.file.Interrupted = ctx.Err() != nil
	if err := WriteOutputs(r.runDir, r.file); err != nil {
		return r.file, r.runDir, err
	}
	if r.file.Interrupted {
		return r.file, r.runDir, fmt.Errorf("%w: partial results in %s", ErrInterrupted, r.runDir)
	}
	return r.file, r.runDir, nil
}

// planned counts the cells and limits for the progress line.
func (r *runner) planned() int {
	n := (len(r.cfg.Backends) + len(r.cfg.Peers)) * len(r.cfg.Sizes) * len(r.cfg.Flushes) * len(r.cfg.Workloads)
	if !r.cfg.NoLimits {
		n += len(r.cfg.Sizes) + 4
	}
	return n
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func safeName(s string) string {
	if s = unsafeChars.ReplaceAllString(s, "_"); s == "" {
		return "host"
	}
	return s
}

// buildPeers builds mqpeer once, before anything is measured.
func (r *runner) buildPeers(ctx context.Context) {
	if len(r.cfg.Peers) == 0 {
		return
	}
	if r.cfg.PeerCommand != "" {
		r.peerCmd = r.cfg.PeerCommand
		return
	}
	r.progress.note("building the peers (mqpeer from bench/peers; the first build downloads NATS and pebble)…")
	r.peerCmd, r.peerErr = BuildPeerCommand(ctx, r.work)
}

// groups runs every size × flush of one backend or peer.
func (r *runner) groups(ctx context.Context, peer bool, backend string) {
	for _, size := range r.cfg.Sizes {
		for _, flush := range r.cfg.Flushes {
			if ctx.Err() != nil {
				return
			}
			r.group(ctx, peer, backend, size, flush)
			if err := WriteRunFile(r.runDir, r.file); err != nil {
				r.progress.note("mqbench: %v", err)
			}
		}
	}
}

// group runs the workloads of one backend × size × flush: throughput first,
// whose median sets the latency cell's rate.
func (r *runner) group(ctx context.Context, peer bool, backend string, size int, flush string) {
	var thr *Cell
	if slices.Contains(r.cfg.Workloads, string(load.Throughput)) {
		c := r.cell(ctx, peer, string(load.Throughput), backend, size, flush, 0, "")
		thr = &c
		if c.Status == StatusOK && r.cfg.Profile && !peer && ctx.Err() == nil {
			r.profile(ctx, backend, size, flush, c.Name)
		}
	}
	if !slices.Contains(r.cfg.Workloads, string(load.Latency)) || ctx.Err() != nil {
		return
	}
	rate, source := r.cfg.Rate, "--rate"
	if rate == 0 {
		if thr == nil {
			// No throughput cell: one unrecorded closed-loop run sets the rate.
			spec := r.cfg.spec(string(load.Throughput), size, 0)
			rep, _ := r.repeat(ctx, peer, backend, size, flush, spec, "calibrate")
			thr = &Cell{Status: rep.Status, Reason: rep.Reason, Figures: rep.Figures}
			source = "calibration: "
		} else {
			source = ""
		}
		if thr.Status != StatusOK {
			c := r.newCell(string(load.Latency), backend, size, flush)
			c.Status, c.Reason = StatusFailed, "no target rate: the throughput run failed: "+thr.Reason
			r.record(peer, c)
			return
		}
		rate = r.cfg.RateFraction * thr.MsgsPerSec
		source += fmt.Sprintf("%.0f%% of the median throughput (%.0f msgs/s)", 100*r.cfg.RateFraction, thr.MsgsPerSec)
	}
	r.cell(ctx, peer, string(load.Latency), backend, size, flush, rate, source)
}

func (r *runner) newCell(workload, backend string, size int, flush string) Cell {
	c := Cell{Name: CellName(workload, backend, size, flush, "none"), Workload: workload, Backend: backend,
		SizeBytes: size, Flush: flush, Pressure: "none", Producers: r.cfg.Producers, Dir: r.cfg.Dir, Repeats: []Repeat{}}
	if workload == string(load.Latency) {
		c.InFlight, c.Arrival = r.cfg.InFlight, r.cfg.Arrival
	}
	return c
}

func (r *runner) record(peer bool, c Cell) {
	if peer {
		r.file.Peers = append(r.file.Peers, c)
	} else {
		r.file.Cells = append(r.file.Cells, c)
	}
	r.progress.done(c.Name, c.Status, c.Reason)
}

// cell runs the repeats of one cell and records it. A failing repeat ends
// the cell (it is failed whatever the others would give).
func (r *runner) cell(ctx context.Context, peer bool, workload, backend string, size int, flush string, rate float64, source string) Cell {
	c := r.newCell(workload, backend, size, flush)
	c.TargetRatePerSec, c.RateSource = rate, source
	spec := r.cfg.spec(workload, size, rate)
	for i := range r.cfg.Repeat {
		if ctx.Err() != nil {
			break
		}
		r.progress.step(c.Name, i, r.cfg.Repeat, rate)
		rep, params := r.repeat(ctx, peer, backend, size, flush, spec, fmt.Sprintf("%s-r%d", c.Name, i))
		rep.Index = i
		if params != nil {
			c.FlushParams = params
		}
		c.Repeats = append(c.Repeats, rep)
		if rep.Status != StatusOK {
			break
		}
	}
	finishCell(&c)
	if len(c.Repeats) == 0 && ctx.Err() != nil {
		c.Status, c.Reason = StatusInterrupted, "interrupted before it ran"
	}
	r.record(peer, c)
	return c
}

// repeat runs one repeat of a store or peer cell in a fresh directory.
func (r *runner) repeat(ctx context.Context, peer bool, backend string, size int, flush string, spec load.Spec, name string) (Repeat, map[string]string) {
	dir := filepath.Join(r.work, name)
	if peer {
		if r.peerErr != nil {
			return failedRepeat(r.peerErr), nil
		}
		return peerRepeat(ctx, r.peerCmd, dir, backend, flush, spec)
	}
	return r.cfg.storeRepeat(ctx, dir, backend, flush, spec, nil)
}

// profile runs the throughput workload once more, unmeasured, under the
// CPU, heap, block and mutex profilers.
func (r *runner) profile(ctx context.Context, backend string, size int, flush, cell string) {
	spec := r.cfg.spec(string(load.Throughput), size, 0)
	spec.Duration, spec.Warmup = r.cfg.ProfileDuration, 0
	r.progress.step(cell+" (profiling)", 0, 1, 0)
	var summaries []ProfileSummary
	var perr error
	rep, _ := r.cfg.storeRepeat(ctx, filepath.Join(r.work, cell+"-profile"), backend, flush, spec, func(run func()) {
		summaries, perr = profileRun(r.profDir, cell, run)
	})
	switch {
	case perr != nil:
		r.progress.note("profile %s: %v", cell, perr)
	case rep.Status != StatusOK:
		r.progress.note("profile %s: the profiled run failed: %s", cell, rep.Reason)
	}
	r.file.Profiles = append(r.file.Profiles, summaries...)
}
