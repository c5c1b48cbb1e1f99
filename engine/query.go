package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/mqstore/mqstore/engine/record"
)

// DefaultQueryMax is how many messages a key query returns by default
// (RocketMQ's defaultQueryMaxNum).
const DefaultQueryMax = 64

// QueryMessages finds the messages of topic whose KEYS contain key or whose
// UNIQ_KEY is key, stored between beginMs and endMs (inclusive; 0 and 0 mean
// any time), newest first, at most maxResults (DefaultQueryMax when ≤ 0). Index hash
// collisions are resolved against the CommitLog records.
func (s *Store) QueryMessages(ctx context.Context, topic, key string, beginMs, endMs int64, maxResults int) ([]record.Record, error) {
	if maxResults <= 0 {
		maxResults = DefaultQueryMax
	}
	if endMs == 0 {
		endMs = math.MaxInt64
	}
	if err := record.ValidateTopic(topic, true); err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	if key == "" {
		return nil, fmt.Errorf("query %s: empty key: %w", topic, ErrInvalidOption)
	}
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return nil, fmt.Errorf("query: %w", ErrClosed)
	}
	// Ask for more than max: some hits may be collisions. An entry's time is
	// whole seconds after its file's begin time, so it can be up to 999 ms
	// before the record's: widen the range, then filter on the records.
	offsets, err := s.logics.index.Query(ctx, topic+"#"+key, max(beginMs-999, 0), endMs, maxResults*2+8)
	if err != nil {
		return nil, fmt.Errorf("query %s#%s: %w", topic, key, err)
	}
	var out []record.Record
	minOffset, maxOffset := s.MinOffset(), s.MaxOffset()
	for _, off := range offsets {
		if len(out) >= maxResults {
			break
		}
		if off < minOffset || off >= maxOffset {
			continue // deleted by retention, or truncated by recovery
		}
		r, err := s.ReadMessage(ctx, off)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				continue
			}
			return out, err
		}
		if r.Topic != topic || !hasKey(&r, key) || r.StoreTimestamp < beginMs || r.StoreTimestamp > endMs {
			continue // a hash collision
		}
		out = append(out, r)
	}
	return out, nil
}

func hasKey(r *record.Record, key string) bool {
	if u, ok := r.UniqKey(); ok && u == key {
		return true
	}
	return slices.Contains(r.Keys(), key)
}

// QueryByUniqKey returns the message of topic with that UNIQ_KEY (the
// newest, if a producer reused it).
func (s *Store) QueryByUniqKey(ctx context.Context, topic, uniqKey string) (record.Record, error) {
	rs, err := s.QueryMessages(ctx, topic, uniqKey, 0, 0, DefaultQueryMax)
	if err != nil {
		return record.Record{}, err
	}
	for _, r := range rs {
		if u, _ := r.UniqKey(); u == uniqKey {
			return r, nil
		}
	}
	return record.Record{}, fmt.Errorf("topic %s has no message with UNIQ_KEY %q: %w", topic, uniqKey, ErrNotFound)
}
