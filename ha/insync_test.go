package ha

import (
	"context"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/tcpproxy"
)

// TestMinInSyncReplicasTwoSlaves: with MinInSyncReplicas 2 and two
// slaves, every PUT_OK's record is on both when Put returns; with one
// black-holed, Puts are never PUT_OK — FLUSH_SLAVE_TIMEOUT until it leaves
// the in-sync set, IN_SYNC_REPLICAS_NOT_ENOUGH after — and once it is
// back and caught up it rejoins and Puts are PUT_OK again.
func TestMinInSyncReplicasTwoSlaves(t *testing.T) {
	ctx := context.Background()
	master := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.SyncMaster, SlaveTimeout: 300 * time.Millisecond,
		MinInSyncReplicas: 2, InSyncMaxLagTime: 500 * time.Millisecond})
	defer master.Close()
	m := startMaster(t, master, fastMaster)
	defer m.Close()
	proxy, err := tcpproxy.New("127.0.0.1:0", m.Addr().String(), tcpproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	var slaves []*engine.Store
	for i, addr := range []string{proxy.Addr(), m.Addr().String()} {
		backend := []string{"mmap", "transient"}[i]
		s := open(t, t.TempDir(), engine.Options{Backend: backend, Role: engine.Slave})
		defer s.Close()
		slaves = append(slaves, s)
		rs := startSlave(t, s, addr, fastSlave)
		defer rs.stop()
	}
	// The set forms once both proved themselves: a first record does it.
	waitUntil(t, "two slaves connected", func() bool { return len(m.Slaves()) == 2 })
	for len(master.InSyncSlaves()) < 2 {
		if res, _ := master.Put(ctx, message(0, 100)); res.Status == engine.PutOK && len(master.InSyncSlaves()) < 2 {
			t.Fatalf("PUT_OK with %v in sync", master.InSyncSlaves())
		}
	}
	putOK := func(i int) {
		t.Helper()
		res, err := master.Put(ctx, message(i, 500))
		if res.Status != engine.PutOK {
			t.Fatalf("put %d: %v %v (in sync %v)", i, res.Status, err, master.InSyncSlaves())
		}
		end := res.PhysicalOffset + int64(res.Size)
		for j, s := range slaves {
			if c := s.Stats().CommittedOffset; c < end {
				t.Fatalf("PUT_OK for a record ending at %d; slave %d has committed %d", end, j, c)
			}
		}
	}
	for i := 1; i < 30; i++ {
		putOK(i)
	}
	proxy.Blackhole(true)
	statuses := map[engine.PutStatus]int{}
	for i := 30; statuses[engine.InSyncReplicasNotEnough] < 3; i++ {
		res, _ := master.Put(ctx, message(i, 500))
		if res.Status == engine.PutOK {
			t.Fatalf("PUT_OK with a member black-holed (in sync %v)", master.InSyncSlaves())
		}
		statuses[res.Status]++
	}
	t.Logf("with a member black-holed: %v", statuses)
	if st := master.ReplicationStats(); len(st.InSync) != 1 {
		t.Fatalf("in sync %v", st.InSync)
	}
	proxy.Blackhole(false)
	proxy.Drop()
	waitUntil(t, "the black-holed slave rejoins", func() bool {
		master.Put(ctx, message(500, 100)) // traffic for it to acknowledge
		return len(master.InSyncSlaves()) == 2
	})
	for i := 600; i < 620; i++ {
		putOK(i)
	}
	for _, s := range slaves {
		waitCaughtUp(t, master, s)
		sameLog(t, master, s)
	}
	for _, si := range m.Slaves() {
		if !si.InSync || !si.Verified {
			t.Fatalf("slave %+v", si)
		}
	}
}
