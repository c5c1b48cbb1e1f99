package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/mqstore/mqstore/engine/consumequeue"
	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/mappedfile"
)

// GetStatus is the outcome of a Get (RocketMQ's GetMessageStatus).
type GetStatus int

const (
	// Found: at least one message is returned.
	Found GetStatus = iota
	// NoMatchedMessage: messages were there but none passed the filter;
	// NextBeginOffset skips them.
	NoMatchedMessage
	// MessageWasRemoving: the CommitLog segment was being deleted.
	MessageWasRemoving
	// OffsetFoundNull: the ConsumeQueue has no readable unit at the offset.
	OffsetFoundNull
	// OffsetOverflowBadly: the offset is past the end of the queue by more than one.
	OffsetOverflowBadly
	// OffsetOverflowOne: the offset is the end of the queue (no new message yet).
	OffsetOverflowOne
	// OffsetTooSmall: the offset is below the first message still stored.
	OffsetTooSmall
	// NoMatchedLogicQueue: the topic/queue does not exist.
	NoMatchedLogicQueue
	// NoMessageInQueue: the queue exists but is empty.
	NoMessageInQueue
)

func (s GetStatus) String() string {
	names := [...]string{"FOUND", "NO_MATCHED_MESSAGE", "MESSAGE_WAS_REMOVING", "OFFSET_FOUND_NULL", "OFFSET_OVERFLOW_BADLY",
		"OFFSET_OVERFLOW_ONE", "OFFSET_TOO_SMALL", "NO_MATCHED_LOGIC_QUEUE", "NO_MESSAGE_IN_QUEUE"}
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("GetStatus(%d)", int(s))
}

// MessageFilter selects messages by tag: first by the ConsumeQueue's tags
// code, then, for a message that passed, by its real TAGS (two tags may share
// a hash code).
type MessageFilter interface {
	MatchTagsCode(code int64) bool
	MatchTags(tags string) bool
}

// TagFilter matches any of the tags ("*" or no tag matches everything),
// like a RocketMQ subscription "A || B".
type TagFilter struct {
	all   bool
	tags  map[string]struct{}
	codes map[int64]struct{}
}

// NewTagFilter returns a filter for the tags.
func NewTagFilter(tags ...string) *TagFilter {
	f := &TagFilter{tags: map[string]struct{}{}, codes: map[int64]struct{}{}}
	for _, t := range tags {
		t = strings.TrimSpace(t)
		if t == "" || t == "*" {
			f.all = true
			continue
		}
		f.tags[t] = struct{}{}
		f.codes[record.TagsCode(t)] = struct{}{}
	}
	if len(f.tags) == 0 {
		f.all = true
	}
	return f
}

// ParseTagExpression parses RocketMQ's "A || B || C" (or "*").
func ParseTagExpression(expr string) *TagFilter { return NewTagFilter(strings.Split(expr, "||")...) }

// MatchTagsCode implements MessageFilter.
func (f *TagFilter) MatchTagsCode(code int64) bool {
	if f.all {
		return true
	}
	_, ok := f.codes[code]
	return ok
}

// MatchTags implements MessageFilter.
func (f *TagFilter) MatchTags(tags string) bool {
	if f.all {
		return true
	}
	_, ok := f.tags[tags]
	return ok
}

// GotMessage is one message of a GetResult.
type GotMessage struct {
	QueueOffset    int64
	PhysicalOffset int64
	Size           int32
	TagsCode       int64
	segment        int // index into GetResult.segments
}

// GetResult is what Get returns. It holds references to the CommitLog
// segments its messages are in, so retention cannot delete them underneath;
// call Release when done.
type GetResult struct {
	Status          GetStatus
	NextBeginOffset int64
	MinOffset       int64
	MaxOffset       int64
	Messages        []GotMessage

	segments []mappedfile.MappedFile
	released bool
}

// TotalBytes is the size of all returned records.
func (r *GetResult) TotalBytes() int64 {
	var n int64
	for _, m := range r.Messages {
		n += int64(m.Size)
	}
	return n
}

// KeepBelow trims a Found result to the messages that end at or below
// limit (a CommitLog offset), the next offset moved back to the first one
// dropped. When none is left it reports so, and the result becomes one of
// a message not there yet (OffsetOverflowOne at that message, its
// segments released).
func (r *GetResult) KeepBelow(limit int64) (none bool) {
	if r.Status != Found {
		return false
	}
	for i, m := range r.Messages {
		if m.PhysicalOffset+int64(m.Size) <= limit {
			continue
		}
		r.NextBeginOffset = m.QueueOffset
		if i > 0 {
			r.Messages = r.Messages[:i]
			return false
		}
		r.Release()
		r.Status, r.Messages = OffsetOverflowOne, nil
		return true
	}
	return false
}

// Release drops the segment references. Safe to call twice.
func (r *GetResult) Release() {
	if r == nil || r.released {
		return
	}
	r.released = true
	for _, seg := range r.segments {
		seg.Release()
	}
	r.segments = nil
}

func (r *GetResult) segmentOf(i int) (mappedfile.MappedFile, error) {
	if r.released {
		return nil, fmt.Errorf("get result used after Release: %w", ErrClosed)
	}
	return r.segments[r.Messages[i].segment], nil
}

// Raw returns a copy of message i's raw record bytes.
func (r *GetResult) Raw(i int) ([]byte, error) {
	seg, err := r.segmentOf(i)
	if err != nil {
		return nil, err
	}
	m := r.Messages[i]
	buf := make([]byte, m.Size)
	if n, err := seg.ReadAt(buf, m.PhysicalOffset-seg.FromOffset()); n != len(buf) {
		return nil, fmt.Errorf("read message at %d: %w", m.PhysicalOffset, err)
	}
	return buf, nil
}

// Message decodes message i (CRC checked).
func (r *GetResult) Message(i int) (record.Record, error) {
	raw, err := r.Raw(i)
	if err != nil {
		return record.Record{}, err
	}
	at := r.Messages[i].PhysicalOffset
	rec, err := record.Decode(raw, at, true)
	if err == nil {
		err = checkStoredOffset(&rec, at)
	}
	return rec, err
}

// ranges calls fn for each run of messages contiguous in one segment.
func (r *GetResult) ranges(fn func(seg mappedfile.MappedFile, pos, n int64) error) error {
	for i := 0; i < len(r.Messages); {
		seg, err := r.segmentOf(i)
		if err != nil {
			return err
		}
		start := r.Messages[i].PhysicalOffset
		end := start + int64(r.Messages[i].Size)
		j := i + 1
		for j < len(r.Messages) && r.Messages[j].segment == r.Messages[i].segment && r.Messages[j].PhysicalOffset == end {
			end += int64(r.Messages[j].Size)
			j++
		}
		if err := fn(seg, start-seg.FromOffset(), end-start); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// WriteTo writes every raw record, in order, to w with the backend's zero
// copy path: one sendfile(2) per contiguous range when w is a socket.
func (r *GetResult) WriteTo(ctx context.Context, w io.Writer) (int64, error) {
	var total int64
	err := r.ranges(func(seg mappedfile.MappedFile, pos, n int64) error {
		m, err := seg.SendRange(ctx, w, pos, n)
		total += m
		return err
	})
	return total, err
}

// copyChunkBytes is the buffer CopyTo copies through.
const copyChunkBytes = 64 << 10

// CopyTo writes the same bytes as WriteTo by copying them through memory.
func (r *GetResult) CopyTo(w io.Writer) (int64, error) {
	var total int64
	buf := make([]byte, copyChunkBytes)
	err := r.ranges(func(seg mappedfile.MappedFile, pos, n int64) error {
		for n > 0 {
			chunk := min(n, int64(len(buf)))
			m, err := seg.ReadAt(buf[:chunk], pos)
			if int64(m) != chunk {
				return fmt.Errorf("read %s at %d: %w", seg.Path(), pos, err)
			}
			k, err := w.Write(buf[:chunk])
			total += int64(k)
			if err != nil {
				return err
			}
			pos += chunk
			n -= chunk
		}
		return nil
	})
	return total, err
}

// maxFilteredUnits bounds how many units one Get examines when a filter
// rejects messages (RocketMQ: 16000 bytes of units).
const maxFilteredUnits = 16000 / consumequeue.UnitSize

// Get reads up to maxMsgs messages (32 when ≤ 0, and at most GetMaxBytes
// bytes, but at least one message) of a queue from a queue offset, keeping
// those that pass filter (nil: all). The result's status follows RocketMQ.
// group names the consumer group (for the record; offsets are the caller's).
// The error is for a closed store or a failed read, not for an empty result.
func (s *Store) Get(ctx context.Context, group, topic string, queueID int32, offset int64, maxMsgs int, filter MessageFilter) (*GetResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("get %s/%d: %w", topic, queueID, ErrClosed)
	}
	if maxMsgs <= 0 {
		maxMsgs = 32
	}
	res := &GetResult{}
	q, err := s.logics.queue(ctx, queueKey{topic: topic, queueID: queueID}, false)
	if err != nil {
		return nil, err
	}
	if q == nil {
		res.Status = NoMatchedLogicQueue
		return res, nil
	}
	res.MinOffset, res.MaxOffset = q.MinOffset(), q.MaxOffset()
	switch {
	case res.MaxOffset == 0:
		res.Status = NoMessageInQueue
	case offset < res.MinOffset:
		res.Status, res.NextBeginOffset = OffsetTooSmall, res.MinOffset
	case offset == res.MaxOffset:
		res.Status, res.NextBeginOffset = OffsetOverflowOne, offset
	case offset > res.MaxOffset:
		res.Status = OffsetOverflowBadly
		res.NextBeginOffset = res.MaxOffset
		if res.MinOffset == 0 {
			res.NextBeginOffset = res.MinOffset
		}
	default:
		if err := s.collect(ctx, q, res, offset, maxMsgs, filter); err != nil {
			res.Release()
			return nil, err
		}
	}
	s.stats.gets.Add(1)
	s.stats.gotMessages.Add(uint64(len(res.Messages)))
	return res, nil
}

// collect fills res with the messages from offset on.
func (s *Store) collect(ctx context.Context, q *consumequeue.Queue, res *GetResult, offset int64, maxMsgs int, filter MessageFilter) error {
	res.Status = NoMatchedMessage
	units := make([]consumequeue.Unit, min(max(maxMsgs, 32), maxFilteredUnits))
	examined := int64(0)
	var bytes int64
	minPhysical := s.MinOffset()
	var lastSeg mappedfile.MappedFile
	for examined < maxFilteredUnits && len(res.Messages) < maxMsgs {
		n, err := q.Read(offset+examined, units)
		if n == 0 {
			if len(res.Messages) == 0 && examined == 0 {
				res.Status = OffsetFoundNull
				res.NextBeginOffset = offset
				return nil
			}
			break
		}
		for _, u := range units[:n] {
			if len(res.Messages) >= maxMsgs || (len(res.Messages) > 0 && bytes+int64(u.Size) > int64(s.opts.GetMaxBytes)) {
				goto done
			}
			examined++
			if u.PhysicalOffset < minPhysical || u.Size == consumequeue.BlankUnitSize {
				continue // deleted by retention, or a pre-blank unit
			}
			if filter != nil && !filter.MatchTagsCode(u.TagsCode) {
				continue
			}
			seg := s.log.queue.Find(u.PhysicalOffset)
			if seg == nil {
				continue // the segment is gone
			}
			if seg != lastSeg {
				if !seg.Retain() {
					if len(res.Messages) == 0 {
						res.Status = MessageWasRemoving
					}
					continue
				}
				res.segments = append(res.segments, seg)
				lastSeg = seg
			}
			m := GotMessage{QueueOffset: offset + examined - 1, PhysicalOffset: u.PhysicalOffset, Size: u.Size, TagsCode: u.TagsCode, segment: len(res.segments) - 1}
			if filter != nil {
				ok, err := s.matchRealTags(seg, m, filter)
				if err != nil {
					return err
				}
				if !ok {
					continue // a tags-code collision
				}
			}
			res.Messages = append(res.Messages, m)
			bytes += int64(u.Size)
		}
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, consumequeue.ErrNotFound) {
			return fmt.Errorf("read consume queue %s/%d at %d: %w", q.Topic(), q.QueueID(), offset+examined, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
done:
	res.NextBeginOffset = offset + examined
	if len(res.Messages) > 0 {
		res.Status = Found
	}
	return nil
}

// matchRealTags reads the record's TAGS to confirm a tags-code match.
func (s *Store) matchRealTags(seg mappedfile.MappedFile, m GotMessage, filter MessageFilter) (bool, error) {
	buf := make([]byte, m.Size)
	if n, err := seg.ReadAt(buf, m.PhysicalOffset-seg.FromOffset()); n != len(buf) {
		return false, fmt.Errorf("read message at %d for its tags: %w", m.PhysicalOffset, err)
	}
	r, err := record.Decode(buf, m.PhysicalOffset, false)
	if err == nil {
		err = checkStoredOffset(&r, m.PhysicalOffset)
	}
	if err != nil {
		return false, fmt.Errorf("message at %d: %w", m.PhysicalOffset, err)
	}
	tags, _ := r.Tags()
	return filter.MatchTags(tags), nil
}

// GetLongPoll is Get that, when there is no message at the offset yet
// (OffsetOverflowOne, NoMessageInQueue, NoMatchedLogicQueue), waits for one
// until ctx ends. Dispatch wakes it (no polling). When ctx ends it returns
// the last result with a nil error: an empty long poll is not a failure.
func (s *Store) GetLongPoll(ctx context.Context, group, topic string, queueID int32, offset int64, maxMsgs int, filter MessageFilter) (*GetResult, error) {
	key := queueKey{topic: topic, queueID: queueID}
	for {
		// Register before reading: a message dispatched after the read
		// closes this channel, so it cannot slip between read and wait.
		ch := s.logics.pollChannel(key)
		res, err := s.Get(context.WithoutCancel(ctx), group, topic, queueID, offset, maxMsgs, filter)
		if err != nil {
			return nil, err
		}
		switch res.Status {
		case OffsetOverflowOne, NoMessageInQueue, NoMatchedLogicQueue:
		case NoMatchedMessage:
			if res.NextBeginOffset < res.MaxOffset {
				return res, nil
			}
			offset = res.NextBeginOffset // everything so far was filtered out: wait for more
		default:
			return res, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return res, nil
		}
	}
}
