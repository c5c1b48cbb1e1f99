package controller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/mqstore/mqstore/internal/tcpproxy"
	"github.com/mqstore/mqstore/mappedfile"
)

// testCluster is n controllers in one process on raft's in-memory
// transport, each with its own MemFS.
type testCluster struct {
	t     *testing.T
	ctrls []*Controller
	trans []*raft.InmemTransport
	fs    []*mappedfile.MemFS
	peers []Peer
	mu    sync.Mutex // guards ctrls against the heartbeat goroutine
	tweak []func(*Options)
}

func (tc *testCluster) options(i int) Options {
	o := fastOptions(tc.peers[i].ID, tc.peers, tc.trans[i], tc.fs[i])
	for _, f := range tc.tweak {
		f(&o)
	}
	return o
}

func fastOptions(id string, peers []Peer, tr raft.Transport, fs *mappedfile.MemFS) Options {
	return Options{ID: id, Peers: peers, Transport: tr, Dir: "/ctl", Backend: fs,
		HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond,
		LeaderLeaseTimeout: 50 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
		BrokerExpiry: 400 * time.Millisecond, ScanInterval: 40 * time.Millisecond, Logger: quietLog()}
}

func newTestCluster(t *testing.T, n int, tweak ...func(*Options)) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, tweak: tweak}
	for i := 0; i < n; i++ {
		addr, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("inmem-%d", i+1)))
		tc.trans = append(tc.trans, tr)
		tc.peers = append(tc.peers, Peer{ID: fmt.Sprintf("c%d", i+1), RaftAddr: string(addr)})
		tc.fs = append(tc.fs, mappedfile.NewMemFS(mappedfile.MemOptions{}))
	}
	tc.connectAll()
	for i := 0; i < n; i++ {
		c, err := Start(context.Background(), tc.options(i))
		if err != nil {
			t.Fatal(err)
		}
		tc.ctrls = append(tc.ctrls, c)
	}
	t.Cleanup(func() {
		for _, c := range tc.ctrls {
			if c != nil {
				c.Close()
			}
		}
	})
	return tc
}

func (tc *testCluster) connectAll() {
	for i, a := range tc.trans {
		for j, b := range tc.trans {
			if i != j && a != nil && b != nil {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
}

// stop closes controller i and cuts it off.
func (tc *testCluster) stop(i int) {
	tc.ctrls[i].Close()
	tc.ctrls[i] = nil
	tc.trans[i].DisconnectAll()
	for j, o := range tc.trans {
		if j != i {
			o.Disconnect(tc.trans[i].LocalAddr())
		}
	}
}

// restart starts controller i again on its MemFS.
func (tc *testCluster) restart(i int) {
	_, tr := raft.NewInmemTransport(tc.trans[i].LocalAddr())
	tc.trans[i] = tr
	tc.connectAll()
	c, err := Start(context.Background(), tc.options(i))
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.ctrls[i] = c
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (tc *testCluster) leader() *Controller {
	tc.t.Helper()
	var l *Controller
	waitFor(tc.t, "a ready leader", 10*time.Second, func() bool {
		for _, c := range tc.ctrls {
			if c != nil && c.IsLeader() {
				l = c
				return true
			}
		}
		return false
	})
	return l
}

// onLeader runs f on the leader, again on a new one while it answers
// "not leader".
func onLeader[T any](tc *testCluster, f func(c *Controller) (T, error)) (T, error) {
	tc.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := f(tc.leader())
		if !errors.Is(err, ErrNotLeader) || time.Now().After(deadline) {
			return v, err
		}
	}
}

// brokers sends heartbeats for the replicas of set "s" to every
// controller (only the leader keeps them) until stopped.
type brokers struct {
	mu      sync.Mutex
	state   map[int64]*Heartbeat
	stopped map[int64]bool
	done    chan struct{}
	wg      sync.WaitGroup
}

func startBrokers(tc *testCluster, hbs ...Heartbeat) *brokers {
	b := &brokers{state: map[int64]*Heartbeat{}, stopped: map[int64]bool{}, done: make(chan struct{})}
	for i := range hbs {
		b.state[hbs[i].ID] = &hbs[i]
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		t := time.NewTicker(40 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-b.done:
				return
			case <-t.C:
			}
			b.mu.Lock()
			var send []Heartbeat
			for id, hb := range b.state {
				if !b.stopped[id] {
					send = append(send, *hb)
				}
			}
			b.mu.Unlock()
			for _, c := range tc.liveCtrls() {
				for _, hb := range send {
					c.Heartbeat(context.Background(), hb)
				}
			}
		}
	}()
	tc.t.Cleanup(func() { close(b.done); b.wg.Wait() })
	return b
}

func (tc *testCluster) liveCtrls() []*Controller {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	var out []*Controller
	for _, c := range tc.ctrls {
		if c != nil {
			out = append(out, c)
		}
	}
	return out
}

func (b *brokers) set(id int64, f func(hb *Heartbeat)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b.state[id])
}

func (b *brokers) stop(id int64, stopped bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped[id] = stopped
}

func (tc *testCluster) setState(c *Controller) *BrokerSet { return c.FSM().Set("s") }

func TestControllerFailover(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	for i, code := range []string{"a", "b", "c"} {
		r, err := onLeader(tc, func(c *Controller) (*Replica, error) {
			return c.Register(ctx, RegisterRequest{Set: "s", Addr: "b" + code, HAAddr: "ha" + code, RegisterCode: code})
		})
		if err != nil || r.ID != int64(i+1) {
			t.Fatalf("register %s: %+v %v", code, r, err)
		}
	}
	// Followers refuse, naming the leader.
	leader := tc.leader()
	for _, c := range tc.ctrls {
		if c == leader {
			continue
		}
		// A follower learns who leads from the leader's next append: the
		// entries above may have committed on the other follower alone.
		var err error
		var nl *NotLeaderError
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			_, err = c.Register(ctx, RegisterRequest{Set: "s", Addr: "x", RegisterCode: "z"})
			if !errors.As(err, &nl) || nl.LeaderID != "" || time.Now().After(deadline) {
				break
			}
		}
		if !errors.As(err, &nl) || nl.LeaderID != leader.ID() {
			t.Fatalf("register on a follower: %v", err)
		}
		if _, err := c.Heartbeat(ctx, Heartbeat{Set: "s", ID: 1}); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("heartbeat to a follower: %v", err)
		}
	}
	if _, err := leader.Heartbeat(ctx, Heartbeat{Set: "s", ID: 9}); !errors.Is(err, ErrInvalidReplicas) {
		t.Fatalf("heartbeat from an unregistered broker: %v", err)
	}

	// Broker 3 heartbeats late: no first election before it does.
	bs := startBrokers(tc, Heartbeat{Set: "s", ID: 1, MaxOffset: 100}, Heartbeat{Set: "s", ID: 2, MaxOffset: 300},
		Heartbeat{Set: "s", ID: 3, MaxOffset: 100})
	bs.stop(3, true)
	waitFor(t, "the grace of the new leader to pass", 5*time.Second, func() bool {
		l := tc.leader()
		l.mu.Lock()
		defer l.mu.Unlock()
		return time.Now().After(l.graceUntil.Add(3 * l.opts.ScanInterval))
	})
	if b := tc.setState(tc.leader()); b.MasterEpoch != 0 {
		t.Fatalf("a first election before every replica heartbeated: %+v", b)
	}
	bs.stop(3, false)
	waitFor(t, "the first election", 5*time.Second, func() bool { return tc.setState(tc.leader()).MasterEpoch == 1 })
	b := tc.setState(tc.leader())
	if b.MasterID != 2 || !slices.Equal(b.SyncStateSet, []int64{2}) {
		t.Fatalf("first election: want broker 2 (the longest log) alone in sync: %+v", b)
	}

	// The master adds broker 1; broker 3 stays out of sync with the
	// longest log, so it is the tempting wrong choice later.
	b, err := onLeader(tc, func(c *Controller) (*BrokerSet, error) {
		return c.AlterSyncStateSet(ctx, AlterSyncStateSetCmd{Set: "s", MasterID: 2, MasterEpoch: 1, SyncStateSetEpoch: 1, NewSyncStateSet: []int64{1, 2}})
	})
	if err != nil || b.SyncStateSetEpoch != 2 {
		t.Fatalf("alter: %+v %v", b, err)
	}
	_, err = onLeader(tc, func(c *Controller) (*BrokerSet, error) {
		return c.AlterSyncStateSet(ctx, AlterSyncStateSetCmd{Set: "s", MasterID: 2, MasterEpoch: 1, SyncStateSetEpoch: 1, NewSyncStateSet: []int64{1, 2, 3}})
	})
	if !errors.Is(err, ErrFencedSyncStateSetEpoch) {
		t.Fatalf("a stale alter: %v", err)
	}
	bs.set(3, func(hb *Heartbeat) { hb.MaxOffset = 5000; hb.LastEpoch = 1 })
	bs.set(1, func(hb *Heartbeat) { hb.LastEpoch = 1; hb.MaxOffset = 250 })

	// The master's heartbeats stop: broker 1, the alive in-sync member,
	// becomes master at epoch 2; the inherited set loses the old master.
	bs.stop(2, true)
	waitFor(t, "the failover", 5*time.Second, func() bool { return tc.setState(tc.leader()).MasterEpoch == 2 })
	b = tc.setState(tc.leader())
	if b.MasterID != 1 || !slices.Equal(b.SyncStateSet, []int64{1}) || b.SyncStateSetEpoch != 3 {
		t.Fatalf("after the master died: %+v", b)
	}
	// The deposed master's alter at its old epoch is refused.
	_, err = onLeader(tc, func(c *Controller) (*BrokerSet, error) {
		return c.AlterSyncStateSet(ctx, AlterSyncStateSetCmd{Set: "s", MasterID: 2, MasterEpoch: 1, SyncStateSetEpoch: 3, NewSyncStateSet: []int64{2}})
	})
	if !errors.Is(err, ErrInvalidMaster) {
		t.Fatalf("the deposed master's alter: %v", err)
	}
	// An operator's election of a replica outside the set is refused.
	waitFor(t, "an answer other than \"not alive\" (a new leader has not heard broker 3 yet)", 5*time.Second, func() bool {
		_, err = onLeader(tc, func(c *Controller) (*BrokerSet, error) {
			return c.ElectMaster(ctx, ElectRequest{Set: "s", BrokerID: 3})
		})
		return !errors.Is(err, ErrBrokerNotAlive)
	})
	if !errors.Is(err, ErrElectMasterFailed) {
		t.Fatalf("electing broker 3 outside the in-sync set: %v", err)
	}

	// The new master dies too: only broker 3 is alive, and it is not in
	// sync: the leader says so and elects nobody.
	bs.stop(1, true)
	waitFor(t, "the leader to find no electable replica", 5*time.Second, func() bool {
		l := tc.leader()
		l.mu.Lock()
		defer l.mu.Unlock()
		_, logged := l.noCand["s"]
		return logged && l.noCand["s"] == 2
	})
	if b := tc.setState(tc.leader()); b.MasterID != 1 || b.MasterEpoch != 2 {
		t.Fatalf("a replica outside the in-sync set was elected: %+v", b)
	}

	// A leader change keeps the state; broker 1 comes back first.
	bs.stop(1, false)
	before := tc.setState(tc.leader())
	old := tc.leader()
	if err := old.Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	oldIdx := slices.Index(tc.ctrls, old)
	tc.mu.Lock()
	tc.stop(oldIdx)
	tc.mu.Unlock()
	nl := tc.leader()
	if nl == old {
		t.Fatal("the stopped controller is still the leader")
	}
	if after := tc.setState(nl); !reflect.DeepEqual(before, after) {
		t.Fatalf("the new leader's state differs:\n%+v\n%+v", before, after)
	}
	// The stopped controller restarts from its snapshot and log.
	tc.mu.Lock()
	tc.restart(oldIdx)
	tc.mu.Unlock()
	waitFor(t, "the restarted controller to catch up", 5*time.Second, func() bool {
		return reflect.DeepEqual(tc.setState(tc.ctrls[oldIdx]), before)
	})

	// With unclean elections allowed, the dead set gets a master again.
	bs.stop(1, true)
	if _, err := onLeader(tc, func(c *Controller) (*BrokerSet, error) {
		return c.SetConfig(ctx, "s", SetConfig{UncleanElection: true, MinInSyncReplicas: 1})
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the unclean election", 5*time.Second, func() bool { return tc.setState(tc.leader()).MasterEpoch == 3 })
	if b := tc.setState(tc.leader()); b.MasterID != 3 || !slices.Equal(b.SyncStateSet, []int64{3}) {
		t.Fatalf("after the unclean election: %+v", b)
	}
	// The status shows the master alive and the others dead (a leader
	// change in between starts its table empty: ask until it has heard).
	waitFor(t, "the status to show broker 3 as the live master", 5*time.Second, func() bool {
		st, err := onLeader(tc, func(c *Controller) (*ClusterStatus, error) { return c.Status(ctx) })
		if err != nil || len(st.Sets) != 1 || len(st.Sets[0].Replicas) != 3 {
			t.Fatalf("status: %+v %v", st, err)
		}
		for _, r := range st.Sets[0].Replicas {
			if r.Master != (r.ID == 3) {
				t.Fatalf("status row %+v", r)
			}
			if (r.ID == 3) != r.Alive {
				return false
			}
		}
		return true
	})
}

// TestControllerPowerLoss cuts the power of a follower, then of the
// leader, after snapshots compacted their logs: each comes back with every
// entry its log store had acknowledged, and catches up with the group.
func TestControllerPowerLoss(t *testing.T) {
	tc := newTestCluster(t, 3, func(o *Options) { o.TrailingLogs = 2 })
	ctx := context.Background()
	n := 0
	register := func(k int) {
		t.Helper()
		for i := 0; i < k; i++ {
			n++
			if _, err := onLeader(tc, func(c *Controller) (*Replica, error) {
				return c.Register(ctx, RegisterRequest{Set: fmt.Sprintf("s%d", n%4), Addr: fmt.Sprintf("b%d", n), RegisterCode: fmt.Sprint(n)})
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	register(12)
	rng := rand.New(rand.NewPCG(7, 7))
	for round, pickLeader := range []bool{false, true} {
		l := tc.leader()
		victim := -1
		for i, c := range tc.ctrls {
			if (c == l) == pickLeader {
				victim = i
				break
			}
		}
		c := tc.ctrls[victim]
		register(5)
		waitFor(t, "the victim to apply every entry", 5*time.Second, func() bool {
			return reflect.DeepEqual(c.FSM().Sets(), tc.leader().FSM().Sets())
		})
		if err := c.Raft().Snapshot().Error(); err != nil {
			t.Fatalf("round %d: snapshot: %v", round, err)
		}
		first, _ := c.logs.FirstIndex()
		last, _ := c.logs.LastIndex()
		if first <= 1 {
			t.Fatalf("round %d: the snapshot did not compact the log (first index %d)", round, first)
		}
		tc.mu.Lock()
		tc.stop(victim)
		tc.mu.Unlock()
		tc.fs[victim].Crash(mappedfile.TornTail(1+rng.IntN(3)), rng)
		tc.fs[victim].Restart()
		s, err := OpenLogStore(ctx, "/ctl/raft-log", LogStoreOptions{Backend: tc.fs[victim]})
		if err != nil {
			t.Fatalf("round %d: reopen the log after the power loss: %v", round, err)
		}
		gotFirst, _ := s.FirstIndex()
		gotLast, _ := s.LastIndex()
		s.Close()
		if gotFirst != first || gotLast < last {
			t.Fatalf("round %d: log %d-%d before the power loss, %d-%d after", round, first, last, gotFirst, gotLast)
		}
		// While the victim is down the others go on and compact their logs
		// past its end: it catches up through an installed snapshot.
		register(6)
		for _, c := range tc.ctrls {
			if c != nil {
				if err := c.Raft().Snapshot().Error(); err != nil {
					t.Fatalf("round %d: snapshot of %s: %v", round, c.ID(), err)
				}
			}
		}
		tc.mu.Lock()
		tc.restart(victim)
		tc.mu.Unlock()
		waitFor(t, "the restarted controller to catch up", 10*time.Second, func() bool {
			return reflect.DeepEqual(tc.ctrls[victim].FSM().Sets(), tc.leader().FSM().Sets())
		})
		register(2) // and appends after the installed snapshot
		waitFor(t, "the restarted controller to follow", 10*time.Second, func() bool {
			return reflect.DeepEqual(tc.ctrls[victim].FSM().Sets(), tc.leader().FSM().Sets())
		})
		if f, _ := tc.ctrls[victim].logs.FirstIndex(); f <= last {
			t.Fatalf("round %d: the victim's log starts at %d, not past its old end %d: no snapshot was installed", round, f, last)
		}
	}
	total := 0
	for _, b := range tc.leader().FSM().Sets() {
		total += len(b.Replicas)
	}
	if total != n {
		t.Fatalf("%d brokers registered, the state holds %d", n, total)
	}
}

// TestControllerPartitionedLeader cuts the leader off from the group: it
// stops acting as leader, the majority elects another that fails the set
// over when the master's heartbeats stop, and after the heal the old
// leader follows the new state.
func TestControllerPartitionedLeader(t *testing.T) {
	tc := newTestCluster(t, 3)
	ctx := context.Background()
	for _, code := range []string{"a", "b", "c"} {
		if _, err := onLeader(tc, func(c *Controller) (*Replica, error) {
			return c.Register(ctx, RegisterRequest{Set: "s", Addr: "b" + code, RegisterCode: code})
		}); err != nil {
			t.Fatal(err)
		}
	}
	bs := startBrokers(tc, Heartbeat{Set: "s", ID: 1, MaxOffset: 9}, Heartbeat{Set: "s", ID: 2}, Heartbeat{Set: "s", ID: 3})
	waitFor(t, "the first election", 5*time.Second, func() bool { return tc.setState(tc.leader()).MasterEpoch == 1 })
	if _, err := onLeader(tc, func(c *Controller) (*BrokerSet, error) {
		return c.AlterSyncStateSet(ctx, AlterSyncStateSetCmd{Set: "s", MasterID: 1, MasterEpoch: 1, SyncStateSetEpoch: 1, NewSyncStateSet: []int64{1, 2, 3}})
	}); err != nil {
		t.Fatal(err)
	}
	old := tc.leader()
	oi := slices.Index(tc.ctrls, old)
	for j, tr := range tc.trans {
		if j != oi {
			tr.Disconnect(tc.trans[oi].LocalAddr())
			tc.trans[oi].Disconnect(tr.LocalAddr())
		}
	}
	waitFor(t, "the cut-off leader to step down", 5*time.Second, func() bool { return !old.IsLeader() })
	if _, err := old.Register(ctx, RegisterRequest{Set: "s", Addr: "x", RegisterCode: "x"}); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("register on the cut-off controller: %v", err)
	}
	nl := tc.leader()
	if nl == old {
		t.Fatal("the cut-off controller is the leader again")
	}
	bs.stop(1, true)
	waitFor(t, "the failover by the new leader", 5*time.Second, func() bool { return tc.setState(nl).MasterEpoch == 2 })
	if b := tc.setState(nl); b.MasterID == 1 || !b.InSync(b.MasterID) || !slices.Equal(b.SyncStateSet, []int64{2, 3}) {
		t.Fatalf("after the failover: %+v", b)
	}
	if b := tc.setState(old); b.MasterEpoch != 1 {
		t.Fatalf("the cut-off controller applied %+v", b)
	}
	tc.connectAll()
	waitFor(t, "the old leader to follow the new state", 5*time.Second, func() bool {
		return reflect.DeepEqual(tc.setState(old), tc.setState(tc.leader()))
	})
}

// TestClientKeepsToItsAddresses: a client that reaches the controllers
// through proxies follows a follower's leader hint (the leader's own
// listen address) only when none of its own addresses leads, and never
// keeps it, so cutting its proxies cuts it off.
func TestClientKeepsToItsAddresses(t *testing.T) {
	tc := newTestCluster(t, 3, func(o *Options) { o.ListenAddr = "127.0.0.1:0" })
	leader := tc.leader()
	var proxies []*tcpproxy.Proxy
	var first, last []string
	for _, c := range tc.ctrls {
		p, err := tcpproxy.New("127.0.0.1:0", c.Addr(), tcpproxy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		proxies = append(proxies, p)
		if c == leader {
			last = append(last, p.Addr())
		} else {
			first = append(first, p.Addr()) // followers first: their answers carry the hint
		}
	}
	client, err := NewClient(append(first, last...), ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.Status(ctx); err != nil {
		t.Fatal(err)
	}
	if got := client.Leader(); got != last[0] {
		t.Fatalf("the client talks to the leader at %s, not through its proxy %s (leader listens on %s)", got, last[0], leader.Addr())
	}
	// A client given only followers' addresses still finds the leader by
	// the hint, and does not keep it: the next call goes through its own
	// addresses again, so cutting them cuts it off.
	one, err := NewClient(first, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if _, err := one.Status(ctx); err != nil {
		t.Fatal(err)
	}
	if got := one.Leader(); got != leader.Addr() {
		t.Fatalf("a client of the followers was answered by %s, not the leader at %s", got, leader.Addr())
	}
	for _, p := range proxies {
		p.Blackhole(true)
	}
	short, cancelShort := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancelShort()
	if _, err := one.Status(short); err == nil {
		t.Fatal("a client whose addresses are all cut off still reached the leader")
	}
	for _, p := range proxies {
		p.Blackhole(false)
	}
}
