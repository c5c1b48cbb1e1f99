// Command mqpeer runs one workload against one peer store and prints one
// JSON object (peers.Output) on stdout: the protocol between mqbench (in the
// store's module) and the peers (in this module). Exit 2 on bad flags (an
// unknown peer is named with the valid ones), 1 when the peer fails to open
// or the run fails (the JSON still says why). --list prints the peers as a
// JSON array of {"name", "label"}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/peers"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("mqpeer", flag.ContinueOnError)
	peer := fs.String("peer", "", "peer: "+strings.Join(peers.Names(), ", ")+", or "+NoOp+" (the load generator's floor) (required)")
	dir := fs.String("dir", "", "empty directory for the peer's files (required)")
	flush := fs.String("flush", "async", "async or sync")
	workload := fs.String("workload", "throughput", "throughput or latency")
	size := fs.Int("size", 1024, "message body bytes")
	producers := fs.Int("producers", 4, "closed-loop producers")
	inFlight := fs.Int("inflight", 8, "open-loop workers")
	duration := fs.Duration("duration", 2*time.Second, "measured window")
	warmup := fs.Duration("warmup", 500*time.Millisecond, "unmeasured warm-up")
	rate := fs.Float64("rate", 0, "open-loop arrivals per second")
	arrival := fs.String("arrival", "constant", "constant or poisson")
	seed := fs.Uint64("seed", 1, "Poisson seed")
	list := fs.Bool("list", false, "print the peers as a JSON array of {name, label} and exit")
	syncInterval := fs.Duration("sync-interval", peers.DefaultSyncInterval, "async sync interval, matched to mqstore's flush interval")
	profileDir := fs.String("profile", "", "write cpu, heap, block and mutex profiles of the run (warm-up included) to this directory")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *list {
		return printList()
	}
	if *peer == "" || *dir == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "mqpeer: --peer and --dir are required; no positional arguments")
		fs.Usage()
		return 2
	}
	spec := load.Spec{Workload: load.Workload(*workload), SizeBytes: *size, Producers: *producers, InFlight: *inFlight,
		Duration: *duration, Warmup: *warmup, RatePerSec: *rate, Arrival: load.Arrival(*arrival), Seed: *seed}
	out := peers.Output{Peer: *peer, Flush: *flush, GoVersion: runtime.Version()}
	if err := spec.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "mqpeer:", err)
		return 2
	}
	if *peer == NoOp {
		// The load generator's floor in this process: the same schedule
		// against an operation that does nothing.
		out.Result = load.Run(ctx, spec, nil, nil, func(int) load.Op { return func(context.Context) error { return nil } })
		if out.Result.Error != "" {
			return emit(out, 1)
		}
		return emit(out, 0)
	}
	peerOpts := []peers.Option{peers.WithSyncInterval(*syncInterval), peers.WithOutstanding(spec.Workers())}
	info, err := peers.Describe(*peer, *flush, peerOpts...)
	if errors.Is(err, peers.ErrUnknownPeer) || errors.Is(err, peers.ErrBadFlush) {
		fmt.Fprintln(os.Stderr, "mqpeer:", err)
		return 2
	}
	if err != nil {
		out.Error = err.Error()
		return emit(out, 1)
	}
	peers.DescribeOutput(&out, info)
	p, err := peers.Open(ctx, *peer, *dir, *flush, peerOpts...)
	if err != nil {
		out.Error = err.Error()
		return emit(out, 1)
	}
	stopProfiles, err := startProfiles(*profileDir, *peer+"-"+*flush)
	if err != nil {
		out.Error = err.Error()
		_ = p.Close()
		return emit(out, 1)
	}
	var dur load.Durability
	if d, ok := p.(load.Durability); ok {
		dur = d
	}
	out.Result = load.Run(ctx, spec, nil, dur, func(worker int) load.Op { return p.NewOp(worker, *size) })
	if err := stopProfiles(); err != nil && out.Result.Error == "" {
		out.Result.Error = err.Error()
	}
	if err := p.Close(); err != nil && out.Result.Error == "" {
		out.Result.Error = err.Error()
	}
	if out.Result.Error != "" {
		return emit(out, 1)
	}
	return emit(out, 0)
}

// NoOp is the --peer that runs the schedule against a no-op: the load
// generator's own floor in the peers' process.
const NoOp = "no-op"

func printList() int {
	list, err := peers.List()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mqpeer:", err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(list); err != nil {
		fmt.Fprintln(os.Stderr, "mqpeer: write list:", err)
		return 1
	}
	return 0
}

func emit(out peers.Output, code int) int {
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "mqpeer: write result:", err)
		return 1
	}
	return code
}
