package interop

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/mqstore/mqstore/broker"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/namesrv"
)

// TestMain quiets the client's log and leaves out the tests that run only
// when asked (-interop.failover; not under -short).
func TestMain(m *testing.M) {
	// The client logs every failed reconnection of the clients earlier tests
	// leave running (see newProducer); INTEROP_LOG shows them.
	rlog.SetLogLevel("fatal")
	if os.Getenv("INTEROP_LOG") != "" {
		rlog.SetLogLevel("warn")
	}
	flag.Parse()
	var leaveOut []string
	if !*failover { // about 90 s: only with -interop.failover
		leaveOut = append(leaveOut, "TestConsumeFromSlaveAfterMasterDies")
	}
	if testing.Short() { // builds the client's examples
		leaveOut = append(leaveOut, "TestClientExamples")
	}
	if err := testenv.LeaveOut(leaveOut...); err != nil {
		panic(err)
	}
	os.Exit(runWithBinDir(m))
}

func quiet() *slog.Logger {
	if os.Getenv("INTEROP_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// node is one broker process's worth: a store and its broker.
type node struct {
	t      *testing.T
	dir    string
	addr   string // the listen address ("127.0.0.1:0" picks one)
	ns     string
	store  *engine.Store
	broker *broker.Broker
}

func startNode(t *testing.T, dir, addr, ns string) *node {
	t.Helper()
	n := openNode(t, dir, addr, ns)
	t.Cleanup(func() { n.stop() })
	return n
}

func openNode(t *testing.T, dir, addr, ns string) *node {
	t.Helper()
	ln, err := broker.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	host, err := broker.StoreHost(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	store, err := engine.Open(context.Background(), dir, engine.Options{Backend: "mmap", SegmentSizeBytes: 16 << 20,
		ConsumeQueueFileSizeBytes: 20 * 4096, IndexSlotCount: 4096, IndexMaxEntries: 16384, StoreHost: host, Logger: quiet()})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	b, err := broker.New(store, ln, broker.Options{Namesrv: []string{ns}, DelayLevels: testDelayLevels, Logger: quiet()})
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	return &node{t: t, dir: dir, addr: b.Addr(), ns: ns, store: store, broker: b}
}

func (n *node) stop() {
	if n.broker == nil {
		return
	}
	if err := n.broker.Close(); err != nil {
		n.t.Error(err)
	}
	if err := n.store.Close(); err != nil {
		n.t.Error(err)
	}
	n.broker = nil
}

// cluster is a name server and one broker.
type cluster struct {
	ns   *namesrv.Server
	node *node
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	ns, err := namesrv.Start(namesrv.Options{ListenAddr: "127.0.0.1:0", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return &cluster{ns: ns, node: startNode(t, t.TempDir(), "127.0.0.1:0", ns.Addr())}
}

// testDelayLevels keeps retries (delay level 3 + reconsume times) short.
var testDelayLevels, _ = broker.ParseDelayLevels("100ms 100ms 200ms 200ms 300ms 300ms")

var instances atomic.Int32

// instance names a client uniquely in this process (the client shares one
// per instance name).
func instance(t *testing.T) string {
	return fmt.Sprintf("%s-%d-%d", t.Name(), os.Getpid(), instances.Add(1))
}

// countMessages counts the messages stored in a topic's queues.
func (n *node) countMessages(topic string, queues int) int64 {
	var total int64
	for q := range queues {
		res, err := n.store.Get(context.Background(), "", topic, int32(q), -1, 1, nil)
		if err != nil {
			n.t.Fatal(err)
		}
		total += res.MaxOffset - res.MinOffset
		res.Release()
	}
	return total
}

// waitFor polls cond until it holds, failing after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// received collects messages by UNIQ_KEY (the client's MsgId), counting
// duplicates.
type received struct {
	mu    sync.Mutex
	byID  map[string]string // msg id → body
	dups  int
	order []string
	at    map[string]time.Time
}

func newReceived() *received { return &received{byID: map[string]string{}, at: map[string]time.Time{}} }

func (r *received) add(id, body string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byID[id]; ok {
		r.dups++
		return
	}
	r.byID[id] = body
	r.order = append(r.order, id)
	r.at[id] = time.Now()
}

func (r *received) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}

func (r *received) snapshot() (map[string]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.byID))
	for k, v := range r.byID {
		out[k] = v
	}
	return out, r.dups
}

func (r *received) arrival(id string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.at[id]
	return at, ok
}
