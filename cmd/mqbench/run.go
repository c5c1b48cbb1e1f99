package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench"
	"github.com/mqstore/mqstore/bench/report"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/internal/cli"
	"github.com/mqstore/mqstore/internal/hostctl"
	"github.com/mqstore/mqstore/internal/segfile"
)

// matrix is the run or the sweep command (runMatrix).
func matrix(name string) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return runMatrix(ctx, name, args, stdout, stderr)
	}
}

// matrixFlags are the flags of run and sweep read after parsing: the
// repeatable flags and the negations.
type matrixFlags struct {
	dirs, vary, backendOpts []string
	noAA, noProfile, quiet  *bool
	sweepFrom               string
}

// runMatrix is run and sweep: the same flags; sweep adds --vary and
// changes the defaults to a flush-policy grid. Every flag sets its field of
// the configuration in place, over the defaults and a --config file.
func runMatrix(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	cfg := bench.DefaultConfig()
	sweep := name == "sweep"
	if sweep {
		cfg.Peers, cfg.Sizes, cfg.Producers, cfg.Rates = nil, []int{1024}, []int{16}, []float64{5000}
		cfg.Repeat, cfg.Duration, cfg.Warmup, cfg.Profile, cfg.NoLimits, cfg.SearchProbes = 3, 2*time.Second, 500*time.Millisecond, false, true, 0
	}
	if file := configArg(args); file != "" {
		if err := loadConfig(file, &cfg); err != nil {
			fmt.Fprintf(stderr, "mqbench %s: --config %s: %v\n", name, file, err)
			return cli.ErrUsage
		}
	}
	c := newCommand(name, "mqbench "+name+" [--backends a,b] [--sizes 1024] [--flush async,sync] [--workloads throughput,latency] [--producers 1,4,16] [--rates 1000,10000] [--duration D|auto] [--repeat N] [--dir DIR] [--peers a,b] [flags]",
		"Runs every backend × size × flush policy (and the peers) through the closed loop at each producer count and the open loop at each rate of one shared ladder, with interleaved shuffled repeats after an unmeasured warm one; measures the device limits and the harness's own floor in the same run; writes results/<id>/ (summary.md, run.json.gz, bench.txt, plots, .hgrm).")
	if sweep {
		c.synopsis = "mqbench sweep [--backends a,b] [--vary option=v1,v2 …] [--pressure none,dirty] [--dir DIR …] [run's flags]"
		c.about = "Runs throughput and latency for every flush policy of the grid (only options that apply to each backend are varied) and plots durable throughput against p99.9 with the Pareto front."
	}
	var m matrixFlags
	m.register(c.fs, &cfg, sweep)
	if err := c.parse(args, stderr, 0); err != nil {
		return err
	}
	if err := m.apply(&cfg, sweep); err != nil {
		return c.bad(stderr, "%v", err)
	}
	opts := progressOptions(stderr)
	if m.sweepFrom != "" {
		ref, err := report.LoadSweepReference(m.sweepFrom)
		if err != nil {
			return c.bad(stderr, "--sweep-from %s: %v", m.sweepFrom, err)
		}
		opts.SweepReference = ref
	}
	f, dir, err := bench.Run(ctx, cfg, opts)
	if f != nil && !*m.quiet {
		fmt.Fprint(stdout, report.SummaryTables(f))
	}
	if dir != "" {
		fmt.Fprintf(stdout, "results: %s (summary.md, run.json.gz, bench.txt, *.hgrm, plots)\n", dir)
	}
	return err
}

func (m *matrixFlags) register(fs *flag.FlagSet, cfg *bench.Config, sweep bool) {
	// The matrix's axes and the devices.
	fs.Var(strsFlag(&cfg.Backends), "backends", "backends, comma-separated (mem is allowed when named)")
	fs.Var(sizesFlag(&cfg.Sizes), "sizes", "message body sizes in bytes, comma-separated (4k, 1MiB accepted)")
	fs.Var(strsFlag(&cfg.Flushes), "flush", "flush policies: async, sync")
	fs.Var(strsFlag(&cfg.Workloads), "workloads", "workloads: throughput (closed loop), latency (open loop), consume (catch-up reads, copy and sendfile), e2e (producers + long-polling consumers), recovery (reopen after SIGKILL)")
	fs.Var(peersFlag(&cfg.Peers), "peers", "peers passed to mqpeer --peer (mqpeer --list names them; none or empty: no peer)")
	fs.Var(strsFlag(&cfg.Pressures), "pressure", "pressures, comma-separated: none, dirty (dirty-page writeback), swap (memory cgroup + swap), both; all but none need root")
	fs.Var(strsFlag(&cfg.PressureWorkloads), "pressure-workloads", "workloads run under a pressure other than none (empty: all of --workloads)")
	fs.Var(intsFlag(&cfg.Producers, "producers"), "producers", "closed-loop producer counts, comma-separated: one throughput cell each")
	fs.Var(ratesFlag(&cfg.Rates), "rates", "open-loop rates in msgs/s shared by every backend and peer (50k, 1.5M accepted); rungs above a system's sustained rate but the first are skipped")
	fs.Var(multiFlag(&m.dirs), "dir", "target directory (repeatable: one device each); a temporary directory is made inside each (default .)")
	fs.Var(strsFlag(&cfg.Emulate), "emulate", "emulated devices to add: hdd (loop-device ext4 throttled with blkio to a 7200 rpm disk; root)")

	// The emulation, workload, pressure and loop settings.
	fs.Var(bytesFlag(&cfg.EmulateImageBytes), "emulate-bytes", "size of the emulated disk's (sparse) image")
	fs.Var(bytesFlag(&cfg.ConsumeBytes), "consume-bytes", "CommitLog the consume workload writes and reads back")
	fs.Var(bytesFlag(&cfg.RecoveryBytes), "recovery-bytes", "CommitLog size a recovery cell reopens after SIGKILL")
	fs.BoolVar(&cfg.ColdReads, "cold-reads", cfg.ColdReads, "add the cold consume and recovery variants (root: they drop the page cache)")
	fs.Var(bytesFlag(&cfg.DirtyBytes), "dirty-bytes", "vm.dirty_bytes during dirty pressure")
	fs.Var(bytesFlag(&cfg.DirtyBackgroundBytes), "dirty-background-bytes", "vm.dirty_background_bytes during dirty pressure")
	fs.Var(bytesFlag(&cfg.DirtyFileBytes), "dirty-file-bytes", "file the dirty neighbour overwrites")
	fs.Var(bytesFlag(&cfg.SwapFileBytes), "swap-file-bytes", "swapfile made when no swap is on")
	fs.Var(bytesFlag(&cfg.SwapLimitBytes), "swap-limit", "memory cgroup limit of the store (and the neighbour) under swap pressure")
	fs.Var(bytesFlag(&cfg.SwapNeighbourBytes), "swap-neighbour-bytes", "anonymous memory the swap neighbour keeps touching")
	fs.StringVar(&cfg.StateDir, "state-dir", cfg.StateDir, "where the state file of system changes is kept (mqbench cleanup reads it)")
	if sweep {
		fs.Var(multiFlag(&m.vary), "vary", "an option and its values, repeatable: flush=async,sync flush-interval=100ms,500ms flush-least-pages=0,4 commit-interval=… commit-least-pages=… sync-flush-timeout=… group-commit-batching=auto,merge,convoys flush-thorough-interval=… (default grid: "+strings.Join(bench.DefaultSweepGrid(), " ")+")")
	}
	fs.IntVar(&cfg.InFlight, "inflight", cfg.InFlight, "open-loop workers, each owning its share of the schedule (requests in flight at most); 0: 2 × the largest --producers, at least 64, so a rate search finds the store's limit, not the generator's")
	fs.Var(windowFlag(&cfg.Duration), "duration", "measured window of each repeat, or auto: long enough for the device to absorb the largest buffer an async cell can fill (see summary.md)")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured warm-up before each repeat's window")
	fs.IntVar(&cfg.Repeat, "repeat", cfg.Repeat, "measured repeats of each cell (one more, unmeasured, runs first); ≥ 5 for intervals at ~94 %, ≥ 6 for 95 %")
	fs.StringVar(&cfg.Arrival, "arrival", cfg.Arrival, "open-loop arrivals: constant or poisson")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the arrivals (with the repeat index) and of the order of the cells")
	fs.IntVar(&cfg.SearchProbes, "search-probes", cfg.SearchProbes, "probes of each system's sustainable-rate search (0: no search)")
	fs.DurationVar(&cfg.SearchDuration, "search-duration", cfg.SearchDuration, "window of each search probe")
	m.noAA = fs.Bool("no-aa", !cfg.AA, "skip the A/A check (one cell measured twice)")
	if !sweep {
		fs.StringVar(&m.sweepFrom, "sweep-from", "", "a flush-policy sweep's results directory (mqbench sweep) whose Pareto fronts the first screen quotes, named as another run, for the flush policy")
	}

	// The outputs, the limits, the store's options and replication.
	fs.StringVar(&cfg.Out, "out", cfg.Out, "results root: the run writes OUT/<YYYYMMDD-HHMMSS>-<host>/")
	fs.StringVar(&cfg.ProfilesRoot, "profiles", cfg.ProfilesRoot, "profiles root: PROFILES/<run>/<cell>.{cpu,heap,block,mutex}.pprof")
	m.noProfile = fs.Bool("no-profile", !cfg.Profile, "skip the profiled extra run of each throughput cell")
	fs.DurationVar(&cfg.ProfileDuration, "profile-duration", cfg.ProfileDuration, "length of each profiled run")
	fs.IntVar(&cfg.ProfileProducers, "profile-producers", cfg.ProfileProducers, "the producer count whose throughput cells get the profiled run (one of --producers; 0: the first)")
	fs.BoolVar(&cfg.NoLimits, "no-limits", cfg.NoLimits, "skip the limits: the device probes and fio")
	fs.Var(bytesFlag(&cfg.DeviceProbeBytes), "probe-bytes", "bytes written by the O_DIRECT device probe and fio")
	fs.IntVar(&cfg.SyncProbeCount, "sync-probes", cfg.SyncProbeCount, "4 KiB write+fdatasync samples per repeat")
	fs.StringVar(&cfg.PeerCommand, "peer-cmd", cfg.PeerCommand, "a built mqpeer binary (default: build it from bench/peers)")
	fs.StringVar(&cfg.Store.Message, "message", cfg.Store.Message, "what the store cells' producers put: bare (the body alone, what the peers write) or rocketmq (a RocketMQ producer's message: TAGS, two KEYS and a UNIQ_KEY unique per message, WAIT, CLUSTER, a user property)")
	fs.Var(bytesFlag(&cfg.Store.SegmentSizeBytes), "segment-size", "CommitLog segment size")
	fs.DurationVar(&cfg.Store.FlushInterval, "flush-interval", cfg.Store.FlushInterval, "async flush interval (0: engine default 500ms)")
	fs.Var(leastPagesFlag(&cfg.Store.FlushLeastPages), "flush-least-pages", "async flush least pages (0: whatever is pending)")
	fs.DurationVar(&cfg.Store.FlushThoroughInterval, "flush-thorough-interval", cfg.Store.FlushThoroughInterval, "async thorough flush interval (0: engine default 10s)")
	fs.DurationVar(&cfg.Store.SyncFlushTimeout, "sync-flush-timeout", cfg.Store.SyncFlushTimeout, "group-commit timeout (0: engine default 5s)")
	fs.StringVar(&cfg.Store.GroupCommitBatching, "group-commit-batching", cfg.Store.GroupCommitBatching, "how the sync group commit forms batches: auto (measured), merge or convoys (engine.Options.GroupCommitBatching; default auto)")
	fs.DurationVar(&cfg.Store.CommitInterval, "commit-interval", cfg.Store.CommitInterval, "commit interval of buffered backends (0: engine default 200ms)")
	fs.Var(leastPagesFlag(&cfg.Store.CommitLeastPages), "commit-least-pages", "commit least pages (0: whatever is pending)")
	fs.BoolVar(&cfg.Store.WarmSegments, "warm-segments", cfg.Store.WarmSegments, "pre-touch new segments in the allocation service (RocketMQ's warmMapedFileEnable)")
	fs.BoolVar(&cfg.Store.LockSegments, "lock-segments", cfg.Store.LockSegments, "mlock warmed segments (with --warm-segments)")
	fs.BoolVar(&cfg.Store.PacePrewrite, "pace-prewrite", cfg.Store.PacePrewrite, "pre-write a segment made ahead in synced steps of "+runfile.SizeLabel(segfile.PrewriteStepBytes)+" (engine.Options.PacePrewrite: a lower p99.9 for some throughput)")
	fs.IntVar(&cfg.Store.RecycleSegments, "recycle-segments", cfg.Store.RecycleSegments, "keep up to N CommitLog segments retention deletes, for reuse as new segments (engine.Options.RecycleSegments), and age each mqstore cell's store before its window until N are pooled, so the window writes into reused segments; pebble-wal runs on a recycled WAL file of N × the segment size (mqpeer --recycle-wal), the other peers on new files (0: fresh stores, no recycling)")
	fs.Var(strsFlag(&cfg.Replication), "replication", "replication axis, crossed with the flush policies: none (no slave), async (ASYNC_MASTER), sync (SYNC_MASTER); a slave runs in its own process and directory")
	fs.StringVar(&cfg.SlaveDir, "slave-dir", cfg.SlaveDir, "where the slaves' stores go (another device; default: beside the master's, in --dir)")
	fs.DurationVar(&cfg.HADelay, "ha-delay", cfg.HADelay, "EMULATED one-way network delay between master and slave, through a TCP proxy (e.g. 1ms; 0: none)")
	fs.Var(multiFlag(&m.backendOpts), "backend-options", "a backend's own options as JSON, repeatable: uring-direct='{\"SyncMethod\":1}' (default: each backend's own defaults; recorded per cell)")
	m.quiet = fs.Bool("quiet", false, "do not print the summary tables at the end")
	fs.String("config", "", "a JSON file of the configuration (the \"config\" object of a run.json: field names as there, durations in ns); flags given beside it override it")
}

// apply sets what the flags read after parsing give, then validates cfg.
func (m *matrixFlags) apply(cfg *bench.Config, sweep bool) error {
	cfg.AA, cfg.Profile = !*m.noAA, !*m.noProfile
	if len(m.dirs) > 0 {
		cfg.Dir, cfg.Dirs = m.dirs[0], m.dirs
	}
	for _, kv := range m.backendOpts {
		name, js, ok := strings.Cut(kv, "=")
		if !ok || name == "" || js == "" {
			return fmt.Errorf("--backend-options %q: want NAME=JSON (uring-direct='{\"PreZero\":true}')", kv)
		}
		if cfg.Store.BackendOptions == nil {
			cfg.Store.BackendOptions = map[string]string{}
		}
		cfg.Store.BackendOptions[name] = js
	}
	if cfg.Store.LockSegments && !cfg.Store.WarmSegments {
		return errors.New("--lock-segments locks warmed segments: add --warm-segments")
	}
	if sweep {
		grid := m.vary
		if len(grid) == 0 {
			grid = bench.DefaultSweepGrid()
		}
		pols, err := bench.SweepPolicies(grid, cfg.Store, cfg.Backends)
		if err != nil {
			return err
		}
		cfg.Policies = pols
	}
	return bench.Validate(cfg)
}

func runDevice(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := bench.DefaultConfig()
	c := newCommand("device", "mqbench device --dir DIR [--sizes 1024] [--producers 1,4,16] [--message bare|rocketmq] [--repeat N] [--probe-bytes 1GiB] [--sync-probes N]",
		"Measures the limits of DIR's device with no engine: sequential O_DIRECT writes through io_uring, 4 KiB write+fdatasync on a fallocated and on a pre-written file, the group-commit limit (for each producer count N, N records as one write+fdatasync on a pre-written file, and from two producers on the N records split between two writers at once), the time to create a segment fallocated and pre-written, and fio's equivalents when fio is on PATH.")
	fs := c.fs
	fs.StringVar(&cfg.Dir, "dir", "", "directory whose device is measured (required)")
	cfg.Sizes = []int{1024}
	fs.Var(sizesFlag(&cfg.Sizes), "sizes", "body sizes of the group-commit limit's records")
	fs.Var(intsFlag(&cfg.Producers, "producers"), "producers", "the producer counts the group-commit limit bounds (records outstanding: all in one write, or split over two in flight), comma-separated")
	fs.StringVar(&cfg.Store.Message, "message", cfg.Store.Message, "the message whose records the group-commit limit writes: bare or rocketmq")
	fs.IntVar(&cfg.Repeat, "repeat", cfg.Repeat, "measured repeats of each probe")
	fs.Var(bytesFlag(&cfg.DeviceProbeBytes), "probe-bytes", "bytes written by the O_DIRECT probe and fio")
	fs.IntVar(&cfg.SyncProbeCount, "sync-probes", cfg.SyncProbeCount, "4 KiB write+fdatasync samples per repeat (on a fallocated and on a pre-written file)")
	fs.Var(bytesFlag(&cfg.Store.SegmentSizeBytes), "segment-size", "the segment the creation probes make (fallocated, and pre-written)")
	if err := c.parse(args, stderr, 0); err != nil {
		return err
	}
	switch {
	case cfg.Store.SegmentSizeBytes%4096 != 0:
		return c.bad(stderr, "--segment-size %d: want a multiple of 4096", cfg.Store.SegmentSizeBytes)
	case cfg.Dir == "" || cfg.Repeat < 1 || cfg.SyncProbeCount < 1:
		return c.bad(stderr, "--dir is required; --repeat and --sync-probes must be ≥ 1")
	}
	if err := bench.Validate(&cfg); err != nil {
		return c.bad(stderr, "%v", err)
	}
	f, err := bench.MeasureDevice(ctx, cfg, progressOptions(stderr))
	if f != nil {
		fmt.Fprint(stdout, report.DeviceReport(f))
	}
	return err
}

func runReport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("report", "mqbench report RUN_DIR",
		"Re-renders RUN_DIR/summary.md, the plots, bench.txt and the .hgrm files from RUN_DIR/run.json.gz (or run.json) and prints the tables. A run file of another schema is refused, with the reason it cannot be converted.")
	if err := c.parse(args, stderr, 1); err != nil {
		return err
	}
	f, err := report.Report(c.fs.Arg(0))
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, report.SummaryTables(f))
	return nil
}

func runCompare(_ context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("compare", "mqbench compare RUN_A RUN_B",
		"Every cell of both runs: A and B as median [interval], B ÷ A, and a verdict only where the intervals separate (\"no significant difference\" otherwise). Open-loop cells are matched by system and rate; rates that differ by more than 1 % are not comparable.")
	if err := c.parse(args, stderr, 2); err != nil {
		return err
	}
	a, err := runfile.Read(c.fs.Arg(0))
	if err != nil {
		return err
	}
	b, err := runfile.Read(c.fs.Arg(1))
	if err != nil {
		return err
	}
	report.Analyze(a)
	report.Analyze(b)
	fmt.Fprint(stdout, report.Compare(a, b))
	return nil
}

func runCleanup(_ context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("cleanup", "mqbench cleanup [--state-dir DIR] [--force]",
		"Undoes what killed runs left: sysctls, swapfiles, cgroups, loop devices, mounts, neighbour processes.")
	stateDir := c.fs.String("state-dir", hostctl.DefaultStateDir, "the state directory runs record their system changes in")
	force := c.fs.Bool("force", false, "also undo the changes of runs that still seem alive")
	if err := c.parse(args, stderr, 0); err != nil {
		return err
	}
	reports, err := hostctl.Cleanup(*stateDir, *force)
	if err != nil {
		return err
	}
	if len(reports) == 0 {
		fmt.Fprintf(stdout, "nothing to clean up in %s\n", *stateDir)
	}
	var failed []string
	for _, rep := range reports {
		switch {
		case rep.Skipped != "":
			fmt.Fprintf(stdout, "%s: left alone: %s\n", rep.File, rep.Skipped)
			continue
		case rep.Err != nil:
			failed = append(failed, fmt.Sprintf("%s: %v", rep.File, rep.Err))
		}
		for _, ch := range rep.Undone {
			fmt.Fprintf(stdout, "%s: undone: %s\n", rep.File, ch)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("could not undo everything:\n%s", strings.Join(failed, "\n"))
	}
	return nil
}

// configArg returns the value of --config in args ("" without one).
func configArg(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		if name, v, ok := strings.Cut(a, "="); name == "--config" || name == "-config" {
			if ok {
				return v
			}
			if i+1 < len(args) {
				return args[i+1]
			}
		}
	}
	return ""
}

// loadConfig reads a configuration file over cfg; a field it does not
// know is an error (a misspelt field would otherwise be silently ignored).
func loadConfig(path string, cfg *bench.Config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		return fmt.Errorf("not a configuration: %w", err)
	}
	return nil
}
