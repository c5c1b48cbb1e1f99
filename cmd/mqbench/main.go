// Command mqbench is mqstore's benchmark harness: the backend × size × flush
// matrix with the device limits and peer stores measured in the same run.
// All logic is in package bench; this file only parses flags.
//
//	mqbench run [flags]          run the matrix, write results/<id>/
//	mqbench device --dir DIR     measure the limits of a directory's device
//	mqbench report RUN_DIR       re-render summary.md, plots, bench.txt, .hgrm from run.json.gz
//	mqbench compare RUN_A RUN_B  two runs side by side with ratios
//	mqbench sweep [flags]        a flush-policy grid with its Pareto front
//	mqbench cleanup              undo what a killed run changed in the system
//
// Exit status: 0 ok, 1 error, 2 bad flags, 130 interrupted (partial results written).
package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/mqstore/mqstore/bench"
	"github.com/mqstore/mqstore/internal/cli"
)

var tool = cli.Tool{Name: "mqbench", Commands: map[string]cli.Command{
	"run":     {Summary: "run the benchmark matrix and write a results directory", Run: matrix("run")},
	"device":  {Summary: "measure the device limits of a directory", Run: runDevice},
	"report":  {Summary: "re-render summary.md, plots, bench.txt and .hgrm files from a run's run.json", Run: runReport},
	"compare": {Summary: "compare two runs side by side (B ÷ A; a difference only where the intervals separate)", Run: runCompare},
	"sweep":   {Summary: "run a grid of flush policies and draw the throughput / p99.9 Pareto front", Run: matrix("sweep")},
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

func progressOptions(stderr io.Writer) bench.RunOptions {
	o := bench.RunOptions{Progress: stderr, CommandLine: "mqbench " + strings.Join(os.Args[1:], " ")}
	if f, ok := stderr.(*os.File); ok {
		o.Terminal = bench.IsTerminal(f)
	}
	return o
}
