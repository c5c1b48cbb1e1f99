package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/mqstore/mqstore/engine/indexfile"
	"github.com/mqstore/mqstore/engine/record"
)

// The dispatch feed: what an append already knows about its record — where
// it went, its queue and queue offset, its tags code, its index keys' hashes
// — handed to dispatch, so dispatch builds ConsumeQueue units and index
// entries without reading back and decoding bytes it has just had written
// (for uring-direct that read was a third of the process's CPU).
//
// Order. A record is pushed from inside its append (encodeBuffer.EncodeAt,
// under the append lock), before the backend moves its write position past
// it: so by the time a record is readable — the bound dispatch respects —
// it is in the feed, in log order. Dispatch reads the readable offset before
// it takes the feed, so every readable record it may dispatch is in what it
// took, unless the feed did not have it.
//
// Coverage. The feed does not have every record: not those appended before
// the store opened (recovery's re-dispatch), not a slave's replicated bytes,
// not those pushed while the feed was full (dispatch far behind). Dispatch
// takes a fed record only when it starts where dispatch stands (or its
// segment's end-of-file blank does); at a gap it reads the log, as it always
// did, and fed records it has passed that way are dropped. The recovery path
// always rebuilds from the log.
type dispatchFeed struct {
	mu      sync.Mutex
	records []fedRecord
	hashes  []int32 // the index key hashes of records, one run after another
	limit   int     // records held at most; past it a record is not fed
}

// fedRecord is one record as its append knew it.
type fedRecord struct {
	// before is the log's write offset before the append: offset, or the
	// start of the end-of-segment blank the append wrote first.
	before, offset int64
	queueOffset    int64
	storeTimestamp int64
	tagsCode       int64
	topic          string
	size, queueID  int32
	sysFlag        int32
	hashesEnd      int32 // its key hashes end here in the batch's hashes
}

// defaultFeedLimit bounds the feed: 128k records is 64 MiB of 512-byte
// records, more than the dispatch gate lets dispatch fall behind.
const defaultFeedLimit = 128 << 10

func newDispatchFeed() *dispatchFeed { return &dispatchFeed{limit: defaultFeedLimit} }

// push feeds a record; the append lock is held.
func (f *dispatchFeed) push(r *fedRecord, hashes []int32) {
	f.mu.Lock()
	if n := len(f.records); n < f.limit {
		f.hashes = append(f.hashes, hashes...)
		r.hashesEnd = int32(len(f.hashes))
		// Stored straight into its slot: append(f.records, *r) copied the
		// record to a stack temporary first.
		if n == cap(f.records) {
			f.records = slices.Grow(f.records, 1)
		}
		f.records = f.records[:n+1]
		f.records[n] = *r
	}
	f.mu.Unlock()
}

// take returns what was fed since the last take and keeps records and
// hashes, emptied, for the next records: two batches' memory in all.
func (f *dispatchFeed) take(records []fedRecord, hashes []int32) ([]fedRecord, []int32) {
	f.mu.Lock()
	r, h := f.records, f.hashes
	f.records, f.hashes = records[:0], hashes[:0]
	f.mu.Unlock()
	return r, h
}

// fedBatch is the dispatcher's side of the feed: a taken batch and how far
// into it dispatch is.
type fedBatch struct {
	records  []fedRecord
	hashes   []int32
	at       int
	hashesAt int32
	taken    uint64 // records dispatched from the feed this pass
}

// next returns the batch's next record with its key hashes, taking a new
// batch from feed when this one is done; nil when the feed is empty.
func (b *fedBatch) next(feed *dispatchFeed) (*fedRecord, []int32) {
	if b.at == len(b.records) {
		// Not cleared: a record names its topic by the string its queue
		// counter keeps (appendLocked), which lives as long as the queue, so
		// old entries keep nothing else alive; and clearing made every line
		// of the batch dirty in this goroutine's cache, for the producers to
		// fetch back from it when they next append into the same memory
		// (pprof, 256 producers: the append into the feed took 0.16 µs of
		// a Put with the clear, 0.04–0.07 µs without).
		b.records, b.hashes = feed.take(b.records, b.hashes)
		b.at, b.hashesAt = 0, 0
		if len(b.records) == 0 {
			return nil, nil
		}
	}
	r := &b.records[b.at]
	return r, b.hashes[b.hashesAt:r.hashesEnd]
}

// done moves past the record next returned.
func (b *fedBatch) done() {
	b.hashesAt = b.records[b.at].hashesEnd
	b.at++
}

// drop forgets the batch and what the feed holds: the log was cut, so they
// may name records that are no longer there.
func (b *fedBatch) drop(feed *dispatchFeed) {
	if feed == nil {
		return
	}
	clear(b.records)
	b.records, b.hashes = feed.take(b.records, b.hashes)
	clear(b.records)
	b.records, b.hashes, b.at, b.hashesAt = b.records[:0], b.hashes[:0], 0, 0
}

// indexBatch is the index keys of fed records waiting for one
// Index.PutBatch.
type indexBatch struct {
	recs   []indexfile.RecordKeys // each record's keys: a run of hashes
	hashes []int32
	// from is where dispatch stood before the first record of recs;
	// failedAt is the from of a batch that failed, -1 when none did.
	from, failedAt int64
}

// indexBatchRecords is the most records whose keys wait for one
// Index.PutBatch.
const indexBatchRecords = 64

// addIndexKeys queues the index keys of the fed record r (dispatch stood at
// from before it).
func (d *dispatcher) addIndexKeys(ctx context.Context, from int64, r *fedRecord, hashes []int32) error {
	b := &d.index
	if len(b.recs) == 0 {
		b.from = from
	}
	at := len(b.hashes)
	b.hashes = append(b.hashes, hashes...)
	// A view of this batch's hashes: it stays true when a later append
	// moves b.hashes, which keeps the old array alive and unchanged.
	b.recs = append(b.recs, indexfile.RecordKeys{Hashes: b.hashes[at:len(b.hashes):len(b.hashes)], PhysicalOffset: r.offset, StoreTimestamp: r.storeTimestamp})
	if len(b.recs) >= indexBatchRecords {
		return d.putIndexBatch(ctx)
	}
	return nil
}

// putIndexBatch puts the queued index keys. The batch is emptied either
// way: a failed put stops the index for good (its error is sticky), and
// dispatch with it; then neither the dispatched offset (dispatchFed) nor
// lastDispatchedTimestamp moves past the batch's first record.
func (d *dispatcher) putIndexBatch(ctx context.Context) error {
	b := &d.index
	if len(b.recs) == 0 {
		return nil
	}
	err := d.store.logics.index.PutBatch(ctx, b.recs)
	if err != nil {
		err = fmt.Errorf("index the keys of %d records from offset %d: %w", len(b.recs), b.recs[0].PhysicalOffset, err)
		if b.failedAt < 0 {
			b.failedAt = b.from
		}
		d.pendingTimestamp = 0
	}
	clear(b.recs) // no view of an old array outlives the batch
	b.recs, b.hashes = b.recs[:0], b.hashes[:0]
	return err
}

// dispatchFed dispatches fed records from from up to readable, while the
// feed has them one after another. It returns where it stopped, and whether
// the log must be read from there: the next readable record was not fed.
// Every record before where it stopped is indexed when it returns: it never
// stops past a record whose keys failed to go in.
func (d *dispatcher) dispatchFed(ctx context.Context, from, readable int64) (int64, bool, error) {
	d.index.failedAt = -1
	to, read, err := d.dispatchFedRun(ctx, from, readable)
	if ierr := d.putIndexBatch(ctx); ierr != nil && err == nil {
		err = ierr
	}
	if d.index.failedAt >= 0 {
		return min(to, d.index.failedAt), false, err
	}
	return to, read, err
}

// dispatchFedRun is dispatchFed, the index keys of the last records queued
// in d.index.
func (d *dispatcher) dispatchFedRun(ctx context.Context, from, readable int64) (int64, bool, error) {
	feed := d.store.log.feed
	if feed == nil {
		return from, true, nil
	}
	for {
		r, hashes := d.fed.next(feed)
		if r == nil {
			return from, from < readable, nil
		}
		if r.offset < from {
			d.fed.done() // dispatched by a read of the log
			continue
		}
		if r.offset != from && r.before != from {
			return from, true, nil // a gap
		}
		end := r.offset + int64(r.size)
		if end > readable {
			return from, false, nil // not readable yet
		}
		if err := d.dispatchUnit(ctx, r.offset, queueKey{topic: r.topic, queueID: r.queueID}, r.sysFlag, r.queueOffset, r.size, r.tagsCode); err != nil {
			return from, false, err
		}
		if len(hashes) > 0 {
			// Index.PutBatch ignores a record older than the newest
			// indexed, as PutHashes does.
			if err := d.addIndexKeys(ctx, from, r, hashes); err != nil {
				return from, false, err
			}
		}
		d.pendingTimestamp = r.storeTimestamp
		d.fed.done()
		d.fed.taken++
		from = end
	}
}

// feedKeys returns the index key hashes of m's KEYS and UNIQ_KEY
// (keyHashes) and its tags code, read from m.Properties as dispatch reads
// the stored record (record.LookupDispatchProperties: a later property wins,
// an empty value is absent) — EncodeProperties has refused any property
// whose stored form would read otherwise.
func feedKeys(hashes []int32, m *Message) ([]int32, int64) {
	var tags, keys, uniq string
	for i := range m.Properties {
		p := &m.Properties[i]
		if p.Value == "" {
			continue
		}
		switch p.Name {
		case record.PropTags:
			tags = p.Value
		case record.PropKeys:
			keys = p.Value
		case record.PropUniqKey:
			uniq = p.Value
		}
	}
	return keyHashes(hashes[:0], m.Topic, keys, uniq), record.TagsCode(tags)
}

// keyHashes appends the index key hashes of a record of topic: each
// non-empty space-separated key of keys, then uniq when not empty (RocketMQ
// indexes both as "topic#key").
func keyHashes(hashes []int32, topic, keys, uniq string) []int32 {
	if keys == "" && uniq == "" {
		return hashes
	}
	prefix := record.IndexKeyPrefix(topic)
	for len(keys) > 0 {
		key := keys
		if i := strings.IndexByte(keys, ' '); i >= 0 {
			key, keys = keys[:i], keys[i+1:]
		} else {
			keys = ""
		}
		if key != "" {
			hashes = append(hashes, record.IndexKeyHashIn(prefix, key))
		}
	}
	if uniq != "" {
		hashes = append(hashes, record.IndexKeyHashIn(prefix, uniq))
	}
	return hashes
}
