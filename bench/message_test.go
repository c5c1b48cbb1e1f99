package bench

import (
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/record"
)

var uniqKeyFormat = regexp.MustCompile(`^[0-9A-F]{32}$`)

// sent is what a message carried when it was put (copied: the producer
// rewrites its buffer for the next one).
type sent struct{ tags, uniq, keys string }

func sentOf(t *testing.T, m *engine.Message) sent {
	t.Helper()
	var s sent
	for _, p := range m.Properties {
		switch p.Name {
		case record.PropTags:
			s.tags = strings.Clone(p.Value)
		case record.PropKeys:
			s.keys = strings.Clone(p.Value)
		case record.PropUniqKey:
			s.uniq = strings.Clone(p.Value)
		}
	}
	return s
}

func TestRocketMQMessages(t *testing.T) {
	const perWorker = 2000
	seen := map[string]bool{}
	for worker := range 3 {
		g := newProducerMessages(MessageRocketMQ, worker, 100)
		for i := range perWorker {
			m := g.next()
			s := sentOf(t, m)
			keys := strings.Fields(s.keys)
			if !uniqKeyFormat.MatchString(s.uniq) || len(keys) != 2 || !slices.Contains(rocketmqTags[:], s.tags) {
				t.Fatalf("worker %d message %d: UNIQ_KEY %q, KEYS %q, TAGS %q: want 32 hex digits, two keys, one of %v", worker, i, s.uniq, s.keys, s.tags, rocketmqTags)
			}
			for _, k := range append(keys, s.uniq) {
				if seen[k] {
					t.Fatalf("worker %d message %d: key %q was already used", worker, i, k)
				}
				seen[k] = true
			}
			props, err := record.EncodeProperties(nil, m.Properties)
			if err != nil {
				t.Fatal(err)
			}
			if got := record.Size(m, len(props)); got != recordBytes(MessageRocketMQ, 100) {
				t.Fatalf("message %d is a %d-byte record, recordBytes says %d", i, got, recordBytes(MessageRocketMQ, 100))
			}
			if v, _ := record.LookupProperty(props, "WAIT"); string(v) != "true" || len(m.Body) != 100 || !m.BornHost.IsValid() {
				t.Fatalf("message %d: WAIT %q, body %d bytes, born host %v", i, v, len(m.Body), m.BornHost)
			}
		}
	}
	bare := newProducerMessages(MessageBare, 1, 100).next()
	if len(bare.Properties) != 0 || recordBytes(MessageBare, 100) != record.Size(bare, 0) || recordBytes("", 100) != recordBytes(MessageBare, 100) {
		t.Errorf("bare: %d properties, record %d bytes", len(bare.Properties), recordBytes(MessageBare, 100))
	}
	if recordBytes(MessageRocketMQ, 100) <= recordBytes(MessageBare, 100)+100 {
		t.Errorf("a rocketmq record (%d bytes) is not well above a bare one (%d)", recordBytes(MessageRocketMQ, 100), recordBytes(MessageBare, 100))
	}
}

func TestProducerMessagesDoNotAllocate(t *testing.T) {
	for _, kind := range MessageKinds() {
		g := newProducerMessages(kind, 5, 1024)
		if n := testing.AllocsPerRun(1000, func() { g.next() }); n != 0 {
			t.Errorf("%s: %v allocations per message, want 0", kind, n)
		}
	}
}

// TestRocketMQMessagesAreStoredAsSent: two producers put rocketmq messages
// concurrently into a real store; every message is found again by each of
// its keys and its UNIQ_KEY through the IndexFile, with the values it was
// sent with — though each producer rewrote its buffer for the next Put
// (the engine copies the properties during Put, which the race detector
// also checks).
func TestRocketMQMessagesAreStoredAsSent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := storeOpen(ctx, StoreConfig{SegmentSizeBytes: 4 << 20}, filepath.Join(t.TempDir(), "s"), "mmap", "async")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const perWorker = 150
	got := make([][]sent, 2)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := newProducerMessages(MessageRocketMQ, w, 64)
			for range perWorker {
				m := g.next()
				if _, err := s.Put(ctx, m); err != nil {
					errs[w] = err
					return
				}
				got[w] = append(got[w], sentOf(t, m))
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.WaitDispatched(ctx, s.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	for w := range got {
		for i, want := range got[w] {
			for _, key := range append(strings.Fields(want.keys), want.uniq) {
				rs, err := s.QueryMessages(ctx, benchTopic, key, 0, 0, 0)
				if err != nil || len(rs) != 1 {
					t.Fatalf("worker %d message %d: query %q: %d records, %v", w, i, key, len(rs), err)
				}
				r := rs[0]
				tags, _ := r.Tags()
				uniq, _ := r.UniqKey()
				if tags != want.tags || uniq != want.uniq || strings.Join(r.Keys(), " ") != want.keys {
					t.Fatalf("worker %d message %d: stored TAGS %q UNIQ_KEY %q KEYS %q, sent %+v", w, i, tags, uniq, r.Keys(), want)
				}
			}
		}
	}
}
