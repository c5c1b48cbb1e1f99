// Command mqbench is mqstore's benchmark harness: the backend × size × flush
// matrix with the device limits and peer stores measured in the same run.
// All logic is in package bench; this file only parses flags.
//
//	mqbench run [flags]          run the matrix, write results/<id>/
//	mqbench device --dir DIR     measure the limits of a directory's device
//	mqbench report RUN_DIR       re-render summary.md, plots, bench.txt from run.json
//	mqbench compare RUN_A RUN_B  two runs side by side with ratios
//	mqbench sweep [flags]        a flush-policy grid with its Pareto front
//	mqbench cleanup              undo what a killed run changed in the system
//
// Exit status: 0 ok, 1 error, 2 bad flags, 130 interrupted (partial results written).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/mqstore/mqstore/bench"
	"github.com/mqstore/mqstore/internal/cli"
)

var tool = cli.Tool{Name: "mqbench", Commands: map[string]cli.Command{
	"run":     {Summary: "run the benchmark matrix and write a results directory", Run: runRun},
	"device":  {Summary: "measure the page-cache copy ceiling and the device limits of a directory", Run: runDevice},
	"report":  {Summary: "re-render summary.md, plots, bench.txt and .hgrm files from a run's run.json", Run: runReport},
	"compare": {Summary: "compare two runs side by side (B ÷ A, with noise)", Run: runCompare},
	"sweep":   {Summary: "run a grid of flush policies and draw the throughput / p99.9 Pareto front", Run: runSweep},
	"cleanup": {Summary: "undo the system changes (sysctls, swap, cgroups, loop devices, mounts) a killed run left", Run: runCleanup},
}, ExitCode: func(err error) (int, bool) {
	if errors.Is(err, bench.ErrInterrupted) {
		return 130, true // Ctrl-C: what finished was still written
	}
	return 0, false
}}

func main() {
	bench.MaybeWorker() // a re-executed worker runs and exits here
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return tool.Run(ctx, args, stdout, stderr)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func splitSizes(s string) ([]int, error) {
	var out []int
	for _, p := range splitList(s) {
		n, err := parseBytes(p)
		if err != nil {
			return nil, err
		}
		out = append(out, int(n))
	}
	return out, nil
}

// parseBytes reads 1024, 4k/4KiB, 1m/1MiB, 1g/1GiB.
func parseBytes(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToLower(s), "ib"), "b")
	mult := int64(1)
	switch {
	case strings.HasSuffix(t, "k"):
		mult, t = 1<<10, strings.TrimSuffix(t, "k")
	case strings.HasSuffix(t, "m"):
		mult, t = 1<<20, strings.TrimSuffix(t, "m")
	case strings.HasSuffix(t, "g"):
		mult, t = 1<<30, strings.TrimSuffix(t, "g")
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes (1024, 4k, 1MiB)", s)
	}
	return n * mult, nil
}

// bytesFlag is a flag.Value of a byte count.
type bytesFlag struct{ v *int64 }

func (b bytesFlag) String() string {
	if b.v == nil {
		return ""
	}
	return strconv.FormatInt(*b.v, 10)
}

func (b bytesFlag) Set(s string) error {
	n, err := parseBytes(s)
	if err == nil {
		*b.v = n
	}
	return err
}

func progressOptions(stderr io.Writer) bench.RunOptions {
	o := bench.RunOptions{Progress: stderr, CommandLine: "mqbench " + strings.Join(os.Args[1:], " ")}
	if f, ok := stderr.(*os.File); ok {
		o.Terminal = bench.IsTerminal(f)
	}
	return o
}
