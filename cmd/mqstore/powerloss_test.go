//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/crashfs"
	"github.com/mqstore/mqstore/internal/testenv"
)

var (
	fuseTrials   = flag.Int("fuse.trials", 6, "power-loss trials per backend in TestPowerLossFUSE (6: each backend gets each kind of trial once)")
	fuseBackends = flag.String("fuse.backends", "mmap,transient,uring,uring-direct", "backends of TestPowerLossFUSE, comma separated")
	fuseSeed     = flag.Uint64("fuse.seed", 1, "seed of TestPowerLossFUSE's first trial (a failure names the seed that replays it)")
	fuseLog      = flag.Bool("fuse.log", false, "log every power-loss trial's crash reports and process logs (a failure's are always logged)")
	fuseHATrials = flag.Int("fuse.ha.trials", 4, "trials of TestPowerLossFUSEReplicated (the -fuse.backends pairs in turn)")
)

// The kinds of power-loss trial; a trial's seed picks its kind.
const (
	plSync     = iota // produce --flush sync, power loss
	plStrict          // the same with names=strict
	plChained         // kill only, restart, produce more, power loss
	plRecovery        // power loss, then another during the recovering open
	plAsync           // async flush: what the store reported flushed survives
	plRecycled        // sync, power loss, in segments reused from retention's pool
	plKinds
)

var plKindNames = [plKinds]string{"sync", "strict", "chained", "recovery", "async", "recycled"}

// errCannotRun marks a backend this machine cannot run (no io_uring).
var errCannotRun = errors.New("backend cannot run here")

// TestPowerLossFUSE cuts the power under the real backends: the store runs
// as a real process (mqstore produce) on crashfs, a FUSE file system whose
// backing directory holds only what was fsynced; after a seeded number of
// acknowledgements the producer is SIGKILLed and the file system crashes
// (unsynced data lost, or a seeded part of it written back torn; with
// names=strict, name changes whose directories were not synced undone).
// Then on the backing directory mqstore verify must pass, every printed
// ack must be there with its body and keys, and the store must take new
// Puts. See docs/crashfs.md.
//
//	go test ./cmd/mqstore -run PowerLossFUSE -fuse.trials 1000 -fuse.backends mmap
func TestPowerLossFUSE(t *testing.T) {
	testenv.NeedFUSE(t, "the power-loss trials mount crashfs")
	backends := fuseBackendList(t)
	for bi, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			start := time.Now()
			kinds := map[string]int{}
			var checked, failed int
			for i := 0; i < *fuseTrials; i++ {
				// Consecutive seeds for a backend: its trials go through
				// every kind (a seed picks its kind), whatever the number
				// of backends; the backends' seeds are 2³² apart.
				seed := *fuseSeed + uint64(i) + uint64(bi)<<32
				tr := newPLTrial(t, backend, seed)
				n, err := tr.run()
				if errors.Is(err, errCannotRun) {
					testenv.Skip(t, testenv.Uring, "%v", err)
				}
				if *fuseLog {
					t.Log(tr.log.String())
				}
				kinds[plKindNames[tr.kind]]++
				checked += n
				if err != nil {
					failed++
					t.Errorf("%s trial %d (%s, seed %d; replay: -run 'PowerLossFUSE/^%s$' -fuse.backends %s -fuse.seed %d -fuse.trials 1): %v\n%s",
						backend, i, plKindNames[tr.kind], seed, backend, backend, seed, err, tr.log.String())
					if failed >= 3 {
						t.Fatalf("stopping after %d failed trials", failed)
					}
				}
			}
			t.Logf("%s: %d power-loss trials %v in %v: %d acknowledged records checked, %d trials failed",
				backend, *fuseTrials, kinds, time.Since(start).Round(time.Millisecond), checked, failed)
		})
	}
}

// fuseBackendList is -fuse.backends.
func fuseBackendList(t *testing.T) []string {
	backends := strings.Split(*fuseBackends, ",")
	for _, b := range backends {
		if !slices.Contains(engine.BackendNames(), b) {
			t.Fatalf("-fuse.backends: unknown backend %q (have %v)", b, engine.BackendNames())
		}
	}
	return backends
}

// TestPowerLossFUSEReplicated cuts the power of two machines at once: a
// SYNC_MASTER producer (async flush) on one crashfs and its slave (sync
// flush: it acknowledges only what it flushed) on another. Every printed
// ack must be on the slave's image, both images must verify and take new
// Puts. The master may lose acknowledged records (its flush is async): the
// slave holds them.
//
//	go test ./cmd/mqstore -run PowerLossFUSEReplicated -fuse.ha.trials 100
func TestPowerLossFUSEReplicated(t *testing.T) {
	testenv.NeedFUSE(t, "the power-loss trials mount crashfs")
	backends := fuseBackendList(t)
	n := len(backends)
	var checked, failed int
	for i := 0; i < *fuseHATrials; i++ {
		seed := *fuseSeed + uint64(i)
		// Pairs in turn: the same backend on both sides first, then shifted.
		mb, sb := backends[i%n], backends[(i+i/n)%n]
		m, s, err := replicatedTrial(t, mb, sb, seed)
		if errors.Is(err, errCannotRun) {
			testenv.Skip(t, testenv.Uring, "%v", err)
		}
		if *fuseLog || err != nil {
			t.Logf("master:\n%s\nslave:\n%s", m.log.String(), s.log.String())
		}
		checked += m.checked
		if err != nil {
			failed++
			t.Errorf("replicated trial %d (%s -> %s, seed %d; replay: -run PowerLossFUSEReplicated -fuse.backends %s -fuse.seed %d -fuse.ha.trials 1): %v",
				i, mb, sb, seed, strings.Join(backends, ","), seed, err)
		}
	}
	t.Logf("%d replicated power-loss trials: %d acknowledged records checked on the slaves, %d trials failed", *fuseHATrials, checked, failed)
}

// replicatedTrial runs one trial of TestPowerLossFUSEReplicated.
func replicatedTrial(t *testing.T, masterBackend, slaveBackend string, seed uint64) (*plTrial, *plTrial, error) {
	m := newPLTrial(t, masterBackend, seed)
	s := &plTrial{t: t, backend: slaveBackend, seed: seed, rng: m.rng, names: m.names, size: m.size, start: m.start}
	for _, tr := range []*plTrial{m, s} {
		if err := tr.setup(); err != nil {
			return m, s, err
		}
		defer tr.unmount()
	}
	m.logf("replicated trial: master %s (async flush), slave %s (sync flush), names=%s, body size %d\n", masterBackend, slaveBackend, m.names, m.size)
	dm, err := m.mount(crashfs.Config{})
	if err != nil {
		return m, s, err
	}
	ds, err := s.mount(crashfs.Config{})
	if err != nil {
		return m, s, err
	}
	if err := m.create(); err != nil {
		return m, s, err
	}
	if err := s.create(); err != nil {
		return m, s, err
	}
	killAfter := 1 + m.rng.IntN(300)
	producer := startProcess(t, true, "produce", "--dir", m.store(), "--topic", "Crash", "--queues", fmt.Sprint(plQueues),
		"--count", "100000000", "--size", fmt.Sprint(m.size), "--keys", "--tags", "K", "--role", "sync-master",
		"--ha-listen", "127.0.0.1:0", "--wait-slaves", "1", "--flush", "async", "--print-acks", "--backend", masterBackend)
	addr := producer.waitLine(t, listeningRE)[1]
	slave := startProcess(t, false, "slave", "--dir", s.store(), "--master", addr, "--backend", slaveBackend, "--flush", "sync",
		"--status-interval", "0")
	var acks, notAcked []ack
	sc := bufio.NewScanner(producer.stdout)
	readAcks(sc, killAfter, &acks, &notAcked)
	if len(acks) < killAfter {
		producer.cmd.Process.Signal(syscall.SIGKILL)
		slave.cmd.Process.Signal(syscall.SIGKILL)
		m.cut(dm)
		s.cut(ds)
		msg := producer.stderr() + "\n" + slave.stderr()
		if strings.Contains(msg, "unsupported on this system") {
			return m, s, fmt.Errorf("%w: %s", errCannotRun, msg)
		}
		return m, s, fmt.Errorf("the producer ended after %d acks, before the kill:\n%s", len(acks), msg)
	}
	// Both machines lose power at a random moment after this ack.
	time.Sleep(time.Duration(m.rng.IntN(2000)) * time.Microsecond)
	producer.cmd.Process.Signal(syscall.SIGKILL)
	slave.cmd.Process.Signal(syscall.SIGKILL)
	cutM, cutS := m.cut(dm), s.cut(ds)
	readAcks(sc, 1<<30, &acks, &notAcked)
	<-producer.done
	<-slave.done
	m.logf("producer logged:\n%s\n", producer.stderr())
	s.logf("slave logged:\n%s\n", slave.stderr())
	if err := errors.Join(cutM, cutS); err != nil {
		return m, s, err
	}
	if len(notAcked) > 0 {
		return m, s, fmt.Errorf("with the slave connected, %d messages were not acknowledged, first %+v", len(notAcked), notAcked[0])
	}
	if err := s.check(acks); err != nil {
		return m, s, fmt.Errorf("the slave's image: %w", err)
	}
	s.checked = len(acks)
	if err := m.check(nil); err != nil {
		return m, s, fmt.Errorf("the master's image: %w", err)
	}
	m.checked = len(acks)
	os.RemoveAll(m.base)
	os.RemoveAll(s.base)
	return m, s, nil
}

// plTrial is one power-loss trial.
type plTrial struct {
	t                   *testing.T
	backend             string
	seed                uint64
	kind                int
	rng                 *rand.Rand
	base                string
	backing, state, mnt string
	names               crashfs.Names
	size                int
	log                 strings.Builder // crash reports and process logs, for a failure
	daemons             []*crashfs.Daemon
	start               time.Time
	checked             int // acknowledged records found (replicated trials)
}

const (
	plQueues      = 2
	plSegmentSize = 262144
)

func newPLTrial(t *testing.T, backend string, seed uint64) *plTrial {
	rng := rand.New(rand.NewPCG(seed, 0x706c))
	tr := &plTrial{t: t, backend: backend, seed: seed, kind: int(seed % plKinds), rng: rng, names: crashfs.NamesDurable, start: time.Now()}
	if tr.kind == plRecycled && engine.RecyclingRefusal(backend) != nil {
		tr.kind = plSync // the store refuses RecycleSegments on this backend
	}
	if tr.kind == plStrict || rng.IntN(3) == 0 {
		tr.names = crashfs.NamesStrict
	}
	tr.size = 1 + rng.IntN(3000)
	return tr
}

func (tr *plTrial) store() string   { return filepath.Join(tr.mnt, "s") }
func (tr *plTrial) durable() string { return filepath.Join(tr.backing, "s") }

// run runs the trial and returns how many acknowledged records it checked.
// setup makes the trial's directories: the backing (the durable image),
// the daemon's state and the mount point.
func (tr *plTrial) setup() error {
	base, err := os.MkdirTemp(tr.t.TempDir(), "pl")
	if err != nil {
		return err
	}
	tr.base = base
	tr.backing, tr.state, tr.mnt = filepath.Join(base, "backing"), filepath.Join(base, "state"), filepath.Join(base, "mnt")
	for _, d := range []string{tr.backing, tr.mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// unmount takes down every daemon the trial started (they are all down
// already unless the trial failed early).
func (tr *plTrial) unmount() {
	for _, d := range tr.daemons {
		if err := d.Close(); err != nil {
			tr.t.Error(err)
		}
	}
	tr.daemons = nil
}

func (tr *plTrial) run() (int, error) {
	if err := tr.setup(); err != nil {
		return 0, err
	}
	defer tr.unmount()
	var err error
	tr.logf("trial: backend %s, %s, names=%s, body size %d\n", tr.backend, plKindNames[tr.kind], tr.names, tr.size)
	var acks []ack
	switch tr.kind {
	case plSync, plStrict:
		acks, err = tr.producePhase(1+tr.rng.IntN(300), true, false)
	case plChained:
		// Killed only: the page cache (here: the daemon's overlay and the
		// kernel's FUSE pages) keeps what the dead process wrote; the
		// restarted store's recovery must sync it before it acknowledges
		// anything new, or the power loss below loses acknowledged records.
		var more []ack
		if acks, err = tr.producePhase(1+tr.rng.IntN(200), false, false); err == nil {
			more, err = tr.producePhaseOn(tr.daemons[len(tr.daemons)-1], 1+tr.rng.IntN(100), true, false)
			acks = append(acks, more...)
		}
	case plRecovery:
		if acks, err = tr.producePhase(1+tr.rng.IntN(300), true, false); err == nil {
			err = tr.recoveryCrash()
		}
	case plAsync:
		acks, err = tr.producePhase(50+tr.rng.IntN(400), true, true)
	case plRecycled:
		acks, err = tr.recycledPhase()
	}
	if err != nil {
		return 0, err
	}
	if err := tr.check(acks); err != nil {
		return len(acks), err
	}
	os.RemoveAll(tr.base)
	return len(acks), nil
}

// logf adds a line to the trial's log, stamped with the time since its start.
func (tr *plTrial) logf(format string, args ...any) {
	fmt.Fprintf(&tr.log, "%7.3fs ", time.Since(tr.start).Seconds())
	fmt.Fprintf(&tr.log, format, args...)
}

// mount starts crashfs on the trial's backing directory.
func (tr *plTrial) mount(c crashfs.Config) (*crashfs.Daemon, error) {
	c.Backing, c.State, c.Mount, c.Names, c.DIOAlign = tr.backing, tr.state, tr.mnt, tr.names, 4096
	c.Writeback = tr.rng.IntN(2) == 0
	c.Seed = tr.rng.Uint64()
	d, err := crashfs.Start(context.Background(), selfCmd(), c)
	if err != nil {
		return nil, err
	}
	tr.daemons = append(tr.daemons, d)
	tr.t.Cleanup(func() { d.Close() }) // also when the test stops early
	tr.logf("mounted: writeback %v, seed %d, crash after fsync %d of %q\n", c.Writeback, c.Seed, c.CrashAfterFsync, c.CrashPath)
	return d, nil
}

// cut crashes d and logs its report.
func (tr *plTrial) cut(d *crashfs.Daemon) error {
	rep, err := d.Crash(context.Background())
	return tr.logReport(rep, err)
}

func (tr *plTrial) logReport(rep *crashfs.Report, err error) error {
	if err != nil {
		return fmt.Errorf("power cut: %w", err)
	}
	b, _ := json.Marshal(rep)
	tr.logf("crash report: %s\n", b)
	return nil
}

// producePhase mounts and runs producePhaseOn.
func (tr *plTrial) producePhase(killAfter int, powerLoss, async bool) ([]ack, error) {
	d, err := tr.mountNewStore()
	if err != nil {
		return nil, err
	}
	return tr.producePhaseOn(d, killAfter, powerLoss, async)
}

// mountNewStore mounts crashfs and creates the store on it (the power is
// cut when that fails).
func (tr *plTrial) mountNewStore() (*crashfs.Daemon, error) {
	d, err := tr.mount(crashfs.Config{})
	if err != nil {
		return nil, err
	}
	if err := tr.create(); err != nil {
		tr.cut(d)
		return nil, err
	}
	tr.logf("store created\n")
	return d, nil
}

// create makes the store on the mount with small ConsumeQueue and index
// files, which the store records (the processes that open it later take
// them): they roll every few dozen messages, so the trials cut the power
// around their creation too, and a recovering open does not scan the
// default 420 MB index (slow under -race).
func (tr *plTrial) create() error {
	ctx := context.Background()
	s, err := engine.Open(ctx, tr.store(), engine.Options{Backend: tr.backend, SegmentSizeBytes: plSegmentSize,
		ConsumeQueueFileSizeBytes: 20 * 64, IndexSlotCount: 64, IndexMaxEntries: 256, NoPreallocate: true})
	if err != nil {
		if strings.Contains(err.Error(), "unsupported on this system") {
			return fmt.Errorf("%w: %s: %v", errCannotRun, tr.backend, err)
		}
		return fmt.Errorf("create the store: %w", err)
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("create the store: %w", err)
	}
	return nil
}

// plRecycle is the pool of the recycled trials' stores.
const plRecycle = 4

// recycledPhase ages the store on the mount — five segments filled, four
// retired by retention into its pool — then runs a sync producer that
// reuses them (--recycle-segments) until at least one roll into a reused
// segment, kills it and cuts the power: a torn record over a pooled
// file's old bytes must not come back, an acknowledged one must.
func (tr *plTrial) recycledPhase() ([]ack, error) {
	d, err := tr.mountNewStore()
	if err != nil {
		return nil, err
	}
	if err := tr.age(); err != nil {
		tr.cut(d)
		return nil, err
	}
	tr.logf("store aged: %d segments pooled\n", plRecycle)
	perSegment := plSegmentSize / (tr.size + 200)
	return tr.producePhaseOn(d, perSegment+1+tr.rng.IntN(2*perSegment), true, false, "--recycle-segments", fmt.Sprint(plRecycle))
}

// age fills the store with plRecycle+1 segments of messages shaped like
// the producer's and lets retention retire plRecycle of them into the pool.
func (tr *plTrial) age() error {
	ctx := context.Background()
	s, err := engine.Open(ctx, tr.store(), engine.Options{Backend: tr.backend, SegmentSizeBytes: plSegmentSize, RecycleSegments: plRecycle,
		DeleteWhen: "*", FileReservedTime: time.Nanosecond, CleanInterval: time.Hour})
	if err != nil {
		return fmt.Errorf("age the store: %w", err)
	}
	body := make([]byte, tr.size)
	for i := 0; s.MaxOffset() <= plRecycle*plSegmentSize; i++ {
		m := &engine.Message{Topic: "Crash", QueueID: int32(i % plQueues), Body: body, Properties: []engine.Property{
			{Name: "TAGS", Value: "K"}, {Name: "KEYS", Value: fmt.Sprintf("old%d", i)}}}
		if _, err := s.Put(ctx, m); err != nil {
			s.Close()
			return fmt.Errorf("age the store: %w", err)
		}
	}
	if _, err := s.Flush(ctx); err != nil {
		s.Close()
		return fmt.Errorf("age the store: %w", err)
	}
	if err := s.WaitDispatched(ctx, s.MaxOffset()); err != nil {
		s.Close()
		return fmt.Errorf("age the store: %w", err)
	}
	for {
		n, err := s.CleanExpired(ctx)
		if err != nil {
			s.Close()
			return fmt.Errorf("age the store: %w", err)
		}
		if n == 0 {
			break
		}
	}
	pooled := s.Stats().SegmentsPooled
	if err := s.Close(); err != nil {
		return fmt.Errorf("age the store: %w", err)
	}
	if pooled != plRecycle {
		return fmt.Errorf("age the store: %d segments pooled, want %d", pooled, plRecycle)
	}
	return nil
}

// reportedAck is a line of the flush-reporting producer: an ack (of an
// async-flush Put: stored, not yet durable) and the store's FlushedOffset
// right after it.
type reportedAck struct {
	ack
	Flushed int64 `json:"flushed"`
}

// producePhaseOn runs a producer on the mount until killAfter acks, then
// SIGKILLs it and, with powerLoss, cuts the power at once. With async the
// producer is the flush-reporting one, and what is returned are the acks
// the store reported flushed.
func (tr *plTrial) producePhaseOn(d *crashfs.Daemon, killAfter int, powerLoss, async bool, extra ...string) ([]ack, error) {
	var cmd *exec.Cmd
	if async {
		cmd = selfCmd("--dir", tr.store(), "--backend", tr.backend, "--size", fmt.Sprint(tr.size),
			"--queues", fmt.Sprint(plQueues))
		cmd.Env = append(cmd.Env, envReporter+"=1")
	} else {
		args := []string{"produce", "--dir", tr.store(), "--topic", "Crash", "--queues", fmt.Sprint(plQueues), "--count", "1000000",
			"--size", fmt.Sprint(tr.size), "--flush", "sync", "--print-acks", "--backend", tr.backend, "--keys", "--tags", "K"}
		cmd = mqstoreCmd(append(args, extra...)...)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var acks []ack
	var flushed int64
	var cutErr error
	cutDone := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var a reportedAck
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			continue // a line cut by the kill
		}
		acks = append(acks, a.ack)
		flushed = max(flushed, a.Flushed)
		if len(acks) == killAfter {
			// At a random moment after this ack: the producer keeps going meanwhile.
			time.Sleep(time.Duration(tr.rng.IntN(2000)) * time.Microsecond)
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				return nil, err
			}
			if powerLoss {
				cutDone, cutErr = true, tr.cut(d)
			}
		}
	}
	io.Copy(io.Discard, stdout)
	waitErr := cmd.Wait()
	tr.logf("producer (killed after ack %d, %d acks read) logged:\n%s", killAfter, len(acks), stderr.String())
	if len(acks) < killAfter {
		if powerLoss && !cutDone {
			tr.cut(d)
		}
		msg := stderr.String()
		if strings.Contains(msg, "unsupported on this system") {
			return nil, fmt.Errorf("%w: %s: %s", errCannotRun, tr.backend, msg)
		}
		return nil, fmt.Errorf("producer ended after %d acks before the kill: %v: %s", len(acks), waitErr, msg)
	}
	if cutErr != nil {
		return nil, cutErr
	}
	if !async {
		return acks, nil
	}
	var durable []ack
	for _, a := range acks {
		if a.PhysicalOffset+int64(a.Size) <= flushed {
			durable = append(durable, a)
		}
	}
	tr.logf("async: %d of %d stored messages reported flushed (FlushedOffset %d)\n", len(durable), len(acks), flushed)
	return durable, nil
}

// recoveryCrash mounts the crashed image with a crash point armed at a
// seeded fsync and runs a recovering open (mqstore verify) on it: the power
// goes in the middle of recovery, or just after it when recovery needed
// fewer fsyncs.
func (tr *plTrial) recoveryCrash() error {
	n := 1 + tr.rng.IntN(12)
	// Any fsync, or one of a kind of file (directories included: FSYNCDIR
	// of s/commitlog matches too).
	paths := []string{"", "^s/commitlog", "^s/consumequeue/", "^s/index", "^s/(checkpoint|abort)"}
	path := paths[tr.rng.IntN(len(paths))]
	if path != "" {
		n = 1 + tr.rng.IntN(3)
	}
	d, err := tr.mount(crashfs.Config{CrashAfterFsync: n, CrashPath: path})
	if err != nil {
		return err
	}
	cmd := mqstoreCmd("verify", "--dir", tr.store())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-d.Exited():
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		tr.logf("power lost at the %d-th fsync matching %q of the recovering open, which logged:\n%s", n, path, out.String())
		rep, err := d.Wait(context.Background())
		return tr.logReport(rep, err)
	case err := <-done:
		if err != nil {
			// The open may have failed because the power went (its fsync
			// got ECONNABORTED) while the daemon is still writing its
			// report: give it time to exit.
			timer := time.NewTimer(10 * time.Second)
			defer timer.Stop()
			select {
			case <-d.Exited():
				tr.logf("power lost at the %d-th fsync matching %q of the recovering open, which logged:\n%s", n, path, out.String())
				rep, err := d.Wait(context.Background())
				return tr.logReport(rep, err)
			case <-timer.C:
			}
		}
		tr.logf("the recovering open finished in fewer than %d fsyncs (%v):\n%s", n, err, out.String())
		if err != nil {
			tr.cut(d)
			return fmt.Errorf("verify on the mount after the power loss: %v:\n%s", err, out.String())
		}
		return tr.cut(d)
	}
}

// check opens the durable image (the backing directory: what survived)
// and checks it.
func (tr *plTrial) check(acks []ack) error {
	dir := tr.durable()
	tr.logf("checking the durable image\n")
	out, errOut, code := runCLI(tr.t, "verify", "--dir", dir)
	if code != 0 {
		return fmt.Errorf("verify after the power loss: exit %d:\n%s%s%s", code, out, errOut, ackTail(acks))
	}
	tr.logf("verify: %s", out)
	// verify checked that every record has its ConsumeQueue unit and its
	// index keys; one dump finds each ack's record.
	out, errOut, code = runCLI(tr.t, "dump", "--dir", dir)
	if code != 0 {
		return fmt.Errorf("dump after the power loss: exit %d:\n%s", code, errOut)
	}
	byOffset := map[int64]recordLine{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue // an empty log
		}
		var l recordLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			return fmt.Errorf("dump output %q: %v", line, err)
		}
		if l.Type == "record" {
			byOffset[l.PhysicalOffset] = l
		}
	}
	for _, a := range acks {
		l, ok := byOffset[a.PhysicalOffset]
		if err := ackMatches(a, l, ok, tr.size, len(acks)); err != nil {
			return fmt.Errorf("%w\n%s", err, ackTail(acks))
		}
	}
	tr.logf("every ack found\n")
	const more = 5
	out, errOut, code = runCLI(tr.t, "produce", "--dir", dir, "--topic", "Crash", "--queues", fmt.Sprint(plQueues), "--count", fmt.Sprint(more),
		"--size", fmt.Sprint(tr.size), "--flush", "sync", "--print-acks", "--backend", tr.backend, "--keys")
	if n := strings.Count(out, "\n"); code != 0 || n != more {
		return fmt.Errorf("produce after the power loss: exit %d, %d acks of %d:\n%s", code, n, more, errOut)
	}
	tr.logf("new puts taken\n")
	return nil
}

// envReporter makes the test binary run the flush-reporting producer.
const envReporter = "MQSTORE_AS_REPORTER"

// runReporter is the producer of the async trials: Puts with async flush,
// and after each a line with the ack and the store's FlushedOffset (what it
// claims is durable). produce does not print FlushedOffset.
func runReporter(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("reporter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "store directory")
	backend := fs.String("backend", "mmap", "backend")
	size := fs.Int("size", 100, "body size")
	queues := fs.Int("queues", 1, "queues")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx := context.Background()
	mode, err := engine.ParseFlushMode("async")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	store, err := engine.Open(ctx, *dir, engine.Options{Backend: *backend, FlushMode: mode,
		FlushInterval: 5 * time.Millisecond, FlushLeastPages: 1})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	runID := fmt.Sprintf("%08X%012X", os.Getpid(), time.Now().UnixMilli())
	enc := json.NewEncoder(stdout)
	for i := int64(0); ; i++ {
		uniq := fmt.Sprintf("%s%012X", runID, i)
		m := &engine.Message{Topic: "Crash", QueueID: int32(i % int64(*queues)), Body: Body(i, *size), Properties: []engine.Property{
			{Name: "TAGS", Value: "K"}, {Name: "KEYS", Value: fmt.Sprintf("k%d", i)}, {Name: "UNIQ_KEY", Value: uniq}}}
		res, err := store.Put(ctx, m)
		if err != nil {
			fmt.Fprintf(stderr, "message %d: %v\n", i, err)
			return 1
		}
		a := reportedAck{ack: ack{I: i, Topic: "Crash", QueueID: m.QueueID, QueueOffset: res.QueueOffset, PhysicalOffset: res.PhysicalOffset,
			Size: res.Size, UniqKey: uniq}, Flushed: store.Stats().FlushedOffset}
		if err := enc.Encode(a); err != nil {
			return 1
		}
	}
}
