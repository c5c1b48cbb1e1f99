package engine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/mappedfile"
)

var (
	crashTrials = flag.Int("crash.trials", 1000, "simulated power-loss trials in TestSimulatedPowerLoss")
	crashSeed   = flag.Uint64("crash.seed", 0, "run only this trial seed (0: trials 1..crash.trials)")
	killTrials  = flag.Int("kill.trials", 1000, "simulated process-kill trials in TestSimulatedKill")
	chainTrials = flag.Int("chain.trials", 200, "trials of each chained kind: TestSimulatedKillRestartPowerLoss, TestSimulatedPowerLossDuringRecovery")
)

var debugHook func(*Store)

// partialScans counts trials whose recovering [0] and clean [1] reopen
// scanned from a later segment than the log's first.
var partialScans [2]atomic.Int64

// recoveryCrashes counts powerLossDuringRecovery trials whose armed power
// loss hit the recovering Open [0] (it failed) or came after it returned,
// in a background service [1].
var recoveryCrashes [2]atomic.Int64

// written is what the test knows about a message it put.
type written struct {
	key            queueKey
	queueOffset    int64
	physical       int64
	size           int
	bodyCRC        uint32
	uniq           string
	acknowledged   bool // PutOK under sync flush: must survive
	mustSurvive    bool // acknowledged, or committed before a process kill
	storeTimestamp int64
	properties     string // as encoded
}

// trialKind is the sequence of failures a trial inflicts.
type trialKind int

const (
	// powerLoss: a workload, then a power loss (MemFS.Crash).
	powerLoss trialKind = iota
	// processKill: a workload, then the process dies (MemFS.Kill): the page
	// cache survives, so every committed record must be there.
	processKill
	// killRestartPowerLoss: a kill, a recovering restart, more Puts, then a
	// power loss: what the restarted store claimed durable must survive —
	// including what the dead process left in the page cache unsynced.
	killRestartPowerLoss
	// powerLossDuringRecovery: a kill or a power loss, then a power loss in
	// the middle of the recovering Open (at a random one of its file system
	// operations), then a clean recovery.
	powerLossDuringRecovery
)

var trialNames = [...]string{"SimulatedPowerLoss", "SimulatedKill", "SimulatedKillRestartPowerLoss", "SimulatedPowerLossDuringRecovery"}

// TestSimulatedPowerLoss runs seeded random workloads on the in-memory file
// system, cuts the power at a random point (keeping only synced bytes and
// synced directory entries, plus a random torn write-back), reopens, and
// checks the store's promises: every message acknowledged under sync flush
// and every record below the flushed offset the store reported is present
// and identical; the recovered CommitLog is a prefix of what was written;
// ConsumeQueues and the index agree with it; queue offsets continue without
// gaps.
//
//	go test ./engine -run SimulatedPowerLoss -crash.trials 100000
//	go test ./engine -run SimulatedPowerLoss -crash.seed 1234 -v
func TestSimulatedPowerLoss(t *testing.T) {
	runCrashTrials(t, *crashTrials, powerLoss)
}

// TestSimulatedKill is TestSimulatedPowerLoss for a killed process on a
// machine that stays up (MemFS.Kill): the page cache survives, so every
// message committed before the kill must be there, under any flush policy.
// After the recovering open it closes and opens the store again, cleanly,
// and checks again: the CLI's crash test does the same with separate
// processes.
//
//	go test ./engine -run SimulatedKill -kill.trials 100000
func TestSimulatedKill(t *testing.T) {
	runCrashTrials(t, *killTrials, processKill)
}

// TestSimulatedKillRestartPowerLoss chains a kill, a recovering restart
// with more Puts, and a power loss. The restarted store claims durable
// (its flushed offset, sync acknowledgements) bytes the dead process only
// left in the page cache: recovery must have synced them.
//
//	go test ./engine -run SimulatedKillRestartPowerLoss -chain.trials 10000
func TestSimulatedKillRestartPowerLoss(t *testing.T) {
	runCrashTrials(t, *chainTrials, killRestartPowerLoss)
}

// TestSimulatedPowerLossDuringRecovery crashes (kill or power loss), then
// cuts the power again at a random file system operation of the recovering
// Open, then recovers for good: recovery must leave a recoverable store at
// every step.
//
//	go test ./engine -run SimulatedPowerLossDuringRecovery -chain.trials 10000
func TestSimulatedPowerLossDuringRecovery(t *testing.T) {
	runCrashTrials(t, *chainTrials, powerLossDuringRecovery)
}

func runCrashTrials(t *testing.T, trials int, kind trialKind) {
	if testing.Short() {
		trials = min(trials, 100)
	}
	first, last := uint64(1), uint64(trials)
	if *crashSeed != 0 {
		first, last = *crashSeed, *crashSeed
	}
	violations := 0
	for seed := first; seed <= last; seed++ {
		if err := crashTrial(t, seed, kind); err != nil {
			violations++
			t.Errorf("seed %d: %v (rerun: go test ./engine -run %s -crash.seed %d -v)", seed, err, trialNames[kind], seed)
			if violations >= 5 {
				t.Fatalf("stopping after %d violations", violations)
			}
		}
	}
	t.Logf("%d trials, %d violations; the recovering open scanned from a later segment than the log's first in %d, the clean reopen in %d",
		last-first+1, violations, partialScans[0].Swap(0), partialScans[1].Swap(0))
	if kind == powerLossDuringRecovery {
		t.Logf("the second power loss hit the recovering open in %d trials, a background service after it in %d",
			recoveryCrashes[0].Swap(0), recoveryCrashes[1].Swap(0))
	}
}

// crashWorkload puts 1–120 random messages (keys, tags, sizes) and returns
// what it wrote.
func crashWorkload(ctx context.Context, s *Store, rng *rand.Rand, seed uint64, phase string, ticks *atomic.Int64, queues int) ([]written, error) {
	puts := 1 + rng.IntN(120)
	sync := s.opts.FlushMode == FlushSync
	var msgs []written
	for i := 0; i < puts; i++ {
		uniq := fmt.Sprintf("u%d-%s%d", seed, phase, i)
		m := &Message{Topic: []string{"A", "Bb", "TopicC"}[rng.IntN(3)], QueueID: int32(rng.IntN(queues)),
			Body: randomBytes(rng, rng.IntN(1500))}
		m.Properties = append(m.Properties, Property{Name: "UNIQ_KEY", Value: uniq})
		if rng.IntN(2) == 0 {
			m.Properties = append(m.Properties, Property{Name: "TAGS", Value: []string{"x", "y"}[rng.IntN(2)]})
		}
		if rng.IntN(3) == 0 {
			m.Properties = append(m.Properties, Property{Name: "KEYS", Value: fmt.Sprintf("k%d k%d", i, i%7)})
		}
		ticks.Add(1)
		res, err := s.Put(ctx, m)
		if err != nil && res.Status != FlushDiskTimeout {
			return msgs, fmt.Errorf("put %s%d: %w", phase, i, err)
		}
		msgs = append(msgs, written{key: queueKey{m.Topic, m.QueueID}, queueOffset: res.QueueOffset, physical: res.PhysicalOffset,
			size: res.Size, bodyCRC: crc32.ChecksumIEEE(m.Body), uniq: uniq, storeTimestamp: res.StoreTimestamp, properties: encodedProperties(m),
			acknowledged: sync && res.Status == PutOK})
	}
	// Let the background services run a little, at random.
	if d := rng.IntN(4); d > 0 {
		time.Sleep(time.Duration(d) * time.Millisecond)
	}
	return msgs, nil
}

// reopenAfter closes the dead store (its files are gone: this only stops
// its goroutines and drops the lock) and restarts the file system.
func reopenAfter(s *Store, fs *mappedfile.MemFS) {
	if s != nil {
		s.Close()
	}
	fs.Restart()
}

func crashTrial(t *testing.T, seed uint64, kind trialKind) error {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	buffered := rng.IntN(2) == 0
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: buffered})
	mode := FlushMode(rng.IntN(2))
	o := Options{
		BackendImpl: fs, FlushMode: mode, Logger: quietLogger,
		SegmentSizeBytes:          int64(4+rng.IntN(13)) * mappedfile.PageSize,
		ConsumeQueueFileSizeBytes: int64(5+rng.IntN(40)) * 20,
		IndexSlotCount:            1 + rng.IntN(11),
		IndexMaxEntries:           8 + rng.IntN(60),
		FlushInterval:             time.Duration(1+rng.IntN(5)) * time.Millisecond,
		FlushLeastPages:           rng.IntN(3),
		CommitInterval:            time.Duration(1+rng.IntN(3)) * time.Millisecond,
		CommitLeastPages:          rng.IntN(3),
		ConsumeQueueFlushInterval: time.Duration(1+rng.IntN(5)) * time.Millisecond,
		// Checkpoints written often: recovery must never find the log
		// shorter than a checkpoint said was durable.
		ConsumeQueueFlushThoroughInterval: time.Duration(2+rng.IntN(10)) * time.Millisecond,
		NoPreallocate:                     rng.IntN(2) == 0,
	}
	// Half the trials run on a clock that jumps 400 ms per Put, so records
	// are seconds apart and recovery after a crash can start past the
	// first segment (RocketMQ's rule keeps a 3 s margin).
	var ticks atomic.Int64
	if rng.IntN(2) == 0 {
		o.now = func() time.Time { return time.Now().Add(time.Duration(ticks.Load()) * 400 * time.Millisecond) }
	}
	dir := filepath.Join(t.TempDir(), fmt.Sprint(seed))
	s, err := Open(ctx, dir, o)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	queues := 1 + rng.IntN(4)
	msgs, err := crashWorkload(ctx, s, rng, seed, "", &ticks, queues)
	if err != nil {
		s.Close()
		return err
	}
	// Every record below the flushed offset the store reported is a
	// durability promise, whatever the flush mode.
	claimed := s.FlushedOffset()
	tail := mappedfile.TornTail(rng.IntN(4))
	what := fmt.Sprintf("tail %v, %d puts, flush %v, buffered %v", tail, len(msgs), mode, buffered)
	switch kind {
	case powerLoss:
		fs.Crash(tail, rng)
	case processKill:
		// A killed process leaves every committed byte in the page cache: with
		// write-through files every Put that returned is there.
		fs.Kill()
		if !buffered {
			for i := range msgs {
				msgs[i].mustSurvive = true
			}
		}
		what = fmt.Sprintf("kill, %d puts, flush %v, buffered %v", len(msgs), mode, buffered)
	case killRestartPowerLoss:
		if msgs, claimed, what, err = killRestartThenPowerLoss(ctx, trialStore{s, fs, dir, o, rng, seed, &ticks, queues}, msgs, what, tail); err != nil {
			return err
		}
		s = nil
	case powerLossDuringRecovery:
		if what, err = powerLossInRecovery(ctx, trialStore{s, fs, dir, o, rng, seed, &ticks, queues}, what, tail); err != nil {
			return err
		}
		s = nil
	}
	reopenAfter(s, fs)
	s, err = Open(ctx, dir, o)
	if err != nil {
		return fmt.Errorf("reopen after a crash (%s): %w", what, err)
	}
	if debugHook != nil {
		debugHook(s)
	}
	if s.recoveredFrom > s.MinOffset() {
		partialScans[0].Add(1)
	}
	n, err := checkRecovered(ctx, s, msgs, claimed)
	if err != nil {
		s.Close()
		return fmt.Errorf("%s: %w", what, err)
	}
	// checkRecovered put one message per queue; then a clean close and
	// open must keep everything (the recovering open's repairs included).
	if err := s.Close(); err != nil {
		return fmt.Errorf("%s: close after recovery: %w", what, err)
	}
	if s, err = Open(ctx, dir, o); err != nil {
		return fmt.Errorf("%s: open after the recovering open's clean close: %w", what, err)
	}
	defer s.Close()
	if s.recoveredFrom > s.MinOffset() {
		partialScans[1].Add(1)
	}
	if err := verifyClean(ctx, s); err != nil {
		return fmt.Errorf("%s: after a clean reopen (%d records recovered): %w", what, n, err)
	}
	return nil
}

// trialStore is what the chained failures of a trial act on.
type trialStore struct {
	s      *Store
	fs     *mappedfile.MemFS
	dir    string
	o      Options
	rng    *rand.Rand
	seed   uint64
	ticks  *atomic.Int64
	queues int
}

// killRestartThenPowerLoss kills the store, restarts it (recovery), puts
// more messages, and cuts the power. It returns the messages the log should
// now begin with, the flushed offset the restarted store reported, and what
// happened; the store is dead.
func killRestartThenPowerLoss(ctx context.Context, ts trialStore, msgs []written, what string, tail mappedfile.TornTail) ([]written, int64, string, error) {
	ts.fs.Kill()
	reopenAfter(ts.s, ts.fs)
	s, err := Open(ctx, ts.dir, ts.o)
	if err != nil {
		return nil, 0, "", fmt.Errorf("reopen after a kill (%s): %w", what, err)
	}
	n, err := checkRecoveredPrefix(ctx, s, msgs, 0)
	if err != nil {
		s.Close()
		return nil, 0, "", fmt.Errorf("after the kill: %w", err)
	}
	more, err := crashWorkload(ctx, s, ts.rng, ts.seed, "b", ts.ticks, ts.queues)
	if err != nil {
		s.Close()
		return nil, 0, "", fmt.Errorf("after the kill and restart: %w", err)
	}
	claimed := s.FlushedOffset()
	ts.fs.Crash(tail, ts.rng)
	reopenAfter(s, ts.fs)
	what = fmt.Sprintf("kill (%s) leaving %d records, restart, %d puts, power loss with that tail", what, n, len(more))
	return append(msgs[:n], more...), claimed, what, nil
}

// powerLossInRecovery kills the store or cuts its power, then cuts the
// power again at a random file system operation of the recovering Open
// (counted on a copy of the file system). The store is dead after it.
func powerLossInRecovery(ctx context.Context, ts trialStore, what string, tail mappedfile.TornTail) (string, error) {
	first := "power loss"
	if ts.rng.IntN(2) == 0 {
		ts.fs.Kill()
		first = "kill"
	} else {
		ts.fs.Crash(tail, ts.rng)
	}
	reopenAfter(ts.s, ts.fs)
	// How many file system operations the recovering Open makes: run it on
	// a copy.
	clone := ts.fs.Clone()
	oc := ts.o
	oc.BackendImpl = clone
	before := clone.Ops()
	sc, err := Open(ctx, ts.dir, oc)
	if err != nil {
		return "", fmt.Errorf("recovering open after a %s (%s), on a copy: %w", first, what, err)
	}
	ops := clone.Ops() - before
	sc.Close()
	at := 1 + ts.rng.Int64N(max(ops, 1))
	tail2 := mappedfile.TornTail(ts.rng.IntN(4))
	ts.fs.ArmCrash(at, tail2, ts.rng)
	if s, err := Open(ctx, ts.dir, ts.o); err == nil {
		s.Close() // the crash came after Open's last operation (a background service's)
		recoveryCrashes[1].Add(1)
	} else {
		recoveryCrashes[0].Add(1)
	}
	if ts.fs.Disarm() {
		ts.fs.Crash(tail2, ts.rng) // never reached: crash now
	}
	reopenAfter(nil, ts.fs)
	return fmt.Sprintf("%s (%s), then a power loss at operation %d of %d of the recovering open with tail %v", first, what, at, ops, tail2), nil
}

// verifyClean runs Verify and turns its problems into an error.
func verifyClean(ctx context.Context, s *Store) error {
	rep, err := s.Verify(ctx)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if len(rep.Problems) > 0 {
		return fmt.Errorf("verify: %d problems, first: %v", len(rep.Problems), rep.Problems[0])
	}
	return nil
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// checkRecovered verifies a reopened store against what was written and
// returns how many messages it holds. Every record ending at or below
// claimed was reported durable (the flushed offset) and must be there.
func checkRecovered(ctx context.Context, s *Store, msgs []written, claimed int64) (int, error) {
	n, err := checkRecoveredRecords(ctx, s, msgs, claimed)
	if err != nil {
		return n, err
	}
	return n, verifyClean(ctx, s)
}

// checkRecoveredPrefix checks that the recovered log is a prefix of the
// written messages, in order and byte for byte, holding every one that
// must survive, and returns its length.
func checkRecoveredPrefix(ctx context.Context, s *Store, msgs []written, claimed int64) (int, error) {
	var recovered []record.Record
	if _, err := s.Scan(ctx, s.MinOffset(), func(_ int64, rec []byte, r *record.Record) error {
		if r != nil {
			c := *r
			c.Body = append([]byte(nil), r.Body...)
			c.Properties = append([]byte(nil), r.Properties...)
			recovered = append(recovered, c)
		}
		return nil
	}); err != nil {
		return len(recovered), fmt.Errorf("scan: %w", err)
	}
	if len(recovered) > len(msgs) {
		return len(recovered), fmt.Errorf("%d records recovered, only %d written", len(recovered), len(msgs))
	}
	for i, r := range recovered {
		w := msgs[i]
		if r.PhysicalOffset != w.physical || int(r.TotalSize) != w.size || crc32.ChecksumIEEE(r.Body) != w.bodyCRC ||
			r.Topic != w.key.topic || r.QueueID != w.key.queueID || r.QueueOffset != w.queueOffset {
			return len(recovered), fmt.Errorf("recovered record %d at %d differs from message %d written at %d", i, r.PhysicalOffset, i, w.physical)
		}
		// BODYCRC covers only the body: the properties must be whole too.
		if u, _ := r.UniqKey(); u != w.uniq || r.StoreTimestamp != w.storeTimestamp || string(r.Properties) != w.properties {
			return len(recovered), fmt.Errorf("recovered record %d at %d has UNIQ_KEY %q and STORETIMESTAMP %d, message %d was written with %q and %d",
				i, r.PhysicalOffset, u, r.StoreTimestamp, i, w.uniq, w.storeTimestamp)
		}
	}
	for i := len(recovered); i < len(msgs); i++ {
		w := msgs[i]
		switch {
		case w.acknowledged || w.mustSurvive:
			return len(recovered), fmt.Errorf("message %d (queue %s/%d offset %d at %d) was acknowledged under sync flush or committed before a kill, but is lost; %d of %d recovered",
				i, w.key.topic, w.key.queueID, w.queueOffset, w.physical, len(recovered), len(msgs))
		case w.physical+int64(w.size) <= claimed:
			return len(recovered), fmt.Errorf("message %d (queue %s/%d offset %d at %d) ends below the flushed offset %d the store reported, but is lost; %d of %d recovered",
				i, w.key.topic, w.key.queueID, w.queueOffset, w.physical, claimed, len(recovered), len(msgs))
		}
	}
	return len(recovered), nil
}

func checkRecoveredRecords(ctx context.Context, s *Store, msgs []written, claimed int64) (int, error) {
	n, err := checkRecoveredPrefix(ctx, s, msgs, claimed)
	if err != nil {
		return n, err
	}
	recovered := msgs[:n]
	// ConsumeQueues agree with the CommitLog and have no gap.
	perQueue := map[queueKey]int64{}
	for _, w := range recovered {
		res, err := s.Get(ctx, "check", w.key.topic, w.key.queueID, w.queueOffset, 1, nil)
		if err != nil {
			return len(recovered), err
		}
		if res.Status != Found || res.Messages[0].PhysicalOffset != w.physical || int(res.Messages[0].Size) != w.size {
			res.Release()
			return len(recovered), fmt.Errorf("consume queue %s/%d offset %d: %v (queue [%d, %d)), want the record at %d",
				w.key.topic, w.key.queueID, w.queueOffset, res.Status, res.MinOffset, res.MaxOffset, w.physical)
		}
		res.Release()
		perQueue[w.key]++
		// The index finds it by UNIQ_KEY.
		if r, err := s.QueryByUniqKey(ctx, w.key.topic, w.uniq); err != nil || r.PhysicalOffset != w.physical {
			return len(recovered), fmt.Errorf("index lookup of %s: %v", w.uniq, err)
		}
	}
	keys := make([]queueKey, 0, len(perQueue))
	for k := range perQueue {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].topic+fmt.Sprint(keys[i].queueID) < keys[j].topic+fmt.Sprint(keys[j].queueID)
	})
	for _, k := range keys {
		res, err := s.Get(ctx, "check", k.topic, k.queueID, perQueue[k], 1, nil)
		if err != nil {
			return len(recovered), err
		}
		res.Release()
		if res.Status != OffsetOverflowOne || res.MaxOffset != perQueue[k] {
			return len(recovered), fmt.Errorf("consume queue %s/%d: max %d status %v, want %d records", k.topic, k.queueID, res.MaxOffset, res.Status, perQueue[k])
		}
		// Queue offsets continue without a gap.
		put, err := s.Put(ctx, &Message{Topic: k.topic, QueueID: k.queueID, Body: []byte("after")})
		if err != nil && !errors.Is(err, ErrFlushDiskTimeout) {
			return len(recovered), fmt.Errorf("put after recovery: %w", err)
		}
		if put.QueueOffset != perQueue[k] {
			return len(recovered), fmt.Errorf("queue %s/%d continues at %d, want %d", k.topic, k.queueID, put.QueueOffset, perQueue[k])
		}
	}
	return len(recovered), nil
}

func encodedProperties(m *Message) string {
	b, err := record.EncodeProperties(nil, m.Properties)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestRecoveryAfterTheClockSteppedBack: records stored after the clock
// stepped back an hour look older than the checkpoint. RocketMQ's rule
// alone (the newest segment whose first record is older than the
// checkpoint's time) would start recovery at the newest segment and never
// re-dispatch the segments between; the checkpoint's dispatched offset
// keeps recovery from starting after it.
func TestRecoveryAfterTheClockSteppedBack(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	var clock atomic.Int64
	clock.Store(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	o := smallLogicsOptions(Options{BackendImpl: fs, FlushMode: FlushSync,
		ConsumeQueueFlushInterval: time.Hour, ConsumeQueueFlushThoroughInterval: time.Hour})
	o.now = func() time.Time { return time.Unix(0, clock.Add(int64(time.Millisecond))) }
	dir := t.TempDir()
	s := openStore(t, dir, o)
	before := putN(t, s, "C", 2, 400, 300, nil)
	if err := s.flushLogics(ctx, 0); err != nil { // the checkpoint: everything so far is durable
		t.Fatal(err)
	}
	clock.Add(-int64(time.Hour))
	after := putN(t, s, "C", 2, 600, 300, nil) // sync flush: durable; their units are not
	if segs := s.log.queue.Len(); segs < 4 {
		t.Fatalf("%d segments; the test needs the post-step records to span several", segs)
	}
	fs.Crash(mappedfile.TornNone, nil)
	reopenAfter(s, fs)
	s = openStore(t, dir, o)
	defer s.Close()
	if from := s.RecoveredFrom(); from > after[0].PhysicalOffset {
		t.Errorf("recovery scanned from %d, after the first record stored since the checkpoint (%d)", from, after[0].PhysicalOffset)
	}
	for i, res := range append(before, after...) {
		got, err := s.Get(ctx, "g", "C", int32(i%2), res.QueueOffset, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != Found || got.Messages[0].PhysicalOffset != res.PhysicalOffset {
			got.Release()
			t.Fatalf("message %d (queue %d offset %d): %v after recovery", i, i%2, res.QueueOffset, got.Status)
		}
		got.Release()
		// The index has it; a query of its own second may not: entries
		// stored across the step carry times RocketMQ's format cannot hold.
		n := i
		if i >= len(before) {
			n = i - len(before) // putN numbers each call's messages from 0
		}
		offs, err := s.logics.index.Query(ctx, fmt.Sprintf("C#k%d", n), 0, math.MaxInt64, 100)
		if err != nil || !slices.Contains(offs, res.PhysicalOffset) {
			t.Fatalf("message %d: the index does not hold it (%v, %v)", i, offs, err)
		}
	}
}

// TestQueueOlderThanTheScanContinues: a clean reopen scans only the newest
// segments; a queue whose records are all older continues after its
// ConsumeQueue's last unit, on disk and in memory.
func TestQueueOlderThanTheScanContinues(t *testing.T) {
	for _, backend := range []string{"mmap", "mem"} {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			o := smallLogicsOptions(Options{Backend: backend})
			if backend == "mem" {
				o.BackendImpl = mappedfile.NewMemFS(mappedfile.MemOptions{})
			}
			dir := t.TempDir()
			s := openStore(t, dir, o)
			old := putN(t, s, "Old", 1, 100, 300, nil)
			putN(t, s, "New", 1, 800, 300, nil)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openStore(t, dir, o)
			defer s.Close()
			if from := s.RecoveredFrom(); from <= old[len(old)-1].PhysicalOffset {
				t.Fatalf("the clean reopen scanned from %d: the test needs it to start after the last Old record (%d)", from, old[len(old)-1].PhysicalOffset)
			}
			res, err := s.Put(ctx, testMessage("Old", 0, 100, 300))
			if err != nil {
				t.Fatal(err)
			}
			if res.QueueOffset != 100 {
				t.Fatalf("Old/0 continues at %d, want 100", res.QueueOffset)
			}
			if err := s.WaitDispatched(ctx, res.PhysicalOffset+int64(res.Size)); err != nil {
				t.Fatal(err)
			}
			if err := verifyClean(ctx, s); err != nil {
				t.Fatal(err)
			}
		})
	}
}
