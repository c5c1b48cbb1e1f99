package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench"
	"github.com/mqstore/mqstore/internal/cli"
)

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runMatrix(ctx, "run", args, stdout, stderr)
}

// runMatrix is run and sweep: the same flags; sweep adds --vary and
// changes the defaults to a flush-policy grid.
func runMatrix(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	cfg := bench.DefaultConfig()
	sweep := name == "sweep"
	defWorkloads, defPeers, defSizes := "throughput,latency", "nats,pebble", "128,1024,4096"
	if sweep {
		defWorkloads, defPeers, defSizes = "throughput,latency", "", "1024"
		cfg.Repeat, cfg.Duration, cfg.Warmup, cfg.Profile, cfg.NoLimits = 1, 2*time.Second, 500*time.Millisecond, false, true
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	backends := fs.String("backends", strings.Join(cfg.Backends, ","), "backends, comma-separated (mem is allowed when named)")
	sizes := fs.String("sizes", defSizes, "message body sizes in bytes, comma-separated (4k, 1MiB accepted)")
	flushes := fs.String("flush", "async,sync", "flush policies: async, sync")
	workloads := fs.String("workloads", defWorkloads, "workloads: throughput (closed loop), latency (open loop), consume (catch-up reads, copy and sendfile), e2e (producers + long-polling consumers), recovery (reopen after SIGKILL)")
	peers := fs.String("peers", defPeers, "peer stores run with the same workloads (empty: none)")
	pressures := fs.String("pressure", "none", "pressures, comma-separated: none, dirty (dirty-page writeback), swap (memory cgroup + swap), both; all but none need root")
	var dirs multiFlag
	fs.Var(&dirs, "dir", "target directory (repeatable: one device each); a temporary directory is made inside each (default .)")
	emulate := fs.String("emulate", "", "emulated devices to add: hdd (loop-device ext4 throttled with blkio to a 7200 rpm disk; root)")
	fs.Var(bytesFlag{&cfg.EmulateImageBytes}, "emulate-bytes", "size of the emulated disk's (sparse) image")
	fs.Var(bytesFlag{&cfg.HDDBandwidthBytes}, "hdd-bandwidth", "emulated HDD bandwidth per direction, bytes/s")
	fs.IntVar(&cfg.HDDIOPS, "hdd-iops", cfg.HDDIOPS, "emulated HDD IOPS per direction")
	fs.Var(bytesFlag{&cfg.ConsumeBytes}, "consume-bytes", "CommitLog the consume workload writes and reads back")
	fs.Var(bytesFlag{&cfg.RecoveryBytes}, "recovery-bytes", "CommitLog size a recovery cell reopens after SIGKILL")
	fs.Var(bytesFlag{&cfg.DirtyBytes}, "dirty-bytes", "vm.dirty_bytes during dirty pressure")
	fs.Var(bytesFlag{&cfg.DirtyBackgroundBytes}, "dirty-background-bytes", "vm.dirty_background_bytes during dirty pressure")
	fs.Var(bytesFlag{&cfg.DirtyFileBytes}, "dirty-file-bytes", "file the dirty neighbour overwrites")
	fs.Var(bytesFlag{&cfg.SwapFileBytes}, "swap-file-bytes", "swapfile made when no swap is on")
	fs.Var(bytesFlag{&cfg.SwapLimitBytes}, "swap-limit", "memory cgroup limit of the store (and the neighbour) under swap pressure")
	fs.Var(bytesFlag{&cfg.SwapNeighbourBytes}, "swap-neighbour-bytes", "anonymous memory the swap neighbour keeps touching")
	fs.StringVar(&cfg.StateDir, "state-dir", cfg.StateDir, "where the state file of system changes is kept (mqbench cleanup reads it)")
	var vary multiFlag
	if sweep {
		fs.Var(&vary, "vary", "an option and its values, repeatable: flush=async,sync flush-interval=100ms,500ms flush-least-pages=0,4 commit-interval=… commit-least-pages=… sync-flush-timeout=… flush-thorough-interval=… (default grid: "+strings.Join(bench.DefaultSweepGrid(), " ")+")")
	}
	fs.IntVar(&cfg.Producers, "producers", cfg.Producers, "closed-loop producer goroutines")
	fs.IntVar(&cfg.InFlight, "inflight", cfg.InFlight, "open-loop workers (requests in flight at most)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured window of each repeat")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured warm-up before each repeat")
	fs.IntVar(&cfg.Repeat, "repeat", cfg.Repeat, "repeats of each cell (median and min–max are reported)")
	fs.Float64Var(&cfg.RateFraction, "rate-fraction", cfg.RateFraction, "latency target rate as a fraction of the cell's median throughput")
	fs.Float64Var(&cfg.Rate, "rate", 0, "fixed latency target rate in msgs/s for every cell (overrides --rate-fraction)")
	fs.StringVar(&cfg.Arrival, "arrival", cfg.Arrival, "open-loop arrivals: constant or poisson")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the Poisson arrivals")
	fs.StringVar(&cfg.Out, "out", cfg.Out, "results root: the run writes OUT/<YYYYMMDD-HHMMSS>-<host>/")
	fs.StringVar(&cfg.ProfilesRoot, "profiles", cfg.ProfilesRoot, "profiles root: PROFILES/<run>/<cell>.{cpu,heap,block,mutex}.pprof")
	noProfile := fs.Bool("no-profile", !cfg.Profile, "skip the profiled extra run of each throughput cell")
	fs.DurationVar(&cfg.ProfileDuration, "profile-duration", cfg.ProfileDuration, "length of each profiled run")
	fs.BoolVar(&cfg.NoLimits, "no-limits", cfg.NoLimits, "skip the copy ceiling, device probes and fio")
	fs.Var(bytesFlag{&cfg.CopyCeilingBytes}, "copy-bytes", "mapped file size of the copy ceiling")
	fs.Var(bytesFlag{&cfg.DeviceProbeBytes}, "probe-bytes", "bytes written by the O_DIRECT device probe and fio")
	fs.IntVar(&cfg.SyncProbeCount, "sync-probes", cfg.SyncProbeCount, "4 KiB write+fdatasync samples per repeat")
	fs.StringVar(&cfg.PeerCommand, "peer-cmd", "", "a built mqpeer binary (default: build it from bench/peers)")
	fs.Var(bytesFlag{&cfg.Store.SegmentSizeBytes}, "segment-size", "CommitLog segment size")
	fs.DurationVar(&cfg.Store.FlushInterval, "flush-interval", 0, "async flush interval (0: engine default 500ms)")
	fs.IntVar(&cfg.Store.FlushLeastPages, "flush-least-pages", 0, "async flush least pages (0: engine default 4)")
	fs.DurationVar(&cfg.Store.FlushThoroughInterval, "flush-thorough-interval", 0, "async thorough flush interval (0: engine default 10s)")
	fs.DurationVar(&cfg.Store.SyncFlushTimeout, "sync-flush-timeout", 0, "group-commit timeout (0: engine default 5s)")
	fs.DurationVar(&cfg.Store.CommitInterval, "commit-interval", 0, "commit interval of buffered backends (0: engine default 200ms)")
	fs.IntVar(&cfg.Store.CommitLeastPages, "commit-least-pages", 0, "commit least pages (0: engine default 4)")
	quiet := fs.Bool("quiet", false, "do not print the summary table at the end")
	fs.Usage = func() {
		if sweep {
			fmt.Fprintln(fs.Output(), "usage: mqbench sweep [--backends a,b] [--vary option=v1,v2 …] [--pressure none,dirty] [--dir DIR …] [run's flags]\n\n"+
				"Runs throughput and latency for every flush policy of the grid and plots throughput against p99.9 with the Pareto front.")
			fs.PrintDefaults()
			return
		}
		fmt.Fprintln(fs.Output(), "usage: mqbench run [--backends a,b] [--sizes 128,1024,4096] [--flush async,sync] [--workloads throughput,latency]\n"+
			"                  [--producers N] [--duration D] [--repeat N] [--dir DIR] [--out DIR] [--peers nats,pebble] [--no-limits] [more flags below]")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, 0); err != nil {
		return err
	}
	cfg.Backends, cfg.Flushes, cfg.Workloads, cfg.Peers = splitList(*backends), splitList(*flushes), splitList(*workloads), splitList(*peers)
	cfg.Pressures, cfg.Emulate = splitList(*pressures), splitList(*emulate)
	if len(dirs) > 0 {
		cfg.Dir, cfg.Dirs = dirs[0], dirs
	}
	if sweep {
		grid := []string(vary)
		if len(grid) == 0 {
			grid = bench.DefaultSweepGrid()
		}
		pols, err := bench.SweepPolicies(grid, cfg.Store)
		if err != nil {
			return cli.BadFlag(fs, "%v", err)
		}
		cfg.Policies = pols
	}
	var err error
	if cfg.Sizes, err = splitSizes(*sizes); err != nil {
		return cli.BadFlag(fs, "%v", err)
	}
	cfg.Profile = !*noProfile
	if err := cfg.Validate(); err != nil {
		return cli.BadFlag(fs, "%v", err)
	}
	f, dir, err := bench.Run(ctx, cfg, progressOptions(stderr))
	if f != nil && !*quiet {
		fmt.Fprint(stdout, bench.SummaryTables(f))
	}
	if dir != "" {
		fmt.Fprintf(stdout, "results: %s (summary.md, run.json, bench.txt, *.hgrm, plots)\n", dir)
	}
	return err
}

func runDevice(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := bench.DefaultConfig()
	fs := flag.NewFlagSet("device", flag.ContinueOnError)
	fs.StringVar(&cfg.Dir, "dir", "", "directory whose device is measured (required)")
	sizes := fs.String("sizes", "1024", "record body sizes of the copy ceiling")
	fs.IntVar(&cfg.Repeat, "repeat", cfg.Repeat, "repeats of each probe")
	fs.Var(bytesFlag{&cfg.CopyCeilingBytes}, "copy-bytes", "mapped file size of the copy ceiling")
	fs.Var(bytesFlag{&cfg.DeviceProbeBytes}, "probe-bytes", "bytes written by the O_DIRECT probe and fio")
	fs.IntVar(&cfg.SyncProbeCount, "sync-probes", cfg.SyncProbeCount, "4 KiB write+fdatasync samples per repeat")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mqbench device --dir DIR [--sizes 1024] [--repeat N] [--probe-bytes 1GiB] [--sync-probes N]")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, 0); err != nil {
		return err
	}
	var err error
	if cfg.Sizes, err = splitSizes(*sizes); err != nil {
		return cli.BadFlag(fs, "%v", err)
	}
	if cfg.Dir == "" || cfg.Repeat < 1 || cfg.SyncProbeCount < 1 {
		return cli.BadFlag(fs, "%v", fmt.Errorf("--dir is required; --repeat and --sync-probes must be ≥ 1"))
	}
	f, err := bench.MeasureDevice(ctx, cfg, progressOptions(stderr))
	if f != nil {
		fmt.Fprint(stdout, bench.DeviceReport(f))
	}
	return err
}

func runReport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mqbench report RUN_DIR\n\nRe-renders RUN_DIR/summary.md, plots, bench.txt and .hgrm files from RUN_DIR/run.json and prints the tables.")
	}
	if err := cli.Parse(fs, args, stderr, 1); err != nil {
		return err
	}
	f, err := bench.Report(fs.Arg(0))
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, bench.SummaryTables(f))
	return nil
}

func runCompare(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mqbench compare RUN_A RUN_B\n\nEvery cell of both runs: A and B as median [min–max], B ÷ A, ~ when the ranges overlap.")
	}
	if err := cli.Parse(fs, args, stderr, 2); err != nil {
		return err
	}
	a, err := bench.ReadRunFile(fs.Arg(0))
	if err != nil {
		return err
	}
	b, err := bench.ReadRunFile(fs.Arg(1))
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, bench.Compare(a, b))
	return nil
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, " ") }

func (m *multiFlag) Set(s string) error {
	*m = append(*m, s)
	return nil
}

func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runMatrix(ctx, "sweep", args, stdout, stderr)
}

func runCleanup(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	stateDir := fs.String("state-dir", bench.DefaultStateDir, "the state directory runs record their system changes in")
	force := fs.Bool("force", false, "also undo the changes of runs that still seem alive")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mqbench cleanup [--state-dir DIR] [--force]\n\nUndoes what killed runs left: sysctls, swapfiles, cgroups, loop devices, mounts, neighbour processes.")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, 0); err != nil {
		return err
	}
	reports, err := bench.Cleanup(*stateDir, *force)
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
		for _, c := range rep.Undone {
			fmt.Fprintf(stdout, "%s: undone: %s\n", rep.File, c)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("could not undo everything:\n%s", strings.Join(failed, "\n"))
	}
	return nil
}
