package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench/load"
)

// peerOutput mirrors peers.Output (the mqpeer protocol: one JSON object on
// stdout). It is declared again here because the store's module must not
// depend on the peers' module.
type peerOutput struct {
	Peer      string            `json:"peer"`
	Flush     string            `json:"flush"`
	Params    map[string]string `json:"params,omitempty"`
	Result    load.Result       `json:"result"`
	GoVersion string            `json:"goVersion"`
	Error     string            `json:"error,omitempty"`
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

// peerRepeat runs one repeat of spec on peer through the mqpeer command.
func peerRepeat(ctx context.Context, command, dir, peer, flush string, spec load.Spec) (Repeat, map[string]string) {
	defer os.RemoveAll(dir)
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
	var out peerOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		if ctx.Err() != nil {
			return Repeat{Status: StatusInterrupted, Reason: "interrupted"}, nil
		}
		if runErr == nil {
			runErr = fmt.Errorf("unreadable result: %w", err)
		}
		return failedRepeat(fmt.Errorf("mqpeer %s: %w; stderr: %s", peer, runErr, strings.TrimSpace(stderr.String()))), nil
	}
	if out.Error != "" {
		return failedRepeat(fmt.Errorf("mqpeer %s: %s", peer, out.Error)), out.Params
	}
	rep := Repeat{Result: out.Result}
	rep.Figures = figuresOf(&rep.Result)
	rep.Status, rep.Reason = resultStatus(&rep.Result)
	if rep.Status == StatusOK && runErr != nil {
		rep.Status, rep.Reason = StatusFailed, fmt.Sprintf("mqpeer %s: %v: %s", peer, runErr, strings.TrimSpace(stderr.String()))
	}
	return rep, out.Params
}
