package broker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/remoting"
)

func TestParseDelayLevels(t *testing.T) {
	levels, err := ParseDelayLevels(DefaultDelayLevels)
	if err != nil || len(levels) != 18 || levels[0] != time.Second || levels[4] != time.Minute || levels[17] != 2*time.Hour {
		t.Fatalf("RocketMQ's table: %v %v", levels, err)
	}
	if l, err := ParseDelayLevels("250ms 1d"); err != nil || l[0] != 250*time.Millisecond || l[1] != 24*time.Hour {
		t.Fatalf("250ms 1d: %v %v", l, err)
	}
	for _, bad := range []string{"", "1x", "0s", "-1s", "s", "1s abc"} {
		if _, err := ParseDelayLevels(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// storedAt is the store timestamp of the record a send answered.
func storedAt(t *testing.T, h *harness, resp *remoting.Command) record.Record {
	t.Helper()
	_, phys, err := ParseOffsetMsgID(resp.Field("msgId"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := h.store.ReadMessage(context.Background(), phys)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// pullDelivered long-polls the real queue at offset for the delivered message.
func pullDelivered(t *testing.T, h *harness, topic string, queueID int, offset int64) record.Record {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp := h.pull("dg", topic, queueID, offset, pullSuspend, 5000)
		if resp.Code == remoting.Success {
			return decodeBody(t, resp.Body)[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message delivered to %s/%d at %d (last answer %d %s)", topic, queueID, offset, resp.Code, resp.Remark)
		}
	}
}

func TestDelayedMessageDeliveredWhenDue(t *testing.T) {
	levels, _ := ParseDelayLevels("100ms 700ms")
	h := start(t, t.TempDir(), Options{DelayLevels: levels}, engine.AsyncMaster)
	resp := h.send("delayed", 1, "later", props("TAGS", "tg", "UNIQ_KEY", "D1", "DELAY", "2"))
	mustCode(t, resp, remoting.Success)
	sched := storedAt(t, h, resp)
	if sched.Topic != ScheduleTopic || sched.QueueID != 1 {
		t.Fatalf("a level-2 message stored in %s/%d, want %s/1", sched.Topic, sched.QueueID, ScheduleTopic)
	}
	if err := h.store.WaitDispatched(context.Background(), h.store.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	// Not pullable before its time: the real queue is empty while the
	// message waits (700 ms; a slow machine only makes the wait longer).
	if r := h.pull("dg", "delayed", 1, 0, 0, 0); r.Code == remoting.Success {
		got := decodeBody(t, r.Body)[0]
		if got.StoreTimestamp < sched.StoreTimestamp+700 {
			t.Fatalf("delivered %d ms after it was stored, before its 700 ms", got.StoreTimestamp-sched.StoreTimestamp)
		}
	}
	got := pullDelivered(t, h, "delayed", 1, 0)
	if d := got.StoreTimestamp - sched.StoreTimestamp; d < 700 {
		t.Fatalf("delivered %d ms after it was stored, before its 700 ms", d)
	}
	if string(got.Body) != "later" || got.Topic != "delayed" || got.QueueID != 1 {
		t.Fatalf("delivered %+v", got)
	}
	if u, _ := got.UniqKey(); u != "D1" {
		t.Fatalf("delivered with UNIQ_KEY %q", u)
	}
	if tags, _ := got.Tags(); tags != "tg" {
		t.Fatalf("delivered with tags %q", tags)
	}
	if _, ok := record.LookupProperty(got.Properties, propDelay); ok {
		t.Fatal("the delivered message still has DELAY (it would be delayed again)")
	}
	if rt, _ := record.LookupProperty(got.Properties, propRealTopic); string(rt) != "delayed" {
		t.Fatalf("REAL_TOPIC %q", rt)
	}
	waitDelayOffset(t, h, 2, 1)

	// Above the table: the last level. Not a level: refused, nothing stored.
	resp = h.send("delayed", 0, "capped", props("DELAY", "99"))
	mustCode(t, resp, remoting.Success)
	if r := storedAt(t, h, resp); r.Topic != ScheduleTopic || r.QueueID != 1 {
		t.Fatalf("DELAY=99 stored in %s/%d, want the last level's queue 1", r.Topic, r.QueueID)
	}
	before := h.store.MaxOffset()
	mustCode(t, h.send("delayed", 0, "bad", props("DELAY", "soon")), remoting.MessageIllegal)
	if h.store.MaxOffset() != before {
		t.Fatal("a refused DELAY stored something")
	}
}

func waitDelayOffset(t *testing.T, h *harness, level int, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.broker.DelayOffset(level) != want {
		if time.Now().After(deadline) {
			t.Fatalf("delay level %d's offset %d, want %d", level, h.broker.DelayOffset(level), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A delayed message survives a restart and is delivered once its time
// has come; one delivered before the restart is not delivered again.
func TestDelayedMessageSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	levels, _ := ParseDelayLevels("50ms 1500ms")
	h := start(t, dir, Options{DelayLevels: levels}, engine.AsyncMaster)
	mustCode(t, h.send("dr", 0, "first", props("DELAY", "1")), remoting.Success)
	pullDelivered(t, h, "dr", 0, 0)
	waitDelayOffset(t, h, 1, 1)
	resp := h.send("dr", 0, "second", props("DELAY", "2"))
	mustCode(t, resp, remoting.Success)
	sched := storedAt(t, h, resp)
	h.stop() // before it is due: Close persists the delivery's progress
	b, err := os.ReadFile(filepath.Join(dir, "config", "delayOffset.json"))
	if err != nil || !strings.Contains(string(b), `"1": 1`) {
		t.Fatalf("delayOffset.json: %s %v", b, err)
	}

	h = start(t, dir, Options{DelayLevels: levels}, engine.AsyncMaster)
	got := pullDelivered(t, h, "dr", 0, 1)
	if string(got.Body) != "second" {
		t.Fatalf("after the restart the queue's second message is %q", got.Body)
	}
	if d := got.StoreTimestamp - sched.StoreTimestamp; d < 1500 {
		t.Fatalf("delivered %d ms after it was stored, before its 1500 ms", d)
	}
	waitDelayOffset(t, h, 2, 1)
	// Level 1 went on from its persisted offset: "first" came once.
	if n := queueLen(t, h, "dr", 0); n != 2 {
		t.Fatalf("the real queue holds %d messages, want 2 (each delivered once)", n)
	}
}

func queueLen(t *testing.T, h *harness, topic string, queueID int32) int64 {
	t.Helper()
	if err := h.store.WaitDispatched(context.Background(), h.store.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	minOff, maxOff, err := h.broker.queueBounds(context.Background(), topic, queueID)
	if err != nil {
		t.Fatal(err)
	}
	return maxOff - minOff
}
