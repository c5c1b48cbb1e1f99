package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/remoting"
)

// Pull system flag bits.
const (
	pullCommitOffset = 1 << 0
	pullSuspend      = 1 << 1
	pullSubscription = 1 << 2
)

// queueArgs reads topic and queueId.
func queueArgs(req *remoting.Command) (string, int32, error) {
	topic := req.Field("topic")
	q, err := req.Int("queueId", -1)
	switch {
	case err != nil:
		return "", 0, err
	case topic == "":
		return "", 0, errors.New("header field topic is missing")
	case q < 0 || q > math.MaxInt32:
		return "", 0, fmt.Errorf("header field queueId=%d is missing or out of range", q)
	}
	return topic, int32(q), nil
}

// filterFor is the tag filter of a subscription expression (nil: every
// message, which skips the record reads a filter costs).
func filterFor(expr, expressionType string) (engine.MessageFilter, error) {
	if expressionType != "" && !strings.EqualFold(expressionType, "TAG") {
		return nil, fmt.Errorf("expression type %q is not supported (only TAG)", expressionType)
	}
	expr = strings.TrimSpace(expr)
	if expr == "" || expr == "*" {
		return nil, nil
	}
	f := engine.ParseTagExpression(expr)
	if f.MatchTags("||") {
		return nil, nil // "a || *": no tag can be "||", so the filter takes everything
	}
	return f, nil
}

// pullStatusCode maps a Get status to the pull response code, following
// RocketMQ's PullMessageProcessor; a slave never moves a consumer's offset
// (it may only be behind its master), it asks it to wait.
func (b *Broker) pullStatusCode(res *engine.GetResult, offset int64) (int16, int64) {
	next := res.NextBeginOffset
	switch res.Status {
	case engine.Found:
		return remoting.Success, next
	case engine.NoMatchedMessage, engine.MessageWasRemoving:
		return remoting.PullRetryImmediately, next
	case engine.OffsetFoundNull, engine.OffsetOverflowOne:
		return remoting.PullNotFound, offset
	case engine.NoMatchedLogicQueue, engine.NoMessageInQueue:
		if offset != 0 && !b.slave {
			return remoting.PullOffsetMoved, next
		}
		return remoting.PullNotFound, offset
	case engine.OffsetOverflowBadly, engine.OffsetTooSmall:
		if b.slave && res.Status == engine.OffsetOverflowBadly {
			return remoting.PullNotFound, offset
		}
		return remoting.PullOffsetMoved, next
	}
	return remoting.SystemError, offset
}

func (b *Broker) pull(ctx context.Context, req *remoting.Command) *remoting.Command {
	topic, queueID, err := queueArgs(req)
	if err != nil {
		return badRequest(req, fmt.Errorf("pull: %w", err))
	}
	group := req.Field("consumerGroup")
	var vals [5]int64
	for i, k := range []string{"queueOffset", "maxMsgNums", "sysFlag", "commitOffset", "suspendTimeoutMillis"} {
		v, err := req.Int(k, []int64{-1, 32, 0, -1, 0}[i])
		if err != nil {
			return badRequest(req, fmt.Errorf("pull %s/%d: %w", topic, queueID, err))
		}
		vals[i] = v
	}
	offset, maxMsgs, sysFlag, commitOffset, suspendMs := vals[0], vals[1], vals[2], vals[3], vals[4]
	if offset < 0 || group == "" {
		return badRequest(req, fmt.Errorf("pull %s/%d: consumerGroup and queueOffset (≥ 0) are required", topic, queueID))
	}
	maxMsgs = min(max(maxMsgs, 1), 1024)
	expr, exprType := req.Field("subscription"), req.Field("expressionType")
	if sysFlag&pullSubscription == 0 || expr == "" {
		// The push consumer sends its subscription in heartbeats only.
		expr, exprType = "*", "TAG"
		if s, ok := b.clients.subscription(group, topic); ok {
			expr, exprType = s.SubString, s.ExpressionType
		}
	}
	filter, err := filterFor(expr, exprType)
	if err != nil {
		return remoting.NewResponse(req, remoting.SubscriptionNotExist, fmt.Sprintf("pull %s/%d: %v", topic, queueID, err))
	}
	if sysFlag&pullCommitOffset != 0 && commitOffset >= 0 && !b.slave {
		b.offsets.set(topic, group, queueID, commitOffset)
	}
	hold := time.Duration(0)
	if sysFlag&pullSuspend != 0 {
		hold = min(time.Duration(max(suspendMs, 0))*time.Millisecond, b.opts.MaxPullSuspend)
	}
	res, err := b.limitedGet(ctx, hold, group, topic, queueID, offset, int(maxMsgs), filter)
	if err != nil {
		if ctx.Err() != nil {
			return nil // the connection closed
		}
		code := remoting.SystemError
		if errors.Is(err, engine.ErrClosed) {
			code = remoting.ServiceNotAvailable
		}
		return remoting.NewResponse(req, code, fmt.Sprintf("pull %s/%d at %d: %v", topic, queueID, offset, err))
	}
	return b.pullResponse(req, res, offset)
}

// pullResponse answers a pull with what Get found: the status and offsets
// in the header, the stored records as the body.
func (b *Broker) pullResponse(req *remoting.Command, res *engine.GetResult, offset int64) *remoting.Command {
	code, next := b.pullStatusCode(res, offset)
	resp := remoting.NewResponse(req, code, "")
	if code != remoting.Success {
		resp.Remark = res.Status.String()
	}
	resp.SetInt("nextBeginOffset", next)
	resp.SetInt("minOffset", res.MinOffset)
	resp.SetInt("maxOffset", res.MaxOffset)
	resp.Set("suggestWhichBrokerId", "0")
	if code == remoting.Success {
		// The stored records are the body: sent from the segments (sendfile
		// where the backend keeps them in a file), released once written.
		resp.BodyLen = res.TotalBytes()
		resp.WriteBody = func(ctx context.Context, w io.Writer) (int64, error) { return res.WriteTo(ctx, w) }
		resp.Done = res.Release
	} else {
		res.Release()
	}
	return resp
}

// limitedGet reads a queue as a pull does — a long poll when hold > 0 —
// and keeps to Options.ReadLimit: records past it are left for a later
// pull, and a long poll whose first record is past it waits (polling the
// limit) until it is not, or the hold ends.
func (b *Broker) limitedGet(ctx context.Context, hold time.Duration, group, topic string, queueID int32, offset int64, maxMsgs int,
	filter engine.MessageFilter) (*engine.GetResult, error) {
	get := func(hold time.Duration) (*engine.GetResult, error) {
		if hold > 0 {
			return b.holdPull(ctx, hold, group, topic, queueID, offset, maxMsgs, filter)
		}
		return b.store.Get(ctx, group, topic, queueID, offset, maxMsgs, filter)
	}
	until := time.Now().Add(hold)
	for {
		res, err := get(time.Until(until))
		if err != nil || !b.heldBack(res) || time.Until(until) <= 0 || ctx.Err() != nil {
			return res, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// heldBack trims a found result to the records that end at or below
// Options.ReadLimit (asked only when there are records), and reports
// whether none is left (GetResult.KeepBelow).
func (b *Broker) heldBack(res *engine.GetResult) bool {
	return b.opts.ReadLimit != nil && res.Status == engine.Found && res.KeepBelow(b.opts.ReadLimit())
}

// holdPull is a long poll: it waits up to hold for a message at offset,
// woken by dispatch. A slave also waits when the consumer is ahead of it
// (it read further from the master than the slave has replicated).
func (b *Broker) holdPull(ctx context.Context, hold time.Duration, group, topic string, queueID int32, offset int64, maxMsgs int,
	filter engine.MessageFilter) (*engine.GetResult, error) {
	b.heldPulls.Add(1)
	defer b.heldPulls.Add(-1)
	ctx, cancel := context.WithTimeout(ctx, hold)
	defer cancel()
	for {
		res, err := b.store.GetLongPoll(ctx, group, topic, queueID, offset, maxMsgs, filter)
		if err != nil || !b.slave || res.Status != engine.OffsetOverflowBadly || ctx.Err() != nil {
			return res, err
		}
		// Wait for the queue's end to grow past where it is, then ask again.
		at := res.MaxOffset
		res.Release()
		wait, err := b.store.GetLongPoll(ctx, group, topic, queueID, at, 1, nil)
		if err != nil {
			return nil, err
		}
		wait.Release()
		if ctx.Err() != nil {
			return b.store.Get(context.WithoutCancel(ctx), group, topic, queueID, offset, maxMsgs, filter)
		}
	}
}

// queueBounds returns a queue's min and max offsets (0, 0 for a queue that
// does not exist).
func (b *Broker) queueBounds(ctx context.Context, topic string, queueID int32) (int64, int64, error) {
	res, err := b.store.Get(ctx, "", topic, queueID, -1, 1, nil)
	if err != nil {
		return 0, 0, err
	}
	defer res.Release()
	return res.MinOffset, res.MaxOffset, nil
}

func (b *Broker) queueOffset(ctx context.Context, req *remoting.Command) *remoting.Command {
	topic, queueID, err := queueArgs(req)
	if err != nil {
		return badRequest(req, fmt.Errorf("queue offset: %w", err))
	}
	minOff, maxOff, err := b.queueBounds(ctx, topic, queueID)
	if err != nil {
		return remoting.NewResponse(req, remoting.SystemError, fmt.Sprintf("queue offset of %s/%d: %v", topic, queueID, err))
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	if req.Code == remoting.GetMinOffset {
		resp.SetInt("offset", minOff)
	} else {
		resp.SetInt("offset", maxOff)
	}
	return resp
}

// searchOffset finds the first queue offset whose message was stored at
// or after the timestamp (the max offset when none is), by binary search
// over the queue.
func (b *Broker) searchOffset(ctx context.Context, req *remoting.Command) *remoting.Command {
	topic, queueID, err := queueArgs(req)
	if err == nil {
		_, err = req.Int("timestamp", 0)
	}
	if err != nil {
		return badRequest(req, fmt.Errorf("search offset: %w", err))
	}
	ts, _ := req.Int("timestamp", 0)
	off, err := b.offsetByTime(ctx, topic, queueID, ts)
	if err != nil {
		return remoting.NewResponse(req, remoting.SystemError, fmt.Sprintf("search offset of %s/%d: %v", topic, queueID, err))
	}
	resp := remoting.NewResponse(req, remoting.Success, "")
	resp.SetInt("offset", off)
	return resp
}

func (b *Broker) offsetByTime(ctx context.Context, topic string, queueID int32, ts int64) (int64, error) {
	lo, hi, err := b.queueBounds(ctx, topic, queueID)
	if err != nil {
		return 0, err
	}
	// Invariant: every offset below lo is stored before ts; hi is the answer
	// when nothing at or above lo is.
	for lo < hi {
		mid := lo + (hi-lo)/2
		stamp, err := b.storeTimestamp(ctx, topic, queueID, mid)
		if err != nil {
			return 0, err
		}
		if stamp < 0 || stamp < ts {
			lo = mid + 1 // gone (retention) counts as older
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// storeTimestamp is the store time of the message at a queue offset (-1
// when it is no longer stored).
func (b *Broker) storeTimestamp(ctx context.Context, topic string, queueID int32, offset int64) (int64, error) {
	res, err := b.store.Get(ctx, "", topic, queueID, offset, 1, nil)
	if err != nil {
		return 0, err
	}
	defer res.Release()
	if res.Status != engine.Found || res.Messages[0].QueueOffset != offset {
		return -1, nil
	}
	r, err := b.store.ReadMessage(ctx, res.Messages[0].PhysicalOffset)
	if err != nil {
		return 0, err
	}
	return r.StoreTimestamp, nil
}

func (b *Broker) queryConsumerOffset(ctx context.Context, req *remoting.Command) *remoting.Command {
	topic, queueID, err := queueArgs(req)
	group := req.Field("consumerGroup")
	if err == nil && group == "" {
		err = errors.New("header field consumerGroup is missing")
	}
	if err != nil {
		return badRequest(req, fmt.Errorf("query consumer offset: %w", err))
	}
	if off, ok := b.offsets.get(topic, group, queueID); ok {
		resp := remoting.NewResponse(req, remoting.Success, "")
		resp.SetInt("offset", off)
		return resp
	}
	// A new group: from the start while the queue still holds its first
	// message (RocketMQ's rule), so a consumer started after its producer
	// sees what was sent; otherwise the client applies its ConsumeFromWhere.
	minOff, _, err := b.queueBounds(ctx, topic, queueID)
	if err != nil {
		return remoting.NewResponse(req, remoting.SystemError, fmt.Sprintf("query consumer offset of %s/%d: %v", topic, queueID, err))
	}
	if minOff <= 0 {
		resp := remoting.NewResponse(req, remoting.Success, "")
		resp.SetInt("offset", 0)
		return resp
	}
	return remoting.NewResponse(req, remoting.QueryNotFound, fmt.Sprintf("group %s has no offset for %s/%d", group, topic, queueID))
}

func (b *Broker) updateConsumerOffset(req *remoting.Command) *remoting.Command {
	topic, queueID, err := queueArgs(req)
	group := req.Field("consumerGroup")
	off, oerr := req.Int("commitOffset", -1)
	switch {
	case err != nil:
	case oerr != nil:
		err = oerr
	case group == "" || off < 0:
		err = errors.New("consumerGroup and commitOffset (≥ 0) are required")
	}
	if err != nil {
		return badRequest(req, fmt.Errorf("update consumer offset: %w", err))
	}
	b.offsets.set(topic, group, queueID, off)
	return remoting.NewResponse(req, remoting.Success, "")
}
