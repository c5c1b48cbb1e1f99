package engine

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/faultfile"
)

var truncateTrials = flag.Int("truncate.trials", 40, "crash trials in TestTruncateOnlineCrash")

// TestTruncateOnline cuts a running slave on every backend: bad offsets
// change nothing; the cut keeps the bytes in diverged/, cuts the epochs,
// the ConsumeQueues, the index and the queue offset table, so replication
// continues at the cut with the queue offsets in sequence and a clean
// reopen finds nothing to repair.
func TestTruncateOnline(t *testing.T) {
	for _, b := range testBackends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			mo := smallLogicsOptions(b.opts(t))
			so := smallLogicsOptions(b.opts(t))
			so.Role = Slave
			master := openRole(t, t.TempDir(), mo)
			defer master.Close()
			puts := putRandom(t, master, rand.New(rand.NewPCG(3, 4)), 90, 3, 0)
			end := master.MaxOffset()
			dir := t.TempDir()
			slave := openRole(t, dir, so)
			defer func() { slave.Close() }()
			if _, err := slave.AppendReplicated(ctx, 0, logBytes(t, master, 0, end)); err != nil {
				t.Fatal(err)
			}
			if err := slave.WaitDispatched(ctx, end); err != nil {
				t.Fatal(err)
			}
			for _, e := range []EpochEntry{{1, 0}, {2, puts[40].PhysicalOffset}, {3, puts[70].PhysicalOffset}} {
				if err := slave.AppendEpoch(ctx, e.Epoch, e.StartOffset); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := master.TruncateOnline(ctx, puts[60].PhysicalOffset); !errors.Is(err, ErrNotSlave) {
				t.Fatalf("a master truncated: %v", err)
			}
			cut := puts[60].PhysicalOffset
			for _, bad := range []int64{cut + 1, end + 100, -1, puts[60].PhysicalOffset + int64(puts[60].Size)/2} {
				if _, err := slave.TruncateOnline(ctx, bad); !errors.Is(err, ErrInvalidOption) {
					t.Fatalf("truncate at %d: %v", bad, err)
				}
			}
			if slave.MaxOffset() != end || len(slave.Epochs()) != 3 {
				t.Fatalf("a refused truncation changed the store: end %d, epochs %v", slave.MaxOffset(), slave.Epochs())
			}
			res, err := slave.TruncateOnline(ctx, cut)
			if err != nil {
				t.Fatal(err)
			}
			if res.Offset != cut || res.OldEnd != end || res.CutBytes != end-cut || len(res.SavedTo) == 0 {
				t.Fatalf("result %+v", res)
			}
			var saved []byte
			for _, p := range res.SavedTo {
				if filepath.Dir(p) != filepath.Join(dir, divergedDirName) {
					t.Fatalf("saved to %s", p)
				}
				data, err := slave.fs.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				saved = append(saved, data...)
			}
			if !bytes.Equal(saved, logBytes(t, master, cut, end)) {
				t.Fatalf("the %d saved bytes are not the %d cut ones", len(saved), end-cut)
			}
			if got := slave.MaxOffset(); got != cut {
				t.Fatalf("the slave ends at %d after the cut at %d", got, cut)
			}
			if got, want := slave.Epochs(), []EpochEntry{{1, 0}, {2, puts[40].PhysicalOffset}}; !reflect.DeepEqual(got, want) {
				t.Fatalf("epochs %v, want %v", got, want)
			}
			checkQueuesAt(t, slave, puts[:60], 3)
			if _, err := slave.QueryByUniqKey(ctx, "Repl", fmt.Sprintf("U%08d", 70)); !errors.Is(err, ErrNotFound) {
				t.Fatalf("a cut record is still found: %v", err)
			}
			if err := verifyClean(ctx, slave); err != nil {
				t.Fatal(err)
			}
			// Replication continues at the cut: the queue offset table
			// expects exactly the next records.
			if _, err := slave.AppendReplicated(ctx, cut, logBytes(t, master, cut, end)); err != nil {
				t.Fatal(err)
			}
			if err := slave.WaitDispatched(ctx, end); err != nil {
				t.Fatal(err)
			}
			checkPrefix(t, master, slave)
			checkQueuesAt(t, slave, puts, 3)
			if err := slave.Close(); err != nil {
				t.Fatal(err)
			}
			if ok, _ := slave.fs.Exists(filepath.Join(dir, cutIntentFileName)); ok {
				t.Fatal("the intent file outlived the truncation")
			}
			slave = openRole(t, dir, so)
			if slave.MaxOffset() != end {
				t.Fatalf("reopened at %d, want %d", slave.MaxOffset(), end)
			}
			if err := verifyClean(ctx, slave); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// checkQueuesAt checks that each of the queues holds exactly the records
// of puts (round robin), ends after the last and finds each.
func checkQueuesAt(t *testing.T, s *Store, puts []PutResult, queues int) {
	t.Helper()
	ctx := context.Background()
	count := make([]int64, queues)
	for i, p := range puts {
		q := int32(i % queues)
		res, err := s.Get(ctx, "g", "Repl", q, p.QueueOffset, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != Found || res.Messages[0].PhysicalOffset != p.PhysicalOffset {
			res.Release()
			t.Fatalf("queue %d offset %d: %v, want the record at %d", q, p.QueueOffset, res.Status, p.PhysicalOffset)
		}
		res.Release()
		count[q]++
	}
	for q := range count {
		res, err := s.Get(ctx, "g", "Repl", int32(q), count[q], 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Release()
		want := OffsetOverflowOne
		if count[q] == 0 {
			want = NoMessageInQueue
		}
		if res.Status != want || res.MaxOffset != count[q] {
			t.Fatalf("queue %d: %v, max %d, want %d records", q, res.Status, res.MaxOffset, count[q])
		}
	}
}

// TestTruncateOnlineCrash cuts the power (or kills the process) at a
// random file system operation of an online truncation, on the in-memory
// file system: the next Open must find either the old log or the cut one —
// byte for byte what was written — with ConsumeQueues, index and epochs
// that match it, queue offsets that continue after its last record (never
// one used twice), and the cut bytes kept when the log was cut.
//
//	go test ./engine -run TruncateOnlineCrash -truncate.trials 2000
func TestTruncateOnlineCrash(t *testing.T) {
	trials := *truncateTrials
	if testing.Short() {
		trials = min(trials, 15)
	}
	var outcomes [2]int
	for seed := uint64(1); seed <= uint64(trials); seed++ {
		cut, err := truncateCrashTrial(t, seed)
		if err != nil {
			t.Errorf("seed %d: %v", seed, err)
			continue
		}
		if cut {
			outcomes[1]++
		} else {
			outcomes[0]++
		}
	}
	t.Logf("%d trials: the old log recovered in %d, the cut one in %d", trials, outcomes[0], outcomes[1])
}

func truncateCrashTrial(t *testing.T, seed uint64) (bool, error) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 0x7c7))
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: rng.IntN(2) == 0})
	o := Options{
		BackendImpl: fs, FlushMode: FlushMode(rng.IntN(2)), Logger: quietLogger,
		SegmentSizeBytes:          int64(4+rng.IntN(8)) * mappedfile.PageSize,
		ConsumeQueueFileSizeBytes: int64(5+rng.IntN(40)) * 20,
		IndexSlotCount:            1 + rng.IntN(11),
		IndexMaxEntries:           8 + rng.IntN(60),
		FlushInterval:             time.Millisecond,
		CommitInterval:            time.Millisecond,
		ConsumeQueueFlushInterval: time.Duration(1+rng.IntN(5)) * time.Millisecond,
		NoPreallocate:             rng.IntN(2) == 0,
	}
	dir := filepath.Join(t.TempDir(), fmt.Sprint(seed))
	s, err := Open(ctx, dir, o)
	if err != nil {
		return false, err
	}
	var ticks atomic.Int64
	msgs, err := crashWorkload(ctx, s, rng, seed, "", &ticks, 1+rng.IntN(4))
	if err != nil {
		s.Close()
		return false, err
	}
	if err := s.Close(); err != nil {
		return false, err
	}
	for i := range msgs { // all durable (a clean close); the cut ones may go
		msgs[i].acknowledged, msgs[i].mustSurvive = false, false
	}
	so := o
	so.Role = Slave
	keep := rng.IntN(len(msgs) + 1)
	var cut int64
	if keep < len(msgs) {
		cut = msgs[keep].physical
	} else {
		cut = msgs[len(msgs)-1].physical + int64(msgs[len(msgs)-1].size)
	}
	epoch2 := int64(-1)
	if keep > 0 && keep < len(msgs) {
		epoch2 = msgs[1+rng.IntN(keep)].physical // at or past the cut when it is the cut's record
	}
	prepare := func(s *Store) error {
		if err := s.AppendEpoch(ctx, 1, 0); err != nil {
			return err
		}
		if epoch2 > 0 {
			return s.AppendEpoch(ctx, 2, epoch2)
		}
		return nil
	}
	// How many operations the truncation makes: on a copy.
	clone := fs.Clone()
	co := so
	co.BackendImpl = clone
	sc, err := Open(ctx, dir, co)
	if err != nil {
		return false, fmt.Errorf("open the copy: %w", err)
	}
	if err := prepare(sc); err != nil {
		sc.Close()
		return false, err
	}
	oldEnd := sc.MaxOffset()
	before := clone.Ops()
	if _, err := sc.TruncateOnline(ctx, cut); err != nil {
		sc.Close()
		return false, fmt.Errorf("truncate the copy at %d: %w", cut, err)
	}
	ops := clone.Ops() - before
	sc.Close()

	s, err = Open(ctx, dir, so)
	if err != nil {
		return false, err
	}
	if err := prepare(s); err != nil {
		s.Close()
		return false, err
	}
	cutBytes := logBytes(t, s, cut, oldEnd)
	at := 1 + rng.Int64N(max(ops, 1))
	kill := rng.IntN(3) == 0
	tail := mappedfile.TornTail(rng.IntN(4))
	if kill {
		fs.ArmKill(at)
	} else {
		fs.ArmCrash(at, tail, rng)
	}
	_, terr := s.TruncateOnline(ctx, cut)
	if fs.Disarm() {
		fs.Crash(tail, rng) // after its last operation: crash now
	}
	reopenAfter(s, fs)
	what := fmt.Sprintf("cut at %d of [0, %d) (%d of %d records), crash at operation %d of %d (kill %v, tail %v), truncate returned %v",
		cut, oldEnd, keep, len(msgs), at, ops, kill, tail, terr)
	s, err = Open(ctx, dir, o)
	if err != nil {
		return false, fmt.Errorf("%s: reopen: %w", what, err)
	}
	end := s.MaxOffset()
	if end != cut && end != oldEnd {
		s.Close()
		return false, fmt.Errorf("%s: the log ends at %d, neither the old end nor the cut", what, end)
	}
	n, err := checkRecovered(ctx, s, msgs, 0)
	if err != nil {
		s.Close()
		return false, fmt.Errorf("%s: %w", what, err)
	}
	for _, e := range s.Epochs() {
		if e.StartOffset > end {
			s.Close()
			return false, fmt.Errorf("%s: epoch %v starts past the end %d", what, e, end)
		}
	}
	if end == cut && cut < oldEnd {
		data, err := s.fs.ReadFile(filepath.Join(dir, divergedDirName, segment.Name(cut)))
		if err != nil || !bytes.HasPrefix(cutBytes, data) || len(data) == 0 {
			s.Close()
			return false, fmt.Errorf("%s: the cut bytes are not kept in diverged/ (%d bytes, %v)", what, len(data), err)
		}
	}
	if err := s.Close(); err != nil {
		return false, fmt.Errorf("%s: close: %w", what, err)
	}
	if s, err = Open(ctx, dir, o); err != nil {
		return false, fmt.Errorf("%s: clean reopen: %w", what, err)
	}
	defer s.Close()
	if err := verifyClean(ctx, s); err != nil {
		return false, fmt.Errorf("%s: after a clean reopen (%d records): %w", what, n, err)
	}
	return end == cut && cut < oldEnd, nil
}

// TestTruncateOnlineToZero: a cut at 0 empties the log; the queues are
// empty and replication starts again from 0.
func TestTruncateOnlineToZero(t *testing.T) {
	ctx := context.Background()
	mo := smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})})
	so := smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{}), Role: Slave})
	master := openRole(t, t.TempDir(), mo)
	defer master.Close()
	puts := putRandom(t, master, rand.New(rand.NewPCG(9, 9)), 40, 3, 0)
	end := master.MaxOffset()
	slave := openRole(t, t.TempDir(), so)
	defer slave.Close()
	if _, err := slave.AppendReplicated(ctx, 0, logBytes(t, master, 0, end)); err != nil {
		t.Fatal(err)
	}
	res, err := slave.TruncateOnline(ctx, 0)
	if err != nil || res.CutBytes != end || slave.MaxOffset() != 0 {
		t.Fatalf("cut at 0: %+v %v, end %d", res, err, slave.MaxOffset())
	}
	checkQueuesAt(t, slave, nil, 3)
	if err := verifyClean(ctx, slave); err != nil {
		t.Fatal(err)
	}
	if _, err := slave.AppendReplicated(ctx, 0, logBytes(t, master, 0, end)); err != nil {
		t.Fatal(err)
	}
	if err := slave.WaitDispatched(ctx, end); err != nil {
		t.Fatal(err)
	}
	checkQueuesAt(t, slave, puts, 3)
	checkPrefix(t, master, slave)
}

// TestInterruptedCutIsFinished: on every backend, an Open that finds the
// intent file of a truncation (the process died after writing it) cuts
// the log there before recovering, and removes it; an intent file that
// does not hold an offset stops Open, naming it.
func TestInterruptedCutIsFinished(t *testing.T) {
	for _, b := range testBackends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			o := smallLogicsOptions(b.opts(t))
			dir := t.TempDir()
			s := openRole(t, dir, o)
			puts := putRandom(t, s, rand.New(rand.NewPCG(1, 2)), 60, 3, 0)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			fsys := s.fs
			intent := filepath.Join(dir, cutIntentFileName)
			if err := fsys.WriteFile(intent, []byte("not an offset\n")); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(ctx, dir, o); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), intent) {
				t.Fatalf("open with a damaged intent file: %v", err)
			}
			cut := puts[45].PhysicalOffset
			if err := fsys.WriteFile(intent, []byte(fmt.Sprintf("%d\n", cut))); err != nil {
				t.Fatal(err)
			}
			s = openRole(t, dir, o)
			defer s.Close()
			if s.MaxOffset() != cut {
				t.Fatalf("the log ends at %d, the interrupted cut was at %d", s.MaxOffset(), cut)
			}
			if ok, _ := fsys.Exists(intent); ok {
				t.Fatal("the intent file is still there")
			}
			checkQueuesAt(t, s, puts[:45], 3)
			if err := verifyClean(ctx, s); err != nil {
				t.Fatal(err)
			}
			res, err := s.Put(ctx, testMessage("Repl", 45%3, 45, 100))
			if err != nil || res.QueueOffset != puts[45].QueueOffset {
				t.Fatalf("the next Put to queue %d got queue offset %d (%v), want %d", 45%3, res.QueueOffset, err, puts[45].QueueOffset)
			}
		})
	}
}

// TestTruncateOnlineFailsPastTheCommitPoint: an I/O error while the
// segments are cut stops the store; the next Open finishes the cut.
func TestTruncateOnlineFailsPastTheCommitPoint(t *testing.T) {
	ctx := context.Background()
	mem := mappedfile.NewMemFS(mappedfile.MemOptions{})
	faults := faultfile.NewFaults()
	o := smallLogicsOptions(Options{BackendImpl: faultfile.NewFaulty(mem, faults)})
	dir := t.TempDir()
	s := openRole(t, dir, o)
	puts := putRandom(t, s, rand.New(rand.NewPCG(4, 4)), 60, 3, 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	o.Role = Slave
	s = openRole(t, dir, o)
	end := s.MaxOffset()
	faults.Add(faultfile.Fault{Op: faultfile.OpTruncate, PathContains: commitLogDirName, Err: syscall.EIO})
	cut := puts[30].PhysicalOffset
	if _, err := s.TruncateOnline(ctx, cut); !errors.Is(err, syscall.EIO) {
		t.Fatalf("truncate with a failing disk: %v", err)
	}
	if _, err := s.AppendReplicated(ctx, s.Stats().WroteOffset, []byte{1}); !errors.Is(err, ErrServiceNotAvailable) {
		t.Fatalf("a half-cut store took bytes: %v", err)
	}
	if err := s.Close(); err == nil {
		t.Fatal("a half-cut store closed cleanly")
	}
	faults.Clear()
	s = openRole(t, dir, o)
	defer s.Close()
	if s.MaxOffset() != cut || end == cut {
		t.Fatalf("reopened at %d; the cut was at %d of %d", s.MaxOffset(), cut, end)
	}
	checkQueuesAt(t, s, puts[:30], 3)
	if err := verifyClean(ctx, s); err != nil {
		t.Fatal(err)
	}
}
