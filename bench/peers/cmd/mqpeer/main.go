// Command mqpeer runs one workload against one peer store and prints one
// JSON object (peers.Output) on stdout: the protocol between mqbench (in the
// store's module) and the peers (in this module). Exit 2 on bad flags (an
// unknown peer is named with the valid ones), 1 when the peer fails to open
// or the run fails (the JSON still says why). --list prints the peers as a
// JSON array of {"name", "label"}. --recycle-wal BYTES runs pebble-wal on a
// recycled WAL file (peers.WithRecycledWAL); the other peers refuse it.
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
	pf := load.RegisterPeerFlags(fs, "", "peer: "+strings.Join(peers.Names(), ", ")+", or "+NoOp+" (the load generator's floor) (required)")
	peer, dir, flush, list, profileDir := pf.Peer, pf.Dir, pf.Flush, pf.List, pf.ProfileDir
	syncInterval := fs.Duration("sync-interval", peers.DefaultSyncInterval, "async sync interval, matched to mqstore's flush interval")
	recycleWAL := fs.Int64(load.RecycleWALFlag, 0, peers.PebbleWAL+" only: before the warm-up, fill a WAL file to at least `BYTES` with the peer's "+
		"writer (records, synced, closed) and run the window's log on that file recycled, as pebble reuses an obsolete WAL "+
		"(renamed to the next log number, written over in the recyclable chunk format); not timed or counted (0: a new file)")
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
	spec := pf.Spec()
	out := peers.Output{Peer: *peer, Flush: *flush, GoVersion: runtime.Version()}
	if err := spec.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "mqpeer:", err)
		return 2
	}
	switch {
	case *recycleWAL < 0:
		fmt.Fprintf(os.Stderr, "mqpeer: --%s %d: want ≥ 0 bytes (0: a new file)\n", load.RecycleWALFlag, *recycleWAL)
		return 2
	case *recycleWAL > 0 && *peer == NoOp:
		fmt.Fprintf(os.Stderr, "mqpeer: --%s with --peer %s: the no-op peer writes no log; only %s runs on a recycled WAL file\n",
			load.RecycleWALFlag, NoOp, peers.PebbleWAL)
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
	peerOpts := []peers.Option{peers.WithSyncInterval(*syncInterval), peers.WithOutstanding(spec.Workers()),
		peers.WithRecycledWAL(*recycleWAL)}
	info, err := peers.Describe(*peer, *flush, peerOpts...)
	if errors.Is(err, peers.ErrUnknownPeer) || errors.Is(err, peers.ErrBadFlush) {
		fmt.Fprintln(os.Stderr, "mqpeer:", err)
		return 2
	}
	if errors.Is(err, peers.ErrBadRecycledWAL) {
		fmt.Fprintf(os.Stderr, "mqpeer: --%s with --peer %s: %v\n", load.RecycleWALFlag, *peer, err)
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
	var dur load.Durability
	if d, ok := p.(load.Durability); ok {
		dur = d
	}
	window, profileErr := load.WindowProfiles(*profileDir, *peer+"-"+*flush)
	spec.Window = window
	out.Result = load.Run(ctx, spec, nil, dur, func(worker int) load.Op { return p.NewOp(worker, *pf.Size) })
	if err := profileErr(); err != nil && out.Result.Error == "" {
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
