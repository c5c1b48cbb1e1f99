package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/mqstore/mqstore/bench"
)

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := bench.DefaultConfig()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	backends := fs.String("backends", strings.Join(cfg.Backends, ","), "backends, comma-separated (mem is allowed when named)")
	sizes := fs.String("sizes", "128,1024,4096", "message body sizes in bytes, comma-separated (4k, 1MiB accepted)")
	flushes := fs.String("flush", "async,sync", "flush policies: async, sync")
	workloads := fs.String("workloads", "throughput,latency", "workloads: throughput (closed loop), latency (open loop)")
	peers := fs.String("peers", "nats,pebble", "peer stores run with the same workloads (empty: none)")
	fs.IntVar(&cfg.Producers, "producers", cfg.Producers, "closed-loop producer goroutines")
	fs.IntVar(&cfg.InFlight, "inflight", cfg.InFlight, "open-loop workers (requests in flight at most)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured window of each repeat")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured warm-up before each repeat")
	fs.IntVar(&cfg.Repeat, "repeat", cfg.Repeat, "repeats of each cell (median and min–max are reported)")
	fs.Float64Var(&cfg.RateFraction, "rate-fraction", cfg.RateFraction, "latency target rate as a fraction of the cell's median throughput")
	fs.Float64Var(&cfg.Rate, "rate", 0, "fixed latency target rate in msgs/s for every cell (overrides --rate-fraction)")
	fs.StringVar(&cfg.Arrival, "arrival", cfg.Arrival, "open-loop arrivals: constant or poisson")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the Poisson arrivals")
	fs.StringVar(&cfg.Dir, "dir", cfg.Dir, "directory whose file system is measured (a temporary directory is made inside it)")
	fs.StringVar(&cfg.Out, "out", cfg.Out, "results root: the run writes OUT/<YYYYMMDD-HHMMSS>-<host>/")
	fs.StringVar(&cfg.ProfilesRoot, "profiles", cfg.ProfilesRoot, "profiles root: PROFILES/<run>/<cell>.{cpu,heap,block,mutex}.pprof")
	noProfile := fs.Bool("no-profile", false, "skip the profiled extra run of each throughput cell")
	fs.DurationVar(&cfg.ProfileDuration, "profile-duration", cfg.ProfileDuration, "length of each profiled run")
	fs.BoolVar(&cfg.NoLimits, "no-limits", false, "skip the copy ceiling, device probes and fio")
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
		fmt.Fprintln(fs.Output(), "usage: mqbench run [--backends a,b] [--sizes 128,1024,4096] [--flush async,sync] [--workloads throughput,latency]\n"+
			"                  [--producers N] [--duration D] [--repeat N] [--dir DIR] [--out DIR] [--peers nats,pebble] [--no-limits] [more flags below]")
		fs.PrintDefaults()
	}
	if err := parse(fs, args, stderr, 0); err != nil {
		return err
	}
	cfg.Backends, cfg.Flushes, cfg.Workloads, cfg.Peers = splitList(*backends), splitList(*flushes), splitList(*workloads), splitList(*peers)
	var err error
	if cfg.Sizes, err = splitSizes(*sizes); err != nil {
		return badFlag(fs, stderr, err)
	}
	cfg.Profile = !*noProfile
	if err := cfg.Validate(); err != nil {
		return badFlag(fs, stderr, err)
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
	if err := parse(fs, args, stderr, 0); err != nil {
		return err
	}
	var err error
	if cfg.Sizes, err = splitSizes(*sizes); err != nil {
		return badFlag(fs, stderr, err)
	}
	if cfg.Dir == "" || cfg.Repeat < 1 || cfg.SyncProbeCount < 1 {
		return badFlag(fs, stderr, fmt.Errorf("--dir is required; --repeat and --sync-probes must be ≥ 1"))
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
	if err := parse(fs, args, stderr, 1); err != nil {
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
	if err := parse(fs, args, stderr, 2); err != nil {
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
