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
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/engine"
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

// argsRecordingPeer writes a peer program into dir that records its
// arguments, one per line, in the file it returns, and prints an empty
// result.
func argsRecordingPeer(t *testing.T, dir string) (script, argsFile string) {
	t.Helper()
	argsFile = filepath.Join(dir, "args")
	script = filepath.Join(dir, "peer.sh")
	body := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + argsFile + "\necho '{}'\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, argsFile
}

// A peer repeat runs the store cells' spec: the peer program is asked for
// the same latency time series, so the generator does the same work in
// every system's process.
func TestPeerRepeatAsksForTheSeries(t *testing.T) {
	root := t.TempDir()
	script, argsFile := argsRecordingPeer(t, root)
	c := &Config{Warmup: 10 * time.Millisecond}
	for _, workload := range []string{string(load.Throughput), string(load.Latency)} {
		s := spec(c, workload, 1024, 4, 1000, 50*time.Millisecond, 1)
		peerRepeat(context.Background(), script, filepath.Join(root, "d"), "pebble-wal", "sync", s, StoreConfig{})
		b, err := os.ReadFile(argsFile)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "--series-interval\n"+host.SampleInterval.String()+"\n") {
			t.Fatalf("%s: the peer was run with\n%s\nwithout --series-interval %v", workload, b, host.SampleInterval)
		}
	}
}

// With --recycle-segments N the peer repeats, run as runJob runs them from
// the run's store options, pass pebble-wal --recycle-wal N × the segment
// size (the bytes mqstore's aging retires before a window) in both flush
// modes, and no other peer the flag; without recycling no peer gets it.
func TestPeerRepeatRecyclesPebbleWALOnly(t *testing.T) {
	root := t.TempDir()
	script, argsFile := argsRecordingPeer(t, root)
	for _, n := range []int{0, 3} {
		cfg := Config{Warmup: 10 * time.Millisecond, Peers: []string{"pebble-wal", "pebble", "nats", "nats-inproc"},
			Sizes: []int{1024}, Flushes: []string{"sync", "async"},
			Store: StoreConfig{SegmentSizeBytes: 64 << 20, RecycleSegments: n}}
		r := &runner{cfg: cfg, peerCmd: script}
		ph := &phaseEnv{t: &target{work: root}}
		ran := 0
		for _, sys := range systems(&r.cfg, PressureNone) {
			if !sys.peer {
				continue
			}
			ran++
			if err := os.Remove(argsFile); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			c := &runfile.Cell{Name: "throughput-" + sys.backend + "-" + sys.pol.Flush, WindowNs: int64(50 * time.Millisecond)}
			r.runJob(ph, sys, "throughput", 4, 0)(context.Background(), c, 0, 1)
			b, err := os.ReadFile(argsFile)
			if err != nil {
				t.Fatalf("%s: the peer did not run: %v", c.Name, err)
			}
			args := string(b)
			switch want := n > 0 && sys.backend == "pebble-wal"; {
			case want && !strings.Contains(args, "--recycle-wal\n201326592\n"):
				t.Errorf("--recycle-segments %d, %s: the peer was run with\n%s\nwithout --recycle-wal 201326592 (3 × 64 MiB)", n, c.Name, args)
			case !want && strings.Contains(args, "--recycle-wal"):
				t.Errorf("--recycle-segments %d, %s: the peer was run with\n%s\nwith --recycle-wal", n, c.Name, args)
			}
		}
		if ran != 8 {
			t.Fatalf("%d peer systems, want 4 peers × 2 flush modes", ran)
		}
	}
}

// TestPeerSyncsAsOftenAsTheStoreFlushes: an async peer is asked to sync at
// the run's flush interval (the engine's default when the run sets none),
// not at a default of its own.
func TestPeerSyncsAsOftenAsTheStoreFlushes(t *testing.T) {
	root := t.TempDir()
	script, argsFile := argsRecordingPeer(t, root)
	c := &Config{Warmup: 10 * time.Millisecond}
	s := spec(c, string(load.Throughput), 1024, 4, 0, 50*time.Millisecond, 1)
	for _, tc := range []struct {
		store StoreConfig
		want  time.Duration
	}{{StoreConfig{}, engine.DefaultFlushInterval}, {StoreConfig{FlushInterval: 100 * time.Millisecond}, 100 * time.Millisecond}} {
		peerRepeat(context.Background(), script, filepath.Join(root, "d"), "nats", "async", s, tc.store)
		b, err := os.ReadFile(argsFile)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "--sync-interval\n"+tc.want.String()+"\n") {
			t.Errorf("flush interval %v: the peer was run with\n%s\nwithout --sync-interval %v", tc.store.FlushInterval, b, tc.want)
		}
	}
}
