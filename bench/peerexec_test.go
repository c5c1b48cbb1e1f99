package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/bench/host"
	"github.com/mqstore/mqstore/bench/load"
)

// --peers remoting finds the interop module from inside the repository
// (mqbench's working directory) and says what to do from outside it.
func TestInteropModuleDir(t *testing.T) {
	dir, err := interopModuleDir(".")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err != nil || !strings.Contains(string(b), "module github.com/mqstore/mqstore/interop") {
		t.Fatalf("%s is not the interop module: %v", dir, err)
	}
	if _, err := interopModuleDir(t.TempDir()); err == nil || !strings.Contains(err.Error(), "--peers remoting") {
		t.Fatalf("outside the repository: %v", err)
	}
	if !(peerList{}).has(RemotingPeer) {
		t.Fatal("the remoting peer is not known without mqpeer's list")
	}
}

// A peer repeat runs the store cells' spec: the peer program is asked for
// the same latency time series, so the generator does the same work in
// every system's process.
func TestPeerRepeatAsksForTheSeries(t *testing.T) {
	root := t.TempDir()
	argsFile := filepath.Join(root, "args")
	script := filepath.Join(root, "peer.sh")
	body := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + argsFile + "\necho '{}'\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Config{Warmup: 10 * time.Millisecond}
	for _, workload := range []string{string(load.Throughput), string(load.Latency)} {
		s := spec(c, workload, 1024, 4, 1000, 50*time.Millisecond, 1)
		peerRepeat(context.Background(), script, filepath.Join(root, "d"), "pebble-wal", "sync", s)
		b, err := os.ReadFile(argsFile)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "--series-interval\n"+host.SampleInterval.String()+"\n") {
			t.Fatalf("%s: the peer was run with\n%s\nwithout --series-interval %v", workload, b, host.SampleInterval)
		}
	}
}
