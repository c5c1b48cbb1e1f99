package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/record"
)

// Delayed delivery, RocketMQ's delay levels: a message whose DELAY property
// names level n (1-based) is stored in ScheduleTopic's queue n-1 with its
// real topic and queue in REAL_TOPIC and REAL_QID; the schedule service
// reads each level's queue in order and, when a message's store time plus
// the level's delay has come, stores it again in its real topic (without
// DELAY), where consumers see it. Its progress per level is persisted in
// config/delayOffset.json (on the offset flush interval and at Close), so
// after a restart it goes on where it was; a crash may deliver the
// messages of the last interval again (at least once, like consumer
// offsets). Only a master delivers.
const (
	// ScheduleTopic holds delayed messages, one queue per level.
	ScheduleTopic = "SCHEDULE_TOPIC_XXXX"
	// DefaultDelayLevels is RocketMQ's messageDelayLevel.
	DefaultDelayLevels = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

	propDelay     = "DELAY"
	propRealTopic = "REAL_TOPIC"
	propRealQueue = "REAL_QID"
)

// ParseDelayLevels reads a level table in RocketMQ's messageDelayLevel form:
// durations separated by spaces, each a number and one of the units s, m,
// h, d ("1s 5s 10s 30s 1m …"); Go durations ("250ms") are accepted too.
func ParseDelayLevels(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Fields(s) {
		d, err := parseDelay(f)
		if err != nil {
			return nil, fmt.Errorf("delay level %d %q: %w", len(out)+1, f, err)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, errors.New("no delay level")
	}
	if len(out) > 255 {
		return nil, fmt.Errorf("%d delay levels, at most 255", len(out))
	}
	return out, nil
}

func parseDelay(f string) (time.Duration, error) {
	var d time.Duration
	if n, err := strconv.ParseInt(f[:len(f)-1], 10, 64); err == nil && n > 0 && len(f) > 1 {
		unit := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour}[f[len(f)-1]]
		if unit != 0 && n <= int64((1<<63-1)/unit) {
			d = time.Duration(n) * unit
		}
	}
	if d == 0 {
		var err error
		if d, err = time.ParseDuration(f); err != nil {
			return 0, errors.New("not a positive duration (1s, 5m, 2h, 1d, 250ms)")
		}
	}
	if d <= 0 {
		return 0, errors.New("not a positive duration")
	}
	return d, nil
}

// delayLevelOf reads a message's DELAY property: 0 for none (or 0), the
// level capped at the table's last otherwise.
func delayLevelOf(props []record.Property, levels int) (int, error) {
	v, ok := lookup(props, propDelay)
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("property DELAY=%q is not a delay level (0 to %d)", v, levels)
	}
	return min(n, levels), nil
}

// scheduleDelayed turns a message into its delayed form when level > 0:
// the schedule topic's queue level-1, its real topic and queue in
// properties.
func scheduleDelayed(m *engine.Message, level int) {
	if level <= 0 {
		return
	}
	m.Properties = setProperty(m.Properties, propDelay, strconv.Itoa(level))
	m.Properties = setProperty(m.Properties, propRealTopic, m.Topic)
	m.Properties = setProperty(m.Properties, propRealQueue, strconv.Itoa(int(m.QueueID)))
	m.Topic, m.QueueID = ScheduleTopic, int32(level-1)
}

// delayOffsets is the schedule service's progress: per level, the next
// schedule-queue offset to deliver.
type delayOffsets struct {
	path  string
	mu    sync.Mutex
	table map[int]int64 // level → offset
	dirty bool
}

type delayOffsetFile struct {
	OffsetTable map[string]int64 `json:"offsetTable"`
}

func loadDelayOffsets(path string) (*delayOffsets, error) {
	var f delayOffsetFile
	if err := readJSON(path, &f); err != nil {
		return nil, err
	}
	d := &delayOffsets{path: path, table: map[int]int64{}}
	for k, off := range f.OffsetTable {
		level, err := strconv.Atoi(k)
		if err != nil || level < 1 || off < 0 {
			return nil, fmt.Errorf("%s: entry %q = %d is not a delay level and an offset", path, k, off)
		}
		d.table[level] = off
	}
	return d, nil
}

func (d *delayOffsets) get(level int) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.table[level]
}

func (d *delayOffsets) set(level int, off int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.table[level] != off {
		d.table[level] = off
		d.dirty = true
	}
}

func (d *delayOffsets) flush() error {
	d.mu.Lock()
	if !d.dirty {
		d.mu.Unlock()
		return nil
	}
	f := delayOffsetFile{OffsetTable: make(map[string]int64, len(d.table))}
	for level, off := range d.table {
		f.OffsetTable[strconv.Itoa(level)] = off
	}
	d.dirty = false
	d.mu.Unlock()
	b, err := json.MarshalIndent(f, "", "  ")
	if err == nil {
		err = writeFileAtomic(d.path, b)
	}
	if err != nil {
		d.mu.Lock()
		d.dirty = true
		d.mu.Unlock()
		return fmt.Errorf("persist delay offsets: %w", err)
	}
	return nil
}

// DelayOffset is the schedule service's next offset in level's queue.
func (b *Broker) DelayOffset(level int) int64 { return b.delays.get(level) }

func openDelayOffsets(configDir string) (*delayOffsets, error) {
	return loadDelayOffsets(filepath.Join(configDir, "delayOffset.json"))
}

// deliverDelayed runs one level's delivery until the broker closes.
func (b *Broker) deliverDelayed(level int) {
	delay := b.opts.DelayLevels[level-1]
	queueID := int32(level - 1)
	log := b.log.With(slog.Int("delayLevel", level), slog.Duration("delay", delay))
	backoff := func() bool {
		select {
		case <-b.ctx.Done():
			return false
		case <-time.After(time.Second):
			return true
		}
	}
	for b.ctx.Err() == nil {
		offset := b.delays.get(level)
		ctx, cancel := context.WithTimeout(b.ctx, b.opts.MaxPullSuspend)
		res, err := b.store.GetLongPoll(ctx, "", ScheduleTopic, queueID, offset, 32, nil)
		cancel()
		if err != nil {
			if b.ctx.Err() != nil {
				return
			}
			log.Error("broker: read delayed messages", slog.Any("err", err))
			if !backoff() {
				return
			}
			continue
		}
		switch res.Status {
		case engine.Found:
		case engine.OffsetTooSmall, engine.OffsetOverflowBadly:
			// Retention removed them (or the queue was cut back): go on from
			// where the queue now is.
			log.Warn("broker: delayed messages gone; going on from the queue's bounds", slog.Int64("offset", offset),
				slog.Int64("next", res.NextBeginOffset))
			b.delays.set(level, res.NextBeginOffset)
			res.Release()
			continue
		default:
			res.Release() // nothing yet: the hold ended
			continue
		}
		msgs := append([]engine.GotMessage(nil), res.Messages...)
		res.Release()
		for _, gm := range msgs {
			ok, err := b.deliverOne(gm, delay)
			if err != nil {
				log.Error("broker: deliver a delayed message", slog.Int64("queueOffset", gm.QueueOffset), slog.Any("err", err))
				if !backoff() {
					return
				}
				break
			}
			if !ok {
				return // the broker closed while it waited
			}
			b.delays.set(level, gm.QueueOffset+1)
		}
	}
}

// deliverOne waits until the message is due, then stores it in its real
// topic; false when the broker closed first.
func (b *Broker) deliverOne(gm engine.GotMessage, delay time.Duration) (bool, error) {
	r, err := b.store.ReadMessage(b.ctx, gm.PhysicalOffset)
	if err != nil {
		return false, fmt.Errorf("read the record at %d: %w", gm.PhysicalOffset, err)
	}
	due := time.UnixMilli(r.StoreTimestamp).Add(delay)
	if wait := time.Until(due); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-b.ctx.Done():
			t.Stop()
			return false, nil
		case <-t.C:
		}
	}
	props, err := record.ParseProperties(r.Properties)
	if err != nil {
		return false, fmt.Errorf("the record at %d: %w", gm.PhysicalOffset, err)
	}
	topic, _ := lookup(props, propRealTopic)
	qs, _ := lookup(props, propRealQueue)
	qid, qerr := strconv.ParseInt(qs, 10, 32)
	if topic == "" || qerr != nil || qid < 0 {
		// Not one of ours (a client wrote to the schedule topic itself):
		// nothing to deliver it to.
		b.log.Warn("broker: a delayed message without its real topic and queue; skipped", slog.Int64("offset", gm.PhysicalOffset),
			slog.String("REAL_TOPIC", topic), slog.String("REAL_QID", qs))
		return true, nil
	}
	kept := props[:0]
	for _, p := range props {
		if p.Name != propDelay {
			kept = append(kept, p)
		}
	}
	tc, ok := b.topics.get(topic)
	if !ok && (strings.HasPrefix(topic, RetryGroupPrefix) || strings.HasPrefix(topic, DLQGroupPrefix)) {
		if tc, err = b.systemTopic(b.ctx, topic); err != nil {
			return false, err
		}
		ok = true
	}
	if ok && tc.WriteQueueNums > 0 && int(qid) >= tc.WriteQueueNums {
		qid %= int64(tc.WriteQueueNums) // the topic shrank meanwhile
	}
	m := &engine.Message{Topic: topic, QueueID: int32(qid), Flag: r.Flag, SysFlag: r.SysFlag, BornTimestamp: r.BornTimestamp,
		BornHost: r.BornHost, ReconsumeTimes: r.ReconsumeTimes, Body: r.Body, Properties: kept}
	res, err := b.put(b.ctx, m)
	if code := putStatusCode(res.Status); !stored(code) {
		return false, fmt.Errorf("store it in %s/%d: %v (%v)", topic, qid, res.Status, err)
	}
	return true, nil
}
