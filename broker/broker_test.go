package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/namesrv"
	"github.com/mqstore/mqstore/remoting"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type harness struct {
	t      *testing.T
	dir    string
	store  *engine.Store
	broker *Broker
	conn   *remoting.Conn
	opts   Options
}

func storeOptions(host netip.AddrPort, role engine.BrokerRole) engine.Options {
	return engine.Options{Backend: "mmap", SegmentSizeBytes: 4 << 20, ConsumeQueueFileSizeBytes: 20 * 1024,
		IndexSlotCount: 1024, IndexMaxEntries: 4096, StoreHost: host, Role: role, Logger: quiet()}
}

// start opens a store in dir and serves it on a loopback port.
func start(t *testing.T, dir string, opts Options, role engine.BrokerRole) *harness {
	t.Helper()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, err := StoreHost(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	store, err := engine.Open(context.Background(), dir, storeOptions(host, role))
	if err != nil {
		t.Fatal(err)
	}
	opts.Logger = quiet()
	b, err := New(store, ln, opts)
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	conn, err := remoting.Dial(context.Background(), b.Addr(), nil, remoting.ConnOptions{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, dir: dir, store: store, broker: b, conn: conn, opts: opts}
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	if h.broker == nil {
		return
	}
	h.conn.Close()
	if err := h.broker.Close(); err != nil {
		h.t.Error(err)
	}
	if err := h.store.Close(); err != nil {
		h.t.Error(err)
	}
	h.broker = nil
}

func (h *harness) call(code int16, ext map[string]string, body []byte) *remoting.Command {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := h.conn.Invoke(ctx, remoting.NewRequest(code, ext, body))
	if err != nil {
		h.t.Fatal(err)
	}
	return resp
}

func props(kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(kv[i] + "\x01" + kv[i+1] + "\x02")
	}
	return b.String()
}

func (h *harness) send(topic string, queueID int, body string, properties string) *remoting.Command {
	h.t.Helper()
	return h.call(remoting.SendMessage, map[string]string{"producerGroup": "pg", "topic": topic, "defaultTopic": DefaultTopic,
		"defaultTopicQueueNums": "4", "queueId": strconv.Itoa(queueID), "sysFlag": "0", "bornTimestamp": "1700000000000",
		"flag": "0", "properties": properties, "reconsumeTimes": "0", "unitMode": "false", "batch": "false"}, []byte(body))
}

func (h *harness) pull(group, topic string, queueID int, offset int64, sysFlag int, suspendMs int) *remoting.Command {
	h.t.Helper()
	return h.call(remoting.PullMessage, map[string]string{"consumerGroup": group, "topic": topic, "queueId": strconv.Itoa(queueID),
		"queueOffset": strconv.FormatInt(offset, 10), "maxMsgNums": "32", "sysFlag": strconv.Itoa(sysFlag), "commitOffset": "0",
		"suspendTimeoutMillis": strconv.Itoa(suspendMs), "subscription": "", "subVersion": "0", "expressionType": "TAG"}, nil)
}

func mustCode(t *testing.T, resp *remoting.Command, code int16) {
	t.Helper()
	if resp.Code != code {
		t.Fatalf("code %d (%s), want %d", resp.Code, resp.Remark, code)
	}
}

func decodeBody(t *testing.T, body []byte) []record.Record {
	t.Helper()
	var out []record.Record
	for len(body) > 0 {
		r, err := record.Decode(body, 0, true)
		if err != nil {
			t.Fatalf("pull body: %v", err)
		}
		out = append(out, r)
		body = body[r.TotalSize:]
	}
	return out
}

func TestSendAndPullAreTheStoredBytes(t *testing.T) {
	h := start(t, t.TempDir(), Options{}, engine.AsyncMaster)
	resp := h.send("orders", 1, "hello", props("TAGS", "a", "KEYS", "k1 k2", "UNIQ_KEY", "U1"))
	mustCode(t, resp, remoting.Success)
	if resp.Field("queueId") != "1" || resp.Field("queueOffset") != "0" || resp.Field("transactionId") != "U1" {
		t.Fatalf("send response %v", resp.ExtFields)
	}
	host, phys, err := ParseOffsetMsgID(resp.Field("msgId"))
	if err != nil || host.String() != h.broker.Addr() {
		t.Fatalf("msgId %q: %v %v", resp.Field("msgId"), host, err)
	}
	tc, ok := h.broker.topics.get("orders")
	if !ok || tc.WriteQueueNums != 4 || tc.Perm != namesrv.PermRead|namesrv.PermWrite {
		t.Fatalf("auto-created topic %+v %v", tc, ok)
	}
	if err := h.store.WaitDispatched(context.Background(), h.store.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	pull := h.pull("g", "orders", 1, 0, 0, 0)
	mustCode(t, pull, remoting.Success)
	if pull.Field("nextBeginOffset") != "1" || pull.Field("maxOffset") != "1" || pull.Field("suggestWhichBrokerId") != "0" {
		t.Fatalf("pull response %v", pull.ExtFields)
	}
	got, err := h.store.Get(context.Background(), "g", "orders", 1, 0, 32, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	raw, err := got.Raw(0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pull.Body, raw) {
		t.Fatal("the pull body is not the stored record")
	}
	recs := decodeBody(t, pull.Body)
	if len(recs) != 1 || string(recs[0].Body) != "hello" || recs[0].PhysicalOffset != phys || recs[0].BornTimestamp != 1700000000000 {
		t.Fatalf("pulled %+v", recs)
	}
	if u, _ := recs[0].UniqKey(); u != "U1" {
		t.Fatalf("UNIQ_KEY %q", u)
	}
	// View by the offset half of the message id, query by key.
	view := h.call(remoting.ViewMessageByID, map[string]string{"offset": strconv.FormatInt(phys, 10)}, nil)
	mustCode(t, view, remoting.Success)
	if !bytes.Equal(view.Body, raw) {
		t.Fatal("view by id returned other bytes")
	}
	q := h.call(remoting.QueryMessage, map[string]string{"topic": "orders", "key": "k2", "maxNum": "8", "beginTimestamp": "0",
		"endTimestamp": strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)}, nil)
	mustCode(t, q, remoting.Success)
	if !bytes.Equal(q.Body, raw) {
		t.Fatal("query by key returned other bytes")
	}
	mustCode(t, h.call(remoting.QueryMessage, map[string]string{"topic": "orders", "key": "nope"}, nil), remoting.QueryNotFound)
}

func TestSendV2HeaderAndGeneratedUniqKey(t *testing.T) {
	h := start(t, t.TempDir(), Options{}, engine.AsyncMaster)
	resp := h.call(remoting.SendMessageV2, map[string]string{"a": "pg", "b": "v2topic", "c": DefaultTopic, "d": "2", "e": "1",
		"f": "0", "g": "5", "h": "3", "i": props("TAGS", "x"), "j": "0"}, []byte("b"))
	mustCode(t, resp, remoting.Success)
	tc, _ := h.broker.topics.get("v2topic")
	if tc.WriteQueueNums != 2 {
		t.Fatalf("defaultTopicQueueNums 2 gave %d queues", tc.WriteQueueNums)
	}
	_, phys, _ := ParseOffsetMsgID(resp.Field("msgId"))
	r, err := h.store.ReadMessage(context.Background(), phys)
	if err != nil {
		t.Fatal(err)
	}
	u, ok := r.UniqKey()
	if !ok || len(u) != 32 || u != resp.Field("transactionId") || r.Flag != 3 || r.BornTimestamp != 5 {
		t.Fatalf("stored %+v uniq %q", r, u)
	}
}

func TestLongPollWokenBySend(t *testing.T) {
	h := start(t, t.TempDir(), Options{}, engine.AsyncMaster)
	mustCode(t, h.send("lp", 0, "first", ""), remoting.Success)
	// An empty hold answers PULL_NOT_FOUND at the requested offset.
	empty := h.pull("g", "lp", 0, 1, pullSuspend, 50)
	mustCode(t, empty, remoting.PullNotFound)
	if empty.Field("nextBeginOffset") != "1" {
		t.Fatalf("empty hold %v", empty.ExtFields)
	}
	held := make(chan *remoting.Command, 1)
	go func() { held <- h.pull("g", "lp", 0, 1, pullSuspend, 20000) }()
	// The held pull does not block the connection's other requests.
	for range 20 {
		mustCode(t, h.call(remoting.GetMaxOffset, map[string]string{"topic": "lp", "queueId": "0"}, nil), remoting.Success)
	}
	mustCode(t, h.send("lp", 0, "second", ""), remoting.Success)
	select {
	case resp := <-held:
		mustCode(t, resp, remoting.Success)
		if recs := decodeBody(t, resp.Body); len(recs) != 1 || string(recs[0].Body) != "second" || resp.Field("nextBeginOffset") != "2" {
			t.Fatalf("held pull got %+v %v", recs, resp.ExtFields)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the held pull was not woken by the send (its hold is 20 s)")
	}
}

func TestTagFilterFromHeartbeat(t *testing.T) {
	h := start(t, t.TempDir(), Options{}, engine.AsyncMaster)
	for i, tag := range []string{"a", "b", "a", "c"} {
		mustCode(t, h.send("tags", 0, "m"+strconv.Itoa(i), props("TAGS", tag)), remoting.Success)
	}
	hb := `{"clientID":"10.0.0.1@1","producerDataSet":[],"consumerDataSet":[{"groupName":"tg","consumeType":"CONSUME_PASSIVELY",` +
		`"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","subscriptionDataSet":[{"topic":"tags",` +
		`"subString":"a || c","expressionType":"TAG","tagsSet":["a","c"],"codeSet":[97,99],"subVersion":1}]}]}`
	mustCode(t, h.call(remoting.HeartBeat, nil, []byte(hb)), remoting.Success)
	if err := h.store.WaitDispatched(context.Background(), h.store.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	resp := h.pull("tg", "tags", 0, 0, 0, 0)
	mustCode(t, resp, remoting.Success)
	var bodies []string
	for _, r := range decodeBody(t, resp.Body) {
		bodies = append(bodies, string(r.Body))
	}
	if strings.Join(bodies, ",") != "m0,m2,m3" || resp.Field("nextBeginOffset") != "4" {
		t.Fatalf("filtered pull gave %v next %s", bodies, resp.Field("nextBeginOffset"))
	}
	// The heartbeat registered the member and created its retry topic.
	list := h.call(remoting.GetConsumerListByGroup, map[string]string{"consumerGroup": "tg"}, nil)
	mustCode(t, list, remoting.Success)
	if string(list.Body) != `{"consumerIdList":["10.0.0.1@1"]}` {
		t.Fatalf("consumer list %s", list.Body)
	}
	if _, ok := h.broker.topics.get("%RETRY%tg"); !ok {
		t.Fatal("no retry topic after a consumer heartbeat")
	}
	mustCode(t, h.call(remoting.GetConsumerListByGroup, map[string]string{"consumerGroup": "other"}, nil), remoting.SystemError)
}

func TestConsumerLeavesWhenItsConnectionCloses(t *testing.T) {
	h := start(t, t.TempDir(), Options{}, engine.AsyncMaster)
	other, err := remoting.Dial(context.Background(), h.broker.Addr(), nil, remoting.ConnOptions{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hb := `{"clientID":"c2","consumerDataSet":[{"groupName":"cg","messageModel":"CLUSTERING","subscriptionDataSet":[]}]}`
	if resp, err := other.Invoke(ctx, remoting.NewRequest(remoting.HeartBeat, nil, []byte(hb))); err != nil || resp.Code != 0 {
		t.Fatalf("%v %+v", err, resp)
	}
	if m := h.broker.clients.members("cg"); len(m) != 1 {
		t.Fatalf("members %v", m)
	}
	other.Close()
	for len(h.broker.clients.members("cg")) != 0 {
		if ctx.Err() != nil {
			t.Fatal("the closed client is still a member")
		}
		time.Sleep(time.Millisecond)
	}
}

func batchBody(msgs ...[2]string) []byte {
	var b []byte
	for _, m := range msgs {
		body, p := m[0], m[1]
		b = binary.BigEndian.AppendUint32(b, uint32(20+len(body)+2+len(p)))
		b = append(b, 0, 0, 0, 0, 0, 0, 0, 0) // MAGIC, BODYCRC
		b = binary.BigEndian.AppendUint32(b, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
		b = append(b, body...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
		b = append(b, p...)
	}
	return b
}

func TestBatchSend(t *testing.T) {
	h := start(t, t.TempDir(), Options{}, engine.AsyncMaster)
	ext := map[string]string{"a": "pg", "b": "batch", "c": DefaultTopic, "d": "4", "e": "2", "f": "0", "g": "1", "h": "0", "i": "", "m": "true"}
	resp := h.call(remoting.SendBatchMessage, ext, batchBody([2]string{"x", props("TAGS", "t")}, [2]string{"yy", ""}, [2]string{"zzz", props("KEYS", "k")}))
	mustCode(t, resp, remoting.Success)
	ids := strings.Split(resp.Field("msgId"), ",")
	if len(ids) != 3 || resp.Field("queueOffset") != "0" || resp.Field("queueId") != "2" {
		t.Fatalf("batch response %v", resp.ExtFields)
	}
	for i, id := range ids {
		_, phys, err := ParseOffsetMsgID(id)
		if err != nil {
			t.Fatal(err)
		}
		r, err := h.store.ReadMessage(context.Background(), phys)
		if err != nil || string(r.Body) != strings.Repeat(string("xyz"[i]), i+1) || r.QueueOffset != int64(i) {
			t.Fatalf("member %d: %+v %v", i, r, err)
		}
		if _, ok := r.UniqKey(); !ok {
			t.Fatalf("member %d stored without a UNIQ_KEY", i)
		}
	}
	// A malformed batch is refused whole, and nothing is stored.
	before := h.store.MaxOffset()
	bad := batchBody([2]string{"ok", ""}, [2]string{"bad", ""})
	binary.BigEndian.PutUint32(bad[len(bad)-25:], 1<<20)
	mustCode(t, h.call(remoting.SendBatchMessage, ext, bad), remoting.MessageIllegal)
	if h.store.MaxOffset() != before {
		t.Fatal("a refused batch stored something")
	}
}

func TestOffsetsPersistAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir, Options{}, engine.AsyncMaster)
	mustCode(t, h.send("off", 0, "m", ""), remoting.Success)
	q := map[string]string{"consumerGroup": "og", "topic": "off", "queueId": "0"}
	resp := h.call(remoting.QueryConsumerOffset, q, nil)
	mustCode(t, resp, remoting.Success)
	if resp.Field("offset") != "0" {
		t.Fatalf("a new group's offset while the queue starts at 0: %v", resp.ExtFields)
	}
	mustCode(t, h.call(remoting.UpdateConsumerOffset, map[string]string{"consumerGroup": "og", "topic": "off", "queueId": "0",
		"commitOffset": "1"}, nil), remoting.Success)
	// A pull's commit bit commits too.
	h.call(remoting.PullMessage, map[string]string{"consumerGroup": "og", "topic": "off", "queueId": "1", "queueOffset": "0",
		"maxMsgNums": "1", "sysFlag": "1", "commitOffset": "7"}, nil)
	h.stop()
	h = start(t, dir, Options{}, engine.AsyncMaster)
	resp = h.call(remoting.QueryConsumerOffset, q, nil)
	mustCode(t, resp, remoting.Success)
	q["queueId"] = "1"
	resp1 := h.call(remoting.QueryConsumerOffset, q, nil)
	if resp.Field("offset") != "1" || resp1.Field("offset") != "7" {
		t.Fatalf("offsets after a restart: %v %v", resp.ExtFields, resp1.ExtFields)
	}
	if _, ok := h.broker.topics.get("off"); !ok {
		t.Fatal("topic lost across a restart")
	}
}

func TestQueueOffsetsAndSearchByTime(t *testing.T) {
	h := start(t, t.TempDir(), Options{}, engine.AsyncMaster)
	var stamps []int64
	for range 5 {
		resp := h.send("ts", 0, "m", "")
		mustCode(t, resp, remoting.Success)
		_, phys, _ := ParseOffsetMsgID(resp.Field("msgId"))
		r, err := h.store.ReadMessage(context.Background(), phys)
		if err != nil {
			t.Fatal(err)
		}
		stamps = append(stamps, r.StoreTimestamp)
	}
	if err := h.store.WaitDispatched(context.Background(), h.store.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	q := map[string]string{"topic": "ts", "queueId": "0"}
	if r := h.call(remoting.GetMaxOffset, q, nil); r.Field("offset") != "5" {
		t.Fatalf("max offset %v", r.ExtFields)
	}
	if r := h.call(remoting.GetMinOffset, q, nil); r.Field("offset") != "0" {
		t.Fatalf("min offset %v", r.ExtFields)
	}
	for _, tc := range []struct {
		ts   int64
		want int
	}{{0, 0}, {stamps[2], firstAtOrAfter(stamps, stamps[2])}, {stamps[4] + 1, 5}} {
		q["timestamp"] = strconv.FormatInt(tc.ts, 10)
		if r := h.call(remoting.SearchOffsetByTimestamp, q, nil); r.Field("offset") != strconv.Itoa(tc.want) {
			t.Fatalf("search %d: %v, want %d", tc.ts, r.ExtFields, tc.want)
		}
	}
}

func firstAtOrAfter(stamps []int64, ts int64) int {
	for i, s := range stamps {
		if s >= ts {
			return i
		}
	}
	return len(stamps)
}

func TestSendBackRetryThenDLQ(t *testing.T) {
	// Retries go through the delay levels (level 3 + reconsume times):
	// short ones here, and the pulls of the retry topic wait for them.
	levels, _ := ParseDelayLevels("10ms 10ms 10ms 20ms 20ms")
	h := start(t, t.TempDir(), Options{DelayLevels: levels}, engine.AsyncMaster)
	resp := h.send("work", 0, "job", props("TAGS", "t", "UNIQ_KEY", "JOB1"))
	mustCode(t, resp, remoting.Success)
	_, phys, _ := ParseOffsetMsgID(resp.Field("msgId"))
	back := func(offset int64, max string) *remoting.Command {
		return h.call(remoting.ConsumerSendMsgBack, map[string]string{"group": "wg", "offset": strconv.FormatInt(offset, 10),
			"delayLevel": "0", "originMsgId": "JOB1", "originTopic": "work", "maxReconsumeTimes": max}, nil)
	}
	mustCode(t, back(phys, "2"), remoting.Success)
	if err := h.store.WaitDispatched(context.Background(), h.store.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	// Level 0 is 3 + reconsume times: the schedule topic's queue 2 holds it.
	if n := queueLen(t, h, ScheduleTopic, 2); n != 1 {
		t.Fatalf("the schedule topic's level-3 queue holds %d messages, want the retry", n)
	}
	retry := h.pull("wg", "%RETRY%wg", 0, 0, pullSuspend, 10000)
	mustCode(t, retry, remoting.Success)
	r := decodeBody(t, retry.Body)[0]
	if rt, _ := record.LookupProperty(r.Properties, "RETRY_TOPIC"); string(rt) != "work" || r.ReconsumeTimes != 1 || string(r.Body) != "job" {
		t.Fatalf("retry message %+v", r)
	}
	if u, _ := r.UniqKey(); u != "JOB1" {
		t.Fatalf("the retry lost its UNIQ_KEY: %q", u)
	}
	// Sent back again (reconsume 1 → 2 = max) and once more: the DLQ.
	mustCode(t, back(r.PhysicalOffset, "2"), remoting.Success)
	if err := h.store.WaitDispatched(context.Background(), h.store.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	r2 := decodeBody(t, h.pull("wg", "%RETRY%wg", 0, 1, pullSuspend, 10000).Body)[0]
	mustCode(t, back(r2.PhysicalOffset, "2"), remoting.Success)
	if err := h.store.WaitDispatched(context.Background(), h.store.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	dlq := h.pull("wg", "%DLQ%wg", 0, 0, 0, 0)
	mustCode(t, dlq, remoting.Success)
	if d := decodeBody(t, dlq.Body)[0]; d.ReconsumeTimes != 3 || string(d.Body) != "job" {
		t.Fatalf("DLQ message %+v", d)
	}
	mustCode(t, back(1<<40, "2"), remoting.SystemError)
}

func TestBadRequests(t *testing.T) {
	h := start(t, t.TempDir(), Options{NoAutoCreateTopic: true}, engine.AsyncMaster)
	before := h.store.MaxOffset()
	mustCode(t, h.send(strings.Repeat("t", 128), 0, "x", ""), remoting.MessageIllegal)
	mustCode(t, h.send("unknown", 0, "x", ""), remoting.TopicNotExist)
	mustCode(t, h.send("bad topic", 0, "x", ""), remoting.MessageIllegal)
	mustCode(t, h.call(remoting.SendMessage, map[string]string{"topic": "t", "queueId": "one"}, nil), remoting.SystemError)
	mustCode(t, h.call(remoting.SendMessage, map[string]string{"topic": "t", "properties": "a\x02"}, nil), remoting.MessageIllegal)
	mustCode(t, h.call(remoting.PullMessage, map[string]string{"topic": "t", "queueId": "0"}, nil), remoting.SystemError)
	mustCode(t, h.call(remoting.HeartBeat, nil, []byte("{")), remoting.SystemError)
	mustCode(t, h.call(999, nil, nil), remoting.RequestCodeNotSupported)
	mustCode(t, h.call(remoting.UpdateAndCreateTopic, map[string]string{"topic": "made", "readQueueNums": "2", "writeQueueNums": "2",
		"perm": "6"}, nil), remoting.Success)
	mustCode(t, h.send("made", 5, "x", ""), remoting.SystemError) // queue 5 of 2
	if h.store.MaxOffset() != before {
		t.Fatal("a refused request stored something")
	}
	mustCode(t, h.send("made", 1, "x", ""), remoting.Success)
}

func TestSlaveRefusesSendsAndServesPulls(t *testing.T) {
	h := start(t, t.TempDir(), Options{}, engine.Slave)
	mustCode(t, h.send("t", 0, "x", ""), remoting.ServiceNotAvailable)
	// A consumer ahead of the slave is held, not moved back.
	resp := h.pull("g", "t", 0, 5, pullSuspend, 20)
	mustCode(t, resp, remoting.PullNotFound)
	if resp.Field("nextBeginOffset") != "5" {
		t.Fatalf("slave pull moved the offset: %v", resp.ExtFields)
	}
}

func TestRegistersWithNameServer(t *testing.T) {
	ns, err := namesrv.Start(namesrv.Options{ListenAddr: "127.0.0.1:0", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h := start(t, t.TempDir(), Options{Namesrv: []string{ns.Addr()}}, engine.AsyncMaster)
	if _, ok := ns.Route(DefaultTopic); !ok {
		t.Fatal("the template topic is not routed")
	}
	mustCode(t, h.send("fresh", 0, "x", ""), remoting.Success)
	rd, ok := ns.Route("fresh")
	if !ok || rd.BrokerDatas[0].BrokerAddrs[0] != h.broker.Addr() || rd.QueueDatas[0].WriteQueueNums != 4 {
		t.Fatalf("route of an auto-created topic right after its first send: %+v %v", rd, ok)
	}
	b, _ := json.Marshal(rd)
	if bytes.ContainsAny(b, " ") {
		t.Fatalf("route JSON %s", b)
	}
}

func TestSlaveCopiesTopicsAndOffsets(t *testing.T) {
	ns, err := namesrv.Start(namesrv.Options{ListenAddr: "127.0.0.1:0", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	m := start(t, t.TempDir(), Options{Namesrv: []string{ns.Addr()}}, engine.AsyncMaster)
	s := start(t, t.TempDir(), Options{Namesrv: []string{ns.Addr()}, SlaveSyncInterval: 10 * time.Millisecond}, engine.Slave)
	mustCode(t, m.call(remoting.UpdateAndCreateTopic, map[string]string{"topic": "copied", "readQueueNums": "3", "writeQueueNums": "3",
		"perm": "6"}, nil), remoting.Success)
	mustCode(t, m.call(remoting.UpdateConsumerOffset, map[string]string{"consumerGroup": "cg", "topic": "copied", "queueId": "2",
		"commitOffset": "9"}, nil), remoting.Success)
	deadline := time.Now().Add(10 * time.Second)
	for {
		tc, ok := s.broker.topics.get("copied")
		off, _ := s.broker.ConsumerOffset("copied", "cg", 2)
		if ok && tc.WriteQueueNums == 3 && off == 9 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slave has topic %+v (%v) and offset %d", tc, ok, off)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The slave's registration does not change the route's queues, and
	// adds its address.
	rd, ok := ns.Route("copied")
	if !ok || len(rd.BrokerDatas) != 1 || rd.BrokerDatas[0].BrokerAddrs[1] != s.broker.Addr() || rd.QueueDatas[0].WriteQueueNums != 3 {
		t.Fatalf("route %+v", rd)
	}
}

// TestPutHookAndSlaveWithoutReads: a broker given a Put stores through it
// and answers its refusal (status and error) to the client; a slave with
// NoSlaveReads refuses pulls and copies its topics from MasterAddr with no
// name server.
func TestPutHookAndSlaveWithoutReads(t *testing.T) {
	refuse := atomic.Bool{}
	var m *harness
	put := func(ctx context.Context, msg *engine.Message) (engine.PutResult, error) {
		if refuse.Load() {
			return engine.PutResult{Status: engine.ServiceNotAvailable}, errors.New("not the master; the master is 2 at 127.0.0.1:9")
		}
		return m.store.Put(ctx, msg)
	}
	m = start(t, t.TempDir(), Options{Put: put}, engine.AsyncMaster)
	mustCode(t, m.send("hooked", 0, "x", ""), remoting.Success)
	refuse.Store(true)
	resp := m.send("hooked", 0, "y", "")
	mustCode(t, resp, remoting.ServiceNotAvailable)
	if !strings.Contains(resp.Remark, "the master is 2 at 127.0.0.1:9") {
		t.Fatalf("refusal remark %q", resp.Remark)
	}
	if got := m.store.MaxOffset(); got == 0 {
		t.Fatal("the hooked put stored nothing")
	}

	s := start(t, t.TempDir(), Options{NoSlaveReads: true, MasterAddr: func() string { return m.broker.Addr() },
		SlaveSyncInterval: 10 * time.Millisecond}, engine.Slave)
	mustCode(t, s.pull("g", "hooked", 0, 0, 0, 0), remoting.ServiceNotAvailable)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := s.broker.topics.get("hooked"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slave did not copy the master's topics from MasterAddr")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReadLimit: pulls and look-ups keep to ReadLimit — a pull returns
// only the records below it, a long poll waits for it to pass the next
// record, and a view of a record past it finds nothing.
func TestReadLimit(t *testing.T) {
	var limit atomic.Int64
	h := start(t, t.TempDir(), Options{ReadLimit: limit.Load}, engine.AsyncMaster)
	for _, body := range []string{"one", "two", "three"} {
		mustCode(t, h.send("limited", 0, body, props("KEYS", "k-"+body)), remoting.Success)
	}
	if err := h.store.WaitDispatched(context.Background(), h.store.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	first := decodeBody(t, h.pull("g", "limited", 0, 0, 0, 0).Body) // no limit yet: held back, so PullNotFound has no body
	if len(first) != 0 {
		t.Fatalf("a pull past a limit of 0 returned %d records", len(first))
	}
	limit.Store(h.store.MaxOffset())
	all := decodeBody(t, h.pull("g", "limited", 0, 0, 0, 0).Body)
	if len(all) != 3 {
		t.Fatalf("a pull under the limit returned %d records", len(all))
	}
	oneEnd := all[0].PhysicalOffset + int64(all[0].TotalSize)
	limit.Store(oneEnd)
	resp := h.pull("g", "limited", 0, 0, 0, 0)
	mustCode(t, resp, remoting.Success)
	if got := decodeBody(t, resp.Body); len(got) != 1 || string(got[0].Body) != "one" || resp.Field("nextBeginOffset") != "1" {
		t.Fatalf("pull under a limit after the first record: %d records, next %s", len(got), resp.Field("nextBeginOffset"))
	}
	mustCode(t, h.pull("g", "limited", 0, 1, 0, 0), remoting.PullNotFound)
	if resp := h.pull("g", "limited", 0, 1, pullSuspend, 50); resp.Code != remoting.PullNotFound || resp.Field("nextBeginOffset") != "1" {
		t.Fatalf("a long poll past the limit: %d %v", resp.Code, resp.ExtFields)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		limit.Store(h.store.MaxOffset())
	}()
	resp = h.pull("g", "limited", 0, 1, pullSuspend, 10000)
	mustCode(t, resp, remoting.Success)
	if got := decodeBody(t, resp.Body); len(got) != 2 {
		t.Fatalf("a long poll woken by the limit returned %d records", len(got))
	}
	limit.Store(oneEnd)
	view := h.call(remoting.ViewMessageByID, map[string]string{"offset": strconv.FormatInt(all[2].PhysicalOffset, 10)}, nil)
	if view.Code == remoting.Success {
		t.Fatal("a record past the limit was viewed")
	}
	query := func(key string) *remoting.Command {
		return h.call(remoting.QueryMessage, map[string]string{"topic": "limited", "key": key, "maxNum": "4", "beginTimestamp": "0",
			"endTimestamp": strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)}, nil)
	}
	mustCode(t, query("k-one"), remoting.Success)
	mustCode(t, query("k-three"), remoting.QueryNotFound)
}

// TestAdoptsStoredTopics: a master whose topic table lacks a topic its
// store holds messages of (elected before its copy of the table caught
// up) adds it, with as many queues as the store has, and routes it.
func TestAdoptsStoredTopics(t *testing.T) {
	dir := t.TempDir()
	h := start(t, dir, Options{ConfigDir: t.TempDir()}, engine.AsyncMaster)
	for q := int32(0); q < 3; q++ {
		if _, err := h.store.Put(context.Background(), &engine.Message{Topic: "adopted", QueueID: q, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.store.WaitDispatched(context.Background(), h.store.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.broker.topics.get("adopted"); ok {
		t.Fatal("the topic was in the table before the restart")
	}
	h.stop()
	again := start(t, dir, Options{ConfigDir: t.TempDir()}, engine.AsyncMaster)
	tc, ok := again.broker.topics.get("adopted")
	if !ok || tc.ReadQueueNums != 3 || tc.WriteQueueNums != 3 {
		t.Fatalf("adopted topic %+v (%v)", tc, ok)
	}
	mustCode(t, again.send("adopted", 2, "y", ""), remoting.Success)
}
