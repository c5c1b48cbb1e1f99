package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// RemotingPeer is the --peers name of the remoting cell: RocketMQ's Go
// client (rocketmq-client-go producers and a push consumer) against
// `mqstore serve` on loopback, what the protocol costs on top of the store.
// It runs interop/cmd/mqpeer-remoting, built from the interop module (the
// one that requires the client), with an mqstore binary next to it (its
// broker); it speaks mqpeer's protocol.
const RemotingPeer = "remoting"

type remotingBuild struct {
	once sync.Once
	bin  string
	err  error
}

var remotingBuilds sync.Map // build directory → *remotingBuild

// remotingPeerCommand builds mqpeer-remoting and mqstore into
// workDir/remoting-peer once per run and returns the peer program.
func remotingPeerCommand(ctx context.Context, workDir string) (string, error) {
	dir, err := filepath.Abs(filepath.Join(workDir, "remoting-peer"))
	if err != nil {
		return "", err
	}
	v, _ := remotingBuilds.LoadOrStore(dir, &remotingBuild{})
	b := v.(*remotingBuild)
	b.once.Do(func() { b.bin, b.err = buildRemotingPeer(ctx, dir) })
	return b.bin, b.err
}

func buildRemotingPeer(ctx context.Context, dir string) (string, error) {
	interop, err := interopModuleDir(".")
	if err != nil {
		return "", err
	}
	for _, b := range []struct{ moduleDir, out, pkg string }{
		{interop, "mqpeer-remoting", "./cmd/mqpeer-remoting"},
		{filepath.Dir(interop), "mqstore", "./cmd/mqstore"}, // the broker, from the main module
	} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Dir = b.moduleDir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("build %s in %s (the remoting peer): %w: %s", b.pkg, b.moduleDir, err, strings.TrimSpace(stderr.String()))
		}
	}
	return filepath.Join(dir, "mqpeer-remoting"), nil
}

// interopModuleDir finds the interop module above dir (the repository root
// or any directory inside it).
func interopModuleDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		candidate := filepath.Join(d, "interop")
		if b, err := os.ReadFile(filepath.Join(candidate, "go.mod")); err == nil &&
			strings.Contains(string(b), "module github.com/mqstore/mqstore/interop") {
			return candidate, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("the interop module is not above %s: run mqbench from the repository for --peers %s", abs, RemotingPeer)
		}
	}
}
