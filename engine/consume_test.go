package engine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/mappedfile"
)

func smallLogicsOptions(o Options) Options {
	o.SegmentSizeBytes = 64 << 10
	o.ConsumeQueueFileSizeBytes = 20 * 50 // 50 units per file: rollovers
	o.IndexSlotCount = 7
	o.IndexMaxEntries = 40 // index rollover
	o.Logger = quietLogger
	return o
}

// putN stores n messages round robin over queues and waits until they are dispatched.
func putN(t testing.TB, s *Store, topic string, queues, n, size int, tags func(i int) string) []PutResult {
	t.Helper()
	return putAll(t, s, 0, n, func(i int) *Message {
		m := testMessage(topic, int32(i%queues), i, size)
		if tags != nil {
			m.Properties[0].Value = tags(i)
		}
		return m
	})
}

// putAll stores message(i) for i in [from, to) and waits until they are
// dispatched.
func putAll(t testing.TB, s *Store, from, to int, message func(i int) *Message) []PutResult {
	t.Helper()
	ctx := context.Background()
	var out []PutResult
	for i := from; i < to; i++ {
		res, err := s.Put(ctx, message(i))
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		out = append(out, res)
	}
	last := out[len(out)-1]
	waitFor(t, "dispatch", func() bool { return s.logics.dispatchedOffset.Load() >= last.PhysicalOffset+int64(last.Size) })
	return out
}

func TestGetStatuses(t *testing.T) {
	forEachBackendAndMode(t, func(t *testing.T, o Options) {
		ctx := context.Background()
		s := openStore(t, t.TempDir(), smallLogicsOptions(o))
		defer s.Close()
		putN(t, s, "S", 2, 120, 200, nil)
		get := func(topic string, q int32, off int64) *GetResult {
			t.Helper()
			res, err := s.Get(ctx, "g", topic, q, off, 10, nil)
			if err != nil {
				t.Fatal(err)
			}
			res.Release()
			return res
		}
		cases := []struct {
			name     string
			topic    string
			queue    int32
			offset   int64
			status   GetStatus
			next     int64
			messages int
		}{
			{"found", "S", 0, 5, Found, 15, 10},
			{"found at the end", "S", 1, 55, Found, 60, 5},
			{"overflow one", "S", 0, 60, OffsetOverflowOne, 60, 0},
			{"overflow badly", "S", 0, 61, OffsetOverflowBadly, 0, 0},
			{"no such queue", "S", 7, 0, NoMatchedLogicQueue, 0, 0},
			{"no such topic", "Nope", 0, 0, NoMatchedLogicQueue, 0, 0},
		}
		for _, c := range cases {
			res := get(c.topic, c.queue, c.offset)
			if res.Status != c.status || res.NextBeginOffset != c.next || len(res.Messages) != c.messages {
				t.Errorf("%s: status %v next %d messages %d; want %v %d %d", c.name, res.Status, res.NextBeginOffset, len(res.Messages), c.status, c.next, c.messages)
			}
			if c.topic == "S" && c.queue < 2 && (res.MinOffset != 0 || res.MaxOffset != 60) {
				t.Errorf("%s: min %d max %d", c.name, res.MinOffset, res.MaxOffset)
			}
		}
		res, err := s.Get(ctx, "g", "S", 0, 3, 4, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Release()
		for i := range res.Messages {
			r, err := res.Message(i)
			if err != nil {
				t.Fatal(err)
			}
			want := testMessage("S", 0, (3+i)*2, 200)
			if r.QueueOffset != int64(3+i) || !bytes.Equal(r.Body, want.Body) {
				t.Fatalf("message %d: queue offset %d", i, r.QueueOffset)
			}
		}
	})
}

// TestGetRareStatuses covers statuses that need a particular queue state.
func TestGetRareStatuses(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})}))
	defer s.Close()
	putN(t, s, "R", 1, 10, 50, func(i int) string { return "A" })
	q, _ := s.logics.queue(ctx, queueKey{"R", 0}, false)
	// A queue that exists but is empty: open one with no units.
	if _, err := s.logics.queue(ctx, queueKey{"Empty", 0}, true); err != nil {
		t.Fatal(err)
	}
	res, _ := s.Get(ctx, "g", "Empty", 0, 0, 10, nil)
	if res.Status != NoMessageInQueue {
		t.Errorf("empty queue: %v", res.Status)
	}
	// Everything filtered out.
	res, _ = s.Get(ctx, "g", "R", 0, 0, 10, NewTagFilter("B"))
	if res.Status != NoMatchedMessage || res.NextBeginOffset != 10 || len(res.Messages) != 0 {
		t.Errorf("no match: %v next %d", res.Status, res.NextBeginOffset)
	}
	// Offset too small once retention moved the minimum.
	if _, err := q.DeleteBefore(ctx, 1<<62); err != nil {
		t.Fatal(err)
	}
	if min := q.MinOffset(); min > 0 {
		res, _ = s.Get(ctx, "g", "R", 0, 0, 10, nil)
		if res.Status != OffsetTooSmall || res.NextBeginOffset != min {
			t.Errorf("below min: %v next %d (min %d)", res.Status, res.NextBeginOffset, min)
		}
	}
}

func TestTagFilterWithHashCollision(t *testing.T) {
	if record.TagsCode("Aa") != record.TagsCode("BB") {
		t.Fatal("Aa and BB must share a Java hash code for this test")
	}
	ctx := context.Background()
	s := openStore(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})}))
	defer s.Close()
	tags := []string{"Aa", "BB", "C", "Aa", "BB", "BB", "C", "Aa"}
	putN(t, s, "F", 1, len(tags), 30, func(i int) string { return tags[i] })
	res, err := s.Get(ctx, "g", "F", 0, 0, 32, ParseTagExpression("Aa"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	var got []int64
	for _, m := range res.Messages {
		got = append(got, m.QueueOffset)
	}
	if fmt.Sprint(got) != "[0 3 7]" || res.NextBeginOffset != 8 {
		t.Fatalf("Aa filter: %v next %d", got, res.NextBeginOffset)
	}
	res2, _ := s.Get(ctx, "g", "F", 0, 0, 32, ParseTagExpression("BB || C"))
	defer res2.Release()
	if len(res2.Messages) != 5 {
		t.Fatalf("BB || C: %d messages", len(res2.Messages))
	}
}

func TestLongPoll(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: true})}))
	defer s.Close()
	// Timeout: nothing arrives.
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	res, err := s.GetLongPoll(tctx, "g", "L", 0, 0, 10, nil)
	cancel()
	if err != nil || res.Status != NoMatchedLogicQueue {
		t.Fatalf("long poll timeout: %v %v", res, err)
	}
	// Wake-up: a message put while the poll waits.
	got := make(chan *GetResult, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		res, err := s.GetLongPoll(wctx, "g", "L", 0, 0, 10, nil)
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	if _, err := s.Put(ctx, testMessage("L", 0, 1, 10)); err != nil {
		t.Fatal(err)
	}
	res = <-got
	defer res.Release()
	if res.Status != Found || len(res.Messages) != 1 {
		t.Fatalf("long poll wake-up: %v %d", res.Status, len(res.Messages))
	}
}

func TestSendfileEqualsCopy(t *testing.T) {
	for _, b := range testBackends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			o := smallLogicsOptions(b.opts(t))
			s := openStore(t, t.TempDir(), o)
			defer s.Close()
			putN(t, s, "Z", 1, 200, 700, nil)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			received := make(chan []byte, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					received <- nil
					return
				}
				b, _ := io.ReadAll(c)
				c.Close()
				received <- b
			}()
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			var viaCopy bytes.Buffer
			for off := int64(0); off < 200; {
				res, err := s.Get(ctx, "g", "Z", 0, off, 32, nil)
				if err != nil || res.Status != Found {
					t.Fatalf("get at %d: %v %v", off, res.Status, err)
				}
				if _, err := res.WriteTo(ctx, conn); err != nil {
					t.Fatal(err)
				}
				if _, err := res.CopyTo(&viaCopy); err != nil {
					t.Fatal(err)
				}
				off = res.NextBeginOffset
				res.Release()
			}
			conn.Close()
			viaSend := <-received
			if !bytes.Equal(viaSend, viaCopy.Bytes()) || len(viaSend) == 0 {
				t.Fatalf("sendfile %d bytes, copy %d bytes, equal prefix %d", len(viaSend), viaCopy.Len(), commonPrefixLen(viaSend, viaCopy.Bytes()))
			}
			// And the bytes are the records.
			for b := viaSend; len(b) > 0; {
				_, total, err := record.Peek(b, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := record.Decode(b[:total], 0, true); err != nil {
					t.Fatal(err)
				}
				b = b[total:]
			}
		})
	}
}

func commonPrefixLen(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

func TestConcurrentProducersAndConsumers(t *testing.T) {
	forEachBackendAndMode(t, func(t *testing.T, o Options) {
		ctx := context.Background()
		s := openStore(t, t.TempDir(), smallLogicsOptions(o))
		defer s.Close()
		const producers, each, queues = 4, 100, 2
		var wg sync.WaitGroup
		for p := 0; p < producers; p++ {
			wg.Add(1)
			go func(p int) {
				defer wg.Done()
				for i := 0; i < each; i++ {
					if _, err := s.Put(ctx, testMessage("C", int32(i%queues), p*each+i, 64)); err != nil {
						t.Error(err)
						return
					}
				}
			}(p)
		}
		for q := 0; q < queues; q++ {
			wg.Add(1)
			go func(q int32) {
				defer wg.Done()
				next := int64(0)
				for next < producers*each/queues {
					pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
					res, err := s.GetLongPoll(pctx, "g", "C", q, next, 16, nil)
					cancel()
					if err != nil {
						t.Error(err)
						return
					}
					if res.Status != Found {
						t.Errorf("queue %d at %d: %v", q, next, res.Status)
						res.Release()
						return
					}
					for i, m := range res.Messages {
						if m.QueueOffset != next+int64(i) {
							t.Errorf("queue %d: gap at %d", q, next+int64(i))
						}
					}
					next = res.NextBeginOffset
					res.Release()
				}
			}(int32(q))
		}
		wg.Wait()
	})
}

func TestQueryByKey(t *testing.T) {
	forEachBackendAndMode(t, func(t *testing.T, o Options) {
		ctx := context.Background()
		dir := t.TempDir()
		o = smallLogicsOptions(o)
		s := openStore(t, dir, o)
		putN(t, s, "Q", 3, 150, 40, nil)
		check := func(s *Store) {
			t.Helper()
			for _, i := range []int{0, 17, 99, 149} {
				rs, err := s.QueryMessages(ctx, "Q", fmt.Sprintf("k%d", i), 0, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(rs) != 1 || !bytes.Equal(rs[0].Body, testMessage("Q", 0, i, 40).Body) {
					t.Fatalf("key k%d: %d results", i, len(rs))
				}
				r, err := s.QueryByUniqKey(ctx, "Q", fmt.Sprintf("U%08d", i))
				if err != nil || r.QueueOffset != int64(i/3) {
					t.Fatalf("uniq key %d: %v %d", i, err, r.QueueOffset)
				}
			}
			if rs, _ := s.QueryMessages(ctx, "Q", "k150", 0, 0, 0); len(rs) != 0 {
				t.Fatalf("missing key found %d", len(rs))
			}
			if rs, _ := s.QueryMessages(ctx, "Other", "k1", 0, 0, 0); len(rs) != 0 {
				t.Fatalf("other topic found %d", len(rs))
			}
		}
		check(s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = openStore(t, dir, o)
		defer s.Close()
		check(s)
	})
}

// midRecordBackend opens files whose readable position may stop inside a
// record, as a buffered backend that commits in chunks does.
type midRecordBackend struct {
	*mappedfile.MemFS
	hold *atomic.Bool
}

func (b midRecordBackend) Open(ctx context.Context, spec mappedfile.Spec) (mappedfile.MappedFile, error) {
	mf, err := b.MemFS.Open(ctx, spec)
	if err != nil || !strings.Contains(spec.Path, commitLogDirName) {
		return mf, err
	}
	return midRecordFile{MappedFile: mf, hold: b.hold}, nil
}

type midRecordFile struct {
	mappedfile.MappedFile
	hold *atomic.Bool
}

func (f midRecordFile) ReadablePosition() int64 {
	r := f.MappedFile.ReadablePosition()
	if f.hold.Load() && r > 7 && r < f.SizeBytes() {
		return r - 7
	}
	return r
}

func (f midRecordFile) ReadAt(dst []byte, pos int64) (int, error) {
	n, err := mappedfile.CheckRead(pos, len(dst), f.ReadablePosition())
	if n == 0 {
		return 0, err
	}
	m, rerr := f.MappedFile.ReadAt(dst[:n], pos)
	if rerr != nil {
		return m, rerr
	}
	return m, err
}

// TestDispatchWaitsForPartlyReadableRecord: a record only partly readable is
// not corruption to dispatch; it waits for the rest (the transient backend
// commits in 4 MiB chunks and stopped dispatch before this was handled).
func TestDispatchWaitsForPartlyReadableRecord(t *testing.T) {
	ctx := context.Background()
	var hold atomic.Bool
	hold.Store(true)
	o := smallLogicsOptions(Options{BackendImpl: midRecordBackend{MemFS: mappedfile.NewMemFS(mappedfile.MemOptions{}), hold: &hold}})
	s := openStore(t, t.TempDir(), o)
	defer s.Close()
	var last PutResult
	for i := 0; i < 50; i++ {
		var err error
		if last, err = s.Put(ctx, testMessage("P", 0, i, 100)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "dispatch up to the partly readable record", func() bool { return s.logics.dispatchedOffset.Load() >= last.PhysicalOffset })
	if p := s.logics.dispatchErr.Load(); p != nil {
		t.Fatalf("dispatch stopped: %v", *p)
	}
	hold.Store(false)
	s.dispatcher.Wakeup()
	waitFor(t, "dispatch of the last record", func() bool { return s.logics.dispatchedOffset.Load() >= last.PhysicalOffset+int64(last.Size) })
}

// TestGetResultKeepBelow: a Found result keeps the messages that end at
// or below the limit, its next offset moved back; none left is reported,
// and the result is then one of a message not there yet; other statuses
// are left alone.
func TestGetResultKeepBelow(t *testing.T) {
	r := &GetResult{Status: Found, NextBeginOffset: 13, Messages: []GotMessage{
		{QueueOffset: 10, PhysicalOffset: 0, Size: 100}, {QueueOffset: 11, PhysicalOffset: 100, Size: 100},
		{QueueOffset: 12, PhysicalOffset: 200, Size: 100}}}
	if r.KeepBelow(300) || len(r.Messages) != 3 || r.NextBeginOffset != 13 {
		t.Fatalf("a limit at the end trimmed: %+v", r)
	}
	if r.KeepBelow(250) || len(r.Messages) != 2 || r.NextBeginOffset != 12 {
		t.Fatalf("a limit inside the third: %+v", r)
	}
	if !r.KeepBelow(99) || len(r.Messages) != 0 || r.Status != OffsetOverflowOne || r.NextBeginOffset != 10 {
		t.Fatalf("a limit inside the first: %+v", r)
	}
	if (&GetResult{Status: NoMessageInQueue}).KeepBelow(0) {
		t.Fatal("a result with no message reported held back")
	}
}
