package interop

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
)

// The remoting peer (mqbench --peers remoting) for a very short cell of
// each workload: one JSON load.PeerOutput on stdout that counts the sends
// and the consumer's deliveries and says what ran; bad flags exit 2.
func TestRemotingPeerProgram(t *testing.T) {
	peer := build(t, "github.com/mqstore/mqstore/interop/cmd/mqpeer-remoting")
	// The broker, built in the main module (as mqbench builds it).
	mqstore := filepath.Join(t.TempDir(), "mqstore")
	cmd := exec.Command("go", "build", "-o", mqstore, "./cmd/mqstore")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build mqstore: %v\n%s", err, out)
	}
	run := func(args ...string) (load.PeerOutput, int, string) {
		t.Helper()
		cmd := exec.Command(peer, append([]string{"--mqstore", mqstore}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		var out load.PeerOutput
		if code != 2 {
			if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
				t.Fatalf("stdout is not one PeerOutput: %v\n%s\nstderr: %s", err, stdout.Bytes(), stderr.Bytes())
			}
		}
		return out, code, stderr.String()
	}
	run0 := &runfile.RunFile{Schema: runfile.SchemaVersion}
	for _, tc := range []struct {
		flush string
		args  []string
	}{
		{"async", []string{"--workload", "throughput", "--producers", "2"}},
		{"sync", []string{"--workload", "latency", "--rate", "200", "--inflight", "4"}},
	} {
		args := append([]string{"--peer", "remoting", "--dir", filepath.Join(t.TempDir(), "store"), "--flush", tc.flush,
			"--size", "64", "--duration", "500ms", "--warmup", "200ms", "--segment-size", "4194304"}, tc.args...)
		out, code, stderr := run(args...)
		r := out.Result
		if code != 0 || out.Error != "" {
			t.Fatalf("%s: exit %d, error %q\nstderr: %s", tc.flush, code, out.Error, stderr)
		}
		if r.Messages <= 0 || r.Service == nil || r.Service.Count() < r.Messages {
			t.Fatalf("%s: %d messages, service histogram %v", tc.flush, r.Messages, r.Service)
		}
		if r.Delivered <= 0 || r.Delivery == nil || r.Delivery.Count() != r.Delivered {
			t.Fatalf("%s: %d delivered, delivery histogram of %d", tc.flush, r.Delivered, r.Delivery.Count())
		}
		if out.Peer != "remoting" || out.Flush != tc.flush || !strings.Contains(out.Label, "rocketmq-client-go v") ||
			!strings.Contains(out.Label, tc.flush+" flush") || out.Version == "" || out.Durability == nil || out.Options["queues"] == "" ||
			!strings.Contains(out.Options["cpu"], "the broker's") || r.CPUUserNs+r.CPUSysNs <= 0 {
			t.Fatalf("%s: the output does not say what ran: %+v", tc.flush, out)
		}
		t.Logf("%s %s: %d sent, %d delivered in the window, delivery p50 %v", tc.flush, r.Workload, r.Messages, r.Delivered,
			r.Delivery.Percentiles().P50Ns)
		run0.Peers = append(run0.Peers, runfile.Cell{Name: "remoting-" + tc.flush, Workload: string(r.Workload), Backend: "remoting",
			Peer: true, Flush: tc.flush, SizeBytes: 64, Status: runfile.StatusOK,
			Repeats: []runfile.Repeat{{Status: runfile.StatusOK, Result: r}}})
	}
	// --summarize reads the cells back from a run file, deliveries included.
	resultsDir := t.TempDir()
	if err := runfile.Write(resultsDir, run0); err != nil {
		t.Fatal(err)
	}
	sum := exec.Command(peer, "--summarize", resultsDir)
	text, err := sum.CombinedOutput()
	if err != nil {
		t.Fatalf("--summarize: %v\n%s", err, text)
	}
	for _, name := range []string{"remoting-async", "remoting-sync"} {
		line := ""
		for _, l := range strings.Split(string(text), "\n") {
			if strings.Contains(l, name) {
				line = l
			}
		}
		if f := strings.Fields(line); len(f) != 11 || f[8] == "-" || f[9] == "-" {
			t.Fatalf("--summarize has no e2e figures for %s:\n%s", name, text)
		}
	}
	t.Logf("--summarize:\n%s", text)
	for _, bad := range [][]string{{"--peer", "nats", "--dir", t.TempDir()}, {"--dir", t.TempDir(), "--size", "4"}, {"--flush", "never", "--dir", t.TempDir()}, {}} {
		if _, code, _ := run(bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}
