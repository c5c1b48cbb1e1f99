package interop

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/mqstore/mqstore/broker"
)

func newProducer(t *testing.T, c *cluster) rocketmq.Producer {
	t.Helper()
	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{c.ns.Addr()})),
		producer.WithInstanceName(instance(t)), producer.WithGroupName("interop-producer"), producer.WithRetry(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	// Not shut down: the client's Shutdown writes a plain bool its own
	// goroutines (heartbeats, rebalances, route refreshes) read, a race the
	// detector reports inside the client. In-process clients run until the
	// test binary ends; where a test must stop a consumer it runs one in a
	// process (consumerProc).
	return p
}

// checkStored checks a send result against the store: the offset message
// id names this broker and a record whose UNIQ_KEY is the client's MsgID.
func checkStored(t *testing.T, c *cluster, res *primitive.SendResult, body []byte) {
	t.Helper()
	if res.Status != primitive.SendOK {
		t.Fatalf("send status %v", res.Status)
	}
	host, phys, err := broker.ParseOffsetMsgID(res.OffsetMsgID)
	if err != nil || host.String() != c.node.addr {
		t.Fatalf("offset msg id %q: %v %v (broker %s)", res.OffsetMsgID, host, err, c.node.addr)
	}
	r, err := c.node.store.ReadMessage(context.Background(), phys)
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := r.UniqKey(); res.MsgID != "" && u != res.MsgID {
		t.Fatalf("stored UNIQ_KEY %q, the client's MsgID %q", u, res.MsgID)
	}
	if body != nil && !bytes.Equal(r.Body, body) {
		t.Fatalf("stored body %q", r.Body)
	}
	if r.QueueOffset != res.QueueOffset {
		t.Fatalf("stored queue offset %d, the result's %d", r.QueueOffset, res.QueueOffset)
	}
}

func TestSendSyncAsyncOneway(t *testing.T) {
	c := startCluster(t)
	p := newProducer(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The topic does not exist: the producer falls back to TBW102's route,
	// and the broker creates it.
	res, err := p.SendSync(ctx, primitive.NewMessage("sends", []byte("sync")))
	if err != nil {
		t.Fatal(err)
	}
	checkStored(t, c, res, []byte("sync"))
	done := make(chan *primitive.SendResult, 1)
	errs := make(chan error, 1)
	if err := p.SendAsync(ctx, func(ctx context.Context, r *primitive.SendResult, err error) {
		if err != nil {
			errs <- err
			return
		}
		done <- r
	}, primitive.NewMessage("sends", []byte("async"))); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		checkStored(t, c, r, []byte("async"))
	case err := <-errs:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("async send never called back")
	}
	if err := p.SendOneWay(ctx, primitive.NewMessage("sends", []byte("oneway"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "three messages stored", func() bool { return c.node.countMessages("sends", 4) == 3 })
}

func TestBatchAndCompressedBody(t *testing.T) {
	c := startCluster(t)
	p := newProducer(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var msgs []*primitive.Message
	for _, b := range []string{"one", "two", "three"} {
		msgs = append(msgs, primitive.NewMessage("batch", []byte(b)))
	}
	res, err := p.SendSync(ctx, msgs...)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != primitive.SendOK || len(strings.Split(res.OffsetMsgID, ",")) != 3 {
		t.Fatalf("batch result %v", res)
	}
	for i, id := range strings.Split(res.OffsetMsgID, ",") {
		_, phys, err := broker.ParseOffsetMsgID(id)
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.node.store.ReadMessage(ctx, phys)
		if err != nil || string(r.Body) != []string{"one", "two", "three"}[i] || r.QueueOffset != res.QueueOffset+int64(i) {
			t.Fatalf("batch member %d: %q at %d (first %d), %v", i, r.Body, r.QueueOffset, res.QueueOffset, err)
		}
	}
	// A body over 4 KiB is compressed by the producer and stored as sent.
	big := bytes.Repeat([]byte("compressible "), 1000)
	res, err = p.SendSync(ctx, primitive.NewMessage("batch", big))
	if err != nil {
		t.Fatal(err)
	}
	_, phys, _ := broker.ParseOffsetMsgID(res.OffsetMsgID)
	r, err := c.node.store.ReadMessage(ctx, phys)
	if err != nil {
		t.Fatal(err)
	}
	if r.SysFlag&1 == 0 || len(r.Body) >= len(big) {
		t.Fatalf("a %d-byte body stored with sysFlag %#x and %d bytes: not compressed", len(big), r.SysFlag, len(r.Body))
	}
	// The pull consumer inflates it back.
	waitFor(t, 10*time.Second, "4 messages dispatched", func() bool { return c.node.countMessages("batch", 4) == 4 })
	pc := newPullConsumer(t, c, "batch-pull", "batch")
	got := pollAll(t, pc, 4)
	found := false
	for _, m := range got {
		if bytes.Equal(m.Body, big) {
			found = true
		}
	}
	if !found {
		t.Fatalf("the compressed body did not come back whole (%d messages pulled)", len(got))
	}
}
