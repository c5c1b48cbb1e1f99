package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
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
	work     string // the current target's work directory (limits use it)
	runDir   string
	profDir  string
	prober   DeviceProber
	progress *progress
	peerCmd  string
	peerErr  error

	journal *Journal
	targets []*target
	// isolate runs every store repeat in a worker process (when swap
	// pressure needs the store in a memory cgroup, so that its unpressured
	// baseline is measured the same way).
	isolate bool
	// rates remembers the unpressured latency rate of each group, so a
	// pressured latency cell runs at the same rate as its baseline.
	rates map[string]float64
}

// Run runs the matrix cfg describes and writes its results directory
// (cfg.Out/<YYYYMMDD-HHMMSS>-<host>/). It returns the run and that
// directory. When ctx is cancelled it stops the current cell, writes what
// finished and returns an error wrapping ErrInterrupted. Every change it
// makes to the system is recorded in a state file and undone before it
// returns (mqbench cleanup undoes them after a killed run).
func Run(ctx context.Context, cfg Config, o RunOptions) (f *RunFile, dir string, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, "", err
	}
	if cfg.Dir == "" && len(cfg.Dirs) > 0 {
		cfg.Dir = cfg.Dirs[0]
	}
	m := DescribeMachine()
	started := time.Now()
	id := started.Format("20060102-150405") + "-" + safeName(m.Host)
	r := &runner{cfg: cfg, prober: o.Prober, runDir: filepath.Join(cfg.Out, id), profDir: filepath.Join(cfg.ProfilesRoot, id),
		rates: map[string]float64{}}
	if r.prober == nil {
		r.prober = UringProber{}
	}
	if err := os.MkdirAll(r.runDir, 0o755); err != nil {
		return nil, "", fmt.Errorf("results: %w", err)
	}
	r.file = &RunFile{Schema: SchemaVersion, ID: id, Command: o.CommandLine, StartedAt: started, Machine: m,
		Devices: []Device{}, Config: cfg, Cells: []Cell{}, Peers: []Cell{}, Limits: []Limit{},
		Ratios: []Ratio{}, Profiles: []ProfileSummary{}}
	r.progress = newProgress(o.Progress, o.Terminal, r.planned())
	defer r.progress.close()
	if r.needsSystemChanges() && isRoot() {
		if left := LeftoverStates(cfg.StateDir); len(left) > 0 {
			return nil, "", fmt.Errorf("a killed run left system changes recorded in %s: run `mqbench cleanup` first", strings.Join(left, ", "))
		}
		if r.journal, err = OpenJournal(cfg.StateDir); err != nil {
			return nil, "", err
		}
		defer func() {
			uerr := r.journal.Undo()
			r.file.SystemChanges = r.journal.Changes()
			if len(r.file.SystemChanges) > 0 {
				r.progress.note("mqbench: undid %d system change(s) (state file %s)", len(r.file.SystemChanges), r.journal.Path())
			}
			if uerr != nil {
				r.progress.note("mqbench: could NOT undo every change: %v — run `mqbench cleanup`", uerr)
				err = errors.Join(err, uerr)
			}
			if dir != "" {
				if werr := WriteRunFile(dir, r.file); werr != nil && err == nil {
					err = werr
				}
			}
		}()
	}
	for i, d := range cfg.targetDirs() {
		work, err := os.MkdirTemp(d, "mqbench-")
		if err != nil {
			return nil, "", fmt.Errorf("work directory in %s: %w", d, err)
		}
		defer os.RemoveAll(work)
		abs, err := filepath.Abs(work)
		if err != nil {
			return nil, "", err
		}
		t := &target{work: abs, device: DescribeDevice(abs)}
		t.device.Dir = d
		t.label = t.device.Device
		if t.label == "" || len(cfg.targetDirs()) > 1 {
			t.label = fmt.Sprintf("%s:%s", orDefault(t.device.Device, "dir"), filepath.Base(filepath.Clean(d)))
			if i == 0 && len(cfg.targetDirs()) == 1 {
				t.label = orDefault(t.device.Device, "dir")
			}
		}
		t.device.Label = t.label
		r.targets = append(r.targets, t)
	}
	for _, e := range cfg.Emulate {
		t, err := r.emulated(ctx, e)
		if err != nil {
			r.note("--emulate %s skipped: %v", e, err)
			r.file.Devices = append(r.file.Devices, Device{Label: e + "-emulated", Emulated: true, Note: "skipped: " + err.Error()})
			continue
		}
		r.targets = append(r.targets, t)
	}
	for _, t := range r.targets {
		if !t.emulated || len(r.file.Devices) == 0 || r.file.Devices[len(r.file.Devices)-1].Label != t.label {
			r.file.Devices = append(r.file.Devices, t.device)
		}
	}
	r.isolate = r.needsIsolation()
	r.buildPeers(ctx)
	for ti, t := range r.targets {
		if ctx.Err() != nil {
			break
		}
		r.runTarget(ctx, ti, t)
	}
	r.file.FinishedAt = time.Now()
	r.file.Interrupted = ctx.Err() != nil
	if r.journal != nil {
		// Restore the system before writing the outputs, so they say so.
		if uerr := r.journal.Undo(); uerr != nil {
			r.note("could NOT undo every system change: %v — run `mqbench cleanup`", uerr)
		}
		r.file.SystemChanges = r.journal.Changes()
	}
	if err := WriteOutputs(r.runDir, r.file); err != nil {
		return r.file, r.runDir, err
	}
	if r.file.Interrupted {
		return r.file, r.runDir, fmt.Errorf("%w: partial results in %s", ErrInterrupted, r.runDir)
	}
	return r.file, r.runDir, nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (r *runner) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.file.Notes = append(r.file.Notes, msg)
	r.progress.note("mqbench: %s", msg)
}

func (r *runner) needsSystemChanges() bool {
	if len(r.cfg.Emulate) > 0 {
		return true
	}
	for _, p := range r.cfg.Pressures {
		if p != PressureNone {
			return true
		}
	}
	return false
}

func (r *runner) needsIsolation() bool {
	if !isRoot() {
		return false
	}
	for _, p := range r.cfg.Pressures {
		if p == PressureSwap || p == PressureBoth {
			return true
		}
	}
	return false
}

func (r *runner) emulated(ctx context.Context, kind string) (*target, error) {
	if r.journal == nil {
		return nil, fmt.Errorf("%w; running as uid %d", errNeedsRoot, os.Geteuid())
	}
	r.progress.note("building the emulated %s (loop device, ext4, blkio throttle)…", kind)
	return r.setupHDD(ctx, r.targets[0])
}

// runTarget runs everything on one device: the limits, then each pressure
// (none first) with every backend, then the peers, consume and recovery
// (unpressured).
func (r *runner) runTarget(ctx context.Context, ti int, t *target) {
	leave, err := t.enter()
	defer leave()
	if err != nil {
		r.note("target %s: %v", t.label, err)
		return
	}
	r.work = t.work
	if !r.cfg.NoLimits {
		before := len(r.file.Limits)
		r.measureLimits(ctx)
		for i := before; i < len(r.file.Limits); i++ {
			r.file.Limits[i].Target = t.label
		}
	}
	for _, pressure := range r.pressureOrder() {
		if ctx.Err() != nil {
			return
		}
		env, err := r.startPressure(ctx, t, pressure)
		if err != nil {
			r.skipPressure(t, pressure, err)
			continue
		}
		for _, backend := range r.cfg.Backends {
			r.groups(ctx, ti, t, pressure, env, false, backend)
		}
		if pressure == PressureNone {
			for _, peer := range r.cfg.Peers {
				r.groups(ctx, ti, t, pressure, env, true, peer)
			}
		}
		if err := env.stop(r.journal); err != nil {
			r.note("pressure %s: undo: %v", pressure, err)
		}
		if env != nil {
			desc := env.desc
			if env.restarts > 0 {
				desc += fmt.Sprintf(" (a neighbour died and was started again %d time(s); the repeat it died in failed)", env.restarts)
			}
			r.file.Notes = append(r.file.Notes, fmt.Sprintf("pressure %s on %s: %s", pressure, t.label, desc))
		}
	}
	for _, backend := range r.cfg.Backends {
		for _, size := range r.cfg.Sizes {
			if ctx.Err() != nil {
				return
			}
			if r.cfg.hasWorkload(WorkloadConsume) {
				r.consumeCells(ctx, t, backend, size)
			}
			if r.cfg.hasWorkload(WorkloadRecovery) && ctx.Err() == nil {
				r.recoveryCells(ctx, t, backend, size)
			}
			r.checkpoint()
		}
	}
}

// pressureOrder puts none first: its cells set the pressured cells' rates.
func (r *runner) pressureOrder() []string {
	out := []string{}
	for _, p := range r.cfg.Pressures {
		if p == PressureNone {
			out = append(out, p)
		}
	}
	for _, p := range r.cfg.Pressures {
		if p != PressureNone {
			out = append(out, p)
		}
	}
	return out
}

func (r *runner) storeWorkloads() []string {
	var out []string
	for _, w := range []string{string(load.Throughput), string(load.Latency), WorkloadE2E} {
		if r.cfg.hasWorkload(w) {
			out = append(out, w)
		}
	}
	return out
}

// skipPressure records every cell of a pressure as skipped, with why.
func (r *runner) skipPressure(t *target, pressure string, err error) {
	r.note("pressure %s on %s skipped: %v", pressure, t.label, err)
	for _, backend := range r.cfg.Backends {
		for _, size := range r.cfg.Sizes {
			for _, pol := range r.cfg.policies() {
				for _, w := range r.storeWorkloads() {
					c := r.newCell(w, backend, size, pol.Flush, pressure, t, &pol)
					c.Status, c.Reason = StatusSkipped, err.Error()
					r.record(false, c)
				}
			}
		}
	}
}

func (r *runner) checkpoint() {
	if err := WriteRunFile(r.runDir, r.file); err != nil {
		r.progress.note("mqbench: %v", err)
	}
}

// planned counts the cells and limits for the progress line.
func (r *runner) planned() int {
	groups := len(r.cfg.Sizes) * len(r.cfg.policies()) * len(r.targetsPlanned())
	n := len(r.cfg.Backends) * groups * len(r.cfg.Pressures) * len(r.storeWorkloadsOf())
	n += len(r.cfg.Peers) * groups * len(r.storeWorkloadsOf())
	if r.cfg.hasWorkload(WorkloadConsume) {
		n += len(r.cfg.Backends) * len(r.cfg.Sizes) * len(r.targetsPlanned()) * len(consumeVariants(isRoot()))
	}
	if r.cfg.hasWorkload(WorkloadRecovery) {
		n += len(r.cfg.Backends) * len(r.cfg.Sizes) * len(r.targetsPlanned()) * len(recoveryVariants(isRoot()))
	}
	if !r.cfg.NoLimits {
		n += (len(r.cfg.Sizes) + 4) * len(r.targetsPlanned())
	}
	return n
}

func (r *runner) targetsPlanned() []string {
	return append(append([]string{}, r.cfg.targetDirs()...), r.cfg.Emulate...)
}

func (r *runner) storeWorkloadsOf() []string {
	var out []string
	for _, w := range []string{string(load.Throughput), string(load.Latency), WorkloadE2E} {
		if r.cfg.hasWorkload(w) {
			out = append(out, w)
		}
	}
	return out
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._=-]+`)

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
	r.peerCmd, r.peerErr = BuildPeerCommand(ctx, r.targets[0].work)
}

// point is where a group of cells runs.
type point struct {
	ti       int
	t        *target
	pressure string
	env      *pressureEnv
	pol      Policy
}

// groups runs every size × policy of one backend or peer.
func (r *runner) groups(ctx context.Context, ti int, t *target, pressure string, env *pressureEnv, peer bool, backend string) {
	for _, size := range r.cfg.Sizes {
		for _, pol := range r.cfg.policies() {
			if ctx.Err() != nil {
				return
			}
			r.group(ctx, point{ti: ti, t: t, pressure: pressure, env: env, pol: pol}, peer, backend, size)
			r.checkpoint()
		}
	}
}

func (r *runner) rateKey(pt point, backend string, size int) string {
	return fmt.Sprintf("%s|%s|%d|%s|%s", pt.t.label, backend, size, pt.pol.Flush, pt.pol.Name)
}

// group runs the workloads of one backend × size × policy: throughput first,
// whose median sets the latency and e2e cells' rate (a pressured group uses
// its unpressured baseline's rate, so both are measured at the same load).
func (r *runner) group(ctx context.Context, pt point, peer bool, backend string, size int) {
	var thr *Cell
	flush := pt.pol.Flush
	if r.cfg.hasWorkload(string(load.Throughput)) {
		c := r.cell(ctx, pt, peer, string(load.Throughput), backend, size, 0, "")
		thr = &c
		if c.Status == StatusOK && r.cfg.Profile && !peer && ctx.Err() == nil && pt.pressure == PressureNone && pt.ti == 0 && len(r.cfg.Policies) == 0 {
			r.profile(ctx, backend, size, flush, c.Name)
		}
	}
	open := []string{}
	for _, w := range []string{string(load.Latency), WorkloadE2E} {
		if r.cfg.hasWorkload(w) {
			open = append(open, w)
		}
	}
	if len(open) == 0 || ctx.Err() != nil {
		return
	}
	rate, source := r.cfg.Rate, "--rate"
	key := r.rateKey(pt, backend, size)
	if base, ok := r.rates[key]; ok && rate == 0 && pt.pressure != PressureNone {
		rate, source = base, fmt.Sprintf("the unpressured cell's rate (%.0f msgs/s)", base)
	}
	if rate == 0 {
		if thr == nil {
			// No throughput cell: one unrecorded closed-loop run sets the rate.
			spec := r.cfg.spec(string(load.Throughput), size, 0)
			rep, _ := r.repeat(ctx, pt, peer, string(load.Throughput), backend, size, spec, "calibrate")
			thr = &Cell{Status: rep.Status, Reason: rep.Reason, Figures: rep.Figures}
			source = "calibration: "
		} else {
			source = ""
		}
		if thr.Status != StatusOK {
			for _, w := range open {
				c := r.newCell(w, backend, size, flush, pt.pressure, pt.t, &pt.pol)
				c.Status, c.Reason = StatusFailed, "no target rate: the throughput run failed: "+thr.Reason
				r.record(peer, c)
			}
			return
		}
		rate = r.cfg.RateFraction * thr.MsgsPerSec
		source += fmt.Sprintf("%.0f%% of the median throughput (%.0f msgs/s)", 100*r.cfg.RateFraction, thr.MsgsPerSec)
	}
	if pt.pressure == PressureNone && !peer {
		r.rates[key] = rate
	}
	for _, w := range open {
		if ctx.Err() != nil {
			return
		}
		r.cell(ctx, pt, peer, w, backend, size, rate, source)
	}
}

func (r *runner) newCell(workload, backend string, size int, flush, pressure string, t *target, pol *Policy) Cell {
	c := Cell{Workload: workload, Backend: backend, SizeBytes: size, Flush: flush, Pressure: pressure,
		Producers: r.cfg.Producers, Dir: r.cfg.Dir, Repeats: []Repeat{}}
	if t != nil {
		c.Dir, c.Target, c.Emulated = t.device.Dir, t.label, t.emulated
	}
	if pol != nil {
		c.Policy = pol.Name
	}
	if workload == string(load.Latency) || workload == WorkloadE2E {
		c.InFlight, c.Arrival = r.cfg.InFlight, r.cfg.Arrival
	}
	c.Name = cellName(&c, r.multiTarget())
	return c
}

func (r *runner) multiTarget() bool { return len(r.cfg.targetDirs())+len(r.cfg.Emulate) > 1 }

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
func (r *runner) cell(ctx context.Context, pt point, peer bool, workload, backend string, size int, rate float64, source string) Cell {
	c := r.newCell(workload, backend, size, pt.pol.Flush, pt.pressure, pt.t, &pt.pol)
	c.TargetRatePerSec, c.RateSource = rate, source
	spec := r.cfg.spec(workload, size, rate)
	for i := range r.cfg.Repeat {
		if ctx.Err() != nil {
			break
		}
		r.progress.step(c.Name, i, r.cfg.Repeat, rate)
		if err := pt.env.revive(ctx, r.journal); err != nil {
			c.Repeats = append(c.Repeats, Repeat{Index: i, Status: StatusFailed, Reason: err.Error()})
			break
		}
		sampler := StartSampler(DefaultProcFiles, SampleInterval)
		rep, params := r.repeat(ctx, pt, peer, workload, backend, size, spec, fmt.Sprintf("%s-r%d", c.Name, i))
		rep.Samples, _ = sampler.Stop()
		if err := pt.env.alive(); err != nil && rep.Status == StatusOK {
			rep.Status, rep.Reason = StatusFailed, err.Error()
		}
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

// repeat runs one repeat of a store or peer cell in a fresh directory: in
// this process, or in a worker placed in the pressure's cgroups.
func (r *runner) repeat(ctx context.Context, pt point, peer bool, workload, backend string, size int, spec load.Spec, name string) (Repeat, map[string]string) {
	dir := filepath.Join(pt.t.work, safeName(name))
	if peer {
		if r.peerErr != nil {
			return failedRepeat(r.peerErr), nil
		}
		if workload == WorkloadE2E {
			return failedRepeat(fmt.Errorf("e2e is not built for peers")), nil
		}
		return peerRepeat(ctx, r.peerCmd, dir, backend, pt.pol.Flush, spec)
	}
	cfg := r.cfg
	cfg.Store = pt.pol.Store
	if r.isolate {
		return workerStoreRepeat(ctx, cfg, dir, backend, pt.pol.Flush, workload, spec, pt.env.cgroups())
	}
	if workload == WorkloadE2E {
		return cfg.e2eRepeat(ctx, dir, backend, pt.pol.Flush, spec)
	}
	return cfg.storeRepeat(ctx, dir, backend, pt.pol.Flush, spec, nil)
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
