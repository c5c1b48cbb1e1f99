package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/mqstore/mqstore/namesrv"
	"github.com/mqstore/mqstore/remoting"
)

func (b *Broker) heartbeat(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	hb, err := decodeHeartbeat(req.Body)
	if err != nil {
		return badRequest(req, fmt.Errorf("heartbeat: body is not heartbeat JSON: %w", err))
	}
	if hb.ClientID == "" {
		return badRequest(req, fmt.Errorf("heartbeat: clientID is missing"))
	}
	// Registered before the reply: the GET_CONSUMER_LIST_BY_GROUP that
	// follows a consumer's first heartbeat must list it.
	changed := b.clients.heartbeat(c, hb, time.Now())
	if !b.slave {
		for _, cd := range hb.ConsumerDataSet {
			if cd.GroupName == "" || strings.EqualFold(cd.MessageModel, "BROADCASTING") {
				continue
			}
			if _, err := b.systemTopic(ctx, RetryGroupPrefix+cd.GroupName); err != nil {
				b.log.Warn("broker: create retry topic", slog.String("group", cd.GroupName), slog.Any("err", err))
			}
		}
	}
	b.notifyChanged(changed, c)
	return remoting.NewResponse(req, remoting.Success, "")
}

func (b *Broker) consumerList(req *remoting.Command) *remoting.Command {
	group := req.Field("consumerGroup")
	ids := b.clients.members(group)
	if len(ids) == 0 {
		return remoting.NewResponse(req, remoting.SystemError, fmt.Sprintf("no consumer of group %q has a heartbeat on this broker", group))
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = encodeJSON(struct {
		ConsumerIDList []string `json:"consumerIdList"`
	}{ids})
	return resp
}

// errHeldBack: a record past Options.ReadLimit.
var errHeldBack = errors.New("held back")

// rawRecord reads the stored record at a CommitLog offset.
func (b *Broker) rawRecord(ctx context.Context, offset int64) ([]byte, error) {
	r, err := b.store.ReadMessage(ctx, offset)
	if err != nil {
		return nil, err
	}
	if b.opts.ReadLimit != nil && offset+int64(r.TotalSize) > b.opts.ReadLimit() {
		return nil, fmt.Errorf("the record at %d is not yet held by every in-sync replica: %w", offset, errHeldBack)
	}
	buf := make([]byte, r.TotalSize)
	if n, err := b.store.CommitLogReader().ReadAt(buf, offset); n != len(buf) {
		return nil, fmt.Errorf("read the record at %d: %w", offset, err)
	}
	return buf, nil
}

// viewMessage answers VIEW_MESSAGE_BY_ID: the record at a CommitLog offset
// (the offset half of an offset message id).
func (b *Broker) viewMessage(ctx context.Context, req *remoting.Command) *remoting.Command {
	off, err := req.Int("offset", -1)
	if err == nil && off < 0 {
		err = fmt.Errorf("header field offset is missing or negative")
	}
	if err != nil {
		return badRequest(req, fmt.Errorf("view message: %w", err))
	}
	raw, err := b.rawRecord(ctx, off)
	if err != nil {
		return remoting.NewResponse(req, remoting.SystemError, fmt.Sprintf("view message at offset %d: %v", off, err))
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = raw
	return resp
}

// queryMessage answers QUERY_MESSAGE: the records of a topic with a key
// (KEYS or UNIQ_KEY) through the IndexFile, concatenated.
func (b *Broker) queryMessage(ctx context.Context, req *remoting.Command) *remoting.Command {
	topic, key := req.Field("topic"), req.Field("key")
	var vals [3]int64
	for i, k := range []string{"maxNum", "beginTimestamp", "endTimestamp"} {
		v, err := req.Int(k, 0)
		if err != nil {
			return badRequest(req, fmt.Errorf("query message: %w", err))
		}
		vals[i] = v
	}
	if topic == "" || key == "" {
		return badRequest(req, fmt.Errorf("query message: topic and key are required"))
	}
	recs, err := b.store.QueryMessages(ctx, topic, key, vals[1], vals[2], int(min(max(vals[0], 0), 1024)))
	if err != nil {
		return remoting.NewResponse(req, remoting.SystemError, fmt.Sprintf("query %s key %q: %v", topic, key, err))
	}
	if len(recs) == 0 {
		return remoting.NewResponse(req, remoting.QueryNotFound, fmt.Sprintf("no message of %s has key %q", topic, key))
	}
	var body []byte
	for _, r := range recs {
		raw, err := b.rawRecord(ctx, r.PhysicalOffset)
		if errors.Is(err, errHeldBack) {
			continue
		}
		if err != nil {
			return remoting.NewResponse(req, remoting.SystemError, fmt.Sprintf("query %s key %q: %v", topic, key, err))
		}
		body = append(body, raw...)
	}
	if len(body) == 0 {
		return remoting.NewResponse(req, remoting.QueryNotFound, fmt.Sprintf("no message of %s with key %q is held by every in-sync replica yet", topic, key))
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.SetInt("indexLastUpdateTimestamp", time.Now().UnixMilli())
	resp.SetInt("indexLastUpdatePhyoffset", b.store.DispatchedOffset())
	resp.Body = body
	return resp
}

// lockTable is the orderly consumers' queue locks: a queue belongs to one
// client of a group until it unlocks, its lock is not renewed for
// lockExpiry, or its connection closes.
type lockTable struct {
	mu    sync.Mutex
	locks map[string]map[messageQueue]*queueLock // by group
}

const lockExpiry = 60 * time.Second

type messageQueue struct {
	Topic      string `json:"topic"`
	BrokerName string `json:"brokerName"`
	QueueID    int    `json:"queueId"`
}

type queueLock struct {
	clientID string
	conn     *remoting.Conn
	renewed  time.Time
}

type lockBody struct {
	ConsumerGroup string         `json:"consumerGroup"`
	ClientID      string         `json:"clientId"`
	MQSet         []messageQueue `json:"mqSet"`
}

func newLockTable() *lockTable { return &lockTable{locks: map[string]map[messageQueue]*queueLock{}} }

func (t *lockTable) lock(c *remoting.Conn, body lockBody, now time.Time) []messageQueue {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.locks[body.ConsumerGroup]
	if g == nil {
		g = map[messageQueue]*queueLock{}
		t.locks[body.ConsumerGroup] = g
	}
	ok := []messageQueue{}
	for _, mq := range body.MQSet {
		l := g[mq]
		if l == nil || l.clientID == body.ClientID || now.Sub(l.renewed) > lockExpiry {
			g[mq] = &queueLock{clientID: body.ClientID, conn: c, renewed: now}
			ok = append(ok, mq)
		}
	}
	return ok
}

func (t *lockTable) unlock(body lockBody) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.locks[body.ConsumerGroup]
	for _, mq := range body.MQSet {
		if l := g[mq]; l != nil && l.clientID == body.ClientID {
			delete(g, mq)
		}
	}
}

func (t *lockTable) dropConn(c *remoting.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, g := range t.locks {
		for mq, l := range g {
			if l.conn == c {
				delete(g, mq)
			}
		}
	}
}

func (b *Broker) lockBatch(c *remoting.Conn, req *remoting.Command) *remoting.Command {
	var body lockBody
	if err := json.Unmarshal(req.Body, &body); err != nil || body.ConsumerGroup == "" || body.ClientID == "" {
		return badRequest(req, fmt.Errorf("lock queues: body must be JSON with consumerGroup, clientId and mqSet (%v)", err))
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.Body = encodeJSON(struct {
		LockOKMQSet []messageQueue `json:"lockOKMQSet"`
	}{b.locks.lock(c, body, time.Now())})
	return resp
}

func (b *Broker) unlockBatch(req *remoting.Command) *remoting.Command {
	var body lockBody
	if err := json.Unmarshal(req.Body, &body); err != nil {
		return badRequest(req, fmt.Errorf("unlock queues: body is not JSON: %w", err))
	}
	b.locks.unlock(body)
	return remoting.NewResponse(req, remoting.Success, "")
}

// slaveSync copies the master's topics and consumer offsets every
// SlaveSyncInterval, so the slave routes and serves the same queues and,
// if it has to, resumes consumers where they were.
func (b *Broker) slaveSync() {
	t := time.NewTicker(b.opts.SlaveSyncInterval)
	defer t.Stop()
	var conn *remoting.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		master := ""
		if b.opts.MasterAddr != nil {
			master = b.opts.MasterAddr()
		} else if b.registrar != nil {
			master = b.registrar.MasterAddr()
		}
		if master == "" {
			continue
		}
		if conn != nil && (conn.RemoteAddr().String() != master || conn.Err() != nil || isDone(conn)) {
			conn.Close()
			conn = nil
		}
		if conn == nil {
			c, err := remoting.Dial(b.ctx, master, nil, remoting.ConnOptions{Logger: b.log, TLS: b.opts.ClientTLS, Credentials: b.opts.Credentials})
			if err != nil {
				b.log.Debug("broker: slave sync: dial master", slog.String("master", master), slog.Any("err", err))
				continue
			}
			conn = c
		}
		if err := b.syncFrom(conn); err != nil {
			b.log.Warn("broker: slave sync", slog.String("master", master), slog.Any("err", err))
		}
	}
}

func isDone(c *remoting.Conn) bool {
	select {
	case <-c.Done():
		return true
	default:
		return false
	}
}

func (b *Broker) syncFrom(conn *remoting.Conn) error {
	ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
	defer cancel()
	resp, err := conn.Invoke(ctx, remoting.NewRequest(remoting.GetAllTopicConfig, nil, nil))
	if err != nil {
		return err
	}
	if resp.Code != remoting.Success {
		return fmt.Errorf("topics: code %d: %s", resp.Code, resp.Remark)
	}
	var tf topicFile
	if err := json.Unmarshal(resp.Body, &tf); err != nil {
		return fmt.Errorf("topics from the master: %w", err)
	}
	table := map[string]namesrv.TopicConfig{}
	for name, tc := range tf.TopicConfigTable {
		tc.TopicName = name
		table[name] = tc
	}
	if err := b.topics.replace(table); err != nil {
		return err
	}
	resp, err = conn.Invoke(ctx, remoting.NewRequest(remoting.GetAllConsumerOffset, nil, nil))
	if err != nil {
		return err
	}
	if resp.Code != remoting.Success {
		return fmt.Errorf("consumer offsets: code %d: %s", resp.Code, resp.Remark)
	}
	if err := b.offsets.replace(resp.Body); err != nil {
		return err
	}
	return b.offsets.flush()
}
