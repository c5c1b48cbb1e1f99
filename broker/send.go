package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/namesrv"
	"github.com/mqstore/mqstore/remoting"
)

// Property names the broker reads or writes.
const (
	propRetryTopic      = "RETRY_TOPIC"
	propOriginMessageID = "ORIGIN_MESSAGE_ID"
	propReconsumeTime   = "RECONSUME_TIME"
	propMaxReconsume    = "MAX_RECONSUME_TIMES"
)

// sysFlagCompressed is the body-compressed bit of a message's system flag
// (stored as given: the consumer inflates).
const sysFlagCompressed = 0x1

// v2Names maps SEND_MESSAGE_V2's and SEND_BATCH_MESSAGE's one-letter
// header names to SEND_MESSAGE's.
var v2Names = map[string]string{"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
	"e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
	"k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "brokerName"}

// sendHeader is a send's header.
type sendHeader struct {
	producerGroup, topic, defaultTopic string
	defaultQueueNums                   int
	queueID                            int32
	sysFlag, flag                      int32
	bornTimestamp                      int64
	properties                         string
	reconsumeTimes, maxReconsumeTimes  int32
}

func parseSendHeader(req *remoting.Command, v2 bool) (sendHeader, error) {
	f := req.ExtFields
	if v2 {
		f = make(map[string]string, len(req.ExtFields))
		for k, v := range req.ExtFields {
			if long, ok := v2Names[k]; ok {
				k = long
			}
			f[k] = v
		}
	}
	c := &remoting.Command{ExtFields: f}
	h := sendHeader{producerGroup: f["producerGroup"], topic: f["topic"], defaultTopic: f["defaultTopic"], properties: f["properties"]}
	ints := []struct {
		key string
		def int64
		min int64
		max int64
		set func(int64)
	}{
		{"queueId", -1, -1 << 31, 1<<31 - 1, func(v int64) { h.queueID = int32(v) }},
		{"sysFlag", 0, -1 << 31, 1<<31 - 1, func(v int64) { h.sysFlag = int32(v) }},
		{"flag", 0, -1 << 31, 1<<31 - 1, func(v int64) { h.flag = int32(v) }},
		{"bornTimestamp", 0, 0, 1<<63 - 1, func(v int64) { h.bornTimestamp = v }},
		{"defaultTopicQueueNums", DefaultQueueNums, 0, 1 << 16, func(v int64) { h.defaultQueueNums = int(v) }},
		{"reconsumeTimes", 0, 0, 1<<31 - 1, func(v int64) { h.reconsumeTimes = int32(v) }},
		{"maxReconsumeTimes", 0, -1, 1<<31 - 1, func(v int64) { h.maxReconsumeTimes = int32(v) }},
	}
	for _, i := range ints {
		v, err := c.Int(i.key, i.def)
		if err != nil {
			return h, err
		}
		if v < i.min || v > i.max {
			return h, fmt.Errorf("header field %s=%d is out of range [%d, %d]", i.key, v, i.min, i.max)
		}
		i.set(v)
	}
	if h.topic == "" {
		return h, errors.New("header field topic is missing")
	}
	return h, nil
}

// putStatusCode maps the store's put status to RocketMQ's response code.
func putStatusCode(s engine.PutStatus) int16 {
	switch s {
	case engine.PutOK:
		return remoting.Success
	case engine.FlushDiskTimeout:
		return remoting.FlushDiskTimeout
	case engine.FlushSlaveTimeout:
		return remoting.FlushSlaveTimeout
	case engine.SlaveNotAvailable:
		return remoting.SlaveNotAvailable
	case engine.MessageIllegal, engine.PropertiesSizeExceeded:
		return remoting.MessageIllegal
	case engine.ServiceNotAvailable:
		return remoting.ServiceNotAvailable
	case engine.OSPageCacheBusy:
		return remoting.SystemBusy
	}
	return remoting.SystemError // CreateMappedFileFailed, UnknownError
}

// stored reports whether a send's code means the message is in the store.
func stored(code int16) bool {
	return code == remoting.Success || code == remoting.FlushDiskTimeout || code == remoting.FlushSlaveTimeout ||
		code == remoting.SlaveNotAvailable
}

func remoteAddrPort(c *remoting.Conn) netip.AddrPort {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort()
	}
	return netip.AddrPort{}
}

// sendableTopic checks a topic a client sends to: v1 records only (the
// clients read a one-byte topic length).
func sendableTopic(topic string) error {
	if err := record.ValidateTopic(topic, false); err != nil {
		return fmt.Errorf("topic %q: %w", topic, err)
	}
	return nil
}

// topicForSend finds the topic, creating it from the template when allowed.
func (b *Broker) topicForSend(ctx context.Context, h *sendHeader) (namesrv.TopicConfig, *remoting.Command, error) {
	if tc, ok := b.topics.get(h.topic); ok {
		return tc, nil, nil
	}
	if strings.HasPrefix(h.topic, RetryGroupPrefix) || strings.HasPrefix(h.topic, DLQGroupPrefix) {
		tc, err := b.systemTopic(ctx, h.topic)
		return tc, nil, err
	}
	if b.opts.NoAutoCreateTopic {
		return namesrv.TopicConfig{}, &remoting.Command{Code: remoting.TopicNotExist,
			Remark: fmt.Sprintf("topic %q does not exist and this broker does not create topics on send", h.topic)}, nil
	}
	tmpl, ok := b.topics.get(DefaultTopic)
	if h.defaultTopic != "" && h.defaultTopic != DefaultTopic {
		tmpl, ok = b.topics.get(h.defaultTopic)
	}
	if !ok || tmpl.Perm&namesrv.PermInherit == 0 {
		return namesrv.TopicConfig{}, &remoting.Command{Code: remoting.TopicNotExist,
			Remark: fmt.Sprintf("topic %q does not exist and its template %q cannot create it", h.topic, h.defaultTopic)}, nil
	}
	n := tmpl.WriteQueueNums
	if h.defaultQueueNums > 0 {
		n = min(n, h.defaultQueueNums)
	}
	tc := namesrv.TopicConfig{TopicName: h.topic, ReadQueueNums: n, WriteQueueNums: n, Perm: namesrv.PermRead | namesrv.PermWrite}
	if err := b.ensureTopic(ctx, tc); err != nil {
		return tc, nil, err
	}
	got, _ := b.topics.get(h.topic)
	return got, nil, nil
}

// ensureTopic creates a topic unless it exists, registering it at once.
func (b *Broker) ensureTopic(ctx context.Context, tc namesrv.TopicConfig) error {
	if _, ok := b.topics.get(tc.TopicName); ok {
		return nil
	}
	changed, err := b.topics.put(tc)
	if err != nil {
		return err
	}
	if changed {
		b.log.Info("broker: topic created", "topic", tc.TopicName, "queues", tc.WriteQueueNums)
		b.topicCreated(ctx)
	}
	return nil
}

// systemTopic is a retry or DLQ topic: one queue, read and write.
func (b *Broker) systemTopic(ctx context.Context, topic string) (namesrv.TopicConfig, error) {
	tc := namesrv.TopicConfig{TopicName: topic, ReadQueueNums: 1, WriteQueueNums: 1, Perm: namesrv.PermRead | namesrv.PermWrite}
	if err := b.ensureTopic(ctx, tc); err != nil {
		return tc, err
	}
	got, _ := b.topics.get(topic)
	return got, nil
}

// put stores one message, bounded by SendTimeout and not cut short by a
// closing connection.
func (b *Broker) put(ctx context.Context, m *engine.Message) (engine.PutResult, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.opts.SendTimeout)
	defer cancel()
	if b.opts.Put != nil {
		return b.opts.Put(ctx, m)
	}
	return b.store.Put(ctx, m)
}

// acceptSend parses a send's header (what names the request in errors)
// and refuses what no broker state can store — a slave's, a bad topic —
// with refused; fail answers a later refusal the same way.
func (b *Broker) acceptSend(req *remoting.Command, v2 bool, what string) (h sendHeader, fail func(int16, string, ...any) *remoting.Command, refused *remoting.Command) {
	h, err := parseSendHeader(req, v2)
	if err != nil {
		return h, nil, badRequest(req, fmt.Errorf("%s: %w", what, err))
	}
	fail = func(code int16, format string, args ...any) *remoting.Command {
		return remoting.NewResponse(req, code, fmt.Sprintf("%s to %s: ", what, h.topic)+fmt.Sprintf(format, args...))
	}
	if b.slave {
		return h, fail, fail(remoting.ServiceNotAvailable, "this broker is a slave; send to its master")
	}
	if err := sendableTopic(h.topic); err != nil {
		return h, fail, fail(remoting.MessageIllegal, "%v", err)
	}
	return h, fail, nil
}

func (b *Broker) send(ctx context.Context, c *remoting.Conn, req *remoting.Command, v2 bool) *remoting.Command {
	h, fail, refused := b.acceptSend(req, v2, "send")
	if refused != nil {
		return refused
	}
	props, err := parseProperties(h.properties)
	if err != nil {
		return fail(remoting.MessageIllegal, "properties: %v", err)
	}
	if strings.HasPrefix(h.topic, RetryGroupPrefix) {
		// A consumer's fallback for a failed send-back: past the maximum the
		// message goes to the group's DLQ.
		max := int32(b.opts.MaxReconsumeTimes)
		if h.maxReconsumeTimes > 0 {
			max = h.maxReconsumeTimes
		}
		if h.reconsumeTimes >= max {
			h.topic = DLQGroupPrefix + strings.TrimPrefix(h.topic, RetryGroupPrefix)
			h.queueID = 0
		}
	}
	tc, refusal, err := b.topicForSend(ctx, &h)
	switch {
	case err != nil:
		return fail(remoting.SystemError, "%v", err)
	case refusal != nil:
		return fail(refusal.Code, "%s", refusal.Remark)
	case tc.Perm&namesrv.PermWrite == 0:
		return fail(remoting.NoPermission, "the topic is not writable (perm %d)", tc.Perm)
	case tc.WriteQueueNums <= 0:
		return fail(remoting.NoPermission, "the topic has no write queue")
	}
	if h.queueID < 0 {
		h.queueID = rand.Int32N(int32(tc.WriteQueueNums))
	} else if h.queueID >= int32(tc.WriteQueueNums) {
		return fail(remoting.SystemError, "queue id %d is not below the topic's %d write queues", h.queueID, tc.WriteQueueNums)
	}
	uniq, ok := lookup(props, record.PropUniqKey)
	if !ok {
		uniq = b.uniq.next()
		props = append(props, record.Property{Name: record.PropUniqKey, Value: uniq})
	}
	level, err := delayLevelOf(props, len(b.opts.DelayLevels))
	if err != nil {
		return fail(remoting.MessageIllegal, "%v", err)
	}
	if strings.HasPrefix(h.topic, DLQGroupPrefix) {
		level = 0 // dead letters wait for nobody
	}
	m := &engine.Message{Topic: h.topic, QueueID: h.queueID, Flag: h.flag, SysFlag: h.sysFlag, BornTimestamp: h.bornTimestamp,
		BornHost: remoteAddrPort(c), ReconsumeTimes: h.reconsumeTimes, Body: req.Body, Properties: props}
	scheduleDelayed(m, level) // to the schedule topic's queue of its level, delivered when due
	res, err := b.put(ctx, m)
	code := putStatusCode(res.Status)
	if !stored(code) {
		return fail(code, "%v", err)
	}
	resp := remoting.NewResponse(req, code, "")
	if err != nil {
		resp.Remark = err.Error()
	}
	resp.Set("msgId", OffsetMsgID(b.storeHost, res.PhysicalOffset))
	resp.SetInt("queueId", int64(m.QueueID)) // where it is stored (a delayed message: its level's queue)
	resp.SetInt("queueOffset", res.QueueOffset)
	resp.Set("transactionId", uniq)
	resp.Set("MSG_REGION", "DefaultRegion")
	resp.Set("TRACE_ON", "true")
	return resp
}

// parseProperties reads a header's properties; the last one's 0x02 may be
// left out.
func parseProperties(s string) ([]record.Property, error) {
	if s != "" && !strings.HasSuffix(s, "\x02") {
		s += "\x02"
	}
	return record.ParseProperties([]byte(s))
}

func lookup(props []record.Property, name string) (string, bool) {
	for _, p := range props {
		if p.Name == name {
			return p.Value, p.Value != ""
		}
	}
	return "", false
}

func setProperty(props []record.Property, name, value string) []record.Property {
	for i := range props {
		if props[i].Name == name {
			props[i].Value = value
			return props
		}
	}
	return append(props, record.Property{Name: name, Value: value})
}

// batchMessage is one member of a SEND_BATCH_MESSAGE body.
type batchMessage struct {
	flag       int32
	body       []byte
	properties []record.Property
}

// decodeBatch splits a batch body: per member TOTALSIZE i32 | MAGIC i32 |
// BODYCRC i32 | FLAG i32 | BODYLEN i32 | BODY | PROPLEN i16 | PROPS.
func decodeBatch(body []byte) ([]batchMessage, error) {
	var out []batchMessage
	for at := 0; at < len(body); {
		rest := body[at:]
		if len(rest) < 22 {
			return nil, fmt.Errorf("batch member %d at byte %d: %d bytes left, fewer than a member's 22-byte frame", len(out), at, len(rest))
		}
		total := int(int32(binary.BigEndian.Uint32(rest)))
		if total < 22 || total > len(rest) {
			return nil, fmt.Errorf("batch member %d at byte %d: TOTALSIZE %d does not fit the %d bytes left", len(out), at, total, len(rest))
		}
		bodyLen := int(int32(binary.BigEndian.Uint32(rest[16:])))
		if bodyLen < 0 || 20+bodyLen+2 > total {
			return nil, fmt.Errorf("batch member %d: BODYLEN %d does not fit TOTALSIZE %d", len(out), bodyLen, total)
		}
		propLen := int(binary.BigEndian.Uint16(rest[20+bodyLen:]))
		if 20+bodyLen+2+propLen != total {
			return nil, fmt.Errorf("batch member %d: TOTALSIZE %d is not the sum of its fields (%d)", len(out), total, 20+bodyLen+2+propLen)
		}
		props, err := record.ParseProperties(rest[22+bodyLen : total])
		if err != nil {
			return nil, fmt.Errorf("batch member %d properties: %w", len(out), err)
		}
		out = append(out, batchMessage{flag: int32(binary.BigEndian.Uint32(rest[12:])), body: rest[20 : 20+bodyLen], properties: props})
		at += total
	}
	if len(out) == 0 {
		return nil, errors.New("empty batch")
	}
	return out, nil
}

// sendBatch stores a batch's members in order in one queue. They are
// separate records: another producer's message may fall between them.
func (b *Broker) sendBatch(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	h, fail, refused := b.acceptSend(req, true, "send batch")
	if refused != nil {
		return refused
	}
	if strings.HasPrefix(h.topic, RetryGroupPrefix) {
		return fail(remoting.MessageIllegal, "a batch cannot go to a retry topic")
	}
	members, err := decodeBatch(req.Body)
	if err != nil {
		return fail(remoting.MessageIllegal, "%v", err)
	}
	tc, refusal, err := b.topicForSend(ctx, &h)
	switch {
	case err != nil:
		return fail(remoting.SystemError, "%v", err)
	case refusal != nil:
		return fail(refusal.Code, "%s", refusal.Remark)
	case tc.Perm&namesrv.PermWrite == 0 || tc.WriteQueueNums <= 0:
		return fail(remoting.NoPermission, "the topic is not writable (perm %d)", tc.Perm)
	}
	if h.queueID < 0 {
		h.queueID = rand.Int32N(int32(tc.WriteQueueNums))
	} else if h.queueID >= int32(tc.WriteQueueNums) {
		return fail(remoting.SystemError, "queue id %d is not below the topic's %d write queues", h.queueID, tc.WriteQueueNums)
	}
	born := remoteAddrPort(c)
	ids := make([]string, 0, len(members))
	firstOffset := int64(-1)
	worst := remoting.Success
	var remark string
	for i, bm := range members {
		props := bm.properties
		if _, ok := lookup(props, record.PropUniqKey); !ok {
			props = append(props, record.Property{Name: record.PropUniqKey, Value: b.uniq.next()})
		}
		m := &engine.Message{Topic: h.topic, QueueID: h.queueID, Flag: bm.flag, SysFlag: h.sysFlag &^ sysFlagCompressed,
			BornTimestamp: h.bornTimestamp, BornHost: born, Body: bm.body, Properties: props}
		res, err := b.put(ctx, m)
		code := putStatusCode(res.Status)
		if !stored(code) {
			return fail(code, "member %d of %d (the %d before it are stored): %v", i, len(members), i, err)
		}
		if code != remoting.Success && worst == remoting.Success {
			worst, remark = code, err.Error()
		}
		if firstOffset < 0 {
			firstOffset = res.QueueOffset
		}
		ids = append(ids, OffsetMsgID(b.storeHost, res.PhysicalOffset))
	}
	resp := remoting.NewResponse(req, worst, remark)
	resp.Set("msgId", strings.Join(ids, ","))
	resp.SetInt("queueId", int64(h.queueID))
	resp.SetInt("queueOffset", firstOffset)
	resp.Set("MSG_REGION", "DefaultRegion")
	resp.Set("TRACE_ON", "true")
	return resp
}

// sendBack takes a message a consumer failed to process back into the
// group's retry topic (or, past the maximum, its DLQ), delayed by the
// request's level or, for level 0, RocketMQ's 3 + reconsume times (10 s,
// 30 s, 1 m, … with the default table).
func (b *Broker) sendBack(ctx context.Context, req *remoting.Command) *remoting.Command {
	group := req.Field("group")
	offset, err := req.Int("offset", -1)
	if err == nil && (group == "" || offset < 0) {
		err = errors.New("group and offset are required")
	}
	if err != nil {
		return badRequest(req, fmt.Errorf("send back: %w", err))
	}
	delayLevel, err := req.Int("delayLevel", 0)
	if err != nil {
		return badRequest(req, fmt.Errorf("send back: %w", err))
	}
	maxTimes, err := req.Int("maxReconsumeTimes", -1)
	if err != nil {
		return badRequest(req, fmt.Errorf("send back: %w", err))
	}
	if maxTimes < 0 {
		maxTimes = int64(b.opts.MaxReconsumeTimes)
	}
	if b.slave {
		return remoting.NewResponse(req, remoting.ServiceNotAvailable, "send back: this broker is a slave; send to its master")
	}
	r, err := b.store.ReadMessage(ctx, offset)
	if err != nil {
		return remoting.NewResponse(req, remoting.SystemError, fmt.Sprintf("send back: look up the message at offset %d: %v", offset, err))
	}
	props, err := record.ParseProperties(r.Properties)
	if err != nil {
		return remoting.NewResponse(req, remoting.SystemError, fmt.Sprintf("send back: message at %d: %v", offset, err))
	}
	if _, ok := lookup(props, propRetryTopic); !ok {
		props = setProperty(props, propRetryTopic, r.Topic)
	}
	if origin := req.Field("originMsgId"); origin != "" {
		if _, ok := lookup(props, propOriginMessageID); !ok {
			props = setProperty(props, propOriginMessageID, origin)
		}
	}
	target := RetryGroupPrefix + group
	if delayLevel < 0 || int64(r.ReconsumeTimes) >= maxTimes {
		target = DLQGroupPrefix + group
	}
	if _, err := b.systemTopic(ctx, target); err != nil {
		return remoting.NewResponse(req, remoting.SystemError, "send back: "+err.Error())
	}
	m := &engine.Message{Topic: target, QueueID: 0, Flag: r.Flag, SysFlag: r.SysFlag, BornTimestamp: r.BornTimestamp,
		BornHost: r.BornHost, ReconsumeTimes: r.ReconsumeTimes + 1, Body: r.Body, Properties: props}
	if !strings.HasPrefix(target, DLQGroupPrefix) {
		level := int(delayLevel)
		if level == 0 {
			level = 3 + int(r.ReconsumeTimes)
		}
		scheduleDelayed(m, min(level, len(b.opts.DelayLevels)))
	}
	res, err := b.put(ctx, m)
	if code := putStatusCode(res.Status); !stored(code) {
		return remoting.NewResponse(req, code, fmt.Sprintf("send back to %s: %v", target, err))
	}
	return remoting.NewResponse(req, remoting.Success, "")
}

func (b *Broker) createTopic(ctx context.Context, req *remoting.Command) *remoting.Command {
	topic := req.Field("topic")
	if err := sendableTopic(topic); err != nil {
		return badRequest(req, fmt.Errorf("create topic: %w", err))
	}
	var vals [3]int64
	for i, k := range []string{"readQueueNums", "writeQueueNums", "perm"} {
		v, err := req.Int(k, []int64{DefaultQueueNums, DefaultQueueNums, namesrv.PermRead | namesrv.PermWrite}[i])
		if err == nil && (v < 0 || v > 1<<16) {
			err = fmt.Errorf("header field %s=%d is out of range", k, v)
		}
		if err != nil {
			return badRequest(req, fmt.Errorf("create topic %s: %w", topic, err))
		}
		vals[i] = v
	}
	if b.slave {
		return remoting.NewResponse(req, remoting.ServiceNotAvailable, "create topic: this broker is a slave; it copies its master's topics")
	}
	order, _ := req.Bool("order", false)
	tc := namesrv.TopicConfig{TopicName: topic, ReadQueueNums: int(vals[0]), WriteQueueNums: int(vals[1]), Perm: int(vals[2]), Order: order}
	changed, err := b.topics.put(tc)
	if err != nil {
		return remoting.NewResponse(req, remoting.SystemError, "create topic: "+err.Error())
	}
	if changed {
		b.log.Info("broker: topic created or updated", "topic", topic, "read", tc.ReadQueueNums, "write", tc.WriteQueueNums, "perm", tc.Perm)
		b.topicCreated(ctx)
	}
	return remoting.NewResponse(req, remoting.Success, "")
}
