package ha

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/mqstore/mqstore/engine"
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
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(22, 1))
	ao := engine.Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})}
	bo := engine.Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})}
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
	co := engine.Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{}), Role: engine.Slave}
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

	// Another history: refused, nothing cut.
	do := engine.Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})}
	d := open(t, t.TempDir(), do)
	if err := d.AppendEpoch(ctx, 7, 0); err != nil {
		t.Fatal(err)
	}
	produce(t, d, 0, 30, rng)
	d = reopenAs(t, d, do, engine.Slave)
	defer d.Close()
	dEnd := d.MaxOffset()
	o := epochSlave
	o.MasterAddress = bm.Addr().String()
	ds, err := NewSlave(d, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := ds.Run(ctx); !errors.Is(err, ErrNoCommonEpoch) || !errors.Is(err, ErrDiverged) {
		t.Fatalf("a slave of another history: %v", err)
	}
	if d.MaxOffset() != dEnd || len(d.Epochs()) != 1 {
		t.Fatalf("the refused slave changed: end %d (was %d), epochs %v", d.MaxOffset(), dEnd, d.Epochs())
	}
}

// checkDiverged checks that the store's diverged/ directory holds the cut
// bytes, from offset on.
func checkDiverged(t *testing.T, o engine.Options, dir string, from int64, want []byte) {
	t.Helper()
	fs := o.BackendImpl.(*mappedfile.MemFS)
	names, err := fs.List(dir + "/diverged")
	if err != nil || len(names) == 0 {
		t.Fatalf("diverged/: %v %v", names, err)
	}
	var got []byte
	for _, n := range names {
		b, err := fs.ReadFile(dir + "/diverged/" + n)
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
