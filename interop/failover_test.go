package interop

import (
	"context"
	"flag"
	"sync"
	"testing"
	"time"

	"github.com/mqstore/mqstore/broker"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/ha"
	"github.com/mqstore/mqstore/namesrv"
)

var failover = flag.Bool("interop.failover", false,
	"run TestConsumeFromSlaveAfterMasterDies (about 90 s: the client's 30 s pull timeout and route refresh)")

// TestConsumeFromSlaveAfterMasterDies: a push consumer holding its queues
// goes on consuming from the slave once the master is gone — RocketMQ
// 4.x's failover: the name server drops the master when its connection
// closes, and the client's next route refresh sends its pulls to the slave.
func TestConsumeFromSlaveAfterMasterDies(t *testing.T) {
	ns, err := namesrv.Start(namesrv.Options{ListenAddr: "127.0.0.1:0", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	master := startNode(t, t.TempDir(), "127.0.0.1:0", ns.Addr())
	hm, err := ha.NewMaster(master.store, ha.MasterOptions{ListenAddr: "127.0.0.1:0", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	// The slave: a store opened as a slave, replicating the master, served
	// under the same broker name.
	ln, err := broker.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	slaveHost, _ := broker.StoreHost(ln.Addr().String())
	slaveStore, err := engine.Open(context.Background(), t.TempDir(), engine.Options{Backend: "mmap", SegmentSizeBytes: 16 << 20,
		ConsumeQueueFileSizeBytes: 20 * 4096, IndexSlotCount: 4096, IndexMaxEntries: 16384, StoreHost: slaveHost,
		Role: engine.Slave, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer slaveStore.Close()
	hs, err := ha.NewSlave(slaveStore, ha.SlaveOptions{MasterAddress: hm.Addr().String(), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); hs.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	sb, err := broker.New(slaveStore, ln, broker.Options{Namesrv: []string{ns.Addr()}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	slave := &node{t: t, store: slaveStore, broker: sb}

	c := &cluster{ns: ns, node: master}
	p := newProducer(t, c)
	warm := sendN(t, p, "failover", 4, nil) // one per queue: every queue's offset resolved at the master
	got := newReceived()
	pc := newPushConsumer(t, c, "failover-group", "failover", "", got)
	waitFor(t, 30*time.Second, "the warm-up consumed", func() bool { return got.len() == len(warm) })

	pc.Suspend()
	// Let the pulls held at the master end (20 s holds) so none is left
	// waiting for the client's 30 s timeout on a dead connection.
	waitFor(t, 30*time.Second, "no pull held at the master", func() bool { return master.broker.HeldPulls() == 0 })
	backlog := sendN(t, p, "failover", 20, nil)
	// Every message sent, counted at the slave — not the slave's count
	// against the master's: the master's dispatch runs behind its puts, so
	// both could read the same lower count while the last records were
	// still on their way to the slave, which then never got them.
	want := int64(len(warm) + len(backlog))
	waitFor(t, 30*time.Second, "the slave has the backlog", func() bool {
		return slave.countMessages("failover", 4) == want
	})
	hm.Close()
	master.stop() // the name server drops it when its registration connection closes
	start := time.Now()
	pc.Resume()
	waitFor(t, 120*time.Second, "the backlog consumed from the slave", func() bool {
		msgs, _ := got.snapshot()
		for id := range backlog {
			if _, ok := msgs[id]; !ok {
				return false
			}
		}
		return true
	})
	t.Logf("%d messages consumed from the slave %v after the master stopped", len(backlog), time.Since(start).Round(time.Second))
}
