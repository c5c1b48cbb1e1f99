package ha

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/storefs"
	"github.com/mqstore/mqstore/mappedfile"
)

var epochSlave = func() SlaveOptions { o := fastSlave; o.EpochHandshake = true; return o }()

// reopenAs closes a store and opens its directory again with role.
func reopenAs(t *testing.T, s *engine.Store, o engine.Options, role engine.BrokerRole) *engine.Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	o.Role = role
	return open(t, s.Dir(), o)
}

// TestForkPointHandshake is a failover in miniature. A is master in epoch
// 1 and B replicates it; A takes records B never gets (acknowledged by
// nobody); B becomes master in epoch 2 at its end and takes other records
// at those offsets. A returns as a slave with the fork-point handshake: it
// compares the record before the point, cuts its unacknowledged tail there
// (keeping it in diverged/), and converges byte for byte with B — its
// epochs, queues and queue offsets B's. A new, empty replica C follows B
// too and records B's epochs; a replica of another history is refused and
// left untouched.
func TestForkPointHandshake(t *testing.T) {
	for _, backend := range []string{"mem", "mmap"} {
		t.Run(backend, func(t *testing.T) {
			opts := func() engine.Options {
				if backend == "mem" {
					return engine.Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})}
				}
				return engine.Options{Backend: backend}
			}
			forkPointHandshake(t, opts)
		})
	}
}

func forkPointHandshake(t *testing.T, opts func() engine.Options) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(22, 1))
	ao, bo := opts(), opts()
	a := open(t, t.TempDir(), ao)
	if err := a.AppendEpoch(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	produce(t, a, 0, 120, rng)
	bo.Role = engine.Slave
	b := open(t, t.TempDir(), bo)
	am := startMaster(t, a, fastMaster)
	rs := startSlave(t, b, am.Addr().String(), epochSlave)
	fork := waitCaughtUp(t, a, b)
	if err := rs.stop(); err != nil {
		t.Fatal(err)
	}
	if got := b.Epochs(); !reflect.DeepEqual(got, []engine.EpochEntry{{Epoch: 1, StartOffset: 0}}) {
		t.Fatalf("B recorded epochs %v from A", got)
	}
	produce(t, a, 120, 40, rng) // B never gets these
	am.Close()
	aEnd := a.MaxOffset()
	aTail := readLog(t, a, fork, aEnd)

	// B is elected for epoch 2 at its end and takes other records.
	b = reopenAs(t, b, bo, engine.AsyncMaster)
	if err := b.AppendEpoch(ctx, 2, b.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	produce(t, b, 500, 70, rng)
	bm := startMaster(t, b, fastMaster)
	defer bm.Close()

	// A returns as a slave of B.
	a = reopenAs(t, a, ao, engine.Slave)
	defer a.Close()
	ra := startSlave(t, a, bm.Addr().String(), epochSlave)
	waitUntil(t, "A caught up with B after the cut", func() bool {
		return a.Stats().WroteOffset == b.Stats().WroteOffset && ra.Status().Truncations == 1
	})
	end := waitCaughtUp(t, b, a)
	if err := ra.stop(); err != nil {
		t.Fatal(err)
	}
	sameLog(t, b, a)
	if a.MinOffset() != 0 || end != b.MaxOffset() {
		t.Fatalf("A holds [%d, %d), B [0, %d)", a.MinOffset(), end, b.MaxOffset())
	}
	want := []engine.EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 2, StartOffset: fork}}
	if got := b.Epochs(); !reflect.DeepEqual(got, want) {
		t.Fatalf("B's epochs %v, want %v", got, want)
	}
	if got := a.Epochs(); !reflect.DeepEqual(got, want) {
		t.Fatalf("A's epochs %v, want B's %v", got, want)
	}
	saved, err := a.TruncateOnline(ctx, a.MaxOffset()) // nothing to cut: says nothing was
	if err != nil || saved.CutBytes != 0 {
		t.Fatalf("a truncation at the end: %+v %v", saved, err)
	}
	checkDiverged(t, ao, a.Dir(), fork, aTail)
	sameQueues(t, b, a)
	if rep, err := a.Verify(ctx); err != nil || len(rep.Problems) > 0 {
		t.Fatalf("verify A: %v %v", err, rep.Problems)
	}

	// A new replica copies B and its epochs.
	co := opts()
	co.Role = engine.Slave
	c := open(t, t.TempDir(), co)
	defer c.Close()
	rc := startSlave(t, c, bm.Addr().String(), epochSlave)
	waitCaughtUp(t, b, c)
	if err := rc.stop(); err != nil {
		t.Fatal(err)
	}
	sameLog(t, b, c)
	if got := c.Epochs(); !reflect.DeepEqual(got, want) {
		t.Fatalf("C's epochs %v, want %v", got, want)
	}

	// Forks the histories do not prove safe to cut are refused, and
	// nothing changes: another history; a master of the same epoch that is
	// shorter (it lost records of its own epoch); a master of an older
	// epoch than the slave's.
	h := open(t, t.TempDir(), opts())
	defer h.Close()
	if err := h.AppendEpoch(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	produce(t, h, 0, 5, rng)
	hm := startMaster(t, h, fastMaster)
	defer hm.Close()
	other := epochStore(t, rng, opts(), []int32{7}, 30)
	defer other.Close()
	longer := epochStore(t, rng, opts(), []int32{1}, 30)
	defer longer.Close()
	for _, c := range []struct {
		name   string
		slave  *engine.Store
		master *Master
		want   error
	}{
		{"another history", other, bm, ErrNoCommonEpoch},
		{"a shorter master in its own epoch", longer, hm, ErrDiverged},
		{"a master of an older epoch", a, hm, ErrStaleMaster},
	} {
		end, epochs := c.slave.MaxOffset(), c.slave.Epochs()
		o := epochSlave
		o.MasterAddress = c.master.Addr().String()
		s, err := NewSlave(c.slave, o)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Run(ctx); !errors.Is(err, c.want) {
			t.Fatalf("%s: %v, want %v", c.name, err, c.want)
		}
		if c.slave.MaxOffset() != end || !reflect.DeepEqual(c.slave.Epochs(), epochs) || s.Status().Truncations != 0 {
			t.Fatalf("%s: the refused slave changed: end %d (was %d), epochs %v (were %v)", c.name, c.slave.MaxOffset(), end, c.slave.Epochs(), epochs)
		}
	}
}

// epochStore is a slave store holding n records written as a master in
// the given epochs (evenly spread).
func epochStore(t *testing.T, rng *rand.Rand, o engine.Options, epochs []int32, n int) *engine.Store {
	t.Helper()
	ctx := context.Background()
	s := open(t, t.TempDir(), o)
	for i, e := range epochs {
		if _, err := s.StartEpoch(ctx, e); err != nil {
			t.Fatal(err)
		}
		produce(t, s, i*n, n/len(epochs), rng)
	}
	return reopenAs(t, s, o, engine.Slave)
}

// checkDiverged checks that the store's diverged/ directory holds the cut
// bytes, from offset on.
func checkDiverged(t *testing.T, o engine.Options, dir string, from int64, want []byte) {
	t.Helper()
	var fsys storefs.FS = storefs.OS()
	if o.BackendImpl != nil {
		fsys = storefs.Of(o.BackendImpl)
	}
	names, err := fsys.List(filepath.Join(dir, "diverged"))
	if err != nil || len(names) == 0 {
		t.Fatalf("diverged/: %v %v", names, err)
	}
	var got []byte
	for _, n := range names {
		b, err := fsys.ReadFile(filepath.Join(dir, "diverged", n))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("diverged/ holds %d bytes (%v), the cut tail from %d is %d", len(got), names, from, len(want))
	}
}

// sameQueues checks that every queue of the test's topic has the same
// units in both stores, and that the next Put would get the same queue
// offset (the next offset both stores expect).
func sameQueues(t *testing.T, master, slave *engine.Store) {
	t.Helper()
	ctx := context.Background()
	for q := int32(0); q < 3; q++ {
		var next [2]int64
		for i, s := range []*engine.Store{master, slave} {
			for off := int64(0); ; {
				res, err := s.Get(ctx, "g", "HA", q, off, 32, nil)
				if err != nil {
					t.Fatal(err)
				}
				n := len(res.Messages)
				max := res.MaxOffset
				res.Release()
				if n == 0 {
					next[i] = max
					break
				}
				off += int64(n)
			}
		}
		if next[0] != next[1] {
			t.Fatalf("queue %d: the master's next offset is %d, the slave's %d", q, next[0], next[1])
		}
		for off := int64(0); off < next[0]; off++ {
			rm, err := master.Get(ctx, "g", "HA", q, off, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			rs, err := slave.Get(ctx, "g", "HA", q, off, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(rm.Messages) != 1 || len(rs.Messages) != 1 || rm.Messages[0].PhysicalOffset != rs.Messages[0].PhysicalOffset {
				t.Fatalf("queue %d offset %d: master %v slave %v", q, off, rm.Status, rs.Status)
			}
			rm.Release()
			rs.Release()
		}
	}
}

// TestForkPointComparesBeforeCutting: the record before the fork point
// differs from the master's (same sizes, another born time): the slave
// stops with ErrDiverged and cuts nothing.
func TestForkPointComparesBeforeCutting(t *testing.T) {
	ctx := context.Background()
	put := func(s *engine.Store, n int, born int64) {
		t.Helper()
		for i := 0; i < n; i++ {
			m := message(i, 100+i)
			m.BornTimestamp = born
			if _, err := s.Put(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	mo := engine.Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})}
	master := open(t, t.TempDir(), mo)
	defer master.Close()
	if _, err := master.StartEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	put(master, 20, 1_700_000_000_000)
	if _, err := master.StartEpoch(ctx, 2); err != nil {
		t.Fatal(err)
	}
	put(master, 5, 1_700_000_000_000)
	so := engine.Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})}
	slave := open(t, t.TempDir(), so)
	if _, err := slave.StartEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	put(slave, 30, 1_600_000_000_000)
	slave = reopenAs(t, slave, so, engine.Slave)
	defer slave.Close()
	end := slave.MaxOffset()
	m := startMaster(t, master, fastMaster)
	defer m.Close()
	o := epochSlave
	o.MasterAddress = m.Addr().String()
	s, err := NewSlave(slave, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx); !errors.Is(err, ErrDiverged) || !strings.Contains(err.Error(), "differs from this slave's") {
		t.Fatalf("a slave whose record before the fork differs: %v", err)
	}
	if slave.MaxOffset() != end || s.Status().Truncations != 0 {
		t.Fatalf("the slave was cut: end %d (was %d), %d truncations", slave.MaxOffset(), end, s.Status().Truncations)
	}
}

// TestForkPointDropsTheSlavesOwnEpochs: a slave elected for an epoch in
// which it wrote nothing, then demoted, follows a master that kept writing
// the earlier epoch: nothing is cut, and its history becomes the master's
// (its own epoch goes).
func TestForkPointDropsTheSlavesOwnEpochs(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	master := open(t, t.TempDir(), engine.Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})})
	defer master.Close()
	if _, err := master.StartEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	res := produce(t, master, 0, 20, rng)
	if err := master.WaitDispatched(ctx, master.Stats().WroteOffset); err != nil {
		t.Fatal(err)
	}
	p10 := res[10].PhysicalOffset
	slave := open(t, t.TempDir(), engine.Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{}), Role: engine.Slave})
	defer slave.Close()
	if _, err := slave.AppendReplicated(ctx, 0, readLog(t, master, 0, p10)); err != nil {
		t.Fatal(err)
	}
	for _, e := range []engine.EpochEntry{{Epoch: 1, StartOffset: 0}, {Epoch: 2, StartOffset: p10}} {
		if err := slave.AppendEpoch(ctx, e.Epoch, e.StartOffset); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := master.StartEpoch(ctx, 3); err != nil {
		t.Fatal(err)
	}
	produce(t, master, 20, 5, rng)
	m := startMaster(t, master, fastMaster)
	defer m.Close()
	rs := startSlave(t, slave, m.Addr().String(), epochSlave)
	waitCaughtUp(t, master, slave)
	if err := rs.stop(); err != nil {
		t.Fatal(err)
	}
	sameLog(t, master, slave)
	if got, want := slave.Epochs(), master.Epochs(); !reflect.DeepEqual(got, want) || rs.Status().Truncations != 0 {
		t.Fatalf("the slave's epochs %v, the master's %v; %d truncations", got, want, rs.Status().Truncations)
	}
}
