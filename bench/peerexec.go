package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
)

// peerInfo is what a peer said about itself.
type peerInfo struct {
	label, version string
	options        map[string]string
	durability     *runfile.Durability
}

func (p peerInfo) apply(c *runfile.Cell) {
	if p.label != "" {
		c.Label = p.label
	}
	if p.version != "" {
		c.Version = p.version
	}
	if p.options != nil {
		c.Options = p.options
	}
	if p.durability != nil {
		c.Durability = p.durability
	}
}

func peerInfoOf(o *load.PeerOutput) peerInfo {
	p := peerInfo{label: o.Label, version: o.Version, options: o.Options}
	if d := o.Durability; d != nil {
		p.durability = &runfile.Durability{Ack: d.Ack, ProcessCrash: d.ProcessCrash, PowerLoss: d.PowerLoss, Mechanism: d.Mechanism}
	}
	return p
}

// PeersModuleDir finds the bench/peers module above dir (the repository
// root or any directory inside it).
func PeersModuleDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		for _, candidate := range []string{filepath.Join(d, "bench", "peers"), filepath.Join(d, "peers"), d} {
			if b, err := os.ReadFile(filepath.Join(candidate, "go.mod")); err == nil &&
				strings.Contains(string(b), "module github.com/mqstore/mqstore/bench/peers") {
				return candidate, nil
			}
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("the bench/peers module is not above %s: run mqbench from the repository, or pass --peer-cmd", abs)
		}
	}
}

// BuildPeerCommand builds mqpeer from the peers module into dir.
func BuildPeerCommand(ctx context.Context, dir string) (string, error) {
	mod, err := PeersModuleDir(".")
	if err != nil {
		return "", err
	}
	bin, err := filepath.Abs(filepath.Join(dir, "mqpeer"))
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/mqpeer")
	cmd.Dir = mod
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build mqpeer in %s: %w: %s", mod, err, strings.TrimSpace(stderr.String()))
	}
	return bin, nil
}

// peerList is what `mqpeer --list` prints.
type peerList []struct {
	Name  string `json:"name"`
	Label string `json:"label"`
}

func (l peerList) has(name string) bool {
	return name == RemotingPeer || slices.ContainsFunc(l, func(p struct {
		Name  string `json:"name"`
		Label string `json:"label"`
	}) bool {
		return p.Name == name
	})
}

func (l peerList) String() string {
	var names []string
	for _, p := range l {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

// listPeers asks mqpeer which peers it runs (an error when it cannot say:
// an mqpeer without --list).
func listPeers(ctx context.Context, command string) (peerList, error) {
	out, err := exec.CommandContext(ctx, command, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("mqpeer --list: %w", err)
	}
	var l peerList
	if err := json.Unmarshal(out, &l); err != nil {
		return nil, fmt.Errorf("mqpeer --list: %w", err)
	}
	return l, nil
}

// peerRepeat runs one repeat of spec on peer through the mqpeer command.
func peerRepeat(ctx context.Context, command, dir, peer, flush string, spec load.Spec) (runfile.Repeat, peerInfo) {
	defer os.RemoveAll(dir)
	if peer == RemotingPeer {
		var err error
		if command, err = remotingPeerCommand(ctx, filepath.Dir(dir)); err != nil {
			return failedRepeat(err), peerInfo{}
		}
	}
	args := []string{"--peer", peer, "--dir", dir, "--flush", flush, "--workload", string(spec.Workload),
		"--size", strconv.Itoa(spec.SizeBytes), "--producers", strconv.Itoa(spec.Producers),
		"--inflight", strconv.Itoa(spec.InFlight), "--duration", spec.Duration.String(), "--warmup", spec.Warmup.String(),
		"--arrival", string(spec.Arrival), "--seed", strconv.FormatUint(spec.Seed, 10)}
	if spec.RatePerSec > 0 {
		args = append(args, "--rate", strconv.FormatFloat(spec.RatePerSec, 'f', -1, 64))
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
			return runfile.Repeat{Status: runfile.StatusInterrupted, Reason: "interrupted"}, peerInfo{}
		}
		if runErr == nil {
			runErr = fmt.Errorf("unreadable result: %w", err)
		}
		return failedRepeat(fmt.Errorf("mqpeer %s: %w; stderr: %s", peer, runErr, strings.TrimSpace(stderr.String()))), peerInfo{}
	}
	if out.Error != "" {
		return failedRepeat(fmt.Errorf("mqpeer %s: %s", peer, out.Error)), peerInfoOf(&out)
	}
	rep := repeatOf(out.Result, nil)
	if rep.Status != runfile.StatusFailed && runErr != nil {
		rep.Status, rep.Reason = runfile.StatusFailed, fmt.Sprintf("mqpeer %s: %v: %s", peer, runErr, strings.TrimSpace(stderr.String()))
	}
	return rep, peerInfoOf(&out)
}
