package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench/host"
	"github.com/mqstore/mqstore/bench/report"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/internal/hostctl"
)

// RunOptions are how a run reports and what it measures the device with.
type RunOptions struct {
	// Progress receives the progress line (nil: none); Terminal rewrites it
	// in place.
	Progress io.Writer
	Terminal bool
	// Prober measures the device (nil: the built-in probes of bench/device).
	Prober DeviceProber
	// CommandLine is recorded in run.json.
	CommandLine string
	// SweepReference is another run's flush-policy sweep that the first
	// screen quotes (nil: none).
	SweepReference *runfile.SweepReference
}

// ErrInterrupted is returned (wrapped) by Run when ctx was cancelled; the
// results of what finished are written all the same.
var ErrInterrupted = errors.New("interrupted")

type runner struct {
	cfg      Config
	host     hostctl.Host
	file     *runfile.RunFile
	work     string // the current target's work directory (limits use it)
	runDir   string
	profDir  string
	prober   DeviceProber
	progress *progress
	peerCmd  string
	peerErr  error
	// rng shuffles the order of the cells in each round of repeats.
	rng *rand.Rand

	journal *hostctl.Journal
	targets []*target
	// isolate runs every store repeat in a worker process (when swap
	// pressure needs the store in a memory cgroup, so that its unpressured
	// baseline is measured the same way), and mqstore's floors with them
	// (floorRun): the generator's floor is measured in the process that
	// drives the cells, in the same cgroups.
	isolate bool
	// floorWorkersNoted: the run's notes say where mqstore's floors ran.
	floorWorkersNoted bool
	// window is every cell's measured window.
	window time.Duration
	// caps is each system's sustained rate from its throughput cells;
	// rungs the rates its latency cells ran at without pressure (the
	// pressured phases run the same ones).
	caps  map[string]float64
	rungs map[string][]float64
	// aaDone: the A/A twin has been made (one per run).
	aaDone bool
	// slaveWork is the slaves' work directory inside --slave-dir (empty:
	// each slave's directory is beside its master's).
	slaveWork string
}

// Run runs the matrix cfg describes and writes its results directory
// (cfg.Out/<YYYYMMDD-HHMMSS>-<host>/). It returns the run and that
// directory. When ctx is cancelled it stops the current cell, writes what
// finished and returns an error wrapping ErrInterrupted. Every change it
// makes to the system is recorded in a state file and undone before it
// returns (mqbench cleanup undoes them after a killed run). A run that
// fails before measuring anything leaves no results directory.
func Run(ctx context.Context, cfg Config, o RunOptions) (f *runfile.RunFile, dir string, err error) {
	if err := Validate(&cfg); err != nil {
		return nil, "", err
	}
	if cfg.Dir == "" && len(cfg.Dirs) > 0 {
		cfg.Dir = cfg.Dirs[0]
	}
	chosenInFlight := cfg.InFlight == 0
	cfg.InFlight = EffectiveInFlight(&cfg)
	r := newRunner(cfg, o)
	r.progress = newProgress(o.Progress, o.Terminal, r.file.Plan.Runs+limitRuns(&cfg, len(cfg.TargetDirs())+len(cfg.Emulate)), r.file.Plan.EstimatedSeconds)
	defer r.progress.close()
	r.progress.note("mqbench: %s", planLine(&r.file.Plan, &cfg))
	// Emulation and pressure change the system: journal it.
	if (len(cfg.Emulate) > 0 || slices.ContainsFunc(cfg.Pressures, func(p string) bool { return p != PressureNone })) && isRoot() {
		if err := r.openJournal(); err != nil {
			return nil, "", err
		}
		defer func() { err = r.undoAndWrite(dir, err) }()
	}
	if err := r.setupTargets(ctx); err != nil {
		return nil, "", err
	}
	defer r.removeWork()
	if err := os.MkdirAll(r.runDir, 0o755); err != nil {
		return nil, "", fmt.Errorf("results: %w", err)
	}
	if chosenInFlight && hasOpenLoop(&r.cfg) {
		r.note("open loop: %d requests in flight (--inflight 0: %d × the largest producer count, at least %d) — with W in flight of mean service time S the open loop offers at most W ÷ S, so a rate search reaches twice the best closed loop before the generator limits it",
			r.cfg.InFlight, InFlightPerProducer, MinAutoInFlight)
	}
	r.isolate = isRoot() && (slices.Contains(r.cfg.Pressures, PressureSwap) || slices.Contains(r.cfg.Pressures, PressureBoth))
	r.buildPeers(ctx)
	r.limitsAndWindow(ctx)
	for ti, t := range r.targets {
		if ctx.Err() != nil {
			break
		}
		r.runTarget(ctx, ti, t)
	}
	r.progress.finish()
	r.file.FinishedAt = time.Now()
	r.file.ElapsedNs = int64(r.file.FinishedAt.Sub(r.file.StartedAt)) // both carry the monotonic clock here
	r.file.Machine.LoadAvgEnd = host.LoadAvg()
	r.file.Interrupted = ctx.Err() != nil
	for _, t := range r.targets {
		if t.close != nil {
			if err := t.close(); err != nil {
				r.note("tearing down %s: %v", t.label, err)
			}
		}
	}
	if r.journal != nil {
		// Restore the system before writing the outputs, so they say so.
		if uerr := r.journal.Undo(); uerr != nil {
			r.note("could NOT undo every system change: %v — run `mqbench cleanup`", uerr)
		}
		r.file.SystemChanges = systemChanges(r.journal.Changes())
	}
	if err := report.WriteOutputs(r.runDir, r.file); err != nil {
		return r.file, r.runDir, err
	}
	if r.file.Interrupted {
		return r.file, r.runDir, fmt.Errorf("%w: partial results in %s", ErrInterrupted, r.runDir)
	}
	return r.file, r.runDir, nil
}

// newRunner makes the runner of cfg and its run file, not yet run.
func newRunner(cfg Config, o RunOptions) *runner {
	hc := hostctl.Default()
	m := host.DescribeMachine(hc)
	started := time.Now()
	id := started.Format("20060102-150405") + "-" + runfile.SafeName(m.Host)
	r := &runner{cfg: cfg, host: hc, prober: cmp.Or[DeviceProber](o.Prober, BuiltinProber{}), runDir: filepath.Join(cfg.Out, id), profDir: filepath.Join(cfg.ProfilesRoot, id),
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x726f756e64)), caps: map[string]float64{}, rungs: map[string][]float64{}}
	r.file = &runfile.RunFile{Schema: runfile.SchemaVersion, ID: id, Command: o.CommandLine, StartedAt: started, Machine: m,
		Devices: []runfile.Device{}, Config: cfg, Cells: []runfile.Cell{}, Peers: []runfile.Cell{}, Floors: []runfile.Floor{},
		Limits: []runfile.Limit{}, Searches: []runfile.RateSearch{}, Ratios: []runfile.Ratio{}, AA: []runfile.Comparison{},
		Recommendations: []runfile.Recommendation{}, Profiles: []runfile.ProfileSummary{}, SweepReference: o.SweepReference}
	r.file.Plan = plan(&cfg, isRoot(), len(cfg.TargetDirs())+len(cfg.Emulate))
	return r
}

// openJournal opens the state file that records every change to the
// system, refusing to start over a killed run's leftovers.
func (r *runner) openJournal() error {
	if left := hostctl.LeftoverStates(r.cfg.StateDir); len(left) > 0 {
		return fmt.Errorf("a killed run left system changes recorded in %s: run `mqbench cleanup` first", strings.Join(left, ", "))
	}
	var err error
	r.journal, err = hostctl.OpenJournal(r.cfg.StateDir, r.host)
	return err
}

// undoAndWrite undoes the run's system changes (a second time is a
// no-op), records them, and rewrites the run file in dir (when the run got
// that far) so that it says what was undone; it returns err joined with
// what went wrong.
func (r *runner) undoAndWrite(dir string, err error) error {
	uerr := r.journal.Undo()
	r.file.SystemChanges = systemChanges(r.journal.Changes())
	if len(r.file.SystemChanges) > 0 {
		r.progress.note("mqbench: undid %d system change(s) (state file %s)", len(r.file.SystemChanges), r.journal.Path())
	}
	if uerr != nil {
		r.progress.note("mqbench: could NOT undo every change: %v — run `mqbench cleanup`", uerr)
		err = errors.Join(err, uerr)
	}
	if dir != "" {
		if werr := runfile.Write(dir, r.file); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

// setupTargets makes a work directory on every target and the emulated
// devices.
func (r *runner) setupTargets(ctx context.Context) error {
	dirs := r.cfg.TargetDirs()
	for _, d := range dirs {
		work, err := absTempDir(d, "mqbench-")
		if err != nil {
			r.removeWork()
			return fmt.Errorf("work directory in %s: %w", d, err)
		}
		t := &target{work: work, device: host.DescribeDevice(work)}
		t.device.Dir = d
		t.label = cmp.Or(t.device.Device, "dir")
		if len(dirs) > 1 {
			t.label += ":" + filepath.Base(filepath.Clean(d))
		}
		t.device.Label = t.label
		r.targets = append(r.targets, t)
	}
	for _, e := range r.cfg.Emulate {
		t, err := r.emulated(ctx, e)
		if err != nil {
			r.note("--emulate %s skipped: %v", e, err)
			r.file.Devices = append(r.file.Devices, runfile.Device{Label: e + "-emulated", Emulated: true, Note: "skipped: " + err.Error()})
			continue
		}
		r.targets = append(r.targets, t)
	}
	for _, t := range r.targets {
		if !t.emulated || len(r.file.Devices) == 0 || r.file.Devices[len(r.file.Devices)-1].Label != t.label {
			r.file.Devices = append(r.file.Devices, t.device)
		}
	}
	if r.cfg.SlaveDir != "" {
		var err error
		if r.slaveWork, err = absTempDir(r.cfg.SlaveDir, "mqbench-slave-"); err != nil {
			r.removeWork()
			return fmt.Errorf("slave directory in %s: %w", r.cfg.SlaveDir, err)
		}
		d := host.DescribeDevice(r.slaveWork)
		r.note("the slaves' stores are in %s (--slave-dir) on %s (%s, %s, mount options %s)", r.cfg.SlaveDir, cmp.Or(d.Device, "an unknown device"),
			d.FSType, cmp.Or(d.Kind, "unknown kind"), cmp.Or(d.MountOptions, "?"))
	}
	return nil
}

// absTempDir makes a temporary directory in dir and returns its absolute
// path.
func absTempDir(dir, pattern string) (string, error) {
	work, err := os.MkdirTemp(dir, pattern)
	if err != nil {
		return "", err
	}
	abs, err := filepath.Abs(work)
	if err != nil {
		os.RemoveAll(work)
		return "", err
	}
	return abs, nil
}

func (r *runner) removeWork() {
	if r.slaveWork != "" {
		os.RemoveAll(r.slaveWork)
	}
	for i := len(r.targets) - 1; i >= 0; i-- {
		if !r.targets[i].emulated {
			os.RemoveAll(r.targets[i].work)
		}
	}
}

func systemChanges(cs []hostctl.Change) []runfile.SystemChange {
	out := make([]runfile.SystemChange, len(cs))
	for i, c := range cs {
		out[i] = runfile.SystemChange{Kind: c.Kind, Path: c.Path, Original: c.Original, Value: c.Value, Backing: c.Backing,
			PID: c.PID, StartTicks: c.StartTicks, Undone: c.Undone, UndoError: c.UndoError, What: c.String()}
	}
	return out
}

func (r *runner) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.file.Notes = append(r.file.Notes, msg)
	r.progress.note("mqbench: %s", msg)
}

// limitsAndWindow measures the limits on every target, then chooses the
// window from all of them (chooseWindow: the slowest device sizes it).
func (r *runner) limitsAndWindow(ctx context.Context) {
	var labels []string
	for _, t := range r.targets {
		labels = append(labels, t.label)
		if r.cfg.NoLimits || ctx.Err() != nil {
			continue
		}
		r.work = t.work
		before := len(r.file.Limits)
		r.measureLimits(ctx)
		for i := before; i < len(r.file.Limits); i++ {
			r.file.Limits[i].Target = t.label
		}
	}
	r.window, r.file.Plan.WindowWhy = chooseWindow(&r.cfg, r.host, r.file.Limits, labels)
	r.file.Plan.WindowNs = r.window.Nanoseconds()
	r.file.Plan = replan(r.file.Plan, &r.cfg, isRoot(), len(r.targets))
	r.progress.replan(r.file.Plan.Runs+limitRuns(&r.cfg, len(r.targets)), r.file.Plan.EstimatedSeconds)
	r.progress.note("mqbench: window %s: %s", r.window, r.file.Plan.WindowWhy)
}

// runTarget runs everything on one device: each pressure (none first)
// with every backend (and the peers without pressure), then consume and
// recovery (unpressured). The limits and the window come first, for every
// target (limitsAndWindow).
func (r *runner) runTarget(ctx context.Context, ti int, t *target) {
	r.work = t.work
	for _, pressure := range pressureOrder(r.cfg.Pressures) {
		if ctx.Err() != nil {
			return
		}
		env, err := r.startPressure(ctx, t, pressure)
		if err != nil {
			r.skipPressure(t, pressure, err)
			continue
		}
		ph := &phaseEnv{ti: ti, t: t, pressure: pressure, env: env}
		if runsUnder(&r.cfg, "throughput", pressure) {
			r.throughputPhase(ctx, ph)
		}
		if runsUnder(&r.cfg, "latency", pressure) || runsUnder(&r.cfg, WorkloadE2E, pressure) {
			r.openLoopPhase(ctx, ph)
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
			if hasWorkload(&r.cfg, WorkloadConsume) {
				r.consumeCells(ctx, t, backend, size)
			}
			if hasWorkload(&r.cfg, WorkloadRecovery) && ctx.Err() == nil {
				r.recoveryCells(ctx, t, backend, size)
			}
			r.checkpoint()
		}
	}
}

// pressureOrder puts none first: its cells set the pressured cells' rungs.
func pressureOrder(ps []string) []string {
	none := slices.DeleteFunc(slices.Clone(ps), func(p string) bool { return p != PressureNone })
	return append(none, slices.DeleteFunc(slices.Clone(ps), func(p string) bool { return p == PressureNone })...)
}

// skipPressure records every store cell of a pressure as skipped, with why.
func (r *runner) skipPressure(t *target, pressure string, err error) {
	r.note("pressure %s on %s skipped: %v", pressure, t.label, err)
	skip := func(c runfile.Cell) {
		c.Status, c.Reason = runfile.StatusSkipped, err.Error()
		r.record(c)
	}
	for _, sys := range systems(&r.cfg, pressure) {
		if runsUnder(&r.cfg, "throughput", pressure) {
			for _, p := range r.cfg.Producers {
				skip(r.loadCell(sys, "throughput", pressure, t, p, 0))
			}
		}
		for _, w := range []string{"latency", WorkloadE2E} {
			if !runsUnder(&r.cfg, w, pressure) {
				continue
			}
			for _, rate := range r.rungs[sys.key(t)] {
				skip(r.loadCell(sys, w, pressure, t, 0, rate))
			}
		}
	}
}

func (r *runner) checkpoint() {
	if err := runfile.Write(r.runDir, r.file); err != nil {
		r.progress.note("mqbench: %v", err)
	}
}

// buildPeers builds mqpeer once, before anything is measured, and checks
// the peer names against `mqpeer --list` when it supports it.
func (r *runner) buildPeers(ctx context.Context) {
	if len(r.cfg.Peers) == 0 {
		return
	}
	if r.cfg.PeerCommand != "" {
		r.peerCmd = r.cfg.PeerCommand
	} else {
		r.progress.note("mqbench: building the peers (mqpeer from bench/peers; the first build downloads NATS and pebble)…")
		r.peerCmd, r.peerErr = BuildPeerCommand(ctx, r.targets[0].work)
	}
	if r.peerErr != nil {
		return
	}
	if known, err := listPeers(ctx, r.peerCmd); err == nil {
		for _, p := range r.cfg.Peers {
			if !known.has(p) {
				r.note("peer %q is not one mqpeer knows (%s): its cells fail", p, known)
			}
		}
	}
}

func (r *runner) multiTarget() bool { return len(r.cfg.TargetDirs())+len(r.cfg.Emulate) > 1 }

func (r *runner) record(c runfile.Cell) {
	if c.Peer {
		r.file.Peers = append(r.file.Peers, c)
	} else {
		r.file.Cells = append(r.file.Cells, c)
	}
	r.progress.cellDone(c.Name, c.Status, c.Reason)
}

func isRoot() bool { return os.Geteuid() == 0 }
