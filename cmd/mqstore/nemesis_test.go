//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/controller"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/internal/tcpproxy"
	"github.com/mqstore/mqstore/remoting"
)

var (
	nemesisPhases = flag.Int("nemesis.phases", 0, "fault phases of TestFailoverNemesis (0: one of each kind)")
	nemesisSeed   = flag.Uint64("nemesis.seed", 0, "seed of TestFailoverNemesis's schedule (0: from the clock, printed)")
)

// The nemesis's fault kinds.
const (
	faultKillMaster    = "kill -9 master"
	faultKillLeader    = "kill -9 raft leader"
	faultKillBoth      = "kill -9 master and raft leader"
	faultStopMaster    = "SIGSTOP master past the expiry"
	faultCutHeartbeats = "master cut off from the controllers"
	faultCutHA         = "master cut off from its slaves"
	faultDelay         = "every link delayed 20 ms"
	faultDrop          = "every connection reset"
	faultCutSlave      = "one slave cut off from the master"
	faultCutSlaveKill  = "one slave cut off, then kill -9 master"
	faultRaftLeader    = "raft leader partitioned from the other controllers"
	faultLostTail      = "kill -9 master, its tail lost, restarted at once"
)

var faultKinds = []string{faultKillMaster, faultKillLeader, faultKillBoth, faultStopMaster, faultCutHeartbeats, faultCutHA,
	faultDelay, faultDrop, faultCutSlave, faultCutSlaveKill, faultRaftLeader, faultLostTail}

// nemesis is a broker set of three `mqstore serve --broker-set`
// processes and a group of three `mqstore controller` processes on
// 127.0.0.1, every link but raft's through a tcpproxy: each broker's
// heartbeats to each controller (hb[i][j]), the slaves' HA connections to
// each broker (ha[i], as registered with --ha-advertise) and the clients'
// connections to each broker (cli[i], as advertised with
// --remoting-advertise).
type nemesis struct {
	t    *testing.T
	root string

	ctrlRPC, ctrlRaft []string
	raft              []*tcpproxy.Proxy // in front of each controller's raft transport
	ctrlPeers         string
	ctrls             []*process

	haReal, cliReal []string
	ha, cli         []*tcpproxy.Proxy
	hb              [][]*tcpproxy.Proxy
	brokers         []*process

	client *controller.Client
}

func newProxy(t *testing.T, target string) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.New("127.0.0.1:0", target, tcpproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func startNemesis(t *testing.T) *nemesis {
	const n = 3
	c := &nemesis{t: t, root: t.TempDir()}
	// The processes' own addresses stay reserved until every proxy has
	// its port, so no proxy takes one of them.
	var held []net.Listener
	reserve := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ln)
		return ln.Addr().String()
	}
	var peers []string
	for i := 0; i < n; i++ {
		c.ctrlRPC = append(c.ctrlRPC, reserve())
		c.ctrlRaft = append(c.ctrlRaft, reserve())
		c.raft = append(c.raft, newProxy(t, c.ctrlRaft[i]))
		peers = append(peers, fmt.Sprintf("c%d=%s", i+1, c.raft[i].Addr()))
	}
	for i := 0; i < n; i++ {
		c.haReal = append(c.haReal, reserve())
		c.cliReal = append(c.cliReal, reserve())
		c.ha = append(c.ha, newProxy(t, c.haReal[i]))
		c.cli = append(c.cli, newProxy(t, c.cliReal[i]))
		var row []*tcpproxy.Proxy
		for j := 0; j < n; j++ {
			row = append(row, newProxy(t, c.ctrlRPC[j]))
		}
		c.hb = append(c.hb, row)
	}
	for _, ln := range held {
		ln.Close()
	}
	c.ctrlPeers = strings.Join(peers, ",")
	c.ctrls = make([]*process, n)
	for i := range c.ctrls {
		c.startController(i)
	}
	c.brokers = make([]*process, n)
	for i := range c.brokers {
		c.startBroker(i)
	}
	client, err := controller.NewClient(c.ctrlRPC, controller.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	c.client = client
	return c
}

func (c *nemesis) startController(i int) {
	c.ctrls[i] = startProcess(c.t, false, "controller", "--id", fmt.Sprintf("c%d", i+1), "--listen", c.ctrlRPC[i],
		"--raft-listen", c.ctrlRaft[i], "--peers", c.ctrlPeers,
		"--dir", filepath.Join(c.root, fmt.Sprintf("c%d", i+1)), "--raft-heartbeat", "300ms", "--broker-expiry", "1s",
		"--scan-interval", "100ms")
}

func (c *nemesis) startBroker(i int) {
	var hb []string
	for _, p := range c.hb[i] {
		hb = append(hb, p.Addr())
	}
	c.brokers[i] = startProcess(c.t, false, "serve", "--dir", c.brokerDir(i), "--broker-set", "orders",
		"--broker-id", fmt.Sprint(i+1), "--controller-peers", strings.Join(hb, ","), "--controller-heartbeat", "200ms",
		"--ha-listen", c.haReal[i], "--ha-advertise", c.ha[i].Addr(), "--ha-heartbeat", "200ms", "--ha-housekeeping", "2s",
		"--remoting-listen", c.cliReal[i], "--remoting-advertise", c.cli[i].Addr(),
		"--segment-size", "1048576", "--status-interval", "0")
}

func (c *nemesis) brokerDir(i int) string { return filepath.Join(c.root, fmt.Sprintf("b%d", i+1)) }

// info is the set's state from the controller leader (nil when no leader
// answers in 2 s).
func (c *nemesis) info() *controller.BrokerSet {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := c.client.ReplicaInfo(ctx, "orders")
	if err != nil {
		return nil
	}
	return s
}

func (c *nemesis) leader() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := c.client.Status(ctx)
	if err != nil {
		return -1
	}
	var i int
	if _, err := fmt.Sscanf(st.LeaderID, "c%d", &i); err != nil {
		return -1
	}
	return i - 1
}

// identity is the preamble a slave's HA connection starts with.
func identity(id int) []byte {
	b := []byte("MQFI\x00\x00\x00\x00\x00\x00\x00\x00")
	binary.BigEndian.PutUint64(b[4:], uint64(id))
	return b
}

// waitLeader waits until the controller leader's index satisfies ok.
func (c *nemesis) waitLeader(ok func(int) bool) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !ok(c.leader()) {
		if time.Now().After(deadline) {
			c.t.Fatalf("no controller leader as wanted within 60 s (now c%d)", c.leader()+1)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *nemesis) waitFor(what string, d time.Duration, cond func(*controller.BrokerSet) bool) *controller.BrokerSet {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		if s := c.info(); s != nil && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			for i, p := range c.brokers {
				c.t.Logf("broker %d:\n%s", i+1, tail(p.stderr(), 40))
			}
			for i, p := range c.ctrls {
				c.t.Logf("controller %d:\n%s", i+1, tail(p.stderr(), 40))
			}
			var stdout, stderr bytes.Buffer
			run(context.Background(), []string{"cluster", "status", "--controller", strings.Join(c.ctrlRPC, ","), "--timeout", "5s"}, &stdout, &stderr)
			c.t.Logf("cluster status:\n%s%s", stdout.String(), stderr.String())
			c.t.Fatalf("timed out after %v waiting for %s (last: %+v)", d, what, c.info())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// whole waits until the set has a master and all three replicas in sync.
func (c *nemesis) whole(d time.Duration) *controller.BrokerSet {
	c.t.Helper()
	return c.waitFor("a master and every replica in sync", d, func(s *controller.BrokerSet) bool {
		return s.MasterID != 0 && len(s.SyncStateSet) == len(c.brokers)
	})
}

// nemesisAck is an acknowledged send: who answered it, when.
type nemesisAck struct {
	body []byte
	addr string
	at   time.Time
}

// clients send unique keys to whichever broker the controller names
// master, through that broker's client proxy, and record a key as
// acknowledged only on SEND_OK (remoting success).
type clients struct {
	c     *nemesis
	mu    sync.Mutex
	acked map[string]nemesisAck
	fails int
	// seen is what the consumer pulled: key -> its queue position and
	// body.
	seen   map[string]seenRecord
	pulled int
	stop   chan struct{}
	wg     sync.WaitGroup
}

func (c *nemesis) startClients(n int) *clients {
	cl := &clients{c: c, acked: map[string]nemesisAck{}, seen: map[string]seenRecord{}, stop: make(chan struct{})}
	cl.wg.Add(1)
	go func() {
		defer cl.wg.Done()
		cl.consume()
	}()
	for w := 0; w < n; w++ {
		cl.wg.Add(1)
		go func() {
			defer cl.wg.Done()
			cl.run(w)
		}()
	}
	return cl
}

func (cl *clients) run(w int) {
	var conn *remoting.Conn
	var addr string
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for i := 0; ; i++ {
		select {
		case <-cl.stop:
			return
		default:
		}
		if conn == nil {
			if conn, addr = cl.dialMaster(); conn == nil {
				continue
			}
		}
		key := fmt.Sprintf("w%d-%d", w, i)
		body := []byte(key + ":" + strings.Repeat("x", 200+i%300))
		req := remoting.NewRequest(remoting.SendMessage, map[string]string{"producerGroup": "nemesis", "topic": "nemesis",
			"queueId": fmt.Sprint(w % 4), "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
			"properties": "KEYS\x01" + key + "\x02"}, body)
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		resp, err := conn.Invoke(ctx, req)
		cancel()
		cl.mu.Lock()
		if err == nil && resp.Code == remoting.Success {
			cl.acked[key] = nemesisAck{body: body, addr: addr, at: time.Now()}
		} else {
			cl.fails++
		}
		cl.mu.Unlock()
		if err != nil || resp.Code != remoting.Success {
			conn.Close()
			conn = nil
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// dialMaster connects to the broker the controller names master, through
// its client proxy; nil (after a pause) when there is none or it does not
// answer.
func (cl *clients) dialMaster() (*remoting.Conn, string) {
	s := cl.c.info()
	if s == nil || s.Master() == nil {
		time.Sleep(20 * time.Millisecond)
		return nil, ""
	}
	addr := s.Master().Addr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := remoting.Dial(ctx, addr, nil, remoting.ConnOptions{})
	if err != nil {
		time.Sleep(20 * time.Millisecond)
		return nil, ""
	}
	return c, addr
}

// seenRecord is a record a consumer pulled.
type seenRecord struct {
	queueID     int32
	queueOffset int64
	body        []byte
}

// consume pulls the test topic's four queues from whichever broker the
// controller names master, from offset 0 on, keeping its offsets across
// failovers as a consumer's offset store does.
func (cl *clients) consume() {
	var conn *remoting.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	next := make([]int64, 4)
	for q := 0; ; q = (q + 1) % 4 {
		select {
		case <-cl.stop:
			return
		default:
		}
		if conn == nil {
			if conn, _ = cl.dialMaster(); conn == nil {
				continue
			}
		}
		req := remoting.NewRequest(remoting.PullMessage, map[string]string{"consumerGroup": "nemesis", "topic": "nemesis",
			"queueId": fmt.Sprint(q), "queueOffset": fmt.Sprint(next[q]), "maxMsgNums": "64", "sysFlag": "0"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		resp, err := conn.Invoke(ctx, req)
		cancel()
		if err != nil || (resp.Code != remoting.Success && resp.Code != remoting.PullNotFound && resp.Code != remoting.PullRetryImmediately) {
			if conn != nil {
				conn.Close()
				conn = nil
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if resp.Code != remoting.Success {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		cl.mu.Lock()
		for at := 0; at < len(resp.Body); {
			r, err := record.Decode(resp.Body[at:], 0, true)
			if err != nil {
				cl.mu.Unlock()
				cl.c.t.Errorf("pulled a bad record from queue %d at %d: %v", q, next[q], err)
				return
			}
			for _, k := range r.Keys() {
				cl.seen[k] = seenRecord{queueID: r.QueueID, queueOffset: r.QueueOffset, body: bytes.Clone(r.Body)}
			}
			cl.pulled++
			next[q] = r.QueueOffset + 1
			at += int(r.TotalSize)
		}
		cl.mu.Unlock()
	}
}

// longestGap is the longest time in [t0, t1] with no acknowledgement.
func (cl *clients) longestGap(t0, t1 time.Time) time.Duration {
	cl.mu.Lock()
	ats := []time.Time{t0}
	for _, a := range cl.acked {
		if !a.at.Before(t0) && !a.at.After(t1) {
			ats = append(ats, a.at)
		}
	}
	cl.mu.Unlock()
	slices.SortFunc(ats, time.Time.Compare)
	ats = append(ats, t1)
	var gap time.Duration
	for i := 1; i < len(ats); i++ {
		gap = max(gap, ats[i].Sub(ats[i-1]))
	}
	return gap
}

func (cl *clients) acks() int {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return len(cl.acked)
}

func (cl *clients) count() (acked, fails int) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return len(cl.acked), cl.fails
}

func (cl *clients) halt() {
	close(cl.stop)
	cl.wg.Wait()
}

// TestFailoverNemesis runs a seeded schedule of faults against a broker
// set that follows a separate controller group, with clients sending all
// along (-nemesis.phases, -nemesis.seed; by default one phase of each
// kind). After every phase the faults are healed and the set must be
// whole again within a bound; at the end every acknowledged key is in the
// final master's log with its body, each epoch's records carry one
// broker's address, the replicas are byte-identical and pass verify.
func TestFailoverNemesis(t *testing.T) {
	seed := *nemesisSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	phases := *nemesisPhases
	rng := rand.New(rand.NewPCG(seed, 22))
	kinds := slices.Clone(faultKinds)
	if phases == 0 {
		phases = len(kinds)
		rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	}
	t.Logf("nemesis: seed %d, %d phases", seed, phases)
	c := startNemesis(t)
	first := c.whole(60 * time.Second)
	t.Logf("first master %d at epoch %d", first.MasterID, first.MasterEpoch)
	cl := c.startClients(4)
	// A quiet run elects nobody.
	time.Sleep(3 * time.Second)
	if s := c.whole(60 * time.Second); s.MasterEpoch != first.MasterEpoch || s.MasterID != first.MasterID {
		t.Fatalf("with no fault, master %d epoch %d became master %d epoch %d", first.MasterID, first.MasterEpoch, s.MasterID, s.MasterEpoch)
	}
	defer func() {
		select {
		case <-cl.stop:
		default:
			cl.halt()
		}
	}()
	unavailable := map[string][]time.Duration{}
	for ph := 0; ph < phases; ph++ {
		kind := kinds[ph%len(kinds)]
		if *nemesisPhases != 0 {
			kind = faultKinds[rng.IntN(len(faultKinds))]
		}
		cur := c.whole(60 * time.Second)
		time.Sleep(time.Duration(200+rng.IntN(400)) * time.Millisecond) // traffic before the fault
		t0 := time.Now()
		t.Logf("phase %d: %s (master %d, epoch %d, controller leader c%d)", ph, kind, cur.MasterID, cur.MasterEpoch, c.leader()+1)
		c.inject(kind, cur, rng)
		back := c.whole(60 * time.Second)
		before, deadline := cl.acks(), time.Now().Add(30*time.Second)
		for cl.acks() < before+50 { // the set takes sends again
			if time.Now().After(deadline) {
				t.Fatalf("phase %d (%s): fewer than 50 sends acknowledged within 30 s of healing", ph, kind)
			}
			time.Sleep(10 * time.Millisecond)
		}
		gap := cl.longestGap(t0, time.Now())
		unavailable[kind] = append(unavailable[kind], gap)
		acked, fails := cl.count()
		t.Logf("phase %d: %s: master %d epoch %d -> master %d epoch %d; longest time without an acknowledgement %v; %d acknowledged, %d refused so far",
			ph, kind, cur.MasterID, cur.MasterEpoch, back.MasterID, back.MasterEpoch, gap.Round(time.Millisecond), acked, fails)
	}
	time.Sleep(300 * time.Millisecond)
	cl.halt()
	final := c.whole(60 * time.Second)
	for kind, gaps := range unavailable {
		slices.Sort(gaps)
		t.Logf("%s: %d phases, longest time without an acknowledgement p50 %v, max %v", kind, len(gaps), gaps[len(gaps)/2].Round(time.Millisecond),
			gaps[len(gaps)-1].Round(time.Millisecond))
	}
	c.check(final, cl)
}

// inject applies one fault to the set whose state is cur, waits as the
// fault needs, and heals it.
func (c *nemesis) inject(kind string, cur *controller.BrokerSet, rng *rand.Rand) {
	t := c.t
	m := int(cur.MasterID) - 1
	newMaster := func() *controller.BrokerSet {
		return c.waitFor("a new master", 60*time.Second, func(s *controller.BrokerSet) bool {
			return s.MasterEpoch > cur.MasterEpoch && s.MasterID != 0
		})
	}
	kill := func(p *process) {
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
	switch kind {
	case faultKillMaster:
		kill(c.brokers[m])
		newMaster()
		c.startBroker(m)
	case faultKillLeader:
		l := c.leader()
		if l < 0 {
			t.Fatalf("%s: no controller leader", kind)
		}
		kill(c.ctrls[l])
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		c.startController(l)
	case faultKillBoth:
		l := c.leader()
		if l < 0 {
			t.Fatalf("%s: no controller leader", kind)
		}
		kill(c.brokers[m])
		kill(c.ctrls[l])
		newMaster()
		c.startController(l)
		c.startBroker(m)
	case faultStopMaster:
		p := c.brokers[m]
		p.cmd.Process.Signal(syscall.SIGSTOP)
		newMaster()
		p.cmd.Process.Signal(syscall.SIGCONT)
	case faultCutHeartbeats:
		for _, p := range c.hb[m] {
			p.Blackhole(true)
		}
		newMaster()
		time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond) // the cut-off master goes on without acknowledgements
		for _, p := range c.hb[m] {
			p.Blackhole(false)
		}
	case faultCutHA:
		c.ha[m].Blackhole(true)
		time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
		c.ha[m].Blackhole(false)
		c.ha[m].Drop()
	case faultCutSlave, faultCutSlaveKill:
		s := (m + 1 + rng.IntN(2)) % len(c.brokers)
		c.ha[m].Cut("slave", identity(s+1))
		time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
		if kind == faultCutSlaveKill {
			kill(c.brokers[m])
			newMaster()
			c.startBroker(m)
		}
		c.ha[m].Heal("slave")
	case faultRaftLeader:
		l := c.leader()
		if l < 0 {
			t.Fatalf("%s: no controller leader", kind)
		}
		// Its connections to the others and theirs to it: raft names the
		// sender's advertised address first in every request.
		for i, p := range c.raft {
			if i != l {
				p.Cut("leader", []byte(c.raft[l].Addr()))
				c.raft[l].Cut(fmt.Sprint("peer", i), []byte(p.Addr()))
			}
		}
		c.waitLeader(func(i int) bool { return i >= 0 && i != l })
		time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
		for i, p := range c.raft {
			p.Heal("leader")
			c.raft[l].Heal(fmt.Sprint("peer", i))
		}
	case faultLostTail:
		c.restartShorter(m, cur, newMaster)
	case faultDelay, faultDrop:
		all := slices.Concat(c.ha, c.cli, c.raft)
		for _, row := range c.hb {
			all = append(all, row...)
		}
		for _, p := range all {
			if kind == faultDelay {
				p.SetDelay(20 * time.Millisecond)
			} else {
				p.Drop()
			}
		}
		if kind == faultDelay {
			time.Sleep(time.Duration(1000+rng.IntN(1000)) * time.Millisecond)
			for _, p := range all {
				p.SetDelay(0)
			}
		}
	default:
		t.Fatalf("unknown fault %q", kind)
	}
}

// restartShorter kills master m, cuts the last records off its log — the
// tail an asynchronously flushed master loses in a power loss, records
// acknowledged (every in-sync slave held them) among it — and starts it
// again before the controllers count it dead (the test heartbeats for it
// meanwhile, as a fast restart would). It must not take its role back:
// a slave that is ahead is elected, and the checker finds every
// acknowledged record.
func (c *nemesis) restartShorter(m int, cur *controller.BrokerSet, newMaster func() *controller.BrokerSet) {
	t := c.t
	p := c.brokers[m]
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	_, _, _, hosts := readStore(t, c.brokerDir(m))
	if len(hosts) < 30 {
		t.Fatalf("the master's log has only %d records", len(hosts))
	}
	cut := hosts[len(hosts)-20].offset
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			c.client.Heartbeat(ctx, controller.Heartbeat{Set: "orders", ID: cur.MasterID, LastEpoch: cur.MasterEpoch, MaxOffset: cut})
			cancel()
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	if _, err := engine.TruncateCommitLog(context.Background(), c.brokerDir(m), cut, engine.Options{SegmentSizeBytes: 1 << 20}); err != nil {
		close(stop)
		t.Fatalf("cut the master's tail: %v", err)
	}
	c.startBroker(m)
	c.brokers[m].waitLine(t, regexp.MustCompile(`fenced until the controller gives it a role`))
	close(stop)
	<-stopped
	if s := newMaster(); s.MasterID == cur.MasterID {
		t.Fatalf("the master that lost its tail took its role back (epoch %d)", s.MasterEpoch)
	}
}

// check waits until the replicas hold the same bytes, stops them, and
// checks the final logs.
func (c *nemesis) check(final *controller.BrokerSet, cl *clients) {
	t := c.t
	time.Sleep(2 * time.Second) // the slaves catch up with the last sends
	for i, p := range c.brokers {
		if code := p.stop(t, syscall.SIGTERM); code != 0 {
			t.Fatalf("broker %d exited %d:\n%s", i+1, code, tail(p.stderr(), 40))
		}
	}
	for i, p := range c.ctrls {
		if code := p.stop(t, syscall.SIGTERM); code != 0 {
			t.Fatalf("controller %d exited %d:\n%s", i+1, code, tail(p.stderr(), 40))
		}
	}
	m := int(final.MasterID) - 1
	want, keys, epochs, hosts := readStore(t, c.brokerDir(m))
	for i := range c.brokers {
		if i == m {
			continue
		}
		got, _, _, _ := readStore(t, c.brokerDir(i))
		if !bytes.Equal(got, want) {
			t.Fatalf("broker %d's log (%d bytes) is not the final master %d's (%d bytes)", i+1, len(got), m+1, len(want))
		}
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for k, a := range cl.acked {
		if got, ok := keys[k]; !ok || !bytes.Equal(got.body, a.body) {
			t.Fatalf("acknowledged %s (by %s) is not in the final master's log (found %v)", k, a.addr, ok)
		}
	}
	// No consumer read a record the log does not hold where it read it.
	for k, r := range cl.seen {
		if got, ok := keys[k]; !ok || got.queueID != r.queueID || got.queueOffset != r.queueOffset || !bytes.Equal(got.body, r.body) {
			t.Fatalf("the consumer read %s at queue %d offset %d; the final master's log has it: %v at %+v", k, r.queueID, r.queueOffset, ok, got)
		}
	}
	// One broker wrote each epoch: the records from one epoch's start to
	// the next's carry one store host.
	for i, e := range epochs {
		end := int64(1 << 62)
		if i+1 < len(epochs) {
			end = epochs[i+1].StartOffset
		}
		seen := map[string]bool{}
		for _, h := range hosts {
			if h.offset >= e.StartOffset && h.offset < end {
				seen[h.host] = true
			}
		}
		if len(seen) > 1 {
			t.Fatalf("epoch %d: records from %v", e.Epoch, seen)
		}
	}
	for i := range c.brokers {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{"verify", "--dir", c.brokerDir(i)}, &stdout, &stderr); code != 0 {
			t.Fatalf("verify broker %d: exit %d: %s%s", i+1, code, stdout.String(), stderr.String())
		}
	}
	t.Logf("final master %d at epoch %d: %d acknowledged sends all in its log (%d refused); %d records pulled, each where the log has it; "+
		"%d epochs, %d bytes on each replica", final.MasterID, final.MasterEpoch, len(cl.acked), cl.fails, cl.pulled, len(epochs), len(want))
}

type hostAt struct {
	offset int64
	host   string
}

// readStore opens a stopped broker's store and returns its log's bytes,
// the body of each key, its epochs and each record's store host.
func readStore(t *testing.T, dir string) (log []byte, keys map[string]seenRecord, epochs []engine.EpochEntry, hosts []hostAt) {
	t.Helper()
	o := engine.Options{Role: engine.Slave, SegmentSizeBytes: 1 << 20}
	ctx := context.Background()
	s, err := engine.Open(ctx, dir, o)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	defer s.Close()
	r := s.CommitLogReader()
	log = make([]byte, r.End()-r.Start())
	if n, err := r.ReadAt(log, r.Start()); n != len(log) {
		t.Fatalf("read %s: %d of %d bytes: %v", dir, n, len(log), err)
	}
	keys = map[string]seenRecord{}
	if _, err := s.Scan(ctx, r.Start(), func(off int64, _ []byte, rec *record.Record) error {
		if rec == nil {
			return nil
		}
		for _, k := range rec.Keys() {
			keys[k] = seenRecord{queueID: rec.QueueID, queueOffset: rec.QueueOffset, body: bytes.Clone(rec.Body)}
		}
		hosts = append(hosts, hostAt{offset: off, host: rec.StoreHost.String()})
		return nil
	}); err != nil {
		t.Fatalf("scan %s: %v", dir, err)
	}
	return log, keys, s.Epochs(), hosts
}
