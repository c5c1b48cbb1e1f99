package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/engine"
)

// RemotingPeer is the --peers name of the remoting cell: RocketMQ's Go
// client (rocketmq-client-go producers and a push consumer) against
// `mqstore serve` on loopback, what the protocol costs on top of the store.
// It runs interop/cmd/mqpeer-remoting, built from the interop module (the
// one that requires the client), with an mqstore binary next to it (its
// broker); it speaks mqpeer's protocol.
const RemotingPeer = "remoting"

// applyPeer records what a peer said about itself (load.PeerOutput, the
// peer protocol) in its cell.
func applyPeer(c *runfile.Cell, o *load.PeerOutput) {
	if o == nil {
		return
	}
	c.Label, c.Version = cmp.Or(o.Label, c.Label), cmp.Or(o.Version, c.Version)
	if o.Options != nil {
		c.Options = o.Options
	}
	if d := o.Durability; d != nil {
		c.Durability = &runfile.Durability{Ack: d.Ack, ProcessCrash: d.ProcessCrash, PowerLoss: d.PowerLoss, Mechanism: d.Mechanism}
	}
}

// moduleDir finds the module named module above dir (the repository root
// or any directory inside it), at one of the relative paths rel.
func moduleDir(dir, module string, rel ...string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		for _, r := range rel {
			candidate := filepath.Join(d, r)
			if b, err := os.ReadFile(filepath.Join(candidate, "go.mod")); err == nil && strings.Contains(string(b), "module "+module) {
				return candidate, nil
			}
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("the module %s is not above %s", module, abs)
		}
	}
}

func interopModuleDir(dir string) (string, error) {
	d, err := moduleDir(dir, "github.com/mqstore/mqstore/interop", "interop")
	if err != nil {
		return "", fmt.Errorf("%w: run mqbench from the repository for --peers %s", err, RemotingPeer)
	}
	return d, nil
}

func goBuild(ctx context.Context, moduleDir, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = moduleDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s in %s: %w: %s", pkg, moduleDir, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// BuildPeerCommand builds mqpeer from the bench/peers module into dir.
func BuildPeerCommand(ctx context.Context, dir string) (string, error) {
	mod, err := moduleDir(".", "github.com/mqstore/mqstore/bench/peers", "bench/peers", "peers", ".")
	if err != nil {
		return "", fmt.Errorf("%w: run mqbench from the repository, or pass --peer-cmd", err)
	}
	bin, err := filepath.Abs(filepath.Join(dir, "mqpeer"))
	if err != nil {
		return "", err
	}
	return bin, goBuild(ctx, mod, bin, "./cmd/mqpeer")
}

type remotingBuild struct {
	once sync.Once
	bin  string
	err  error
}

var remotingBuilds sync.Map // build directory → *remotingBuild

// remotingPeerCommand builds mqpeer-remoting and mqstore (its broker, from
// the main module) into workDir/remoting-peer once per run and returns the
// peer program.
func remotingPeerCommand(ctx context.Context, workDir string) (string, error) {
	dir, err := filepath.Abs(filepath.Join(workDir, "remoting-peer"))
	if err != nil {
		return "", err
	}
	v, _ := remotingBuilds.LoadOrStore(dir, &remotingBuild{})
	b := v.(*remotingBuild)
	b.once.Do(func() {
		interop, err := interopModuleDir(".")
		if err == nil {
			err = goBuild(ctx, interop, filepath.Join(dir, "mqpeer-remoting"), "./cmd/mqpeer-remoting")
		}
		if err == nil {
			err = goBuild(ctx, filepath.Dir(interop), filepath.Join(dir, "mqstore"), "./cmd/mqstore")
		}
		b.bin, b.err = filepath.Join(dir, "mqpeer-remoting"), err
	})
	return b.bin, b.err
}

// peerList is the peer names `mqpeer --list` prints.
type peerList []string

func (l peerList) has(name string) bool { return name == RemotingPeer || slices.Contains(l, name) }

func (l peerList) String() string { return strings.Join(l, ", ") }

// listPeers asks mqpeer which peers it runs (an error when it cannot say:
// an mqpeer without --list).
func listPeers(ctx context.Context, command string) (peerList, error) {
	out, err := exec.CommandContext(ctx, command, "--list").Output()
	var l []struct{ Name string }
	if err == nil {
		err = json.Unmarshal(out, &l)
	}
	if err != nil {
		return nil, fmt.Errorf("mqpeer --list: %w", err)
	}
	var names peerList
	for _, p := range l {
		names = append(names, p.Name)
	}
	return names, nil
}

// recycledWALPeer is the peer that runs on a recycled log when mqstore's
// cells run on an aged store (--recycle-segments): pebble-wal, pebble's WAL
// alone, whose mqpeer reuses a WAL file it filled beforehand as pebble's
// WAL manager reuses an obsolete one (mqpeer --recycle-wal,
// load.RecycleWALFlag). The other peers write new files.
const recycledWALPeer = "pebble-wal"

// peerRecycledWALBytes is the recycled WAL mqbench asks of peer in a run on
// store: with store.RecycleSegments N > 0, N × the segment size — the bytes
// mqstore's aging retires into the pool before a window — for pebble-wal;
// 0 (a new file, no flag) for the other peers and for fresh stores.
func peerRecycledWALBytes(store StoreConfig, peer string) int64 {
	if peer != recycledWALPeer || store.RecycleSegments <= 0 {
		return 0
	}
	return int64(store.RecycleSegments) * store.SegmentSizeBytes
}

// peerRepeat runs one repeat of spec on peer through the mqpeer command, on
// a recycled WAL when store asks for one of that peer
// (peerRecycledWALBytes); it returns what the peer said about itself beside
// it (nil when it said nothing readable).
func peerRepeat(ctx context.Context, command, dir, peer, flush string, spec load.Spec, store StoreConfig) (runfile.Repeat, *load.PeerOutput) {
	defer os.RemoveAll(dir)
	if peer == RemotingPeer {
		var err error
		if command, err = remotingPeerCommand(ctx, filepath.Dir(dir)); err != nil {
			return failedRepeat(fmt.Errorf("the remoting peer: %w", err)), nil
		}
	}
	args := []string{"--peer", peer, "--dir", dir, "--flush", flush, "--workload", string(spec.Workload),
		"--size", strconv.Itoa(spec.SizeBytes), "--producers", strconv.Itoa(spec.Producers),
		"--inflight", strconv.Itoa(spec.InFlight), "--duration", spec.Duration.String(), "--warmup", spec.Warmup.String(),
		"--arrival", string(spec.Arrival), "--seed", strconv.FormatUint(spec.Seed, 10)}
	if spec.RatePerSec > 0 {
		args = append(args, "--rate", strconv.FormatFloat(spec.RatePerSec, 'f', -1, 64))
	}
	// An async peer syncs as often as mqstore flushes in this run (its
	// --flush-interval, or the engine's default), not at a default of its
	// own.
	args = append(args, "--sync-interval", cmp.Or(store.FlushInterval, engine.DefaultFlushInterval).String())
	if spec.SeriesInterval > 0 {
		// The peer keeps the same time series as a store cell, so the
		// generator does the same work in every system's process.
		args = append(args, "--series-interval", spec.SeriesInterval.String())
	}
	if b := peerRecycledWALBytes(store, peer); b > 0 {
		// Filled and reused before the warm-up, as mqstore's aging runs
		// before its cells' windows.
		args = append(args, "--"+load.RecycleWALFlag, strconv.FormatInt(b, 10))
	}
	cmd := exec.CommandContext(ctx, command, args...)
	// Ctrl-C: ask mqpeer to stop (it still prints what it measured).
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var out load.PeerOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		if ctx.Err() != nil {
			return runfile.Repeat{Status: runfile.StatusInterrupted, Reason: "interrupted"}, nil
		}
		if runErr == nil {
			runErr = fmt.Errorf("unreadable result: %w", err)
		}
		return failedRepeat(fmt.Errorf("mqpeer %s: %w; stderr: %s", peer, runErr, strings.TrimSpace(stderr.String()))), nil
	}
	if out.Error != "" {
		return failedRepeat(fmt.Errorf("mqpeer %s: %s", peer, out.Error)), &out
	}
	rep := repeatOf(out.Result, nil)
	if rep.Status != runfile.StatusFailed && runErr != nil {
		rep.Status, rep.Reason = runfile.StatusFailed, fmt.Sprintf("mqpeer %s: %v: %s", peer, runErr, strings.TrimSpace(stderr.String()))
	}
	return rep, &out
}
