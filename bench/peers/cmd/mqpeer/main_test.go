package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/record"
	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/peers"
	"github.com/mqstore/mqstore/bench/peers/internal/gomod"
)

// mqpeer is the command built from this package by TestMain: a real build,
// whose build info carries the dependencies' versions (a test binary's does
// not).
var mqpeer string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "mqpeer-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	mqpeer = filepath.Join(dir, "mqpeer")
	args := []string{"build", "-o", mqpeer}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build mqpeer: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// requiredVersions reads the versions the peers module's go.mod requires.
func requiredVersions(t *testing.T) map[string]string {
	t.Helper()
	versions, err := gomod.Required("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	return versions
}

func peerModule(name string) string {
	if strings.HasPrefix(name, "nats") {
		return "github.com/nats-io/nats-server/v2"
	}
	return "github.com/cockroachdb/pebble/v2"
}

func runMQPeer(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(mqpeer, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run mqpeer: %v", err)
	}
	return out.String(), errOut.String(), code
}

// TestList: --list prints every peer with a label carrying the version
// go.mod requires.
func TestList(t *testing.T) {
	stdout, stderr, code := runMQPeer(t, "--list")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var list []map[string]string
	if err := json.Unmarshal([]byte(stdout), &list); err != nil {
		t.Fatalf("--list printed %q: %v", stdout, err)
	}
	req := requiredVersions(t)
	if len(list) != len(peers.Names()) {
		t.Fatalf("--list: %d peers, want %d: %s", len(list), len(peers.Names()), stdout)
	}
	for i, name := range peers.Names() {
		if list[i]["name"] != name || !strings.Contains(list[i]["label"], req[peerModule(name)]) || len(list[i]) != 2 {
			t.Fatalf("--list entry %d: %v, want name %s and a label with version %s", i, list[i], name, req[peerModule(name)])
		}
	}
}

// TestBadPeerOrFlush: an unknown peer or flush mode exits 2 naming what is
// valid, and prints no result.
func TestBadPeerOrFlush(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--peer", "UNKNOWN", "--dir", t.TempDir()}, strings.Join(peers.Names(), ", ")},
		{[]string{"--peer", "pebble", "--dir", t.TempDir(), "--flush", "fsync"}, "want async or sync"},
		{[]string{"--peer", "nats"}, "--peer and --dir are required"},
		{[]string{"--peer", "pebble-wal", "--dir", t.TempDir(), "--series-interval", "-1s"}, "series interval -1s is negative"},
		{[]string{"--peer", "pebble-wal", "--dir", t.TempDir(), "--recycle-wal", "-1"}, "--recycle-wal -1: want ≥ 0 bytes"},
		{[]string{"--peer", "pebble-wal", "--dir", t.TempDir(), "--recycle-wal", "1MiB"}, `invalid value "1MiB" for flag -recycle-wal`},
		{[]string{"--peer", "pebble", "--dir", t.TempDir(), "--recycle-wal", "1048576"}, "pebble takes none, only pebble-wal runs on a recycled WAL file"},
		{[]string{"--peer", "nats", "--dir", t.TempDir(), "--recycle-wal", "1048576"}, "nats takes none, only pebble-wal runs on a recycled WAL file"},
		{[]string{"--peer", "no-op", "--dir", t.TempDir(), "--recycle-wal", "1048576"}, "the no-op peer writes no log"},
	}
	for _, c := range cases {
		stdout, stderr, code := runMQPeer(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) || stdout != "" {
			t.Fatalf("mqpeer %v: exit %d, stderr %q, stdout %q; want exit 2 and %q", c.args, code, stderr, stdout, c.want)
		}
	}
}

// TestOutput: a short run of every peer and flush mode prints one JSON
// object with the label, the version go.mod requires, the options (and
// params, the same map), the four durability statements and a result,
// with the latency time series mqbench asks for (--series-interval).
func TestOutput(t *testing.T) {
	req := requiredVersions(t)
	for _, name := range peers.Names() {
		for _, flush := range []string{"sync", "async"} {
			t.Run(name+"/"+flush, func(t *testing.T) {
				stdout, stderr, code := runMQPeer(t, "--peer", name, "--dir", t.TempDir(), "--flush", flush,
					"--producers", "4", "--duration", "200ms", "--warmup", "0s", "--series-interval", "50ms")
				if code != 0 {
					t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
				}
				var out peers.Output
				dec := json.NewDecoder(strings.NewReader(stdout))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&out); err != nil {
					t.Fatalf("output %q: %v", stdout, err)
				}
				want := req[peerModule(name)]
				d := out.Durability
				switch {
				case out.Peer != name || out.Flush != flush:
					t.Fatalf("peer %q flush %q", out.Peer, out.Flush)
				case out.Version != want || !strings.Contains(out.Label, want):
					t.Fatalf("version %q, label %q; go.mod requires %s", out.Version, out.Label, want)
				case len(out.Options) == 0:
					t.Fatalf("options %v", out.Options)
				case d == nil || d.Ack == "" || d.ProcessCrash == "" || d.PowerLoss == "" || d.Mechanism == "":
					t.Fatalf("durability %+v", d)
				case out.Result.Messages == 0 || out.Result.Error != "" || out.Error != "":
					t.Fatalf("result: %d messages, error %q %q", out.Result.Messages, out.Result.Error, out.Error)
				}
				var inSeries int64
				for _, p := range out.Result.Series {
					inSeries += p.Count
					if p.IntervalNs != int64(50*time.Millisecond) {
						t.Fatalf("series point %+v: want 50ms intervals", p)
					}
				}
				if len(out.Result.Series) < 2 || inSeries != out.Result.Messages {
					t.Fatalf("series of %d points holds %d requests, the window %d", len(out.Result.Series), inSeries, out.Result.Messages)
				}
			})
		}
	}
}

// TestRecycledWAL: --recycle-wal runs pebble-wal's window on a recycled
// WAL file and says so. The window's log is the obsolete log's file renamed
// (000001.log is gone, 000002.log holds at least the aged bytes) and
// written over from its start: read back with pebble's reader as log 2
// (the new log number in every chunk), it holds at least the acknowledged
// records, each a producer's body, up to the EOF trailer, and past the new
// log's end the old log's records are still there as log 1. The open-loop
// rate keeps the window well below the aged bytes.
func TestRecycledWAL(t *testing.T) {
	const aged, size, workers = 2 << 20, 1024, 4
	dir := t.TempDir()
	stdout, stderr, code := runMQPeer(t, "--peer", "pebble-wal", "--dir", dir, "--flush", "sync", "--recycle-wal", strconv.Itoa(aged),
		"--workload", "latency", "--rate", "1000", "--inflight", strconv.Itoa(workers), "--size", strconv.Itoa(size),
		"--duration", "200ms", "--warmup", "0s")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	var out peers.Output
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("output %q: %v", stdout, err)
	}
	if out.Result.Error != "" || out.Error != "" || out.Result.Messages == 0 {
		t.Fatalf("result: %d messages, error %q %q", out.Result.Messages, out.Result.Error, out.Error)
	}
	if !strings.Contains(out.Label, "on a recycled WAL file (log 2)") || out.Options[load.RecycledLogOption] == "" ||
		!strings.Contains(out.Options["file"], "000002.log, a recycled WAL file") || !strings.Contains(out.Options["file"], "log number 2") {
		t.Fatalf("label %q, options %v: the recycled WAL is not named", out.Label, out.Options)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "000002.log" {
		t.Fatalf("the peer's directory holds %v, want 000002.log alone (000001.log reused)", entries)
	}
	path := filepath.Join(dir, "000002.log")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() < aged {
		t.Fatalf("%s: %d bytes, fewer than the %d aged", path, fi.Size(), aged)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	records, end := readLog(t, f, 2)
	bodies := map[string]bool{}
	for w := range workers {
		bodies[string(load.Body(w, size))] = true
	}
	for i, rec := range records {
		if !bodies[string(rec)] {
			t.Fatalf("log 2, record %d: %d bytes, not a producer's body", i, len(rec))
		}
	}
	if int64(len(records)) < out.Result.Messages {
		t.Fatalf("log 2 holds %d records, fewer than the %d acknowledged in the window", len(records), out.Result.Messages)
	}
	// Two blocks past the new log's end (its last block may end in the
	// EOF trailer's), the old log's records.
	const block = 32 << 10
	tailAt := (end/block + 2) * block
	if tailAt >= fi.Size() {
		t.Fatalf("the new log reached offset %d of the %d-byte file: no old tail left to check", end, fi.Size())
	}
	if old, _ := readLog(t, io.NewSectionReader(f, tailAt, fi.Size()-tailAt), 1); len(old) == 0 {
		t.Fatalf("%s from offset %d: no record of the old log 1", path, tailAt)
	}
}

// readLog reads log logNum's records from r with pebble's reader up to its
// end (io.EOF: the EOF trailer or the end of the data) and returns them
// with the offset of the last record's end in r.
func readLog(t *testing.T, r io.Reader, logNum uint64) (records [][]byte, end int64) {
	t.Helper()
	rr := newReader(record.NewReader, r, logNum)
	for {
		next, err := rr.Next()
		if errors.Is(err, io.EOF) {
			return records, end
		}
		if err != nil {
			t.Fatalf("log %d: record %d: %v", logNum, len(records), err)
		}
		rec, err := io.ReadAll(next)
		if err != nil {
			t.Fatalf("log %d: record %d: %v", logNum, len(records), err)
		}
		records = append(records, rec)
		end = rr.Offset()
	}
}

// newReader calls pebble's newReader with logNum as its file-number type
// (an internal pebble type, named only through the function's signature).
func newReader[N ~uint64](newReader func(io.Reader, N) *record.Reader, r io.Reader, logNum uint64) *record.Reader {
	return newReader(r, N(logNum))
}

// TestNoOpFloor: --peer no-op runs the open-loop schedule against an
// operation that does nothing, in this process: the generator's floor
// where the peers run.
func TestNoOpFloor(t *testing.T) {
	stdout, stderr, code := runMQPeer(t, "--peer", "no-op", "--dir", t.TempDir(), "--workload", "latency", "--rate", "1000",
		"--inflight", "4", "--duration", "100ms", "--warmup", "0s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out peers.Output
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatal(err)
	}
	r := out.Result
	if out.Peer != "no-op" || r.Error != "" || r.Arrivals == 0 || r.Messages == 0 || r.Latency == nil || r.Latency.Count() == 0 || r.Durability != nil {
		t.Fatalf("no-op floor: %+v", out)
	}
}
