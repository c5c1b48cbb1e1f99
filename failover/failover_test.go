package failover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/mqstore/mqstore/controller"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/ha"
	"github.com/mqstore/mqstore/internal/tcpproxy"
	"github.com/mqstore/mqstore/mappedfile"
)

var quiet = slog.New(slog.DiscardHandler)

func testLog() *slog.Logger {
	if os.Getenv("FAILOVER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return quiet
}

// startControllers starts n controllers on raft's in-memory transport,
// their RPC on loopback TCP, and returns their RPC addresses.
func startControllers(t *testing.T, n int) []string {
	t.Helper()
	var peers []controller.Peer
	var trans []*raft.InmemTransport
	for i := 0; i < n; i++ {
		addr, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("inmem-%d", i+1)))
		trans = append(trans, tr)
		peers = append(peers, controller.Peer{ID: fmt.Sprintf("c%d", i+1), RaftAddr: string(addr)})
	}
	for i, a := range trans {
		for j, b := range trans {
			if i != j {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
	var addrs []string
	for i := 0; i < n; i++ {
		listen := deadAddr(t) // free now; the controller listens on it
		c, err := controller.Start(context.Background(), controller.Options{ID: peers[i].ID, Peers: peers, Transport: trans[i],
			Dir: "/ctl", Backend: mappedfile.NewMemFS(mappedfile.MemOptions{}), ListenAddr: listen,
			// Followers name the leader at an address nobody listens on, so
			// a broker reaches the controllers only through its own links
			// (proxies the tests can cut): a hint fails, and the client tries
			// its other addresses.
			AdvertiseAddr:    deadAddr(t),
			HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
			LeaderLeaseTimeout: 150 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
			BrokerExpiry: 600 * time.Millisecond, ScanInterval: 50 * time.Millisecond, Logger: testLog()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		addrs = append(addrs, listen)
	}
	return addrs
}

// deadAddr returns a loopback address nobody listens on now.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func brokerOptions(dir string, ctrls []string) Options {
	log := testLog()
	return Options{Set: "set-a", Dir: dir, Controllers: ctrls, HeartbeatInterval: 100 * time.Millisecond,
		AckTimeout: 2 * time.Second, ShrinkAfter: 500 * time.Millisecond, LeaseTimeout: 300 * time.Millisecond,
		Store: engine.Options{SegmentSizeBytes: 256 << 10, ConsumeQueueFileSizeBytes: 20 * 1000, IndexSlotCount: 1024, IndexMaxEntries: 4096, SlaveTimeout: 2 * time.Second,
			InSyncMaxLagTime: time.Second, Logger: log},
		Master: ha.MasterOptions{SendHeartbeatInterval: 100 * time.Millisecond, HousekeepingInterval: time.Second, Logger: log},
		Slave: ha.SlaveOptions{SendHeartbeatInterval: 100 * time.Millisecond, HousekeepingInterval: time.Second,
			ReconnectMinBackoff: 10 * time.Millisecond, ReconnectMaxBackoff: 100 * time.Millisecond, Logger: log},
		Logger: log}
}

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func message(i int) *engine.Message {
	body := []byte(fmt.Sprintf("body-%d-%s", i, bytes.Repeat([]byte{byte('a' + i%26)}, 100+i%700)))
	return &engine.Message{Topic: "FO", QueueID: int32(i % 3), Body: body,
		Properties: []engine.Property{{Name: "KEYS", Value: fmt.Sprintf("k%d", i)}}}
}

type cluster struct {
	t       *testing.T
	mu      sync.Mutex          // guards brokers against a producer goroutine
	proxies [][]*tcpproxy.Proxy // broker i's links to each controller
	ctrls   []string
	dirs    []string
	brokers []*Broker
	client  *controller.Client
}

// newCluster starts three controllers and three brokers following them.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	ctrls := startControllers(t, 3)
	client, err := controller.NewClient(ctrls, controller.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	c := &cluster{t: t, ctrls: ctrls, client: client, brokers: make([]*Broker, 3)}
	for i := 0; i < 3; i++ {
		c.dirs = append(c.dirs, filepath.Join(t.TempDir(), fmt.Sprintf("b%d", i)))
		var links []*tcpproxy.Proxy
		for _, a := range ctrls {
			p, err := tcpproxy.New("127.0.0.1:0", a, tcpproxy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			links = append(links, p)
		}
		c.proxies = append(c.proxies, links)
	}
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b, err := Start(ctx, brokerOptions(c.dirs[i], c.ctrlAddrs(i)))
			c.brokers[i] = b
			errs <- err
		}()
	}
	for i := 0; i < 3; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, b := range c.brokers {
			if b != nil {
				b.Close()
			}
		}
	})
	return c
}

func (c *cluster) start(i int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := Start(ctx, brokerOptions(c.dirs[i], c.ctrlAddrs(i)))
	if err != nil {
		c.t.Fatalf("start broker %d: %v", i, err)
	}
	c.set(i, b)
}

// ctrlAddrs are broker i's addresses of the controllers (its proxies).
func (c *cluster) ctrlAddrs(i int) []string {
	var out []string
	for _, p := range c.proxies[i] {
		out = append(out, p.Addr())
	}
	return out
}

// isolate cuts broker i off from every controller (on) or heals it.
func (c *cluster) isolate(i int, on bool) {
	for _, p := range c.proxies[i] {
		p.Blackhole(on)
	}
}

func (c *cluster) set(i int, b *Broker) {
	c.mu.Lock()
	c.brokers[i] = b
	c.mu.Unlock()
}

func (c *cluster) live() []*Broker {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Broker
	for _, b := range c.brokers {
		if b != nil {
			out = append(out, b)
		}
	}
	return out
}

// master returns the writable broker of the highest epoch (a master cut
// off from the controllers may still think itself writable).
func (c *cluster) master() *Broker {
	var best *Broker
	var epoch int32
	for _, b := range c.live() {
		if st := b.Status(); st.Writable && (best == nil || st.Epoch > epoch) {
			best, epoch = b, st.Epoch
		}
	}
	return best
}

func (c *cluster) byAddr(addr string) *Broker {
	for _, b := range c.live() {
		if b.Addr() == addr {
			return b
		}
	}
	return nil
}

func (c *cluster) info() *controller.BrokerSet {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.client.ReplicaInfo(ctx, "set-a")
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// put puts message i to the master, following NotMasterError hints and
// retrying a Put that was not acknowledged, until one is.
func (c *cluster) put(i int, acked map[string][]byte) {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	b := c.master()
	for {
		if b == nil {
			live := c.live()
			b = live[len(live)-1]
		}
		m := message(i)
		_, err := b.Put(context.Background(), m)
		if err == nil {
			acked[fmt.Sprintf("k%d", i)] = m.Body
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("put %d: not acknowledged within 15 s: %v", i, err)
		}
		var nm *NotMasterError
		if errors.As(err, &nm) {
			b = c.byAddr(nm.Addr)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func readAll(t *testing.T, b *Broker) (log []byte, start int64, keys map[string][]byte) {
	t.Helper()
	keys = map[string][]byte{}
	err := b.WithStore(func(s *engine.Store) error {
		r := s.CommitLogReader()
		start = r.Start()
		log = make([]byte, r.End()-start)
		if n, err := r.ReadAt(log, start); n != len(log) {
			return fmt.Errorf("read the log: %d of %d bytes: %w", n, len(log), err)
		}
		_, err := s.Scan(context.Background(), start, func(_ int64, _ []byte, rec *record.Record) error {
			if rec == nil {
				return nil
			}
			for _, k := range rec.Keys() {
				keys[k] = bytes.Clone(rec.Body)
			}
			return nil
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return log, start, keys
}

// TestFailover: three brokers follow three controllers. The first
// election names one master; the slaves join the in-sync set; the master
// dies and an in-sync slave becomes master within a bound and takes Puts;
// the old master, which had appended records nobody acknowledged, returns
// as a slave, is cut at the fork point and converges byte for byte; a Put
// to a slave is refused with the new master's address; every acknowledged
// record is on the final master.
func TestFailover(t *testing.T) {
	c := newCluster(t)
	// A fenced broker refuses writes before any role is confirmed.
	for _, b := range c.brokers {
		if st := b.Status(); st.Writable {
			continue
		}
		_, err := b.Put(context.Background(), message(-1))
		if err != nil && !errors.Is(err, ErrNotMaster) {
			t.Fatalf("a Put to a broker that is not the master: %v, want ErrNotMaster", err)
		}
	}
	waitUntil(t, "a master", 10*time.Second, func() bool { return c.master() != nil })
	first := c.master()
	if info := c.info(); info.MasterEpoch != 1 || info.MasterID != first.ID() || len(info.Replicas) != 3 {
		t.Fatalf("after the first election: master %d epoch %d replicas %d; broker %d is writable",
			info.MasterID, info.MasterEpoch, len(info.Replicas), first.ID())
	}
	acked := map[string][]byte{}
	next := 0
	for ; next < 200; next++ {
		c.put(next, acked)
	}
	waitUntil(t, "every replica in the controller's in-sync set", 10*time.Second, func() bool {
		return len(c.info().SyncStateSet) == 3
	})
	for ; next < 300; next++ {
		c.put(next, acked)
	}

	// A Put to a slave names the master.
	for _, b := range c.brokers {
		if b == first {
			continue
		}
		_, err := b.Put(context.Background(), message(-1))
		var nm *NotMasterError
		if !errors.As(err, &nm) || !errors.Is(err, ErrNotMaster) || nm.Addr != first.Addr() || nm.Epoch != 1 {
			t.Fatalf("a Put to slave %d: %v, want ErrNotMaster naming %s at epoch 1", b.ID(), err, first.Addr())
		}
	}

	// The master dies: its heartbeats stop and its store closes. Then
	// (while it is down) its log gains a tail no slave got, as if it had
	// appended records no one acknowledged before it died.
	oldIdx := slices.Index(c.brokers, first)
	oldID := first.ID()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	c.set(oldIdx, nil)

	waitUntil(t, "a new master", 15*time.Second, func() bool { return c.master() != nil })
	failover := time.Since(killed)
	second := c.master()
	t.Logf("failover: broker %d is master %v after broker %d died", second.ID(), failover.Round(time.Millisecond), oldID)
	if info := c.info(); info.MasterEpoch != 2 || info.MasterID != second.ID() || second.ID() == oldID {
		t.Fatalf("after the failover: master %d epoch %d (old master %d)", info.MasterID, info.MasterEpoch, oldID)
	}
	forkAt := appendTail(t, c.dirs[oldIdx], 40)
	t.Logf("the dead master's store gained an unacknowledged tail at %d", forkAt)
	for ; next < 400; next++ {
		c.put(next, acked)
	}

	// The old master returns: a slave, cut at the fork point.
	c.start(oldIdx)
	back := c.brokers[oldIdx]
	if back.ID() != oldID {
		t.Fatalf("the restarted broker got id %d, was %d", back.ID(), oldID)
	}
	waitUntil(t, "the old master following the new one", 10*time.Second, func() bool {
		st := back.Status()
		return st.Role == Slave && st.Epoch == 2
	})
	_, err := back.Put(context.Background(), message(-1))
	var nm *NotMasterError
	if !errors.As(err, &nm) || nm.Addr != second.Addr() || nm.Epoch != 2 {
		t.Fatalf("a Put to the demoted broker: %v, want ErrNotMaster naming %s at epoch 2", err, second.Addr())
	}
	for ; next < 450; next++ {
		c.put(next, acked)
	}
	waitUntil(t, "every replica byte-identical with the master", 15*time.Second, func() bool {
		want, _, _ := readAll(t, second)
		for _, b := range c.brokers {
			if got, _, _ := readAll(t, b); !bytes.Equal(got, want) {
				return false
			}
		}
		return true
	})
	names, err := os.ReadDir(filepath.Join(c.dirs[oldIdx], "diverged"))
	if err != nil || len(names) == 0 {
		t.Fatalf("the old master's cut tail (from %d) was not kept in diverged/: %v %v", forkAt, names, err)
	}
	_, _, keys := readAll(t, second)
	for k, body := range acked {
		if got, ok := keys[k]; !ok || !bytes.Equal(got, body) {
			t.Fatalf("acknowledged %s is not on the final master (found %v)", k, ok)
		}
	}
	for i := 0; i < 40; i++ {
		if _, ok := keys[fmt.Sprintf("tail%d", i)]; ok {
			t.Fatalf("the unacknowledged tail record tail%d survived", i)
		}
	}
	waitUntil(t, "the old master back in the in-sync set", 10*time.Second, func() bool {
		return slices.Contains(c.info().SyncStateSet, oldID)
	})
}

// appendTail opens a dead master's store directly and appends n records
// in its epoch, as if it had taken them and died before any slave got
// them; it returns where they start.
func appendTail(t *testing.T, dir string, n int) int64 {
	t.Helper()
	o := brokerOptions(dir, nil).Store
	s, err := engine.Open(context.Background(), dir, o)
	if err != nil {
		t.Fatal(err)
	}
	at := s.MaxOffset()
	for i := 0; i < n; i++ {
		m := &engine.Message{Topic: "FO", QueueID: int32(i % 3), Body: []byte(fmt.Sprintf("tail-%d", i)),
			Properties: []engine.Property{{Name: "KEYS", Value: fmt.Sprintf("tail%d", i)}}}
		if _, err := s.Put(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return at
}

// TestDemotion: an operator's election moves the master while it is
// alive and a producer keeps writing to it. The old master stops
// acknowledging at once — its Puts, in flight or new, fail with
// ErrNotMaster naming the new master and epoch — follows the new master
// and converges; every acknowledged record is on the new master.
func TestDemotion(t *testing.T) {
	c := newCluster(t)
	waitUntil(t, "a master", 10*time.Second, func() bool { return c.master() != nil })
	first := c.master()
	acked := map[string][]byte{}
	next := 0
	for ; next < 100; next++ {
		c.put(next, acked)
	}
	waitUntil(t, "every replica in the controller's in-sync set", 10*time.Second, func() bool {
		return len(c.info().SyncStateSet) == 3
	})
	var target *Broker
	for _, b := range c.brokers {
		if b != first {
			target = b
			break
		}
	}

	// Producers write to the first master only, until it refuses.
	type outcome struct {
		key  string
		body []byte
		err  error
	}
	results := make(chan outcome, 1024)
	stop := make(chan struct{})
	const producers = 4
	for p := 0; p < producers; p++ {
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					results <- outcome{}
					return
				default:
				}
				n := 100000*(p+1) + i
				m := message(n)
				_, err := first.Put(context.Background(), m)
				results <- outcome{key: fmt.Sprintf("k%d", n), body: m.Body, err: err}
				if errors.Is(err, ErrNotMaster) {
					results <- outcome{}
					return
				}
			}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	deadline := time.Now().Add(2 * time.Second)
	for n := 0; n < 20 && time.Now().Before(deadline); {
		o := <-results
		if o.err == nil && o.key != "" {
			acked[o.key] = o.body
			n++
		}
	}
	if _, err := c.client.ElectMaster(ctx, controller.ElectRequest{Set: "set-a", BrokerID: target.ID()}); err != nil {
		t.Fatal(err)
	}
	refused := 0
	for done := 0; done < producers; {
		o := <-results
		switch {
		case o.key == "":
			done++
		case o.err == nil:
			acked[o.key] = o.body
		case errors.Is(o.err, ErrNotMaster):
			var nm *NotMasterError
			if !errors.As(o.err, &nm) {
				t.Fatalf("ErrNotMaster without a NotMasterError: %v", o.err)
			}
			// Fenced while switching, the hint may still be the broker
			// itself; once it follows, it names the new master.
			if nm.Epoch == 2 && nm.Role == Slave && nm.Addr != target.Addr() {
				t.Fatalf("the demoted master names %s, the new master is %s", nm.Addr, target.Addr())
			}
			refused++
		default:
			// Not acknowledged for another reason (the in-sync set
			// changing under it): not counted as acknowledged.
		}
	}
	close(stop)
	if refused == 0 {
		t.Fatal("no Put was refused with ErrNotMaster")
	}
	waitUntil(t, "the old master following the new one", 10*time.Second, func() bool {
		st := first.Status()
		return st.Role == Slave && st.Epoch == 2
	})
	_, err := first.Put(context.Background(), message(-1))
	var nm *NotMasterError
	if !errors.As(err, &nm) || nm.Addr != target.Addr() || nm.Epoch != 2 || nm.MasterID != target.ID() {
		t.Fatalf("a Put to the demoted master: %v, want ErrNotMaster naming broker %d at %s, epoch 2", err, target.ID(), target.Addr())
	}
	waitUntil(t, "the new master writable", 10*time.Second, func() bool { return target.Status().Writable })
	for ; next < 150; next++ {
		c.put(next, acked)
	}
	waitUntil(t, "every replica byte-identical with the master", 15*time.Second, func() bool {
		want, _, _ := readAll(t, target)
		for _, b := range c.brokers {
			if got, _, _ := readAll(t, b); !bytes.Equal(got, want) {
				return false
			}
		}
		return true
	})
	_, _, keys := readAll(t, target)
	for k, body := range acked {
		if got, ok := keys[k]; !ok || !bytes.Equal(got, body) {
			t.Fatalf("acknowledged %s is not on the new master (found %v)", k, ok)
		}
	}
	t.Logf("%d acknowledged records, %d Puts refused with ErrNotMaster", len(acked), refused)
}
