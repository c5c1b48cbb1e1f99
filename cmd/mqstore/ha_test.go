//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/internal/testenv"
)

var haKillTrials = flag.Int("ha.kill.trials", 2, "SIGKILL trials of a SYNC_MASTER producer in TestKillSyncMasterLosesNoAck (backend pairs in turn)")

// process is an mqstore child process whose stderr is collected line by
// line (and whose stdout, when piped, the test reads).
type process struct {
	cmd    *exec.Cmd
	stdout io.ReadCloser
	mu     sync.Mutex
	lines  []string
	grew   chan struct{} // closed and replaced on each stderr line
	done   chan struct{}
	err    error
}

// startProcess starts this test binary as mqstore with args; it is killed
// (by its PID) when the test ends if still running.
func startProcess(t testing.TB, pipeStdout bool, args ...string) *process {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "MQSTORE_AS_CLI=1")
	p := &process{cmd: cmd, grew: make(chan struct{}), done: make(chan struct{})}
	if pipeStdout {
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		p.stdout = out
	}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(errPipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.grew)
			p.grew = make(chan struct{})
			p.mu.Unlock()
		}
		if p.stdout != nil {
			io.Copy(io.Discard, p.stdout) // let Wait close the pipes
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *process) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitLine waits until a stderr line matches re and returns its submatches.
func (p *process) waitLine(t testing.TB, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for i := 0; ; {
		p.mu.Lock()
		for ; i < len(p.lines); i++ {
			if m := re.FindStringSubmatch(p.lines[i]); m != nil {
				p.mu.Unlock()
				return m
			}
		}
		grew := p.grew
		p.mu.Unlock()
		select {
		case <-grew:
		case <-p.done:
			p.mu.Lock()
			n := len(p.lines)
			p.mu.Unlock()
			if i == n {
				t.Fatalf("%v ended (%v) before logging %q:\n%s", p.cmd.Args[1:], p.err, re, p.stderr())
			}
		case <-deadline:
			t.Fatalf("%v did not log %q in 30 s:\n%s", p.cmd.Args[1:], re, p.stderr())
		}
	}
}

// stop sends sig and waits; it returns the exit code.
func (p *process) stop(t testing.TB, sig syscall.Signal) int {
	t.Helper()
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%v did not end after %v:\n%s", p.cmd.Args[1:], sig, p.stderr())
	}
	return p.cmd.ProcessState.ExitCode()
}

// wait waits for the process to end by itself and returns its exit code.
func (p *process) wait(t testing.TB) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("%v did not end:\n%s", p.cmd.Args[1:], p.stderr())
	}
	return p.cmd.ProcessState.ExitCode()
}

var listeningRE = regexp.MustCompile(`ha master listening on (\S+)`)

// diskBackends are the registered backends that keep files (a slave and a
// master in other processes need them).
func diskBackends() []string {
	var out []string
	for _, b := range engine.Backends() {
		if !b.Volatile {
			out = append(out, b.Name)
		}
	}
	return out
}

// segmentedLog is a store's CommitLog segment files by start offset.
type segmentedLog struct {
	size  int64
	files map[int64][]byte
}

// commitLogFrom reads a store's CommitLog segments (retention may have
// deleted the first ones: each is placed by its name).
func commitLogFrom(t testing.TB, dir string) segmentedLog {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "commitlog", "[0-9]*"))
	if err != nil {
		t.Fatal(err)
	}
	l := segmentedLog{files: map[int64][]byte{}}
	for _, n := range names {
		base := filepath.Base(n)
		if strings.Contains(base, ".") {
			continue // a pooled segment, a temporary file
		}
		var from int64
		if _, err := fmt.Sscanf(base, "%d", &from); err != nil {
			t.Fatalf("segment name %s: %v", n, err)
		}
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		l.files[from], l.size = b, int64(len(b))
	}
	return l
}

// slice returns the log's bytes [from, to), which its segments must hold.
func (l segmentedLog) slice(t testing.TB, from, to int64) []byte {
	t.Helper()
	var out []byte
	for at := from; at < to; {
		seg := at - at%l.size
		b, ok := l.files[seg]
		if !ok {
			t.Fatalf("no segment holds offset %d", at)
		}
		n := min(to, seg+l.size) - at
		out = append(out, b[at-seg:at-seg+n]...)
		at += n
	}
	return out
}

// commitLogBytes concatenates a store's CommitLog segment files.
func commitLogBytes(t testing.TB, dir string) []byte {
	t.Helper()
	l := commitLogFrom(t, dir)
	var out []byte
	for _, from := range slices.Sorted(maps.Keys(l.files)) {
		out = append(out, l.files[from]...)
	}
	return out
}

var verifiedRE = regexp.MustCompile(`CommitLog \[(\d+), (\d+)\); .* 0 problems`)

// verifyStore runs mqstore verify and returns the CommitLog's [start, end).
func verifyStore(t testing.TB, dir string) (int64, int64) {
	t.Helper()
	out, errOut, code := runCLI(t, "verify", "--dir", dir)
	m := verifiedRE.FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("verify %s: exit %d:\n%s%s", dir, code, out, errOut)
	}
	start, _ := strconv.ParseInt(m[1], 10, 64)
	end, _ := strconv.ParseInt(m[2], 10, 64)
	return start, end
}

// consumeAll reads every queue of topic in dir through mqstore consume.
func consumeAll(t testing.TB, dir, topic string, queues int) map[[2]int64]recordLine {
	t.Helper()
	got := map[[2]int64]recordLine{}
	for q := 0; q < queues; q++ {
		out, errOut, code := runCLI(t, "consume", "--dir", dir, "--topic", topic, "--queue", fmt.Sprint(q))
		if code != 0 {
			t.Fatalf("consume %s queue %d: %s", dir, q, errOut)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line == "" {
				continue
			}
			var l recordLine
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("consume output %q: %v", line, err)
			}
			got[[2]int64{int64(q), l.QueueOffset}] = l
		}
	}
	return got
}

// readAcks reads produce's ack lines until n are read or the stream ends;
// lines with a status are stored-but-not-acknowledged, counted apart.
func readAcks(sc *bufio.Scanner, n int, acks *[]ack, notAcked *[]ack) {
	for len(*acks) < n && sc.Scan() {
		var a ack
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			continue // a line cut by a kill
		}
		if a.Status != "" {
			*notAcked = append(*notAcked, a)
			continue
		}
		*acks = append(*acks, a)
	}
}

// checkAcksOn checks that every ack is in dir with its body, by mqstore
// consume.
func checkAcksOn(t testing.TB, dir string, acks []ack, size, queues int) {
	t.Helper()
	got := consumeAll(t, dir, "HA", queues)
	for _, a := range acks {
		l, ok := got[[2]int64{int64(a.QueueID), a.QueueOffset}]
		switch {
		case !ok:
			t.Fatalf("acknowledged message %d (queue %d offset %d at %d) is not on %s", a.I, a.QueueID, a.QueueOffset, a.PhysicalOffset, dir)
		case l.PhysicalOffset != a.PhysicalOffset || l.UniqKey != a.UniqKey || l.BodyCRC != record.BodyCRC(Body(a.I, size)):
			t.Fatalf("acknowledged message %d reads back wrong on %s: %+v", a.I, dir, l)
		}
	}
}

// TestKillSyncMasterLosesNoAck is the replication acceptance run, as a test:
// a slave process, then a SYNC_MASTER producer process (async flush) that
// waits for it and prints an ack per message; the producer is killed with
// SIGKILL at a random moment and the slave stopped. Every printed ack must
// be on the slave (mqstore consume, body CRC), the slave must verify, and
// its CommitLog must equal the master's byte for byte up to its end.
// Backend pairs rotate over the trials (every pair in len(backends)²
// trials; the default two are mmap→mmap and transient→transient).
//
//	go test ./cmd/mqstore -run KillSyncMasterLosesNoAck -ha.kill.trials 200
func TestKillSyncMasterLosesNoAck(t *testing.T) {
	backends := diskBackends()
	violations := 0
	pairs := len(backends) * len(backends)
	step := 1 // a step coprime with the pair count visits every pair, the same-backend ones first
	for s := len(backends) + 1; s < pairs; s++ {
		if gcd(s, pairs) == 1 {
			step = s
			break
		}
	}
	for trial := 0; trial < *haKillTrials; trial++ {
		pair := trial * step % pairs
		mb, sb := backends[pair/len(backends)], backends[pair%len(backends)]
		ok := t.Run(fmt.Sprintf("%d:%s->%s", trial, mb, sb), func(t *testing.T) {
			killSyncMasterTrial(t, mb, sb, uint64(trial+1))
		})
		if !ok {
			violations++
		}
	}
	t.Logf("%d SIGKILL trials of a SYNC_MASTER producer, %d with a lost or wrong acknowledged message", *haKillTrials, violations)
}

// killSyncMaster runs a SYNC_MASTER producer (mqstore produce with
// produceArgs, printing its acks, async flush, waiting for one slave) and a
// slave of it (mqstore slave with slaveArgs), kills the producer with
// SIGKILL at a random moment after its killAfter-th ack, reads the acks it
// printed before it died — all acknowledged: the slave was there — and
// stops the slave. The processes are returned for their stderr.
func killSyncMaster(t *testing.T, rng *rand.Rand, killAfter int, produceArgs, slaveArgs []string) ([]ack, *process, *process) {
	t.Helper()
	producer := startProcess(t, true, append(append([]string{"produce"}, produceArgs...), "--count", "100000000", "--keys",
		"--role", "sync-master", "--ha-listen", "127.0.0.1:0", "--wait-slaves", "1", "--flush", "async", "--print-acks")...)
	addr := producer.waitLine(t, listeningRE)[1]
	slave := startProcess(t, false, append(append([]string{"slave"}, slaveArgs...), "--master", addr)...)
	var acks, notAcked []ack
	sc := bufio.NewScanner(producer.stdout)
	readAcks(sc, killAfter, &acks, &notAcked)
	if len(acks) < killAfter {
		if strings.Contains(producer.stderr()+slave.stderr(), "unsupported on this system") {
			testenv.Skip(t, testenv.Uring, "%s", producer.stderr()+slave.stderr())
		}
		t.Fatalf("the producer ended after %d acks, before the kill:\n%s\nslave:\n%s", len(acks), producer.stderr(), slave.stderr())
	}
	// Kill at a random moment after this ack; the producer goes on meanwhile.
	time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
	producer.cmd.Process.Signal(syscall.SIGKILL)
	readAcks(sc, 1<<30, &acks, &notAcked)
	<-producer.done
	if len(notAcked) > 0 {
		t.Fatalf("with the slave connected, %d messages were not acknowledged, first %+v", len(notAcked), notAcked[0])
	}
	if code := slave.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("the slave exited %d:\n%s", code, slave.stderr())
	}
	return acks, producer, slave
}

// restartPair serves a master again (mqstore serve --role async-master
// with masterArgs) and its slave (mqstore slave with slaveArgs), waits
// until the slave has followed it to masterEnd — without finding the logs
// diverged — and stops both.
func restartPair(t *testing.T, masterArgs, slaveArgs []string, masterEnd int64) {
	t.Helper()
	server := startProcess(t, false, append(append([]string{"serve"}, masterArgs...), "--role", "async-master", "--ha-listen", "127.0.0.1:0",
		"--status-interval", "0")...)
	addr := server.waitLine(t, listeningRE)[1]
	slave := startProcess(t, false, append(append([]string{"slave"}, slaveArgs...), "--master", addr, "--status-interval", "50ms")...)
	slave.waitLine(t, regexp.MustCompile(fmt.Sprintf(`msg=replication .* connected=true offset=%d `, masterEnd)))
	if code := slave.stop(t, syscall.SIGTERM); code != 0 || strings.Contains(slave.stderr(), "diverged") {
		t.Fatalf("the slave after the restart: exit %d:\n%s", code, slave.stderr())
	}
	server.stop(t, syscall.SIGTERM)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func killSyncMasterTrial(t *testing.T, masterBackend, slaveBackend string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 16))
	base := t.TempDir()
	m, s := filepath.Join(base, "M"), filepath.Join(base, "S")
	size := 1 + rng.IntN(2000)
	killAfter := 1 + rng.IntN(400)
	const queues = 3
	acks, _, _ := killSyncMaster(t, rng, killAfter,
		[]string{"--dir", m, "--topic", "HA", "--queues", fmt.Sprint(queues), "--size", fmt.Sprint(size), "--backend", masterBackend, "--segment-size", "262144"},
		[]string{"--dir", s, "--backend", slaveBackend, "--segment-size", "262144", "--status-interval", "0"})
	start, end := verifyStore(t, s)
	checkAcksOn(t, s, acks, size, queues)
	mb, sb := commitLogBytes(t, m), commitLogBytes(t, s)
	if int64(len(mb)) < end || int64(len(sb)) < end || !bytes.Equal(mb[start:end], sb[start:end]) {
		t.Fatalf("the slave's CommitLog [%d,%d) differs from the master's (%d and %d bytes of files)", start, end, len(mb), len(sb))
	}
	// Both come back: the restarted master has everything it sent (it
	// sends only what a process crash keeps), so the slave verifies its
	// newest record against it and follows to the master's end.
	_, masterEnd := verifyStore(t, m)
	if masterEnd < end {
		t.Fatalf("the master recovered up to %d after the kill; the slave holds up to %d", masterEnd, end)
	}
	restartPair(t, []string{"--dir", m, "--backend", masterBackend}, []string{"--dir", s, "--backend", slaveBackend}, masterEnd)
	if _, e := verifyStore(t, s); e != masterEnd || !bytes.Equal(commitLogBytes(t, m)[start:e], commitLogBytes(t, s)[start:e]) {
		t.Fatalf("after the restart the slave ends at %d (master %d) or differs", e, masterEnd)
	}
	t.Logf("%d acks (size %d), all on the slave; CommitLogs equal over [%d,%d); resumed to %d after the restart", len(acks), size, start, end, masterEnd)
}

var (
	slaveConnectedRE = regexp.MustCompile(`ha slave: connected\b.* end=(\d+) reported=(\d+)`)
)

// TestKillSlave: a SYNC_MASTER producer keeps serving when its slave is
// killed with SIGKILL: it answers FLUSH_SLAVE_TIMEOUT or
// SLAVE_NOT_AVAILABLE, never PUT_OK without a slave acknowledgement — every
// PUT_OK printed before the slave comes back is on the killed slave's disk —
// and the restarted slave resumes from where it was, not from the start.
//
// The slave is a transient (buffered) one — the harder case: it
// acknowledges only what it committed to its files, so a kill -9 loses none
// of it (TestReplicationTrials kills slaves of every disk backend).
func TestKillSlave(t *testing.T) {
	for _, backend := range []string{"transient"} {
		t.Run(backend, func(t *testing.T) { killSlaveTrial(t, backend) })
	}
}

func killSlaveTrial(t *testing.T, backend string) {
	base := t.TempDir()
	m, s := filepath.Join(base, "M"), filepath.Join(base, "S")
	const size, queues = 300, 3
	producer := startProcess(t, true, "produce", "--dir", m, "--topic", "HA", "--queues", fmt.Sprint(queues), "--count", "100000000",
		"--size", fmt.Sprint(size), "--role", "sync-master", "--ha-listen", "127.0.0.1:0", "--wait-slaves", "1", "--keep-going",
		"--slave-timeout", "200ms", "--ha-heartbeat", "200ms", "--ha-housekeeping", "2s", "--print-acks", "--segment-size", "262144")
	addr := producer.waitLine(t, listeningRE)[1]
	slaveArgs := []string{"slave", "--dir", s, "--master", addr, "--segment-size", "262144", "--status-interval", "0",
		"--ha-heartbeat", "200ms", "--ha-housekeeping", "2s", "--backend", backend}
	slave := startProcess(t, false, slaveArgs...)
	var acks, notAcked []ack
	sc := bufio.NewScanner(producer.stdout)
	readAcks(sc, 2000, &acks, &notAcked)
	slave.cmd.Process.Signal(syscall.SIGKILL)
	<-slave.done
	// The master goes on, without acknowledgements.
	for len(notAcked) < 5 && sc.Scan() {
		var a ack
		if json.Unmarshal(sc.Bytes(), &a) != nil {
			continue
		}
		if a.Status == "" {
			acks = append(acks, a)
		} else {
			notAcked = append(notAcked, a)
		}
	}
	if len(notAcked) < 5 {
		t.Fatalf("the producer stopped after the slave was killed:\n%s", producer.stderr())
	}
	for _, a := range notAcked {
		if a.Status != "FLUSH_SLAVE_TIMEOUT" && a.Status != "SLAVE_NOT_AVAILABLE" {
			t.Fatalf("status %q without a slave", a.Status)
		}
	}
	// Every PUT_OK so far is on the killed slave's disk.
	checkAcksOn(t, s, acks, size, queues)
	_, killedEnd := verifyStore(t, s)
	// The slave comes back and resumes from its end.
	slave = startProcess(t, false, slaveArgs...)
	c := slave.waitLine(t, slaveConnectedRE)
	if end, _ := strconv.ParseInt(c[1], 10, 64); end != killedEnd {
		t.Fatalf("the restarted slave resumes at %d; its CommitLog ended at %d", end, killedEnd)
	}
	reported := c[2]
	producer.waitLine(t, regexp.MustCompile(`ha master: slave starts\b.* reported=`+reported+` `))
	okAgain := 0
	for okAgain < 200 && sc.Scan() {
		var a ack
		if json.Unmarshal(sc.Bytes(), &a) == nil && a.Status == "" {
			acks = append(acks, a)
			okAgain++
		}
	}
	if okAgain < 200 {
		t.Fatalf("no PUT_OK after the slave came back:\n%s", producer.stderr())
	}
	if code := producer.stop(t, syscall.SIGINT); code != 1 && code != 0 {
		t.Fatalf("producer exit %d:\n%s", code, producer.stderr())
	}
	if code := slave.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("slave exit %d:\n%s", code, slave.stderr())
	}
	start, end := verifyStore(t, s)
	checkAcksOn(t, s, acks, size, queues)
	mb, sb := commitLogBytes(t, m), commitLogBytes(t, s)
	if !bytes.Equal(mb[start:end], sb[start:end]) {
		t.Fatalf("the slave's CommitLog [%d,%d) differs from the master's", start, end)
	}
	t.Logf("%d PUT_OK, %d not acknowledged while the slave was down (killed at %d bytes)", len(acks), len(notAcked), killedEnd)
}

// TestDivergedSlaveCLI: a slave whose master lost and rewrote a tail is
// refused (exit 1, both offsets and the repair named, nothing changed);
// mqstore repair-slave finds where they part and cuts the slave there,
// keeping the cut bytes; the slave then follows the master byte for byte.
func TestDivergedSlaveCLI(t *testing.T) {
	base := t.TempDir()
	m, s := filepath.Join(base, "M"), filepath.Join(base, "S")
	common := []string{"--segment-size", "262144", "--ha-heartbeat", "200ms", "--ha-housekeeping", "2s"}
	// Replicate 300 messages.
	producer := startProcess(t, true, append([]string{"produce", "--dir", m, "--topic", "HA", "--queues", "2", "--count", "300",
		"--size", "500", "--role", "sync-master", "--ha-listen", "127.0.0.1:0", "--wait-slaves", "1", "--print-acks"}, common...)...)
	addr := producer.waitLine(t, listeningRE)[1]
	slave := startProcess(t, false, append([]string{"slave", "--dir", s, "--master", addr, "--status-interval", "0"}, common...)...)
	var acks, notAcked []ack
	readAcks(bufio.NewScanner(producer.stdout), 300, &acks, &notAcked)
	if code := producer.wait(t); code != 0 || len(acks) != 300 {
		t.Fatalf("produce: exit %d, %d acks:\n%s", code, len(acks), producer.stderr())
	}
	slave.stop(t, syscall.SIGTERM)
	_, slaveEnd := verifyStore(t, s)
	before := commitLogBytes(t, s)

	// The master "loses" its tail from message 200 on, then takes others.
	// repair-slave refuses to cut a store served as a master without
	// --force, and changes nothing.
	cut := acks[200].PhysicalOffset
	masterBefore := commitLogBytes(t, m)
	if out, errOut, code := runCLI(t, "repair-slave", "--dir", m, "--offset", fmt.Sprint(cut)); code != 1 ||
		!strings.Contains(errOut, "last served as SYNC_MASTER") || !strings.Contains(errOut, "--force") {
		t.Fatalf("cutting the master without --force: exit %d: %s %s", code, out, errOut)
	}
	if !bytes.Equal(commitLogBytes(t, m), masterBefore) {
		t.Fatal("a refused repair-slave changed the master's CommitLog")
	}
	if out, errOut, code := runCLI(t, "repair-slave", "--dir", m, "--offset", fmt.Sprint(cut), "--force"); code != 0 {
		t.Fatalf("cut the master: %s %s", out, errOut)
	}
	if _, errOut, code := runCLI(t, "produce", "--dir", m, "--topic", "HA", "--queues", "2", "--count", "300", "--size", "400"); code != 0 {
		t.Fatalf("produce again: %s", errOut)
	}
	_, masterEnd := verifyStore(t, m)
	if masterEnd <= slaveEnd {
		t.Fatalf("the master (%d) should now reach past the slave (%d)", masterEnd, slaveEnd)
	}
	server := startProcess(t, false, append([]string{"serve", "--dir", m, "--role", "async-master", "--ha-listen", "127.0.0.1:0",
		"--status-interval", "0"}, common...)...)
	addr = server.waitLine(t, listeningRE)[1]

	refused := startProcess(t, false, append([]string{"slave", "--dir", s, "--master", addr, "--status-interval", "0"}, common...)...)
	if code := refused.wait(t); code != 1 {
		t.Fatalf("the diverged slave exited %d:\n%s", code, refused.stderr())
	}
	msg := refused.stderr()
	if !strings.Contains(msg, "differs") || !strings.Contains(msg, fmt.Sprint(slaveEnd)) || !strings.Contains(msg, "repair-slave") {
		t.Fatalf("the refusal does not name the offsets and the repair:\n%s", msg)
	}
	if !bytes.Equal(commitLogBytes(t, s), before) {
		t.Fatal("the refused slave's CommitLog changed")
	}
	out, errOut, code := runCLI(t, "repair-slave", "--dir", s, "--master", addr, "--dry-run")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("parts from the master's at %d", cut)) || strings.Contains(out, "--force") {
		t.Fatalf("repair-slave --dry-run: exit %d: %s %s", code, out, errOut)
	}
	// Had it last served as a master, the dry run would say the cut takes
	// --force.
	if err := recordServedRole(s, engine.SyncMaster); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runCLI(t, "repair-slave", "--dir", s, "--master", addr, "--dry-run")
	if code != 0 || !strings.Contains(out, "last served as SYNC_MASTER: the cut takes --force") {
		t.Fatalf("repair-slave --dry-run of a store served as a master: exit %d: %s %s", code, out, errOut)
	}
	if err := recordServedRole(s, engine.Slave); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(commitLogBytes(t, s), before) {
		t.Fatal("a dry run changed the slave")
	}
	out, errOut, code = runCLI(t, "repair-slave", "--dir", s, "--master", addr)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("cut the CommitLog at %d", cut)) {
		t.Fatalf("repair-slave: exit %d: %s %s", code, out, errOut)
	}
	saved, _ := filepath.Glob(filepath.Join(s, "diverged", "*"))
	var kept []byte
	for _, f := range saved {
		b, _ := os.ReadFile(f)
		kept = append(kept, b...)
	}
	if !bytes.Equal(kept, before[cut:slaveEnd]) {
		t.Fatalf("the cut bytes kept (%d) are not the slave's [%d,%d)", len(kept), cut, slaveEnd)
	}
	// Replicating again, up to the master's end.
	slave = startProcess(t, false, append([]string{"slave", "--dir", s, "--master", addr, "--status-interval", "100ms"}, common...)...)
	slave.waitLine(t, regexp.MustCompile(fmt.Sprintf(`msg=replication .* offset=%d `, masterEnd)))
	if code := slave.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("slave exit %d:\n%s", code, slave.stderr())
	}
	if code := server.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("serve exit %d:\n%s", code, server.stderr())
	}
	start, end := verifyStore(t, s)
	if end != masterEnd {
		t.Fatalf("the slave ends at %d, the master at %d", end, masterEnd)
	}
	mb, sb := commitLogBytes(t, m), commitLogBytes(t, s)
	if !bytes.Equal(mb[start:end], sb[start:end]) {
		t.Fatalf("the repaired slave's CommitLog differs from the master's")
	}
}

// TestReplicationFlags: bad replication flags print the usage and exit 2,
// before any store is touched.
func TestReplicationFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "never")
	for _, args := range [][]string{
		{"serve", "--dir", dir},
		{"serve", "--dir", dir, "--role", "leader"},
		{"serve", "--dir", dir, "--role", "slave"},
		{"serve", "--dir", dir, "--role", "slave", "--master", "127.0.0.1:1", "--ha-listen", ":0"},
		{"serve", "--dir", dir, "--role", "sync-master", "--master", "127.0.0.1:1"},
		{"serve", "--dir", dir, "--role", "sync-master", "--ha-batch", "-1"},
		{"serve", "--dir", dir, "--role", "sync-master", "--ha-heartbeat", "30s"},
		{"serve", "--dir", dir, "--role", "async-master", "--empty-slave-start", "yesterday"},
		{"slave", "--dir", dir},
		{"slave", "--dir", dir, "--master", "no-port"},
		{"produce", "--dir", dir, "--topic", "T", "--role", "sync-master"},
		{"produce", "--dir", dir, "--topic", "T", "--role", "slave", "--ha-listen", ":0"},
		{"produce", "--dir", dir, "--topic", "T", "--wait-slaves", "1"},
		{"produce", "--dir", dir, "--topic", "T", "--ha-listen", "nowhere"},
		{"repair-slave", "--dir", dir},
		{"repair-slave", "--dir", dir, "--master", "a:1", "--offset", "0"},
		{"repair-slave", "--dir", dir, "--offset", "0", "--dry-run"},
		{"serve", "--dir", dir, "--role", "sync-master", "--ha-listen", "0.0.0.0:0"},
		{"produce", "--dir", dir, "--topic", "T", "--ha-listen", ":0"},
		{"serve", "--dir", dir, "--role", "sync-master", "--tls-cert", "c.pem"},
		{"slave", "--dir", dir, "--master", "127.0.0.1:1", "--tls-ca", filepath.Join(dir, "none.pem"), "--tls-cert", "a", "--tls-key", "b"},
		{"slave", "--dir", dir, "--master", "127.0.0.1:1", "--ha-secret-file", filepath.Join(dir, "none")},
		{"repair-slave", "--dir", dir, "--master", "127.0.0.1:1", "--ha-secret-file", filepath.Join(dir, "none")},
		{"gen-certs"},
		{"serve", "--dir", dir, "--role", "async-master", "--min-in-sync-replicas", "1"},
		{"slave", "--dir", dir, "--master", "127.0.0.1:1", "--min-in-sync-replicas", "1"},
		{"produce", "--dir", dir, "--topic", "T", "--role", "sync-master", "--ha-listen", "127.0.0.1:0", "--min-in-sync-replicas", "-1"},
		{"gen-certs", "--valid-for", "-1h", dir},
	} {
		_, stderr, code := runCLI(t, args...)
		if code != 2 || !strings.Contains(stderr, "usage") {
			t.Errorf("mqstore %v: exit %d, stderr %q; want 2 and the usage", args, code, stderr)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a refused command created %s", dir)
	}
}
