package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/mqstore/mqstore/engine/consumequeue"
	"github.com/mqstore/mqstore/engine/indexfile"
	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/mappedfile"
)

// feedMessages are messages whose properties test how dispatch reads them:
// a later TAGS wins, an empty value is absent, KEYS split on single spaces
// (empty keys skipped), a key repeated or equal to the UNIQ_KEY is indexed
// once, non-ASCII keys, a prepared transaction (no unit), none at all.
func feedMessages() []*Message {
	var ms []*Message
	props := [][]Property{
		{{Name: "TAGS", Value: "a"}, {Name: "KEYS", Value: "k1 k2"}, {Name: "UNIQ_KEY", Value: "U1"}},
		{{Name: "TAGS", Value: "a"}, {Name: "TAGS", Value: "b"}},
		{{Name: "TAGS", Value: "a"}, {Name: "TAGS", Value: ""}, {Name: "KEYS", Value: "x"}, {Name: "KEYS", Value: ""}},
		{{Name: "KEYS", Value: "  k1   k1 k3 "}, {Name: "UNIQ_KEY", Value: "k3"}},
		{{Name: "KEYS", Value: "ключ 鍵🔑"}, {Name: "TAGS", Value: "тег"}},
		{{Name: "WAIT", Value: "true"}, {Name: "UNIQ_KEY", Value: ""}},
		nil,
	}
	for i := range 60 {
		m := testMessage([]string{"A", "Bb"}[i%2], int32(i%3), i, 100+i*37%900)
		if p := props[i%len(props)]; p != nil || i%len(props) == len(props)-1 {
			m.Properties = p
		}
		if i%11 == 5 {
			m.SysFlag = 0x4 // a prepared transaction: indexed, no queue offset
		}
		m.BornTimestamp = int64(1_700_000_000_000 + i)
		ms = append(ms, m)
	}
	return ms
}

// TestDispatchFeedBuildsWhatTheLogWould: the units and index entries
// dispatch builds from what the appends fed it are those it builds by
// reading the records back, and Verify (which reads the log) finds them.
func TestDispatchFeedBuildsWhatTheLogWould(t *testing.T) {
	ctx := context.Background()
	type built struct {
		units   map[queueKey][]consumequeue.Unit
		entries int32
		stats   Stats
	}
	build := func(fromLog bool) built {
		o := smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})})
		o.dispatchFromLog = fromLog
		s := openStore(t, t.TempDir(), o)
		defer s.Close()
		var last PutResult
		for i, m := range feedMessages() {
			res, err := s.Put(ctx, m)
			if err != nil {
				t.Fatalf("put %d: %v", i, err)
			}
			last = res
		}
		if err := s.WaitDispatched(ctx, last.PhysicalOffset+int64(last.Size)); err != nil {
			t.Fatal(err)
		}
		if err := verifyClean(ctx, s); err != nil {
			t.Fatalf("from the log %v: %v", fromLog, err)
		}
		b := built{units: map[queueKey][]consumequeue.Unit{}, stats: s.Stats()}
		for _, q := range s.logics.queues() {
			units := make([]consumequeue.Unit, q.MaxOffset()-q.MinOffset())
			n, err := q.Read(q.MinOffset(), units)
			if err != nil {
				t.Fatal(err)
			}
			b.units[queueKey{q.Topic(), q.QueueID()}] = units[:n]
		}
		for _, f := range s.logics.index.Files() {
			b.entries += f.Header.IndexCount
		}
		return b
	}
	fed, read := build(false), build(true)
	if fed.stats.DispatchRead != 0 || fed.stats.DispatchFed != uint64(len(feedMessages())) {
		t.Errorf("with the feed: %d records fed, %d read back; want all %d fed", fed.stats.DispatchFed, fed.stats.DispatchRead, len(feedMessages()))
	}
	if read.stats.DispatchFed != 0 || read.stats.DispatchRead == 0 {
		t.Errorf("from the log: %d records fed, %d read back", read.stats.DispatchFed, read.stats.DispatchRead)
	}
	if len(fed.units) != len(read.units) {
		t.Fatalf("%d queues with the feed, %d from the log", len(fed.units), len(read.units))
	}
	for key, units := range read.units {
		if !slices.Equal(fed.units[key], units) {
			t.Errorf("queue %s/%d: fed units %v, read back %v", key.topic, key.queueID, fed.units[key], units)
		}
	}
	if fed.entries != read.entries {
		t.Errorf("index entries: %d fed, %d read back", fed.entries, read.entries)
	}
}

// TestDispatchReadsWhatTheFeedMissed: records the feed did not take (it
// was full while dispatch was stopped) are read back from the log, and
// dispatch takes the fed ones again after them.
func TestDispatchReadsWhatTheFeedMissed(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})}))
	defer s.Close()
	s.log.feed.limit = 2
	s.pauseLogics()
	var last PutResult
	for i := range 20 {
		res, err := s.Put(ctx, testMessage("T", int32(i%2), i, 3000))
		if err != nil {
			t.Fatal(err)
		}
		last = res
	}
	s.resumeLogics()
	if err := s.WaitDispatched(ctx, last.PhysicalOffset+int64(last.Size)); err != nil {
		t.Fatal(err)
	}
	for i := 20; i < 30; i++ { // the feed has room again
		if last, err := s.Put(ctx, testMessage("T", int32(i%2), i, 3000)); err != nil {
			t.Fatal(err)
		} else if err := s.WaitDispatched(ctx, last.PhysicalOffset+int64(last.Size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := verifyClean(ctx, s); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.DispatchFed != 12 || st.DispatchRead != 18 {
		t.Errorf("%d records fed, %d read back; want 12 and 18 (the feed held 2 of the first 20)", st.DispatchFed, st.DispatchRead)
	}
	if s.log.queue.Len() < 2 {
		t.Errorf("%d segments: the test wants a roll (a fed record after an end-of-segment blank)", s.log.queue.Len())
	}
}

// TestFeedKeysReadsAsDispatch: the tags code and key hashes a Put feeds are
// those dispatch computes from the stored properties.
func TestFeedKeysReadsAsDispatch(t *testing.T) {
	for i, m := range feedMessages() {
		raw, err := record.EncodeProperties(nil, m.Properties)
		if err != nil {
			t.Fatal(err)
		}
		p := record.LookupDispatchProperties(raw)
		var want []int32
		if p.HasKeys {
			for _, key := range strings.Split(string(p.Keys), " ") {
				if key != "" {
					want = append(want, record.IndexKeyHash(m.Topic+"#"+key))
				}
			}
		}
		if p.HasUniqKey {
			want = append(want, record.IndexKeyHash(m.Topic+"#"+string(p.UniqKey)))
		}
		hashes, tags := feedKeys(nil, m)
		if !slices.Equal(hashes, want) || tags != record.TagsCode(string(p.Tags)) {
			t.Errorf("message %d (%v): fed hashes %v tags code %d, dispatch reads %v %d", i, m.Properties, hashes, tags, want, record.TagsCode(string(p.Tags)))
		}
	}
}

// TestFedRecordsNameTheQueuesTopic: a fed record names its topic by the
// string its queue counter keeps, not by the string its Put passed, which
// may be garbage once Put returns; fedBatch.next does not clear the records
// of a batch it is done with, so this is what keeps old entries from
// holding producers' strings alive.
func TestFedRecordsNameTheQueuesTopic(t *testing.T) {
	ctx := context.Background()
	const size = 1 << 16
	q, err := segment.Open(ctx, segment.Config{Dir: "/f/commitlog", Backend: mappedfile.NewMemFS(mappedfile.MemOptions{}), SegmentSizeBytes: size})
	if err != nil {
		t.Fatal(err)
	}
	c := &commitLog{queue: q, segmentSizeBytes: size, maxRecordBytes: size / 2, queueOffsets: map[queueKey]*queueCounter{}, feed: newDispatchFeed()}
	c.crcFrom.Store(-1)
	var puts []string
	for i := range 3 {
		topic := strings.Clone("FeedTopic") // each Put's own string
		puts = append(puts, topic)
		m := &Message{Topic: topic, Body: []byte{byte(i)}}
		e := &encodeBuffer{size: record.Size(m, 0), feed: c.feed, fed: fedRecord{topic: "stale"}}
		e.buf = make([]byte, e.size)
		if err := record.Encode(e.buf, m, nil); err != nil {
			t.Fatal(err)
		}
		key := queueKey{topic: topic}
		if _, err := c.appendLocked(ctx, e, c.counterLocked(key), 0, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	kept := c.queueOffsets[queueKey{topic: "FeedTopic"}].topic
	if len(c.feed.records) != 3 {
		t.Fatalf("%d records fed, want 3", len(c.feed.records))
	}
	for i, r := range c.feed.records {
		if r.topic != "FeedTopic" || unsafe.StringData(r.topic) != unsafe.StringData(kept) {
			t.Errorf("record %d names topic %q at %p, want the queue's string at %p", i, r.topic, unsafe.StringData(r.topic), unsafe.StringData(kept))
		}
		if i > 0 && unsafe.StringData(r.topic) == unsafe.StringData(puts[i]) {
			t.Errorf("record %d holds its Put's topic string", i)
		}
	}
}

// TestFailedIndexBatchStopsDispatchBeforeIt: dispatch puts the index keys
// of fed records in batches; when a batch fails, neither the dispatched
// offset nor the timestamp the logics checkpoint takes covers its records,
// dispatch stops — even on ENOSPC, which it retries elsewhere, since the
// index stays stopped until the store is opened again — and the next Open
// indexes them.
func TestFailedIndexBatchStopsDispatchBeforeIt(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EIO, syscall.ENOSPC} {
		t.Run(errno.Error(), func(t *testing.T) {
			ctx := context.Background()
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
			h := newHooked(fs)
			o := smallLogicsOptions(Options{BackendImpl: h})
			o.IndexMaxEntries = 1000
			dir := t.TempDir()
			s := openStore(t, dir, o)
			before := putN(t, s, "Q", 2, 10, 100, nil)
			last := before[len(before)-1]
			if err := s.WaitDispatched(ctx, last.PhysicalOffset+int64(last.Size)); err != nil {
				t.Fatal(err)
			}
			stamp := s.logics.lastDispatchedTimestamp.Load()
			h.set(on("overwrite", indexDirName, func(string) error { return errno }))
			var failed []PutResult // stored; their dispatch fails in the background
			for i := 10; i < 15; i++ {
				res, err := s.Put(ctx, testMessage("Q", int32(i%2), i, 100))
				if errors.Is(err, ErrServiceNotAvailable) && len(failed) > 0 {
					break // dispatch has stopped already: the store refuses writes
				}
				if err != nil {
					t.Fatal(err)
				}
				failed = append(failed, res)
			}
			end := failed[len(failed)-1]
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := s.WaitDispatched(wctx, end.PhysicalOffset+int64(end.Size)); !errors.Is(err, errno) || !errors.Is(err, indexfile.ErrStopped) {
				t.Fatalf("WaitDispatched: %v, want the index's %v, stopped", err, errno)
			}
			if got := s.DispatchedOffset(); got > failed[0].PhysicalOffset {
				t.Errorf("dispatched offset %d after the index failed, past the first record not indexed (%d)", got, failed[0].PhysicalOffset)
			}
			if got := s.logics.lastDispatchedTimestamp.Load(); got > stamp {
				t.Errorf("last dispatched timestamp %d after the index failed, want at most %d (the records before)", got, stamp)
			}
			reopenIndexesOnce(t, s, h, dir, o, errno, append(before, failed...), func(i int) []string { return []string{fmt.Sprintf("k%d", i)} })
		})
	}
}

// TestIndexFailureMidBatchLosesNoKey: an index write that fails part way
// through dispatch's batches — the k-th slot swap after the fault is armed,
// which may fall in the second file a batch fills, after the first took its
// entries — leaves the next Open to index every record's keys exactly once.
func TestIndexFailureMidBatchLosesNoKey(t *testing.T) {
	for k := int32(1); k <= 4; k++ {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			ctx := context.Background()
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
			h := newHooked(fs)
			o := smallLogicsOptions(Options{BackendImpl: h}) // 40 entries per index file: rolls within a batch
			dir := t.TempDir()
			s := openStore(t, dir, o)
			var swaps atomic.Int32
			h.set(on("overwrite", indexDirName, func(string) error {
				if swaps.Add(1) >= k {
					return syscall.EIO
				}
				return nil
			}))
			var stored []PutResult
			for i := range 60 {
				res, err := s.Put(ctx, testMessage("Q", int32(i%2), i, 100))
				if errors.Is(err, ErrServiceNotAvailable) {
					break // dispatch has stopped: the store refuses writes
				}
				if err != nil {
					t.Fatal(err)
				}
				stored = append(stored, res)
			}
			reopenIndexesOnce(t, s, h, dir, o, syscall.EIO, stored, func(i int) []string {
				return []string{fmt.Sprintf("k%d", i), fmt.Sprintf("x%d", i), fmt.Sprintf("U%08d", i)}
			})
		})
	}
}

// reopenIndexesOnce closes s, whose index failed with want, opens the
// store again without the hooks and checks that a query of each of
// keys(i) finds stored[i] once.
func reopenIndexesOnce(t *testing.T, s *Store, h *hooked, dir string, o Options, want error, stored []PutResult, keys func(i int) []string) {
	t.Helper()
	ctx := context.Background()
	if err := s.Close(); !errors.Is(err, want) {
		t.Fatalf("Close: %v, want the index's %v", err, want)
	}
	h.set(nil)
	s = openStore(t, dir, o)
	defer s.Close()
	if err := s.WaitDispatched(ctx, s.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	for i, r := range stored {
		for _, key := range keys(i) {
			got, err := s.QueryMessages(ctx, "Q", key, 0, 0, 10)
			if err != nil || len(got) != 1 || got[0].PhysicalOffset != r.PhysicalOffset {
				t.Fatalf("query of %s after the reopen: %d results, %v; want the record at %d once", key, len(got), err, r.PhysicalOffset)
			}
		}
	}
}
