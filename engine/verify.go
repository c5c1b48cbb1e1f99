package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/mqstore/mqstore/engine/consumequeue"
	"github.com/mqstore/mqstore/engine/record"
)

// Problem is one inconsistency found by Verify.
type Problem struct {
	Offset int64  // CommitLog offset it concerns (-1 when none)
	What   string // what is wrong
}

func (p Problem) String() string {
	if p.Offset < 0 {
		return p.What
	}
	return fmt.Sprintf("offset %d: %s", p.Offset, p.What)
}

// VerifyReport summarizes a Verify run.
type VerifyReport struct {
	Records       int64
	Blanks        int64
	Bytes         int64
	Queues        int
	Units         int64
	IndexedKeys   int64
	MinOffset     int64
	MaxOffset     int64
	Problems      []Problem
	TruncatedMore bool // Problems was capped
}

// maxProblems caps the problems a Verify lists.
const maxProblems = 1000

// Verify checks the whole store: every record's CRC and lengths, every
// ConsumeQueue unit against its record (and that no record lacks its unit),
// and that the index finds every record by each of its keys. It reads
// everything; run it on a quiet store. It first waits until every record
// readable when it starts is dispatched (a ConsumeQueue unit not written
// yet is not a problem); an error stopping dispatch is its error.
func (s *Store) Verify(ctx context.Context) (*VerifyReport, error) {
	rep := &VerifyReport{MinOffset: s.MinOffset(), MaxOffset: s.MaxOffset()}
	if err := s.WaitDispatched(ctx, rep.MaxOffset); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	add := func(off int64, format string, args ...any) {
		if len(rep.Problems) >= maxProblems {
			rep.TruncatedMore = true
			return
		}
		rep.Problems = append(rep.Problems, Problem{Offset: off, What: fmt.Sprintf(format, args...)})
	}
	perQueue := map[queueKey]int64{}
	end, err := s.Scan(ctx, rep.MinOffset, func(offset int64, rec []byte, r *record.Record) error {
		if offset >= rep.MaxOffset {
			return errVerifyEnd // written since Verify began
		}
		if r == nil {
			rep.Blanks++
			return nil
		}
		rep.Records++
		rep.Bytes += int64(r.TotalSize)
		if takesQueueOffset(r.SysFlag) {
			key := queueKey{topic: r.Topic, queueID: r.QueueID}
			perQueue[key]++
			s.verifyUnit(ctx, offset, r, add)
		}
		s.verifyIndex(ctx, offset, r, rep, add)
		return nil
	})
	if errors.Is(err, errVerifyEnd) {
		end, err = rep.MaxOffset, nil
	}
	if err != nil {
		add(end, "CommitLog scan stopped: %v", err)
	}
	if end != rep.MaxOffset && err == nil {
		add(end, "CommitLog valid data ends at %d, readable end is %d", end, rep.MaxOffset)
	}
	for _, q := range s.logics.queues() {
		rep.Queues++
		key := queueKey{topic: q.Topic(), queueID: q.QueueID()}
		units := q.MaxOffset() - q.MinOffset()
		rep.Units += units
		if units > perQueue[key] && unitsAfter(q, perQueue[key], rep.MaxOffset) {
			continue // the extra units are of records written since Verify began
		}
		if units != perQueue[key] {
			add(-1, "consume queue %s/%d holds %d units [%d, %d), the CommitLog has %d records of it",
				key.topic, key.queueID, units, q.MinOffset(), q.MaxOffset(), perQueue[key])
		}
	}
	return rep, nil
}

// errVerifyEnd stops Verify's scan at the end it began with.
var errVerifyEnd = errors.New("verify: end reached")

// unitsAfter reports whether q's units from number n on (counted from its
// MinOffset) all point at or after end.
func unitsAfter(q *consumequeue.Queue, n, end int64) bool {
	u, err := q.Get(q.MinOffset() + n)
	return err == nil && u.PhysicalOffset >= end
}

func (s *Store) verifyUnit(ctx context.Context, offset int64, r *record.Record, add func(int64, string, ...any)) {
	q, err := s.logics.queue(ctx, queueKey{topic: r.Topic, queueID: r.QueueID}, false)
	if err != nil || q == nil {
		add(offset, "record of %s/%d has no consume queue (%v)", r.Topic, r.QueueID, err)
		return
	}
	if r.QueueOffset < q.MinOffset() {
		return // older than the queue's retention
	}
	u, err := q.Get(r.QueueOffset)
	if err != nil {
		add(offset, "consume queue %s/%d has no unit %d: %v", r.Topic, r.QueueID, r.QueueOffset, err)
		return
	}
	tags, _ := r.Tags()
	if u.PhysicalOffset != offset || u.Size != r.TotalSize || u.TagsCode != record.TagsCode(tags) {
		add(offset, "consume queue %s/%d unit %d is (offset %d, size %d, tags code %d); the record is (%d, %d, %d)",
			r.Topic, r.QueueID, r.QueueOffset, u.PhysicalOffset, u.Size, u.TagsCode, offset, r.TotalSize, record.TagsCode(tags))
	}
}

func (s *Store) verifyIndex(ctx context.Context, offset int64, r *record.Record, rep *VerifyReport, add func(int64, string, ...any)) {
	keys := r.Keys()
	if u, ok := r.UniqKey(); ok && u != "" {
		keys = append(keys, u)
	}
	for _, k := range keys {
		rep.IndexedKeys++
		// Index times are whole seconds after the file's begin time.
		offs, err := s.logics.index.Query(ctx, r.Topic+"#"+k, r.StoreTimestamp-indexTimeResolutionMs+1, r.StoreTimestamp, verifyQueryMax)
		if err != nil {
			add(offset, "index query of %q: %v", k, err)
			continue
		}
		if !slices.Contains(offs, offset) {
			add(offset, "index does not find the record by key %q (stored at %d ms; %s)", k, r.StoreTimestamp, s.indexMissDetail(ctx, r.Topic+"#"+k, offset))
		}
	}
}

// indexTimeResolutionMs is how finely an index entry keeps its time (whole
// seconds after its file's begin time); verifyQueryMax bounds the offsets
// one of Verify's index queries returns (a key that many records share is
// checked among the first that many).
const (
	indexTimeResolutionMs = 1000
	verifyQueryMax        = 1 << 20
)

// indexMissDetail says more about a key the index did not find: whether a
// query over all time finds it (then the times disagree) and the index
// files' ranges.
func (s *Store) indexMissDetail(ctx context.Context, key string, offset int64) string {
	detail := "not found over all time either"
	if offs, err := s.logics.index.Query(ctx, key, 0, math.MaxInt64, verifyQueryMax); err == nil && slices.Contains(offs, offset) {
		detail = "found by a query over all time: the entry's time is outside the record's second"
	}
	files := s.logics.index.Files()
	for i, f := range files {
		h := f.Header
		newest := i == len(files)-1
		if offset < h.BeginPhyOffset || (offset > h.EndPhyOffset && !newest) {
			continue // a file that should not hold it
		}
		detail += fmt.Sprintf("; index file %s: %d entries, offsets [%d, %d], times [%d, %d]",
			f.Name, h.IndexCount-1, h.BeginPhyOffset, h.EndPhyOffset, h.BeginTimestamp, h.EndTimestamp)
	}
	return detail
}
