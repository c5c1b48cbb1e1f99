// Command mqpeer-remoting is mqbench's remoting peer: it runs one workload
// through RocketMQ's own Go client against an mqstore broker and prints one
// JSON object (load.PeerOutput) on stdout — the peer protocol of
// bench/peers' mqpeer, with the same flags, so `mqbench --peers remoting`
// runs it like the other peers.
//
// For each run it starts, on 127.0.0.1, a name server (in this process)
// and `mqstore serve` (a process: the broker, a store in --dir with the
// given flush mode) and creates the topic. The producers are
// rocketmq-client-go producers (SendSync, no client-side retry), shared by
// the workload's goroutines; a push consumer of the same client receives
// every message, and its delivery time minus the time stamped in the body
// (the send's intended start) is the end-to-end latency (Result.Delivery).
// Exit 2 on bad flags, 1 when the run fails (the JSON still says why).
// --list prints the one peer as a JSON array of {"name", "label"};
// --summarize RUN prints a run's remoting cells beside its in-process e2e
// cells (mqbench's tables show a peer's send latency, not its deliveries).
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/mqstore/mqstore/bench/load"
)

// Peer is the name mqbench knows this peer by.
const Peer = "remoting"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type config struct {
	spec      load.Spec
	dir       string
	flush     string
	backend   string
	mqstore   string
	segment   int64
	clients   int
	queues    int
	logOutput io.Writer
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mqpeer-remoting", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pf := load.RegisterPeerFlags(fs, Peer, "peer: "+Peer+" (the only one this program runs)")
	peer, dir, flush, size, list, profileDir := pf.Peer, pf.Dir, pf.Flush, pf.Size, pf.List, pf.ProfileDir
	fs.Duration("sync-interval", 0, "accepted for mqpeer's flags; the broker's flush interval is mqstore's own")
	mqstoreBin := fs.String("mqstore", "", "the mqstore binary to run the broker with (default: mqstore next to this program, else on PATH)")
	backend := fs.String("backend", "mmap", "the broker's store backend")
	clients := fs.Int("clients", 0, "producer clients the workload's goroutines share (default: min(goroutines, 8))")
	queues := fs.Int("queues", 8, "the topic's queues")
	segmentSize := fs.Int64("segment-size", 256<<20, "the broker's CommitLog segment size in bytes (mqbench's store default)")
	summary := fs.String("summarize", "", "print the remoting cells of this mqbench run (its results directory or run file) beside "+
		"the in-process e2e cells at the same size, flush and rate, and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *summary != "" {
		if err := summarize(*summary, stdout); err != nil {
			fmt.Fprintln(stderr, "mqpeer-remoting:", err)
			return 1
		}
		return 0
	}
	if *list {
		if err := json.NewEncoder(stdout).Encode([]map[string]string{{"name": Peer, "label": label(clientVersion(), *backend, *flush)}}); err != nil {
			fmt.Fprintln(stderr, "mqpeer-remoting: write list:", err)
			return 1
		}
		return 0
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "mqpeer-remoting: "+format+"\n", a...)
		fs.Usage()
		return 2
	}
	switch {
	case *peer != Peer:
		return bad("unknown peer %q: this program runs %q", *peer, Peer)
	case *dir == "" || fs.NArg() > 0:
		return bad("--dir is required; no positional arguments")
	case *flush != "async" && *flush != "sync":
		return bad("--flush %q: want async or sync", *flush)
	case *size < 8:
		return bad("--size %d: the send time is stamped in the body's first 8 bytes", *size)
	case *clients < 0:
		return bad("--clients %d is negative", *clients)
	case *queues < 1 || *queues > 1024:
		return bad("--queues %d: want 1 to 1024", *queues)
	case *segmentSize < 1<<20:
		return bad("--segment-size %d: want at least 1 MiB", *segmentSize)
	}
	spec := pf.Spec()
	if err := spec.Validate(); err != nil {
		return bad("%v", err)
	}
	cfg := config{spec: spec, dir: *dir, flush: *flush, backend: *backend, mqstore: *mqstoreBin, clients: *clients,
		queues: *queues, segment: *segmentSize, logOutput: stderr}
	if cfg.clients == 0 {
		cfg.clients = min(spec.Workers(), 8)
	}
	cfg.clients = min(cfg.clients, spec.Workers())
	out := load.PeerOutput{Peer: Peer, Flush: *flush, GoVersion: runtime.Version()}
	stopProfiles, err := load.StartProfiles(*profileDir, Peer+"-"+*flush)
	if err != nil {
		out.Error = err.Error()
		return emit(stdout, stderr, out, 1)
	}
	res, err := runCell(ctx, cfg, &out)
	if perr := stopProfiles(); perr != nil && err == nil {
		err = perr
	}
	out.Result = res
	if err != nil && out.Result.Error == "" {
		out.Result.Error = err.Error()
	}
	if out.Result.Error != "" {
		out.Error = out.Result.Error
		return emit(stdout, stderr, out, 1)
	}
	return emit(stdout, stderr, out, 0)
}

func emit(stdout, stderr io.Writer, out load.PeerOutput, code int) int {
	if err := json.NewEncoder(stdout).Encode(out); err != nil {
		fmt.Fprintln(stderr, "mqpeer-remoting: write result:", err)
		return 1
	}
	return code
}

func label(client, backend, flush string) string {
	return fmt.Sprintf("rocketmq-client-go %s SendSync and push consumer → mqstore serve (RocketMQ remoting over loopback TCP; %s backend, %s flush)",
		client, backend, flush)
}

func quiet(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// stamp writes t into a body's first 8 bytes; stampOf reads it (0: a probe).
func stamp(body []byte, t time.Time) { binary.LittleEndian.PutUint64(body, uint64(t.UnixNano())) }

func stampOf(body []byte) int64 {
	if len(body) < 8 {
		return -1
	}
	return int64(binary.LittleEndian.Uint64(body))
}
