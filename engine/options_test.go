package engine

import (
	"context"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/consumequeue"
	"github.com/mqstore/mqstore/engine/indexfile"
)

// TestDefaultOptions reads withDefaults of the zero Options field by field.
// Every exported field must be listed — as its default, or as unset when
// the store's recorded parameters resolve it, or as "zero is a value" — so
// a new option without a decision here fails.
func TestDefaultOptions(t *testing.T) {
	d := DefaultOptions()
	want := map[string]any{
		"Backend":                           defaultBackendName(),
		"BackendOptions":                    nil,
		"BackendImpl":                       nil,
		"SegmentSizeBytes":                  int64(0), // recorded: withStoreParams
		"MaxMessageSizeBytes":               DefaultMaxMessageSizeBytes,
		"FlushMode":                         FlushAsync,
		"FlushInterval":                     500 * time.Millisecond,
		"FlushLeastPages":                   4,
		"FlushThoroughInterval":             10 * time.Second,
		"SyncFlushTimeout":                  5 * time.Second,
		"GroupCommitQueueSize":              16384,
		"GroupCommitBatching":               BatchingAuto, // zero is auto: measured
		"PrewriteBelowSyncBytes":            int64(128 << 10),
		"CommitInterval":                    200 * time.Millisecond,
		"CommitLeastPages":                  4,
		"CommitThoroughInterval":            200 * time.Millisecond,
		"NoPreallocate":                     false,
		"NoRetention":                       false,
		"WarmSegments":                      false,
		"WarmFlushEveryPages":               0, // zero is a value: no flush during warm-up
		"LockSegments":                      false,
		"AllocationTimeout":                 5 * time.Second,
		"PrewriteSegments":                  PrewriteOff, // async flush
		"PacePrewrite":                      false,       // zeros at full speed
		"OSPageCacheBusyTimeout":            time.Second,
		"DispatchLagLimitBytes":             int64(0), // the backend's bound, resolved at Open (dispatchLagLimit); negative: none
		"StoreHost":                         DefaultStoreHost,
		"ConsumeQueueFileSizeBytes":         int64(0), // recorded
		"IndexSlotCount":                    0,        // recorded
		"IndexMaxEntries":                   0,        // recorded
		"ConsumeQueueFlushInterval":         time.Second,
		"ConsumeQueueFlushThoroughInterval": time.Minute,
		"GetMaxBytes":                       256 << 10,
		"FileReservedTime":                  72 * time.Hour,
		"DeleteWhen":                        "04",
		"DiskMaxUsedRatio":                  75,
		"CleanInterval":                     10 * time.Second,
		"RecycleSegments":                   0, // retention deletes; nothing is reused
		"Role":                              AsyncMaster,
		"SlaveTimeout":                      3 * time.Second,
		"HASlaveFallbehindMax":              int64(256 << 20),
		"MinInSyncReplicas":                 0, // zero is a value: the classic mode
		"InSyncMaxLagBytes":                 int64(4 << 20),
		"InSyncMaxLagTime":                  10 * time.Second,
		"SlaveRetentionMaxBytes":            int64(64 << 30),
		"OnCorruption":                      CorruptionStop,
		"FullRecoveryScan":                  false,
		"Logger":                            slog.Default(),
		"ProfileLabels":                     false,
	}
	v := reflect.ValueOf(d)
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		w, ok := want[f.Name]
		if !ok {
			t.Errorf("Options.%s: no expected default here (add it, with what the zero value means)", f.Name)
			continue
		}
		delete(want, f.Name)
		got := v.Field(i).Interface()
		if w == nil {
			if !v.Field(i).IsZero() {
				t.Errorf("Options.%s = %v, want unset", f.Name, got)
			}
			continue
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("Options.%s = %#v, want %#v", f.Name, got, w)
		}
	}
	for name := range want {
		t.Errorf("expected a field Options.%s", name)
	}
	if d.now == nil || !d.realClock || d.diskUsed == nil || !d.maxMessageSizeDefaulted {
		t.Error("the hooks (clock, disk usage) or the defaulted-size mark are not set")
	}
	if again := d.withDefaults(); !reflect.DeepEqual(fieldsOf(again), fieldsOf(d)) {
		t.Errorf("withDefaults is not idempotent:\n%v\n%v", fieldsOf(again), fieldsOf(d))
	}
	if got := (Options{FlushMode: FlushSync}).withDefaults().PrewriteSegments; got != PrewriteAuto {
		t.Errorf("sync flush: PrewriteSegments %v, want auto", got)
	}
}

// fieldsOf is o's exported fields, comparable with DeepEqual (the
// function-valued hooks are not).
func fieldsOf(o Options) map[string]any {
	m := map[string]any{}
	v := reflect.ValueOf(o)
	for i := 0; i < v.NumField(); i++ {
		if f := v.Type().Field(i); f.IsExported() {
			m[f.Name] = v.Field(i).Interface()
		}
	}
	return m
}

// TestExplicitNone: the named "none" values survive as set — they are not
// unset fields — and the recorded parameters of a new store are the
// defaults, with MaxMessageSizeBytes fitted to a small segment only when
// it was unset.
func TestExplicitNone(t *testing.T) {
	o := Options{FlushLeastPages: LeastPagesAny, CommitLeastPages: LeastPagesAny, SlaveRetentionMaxBytes: SlaveRetentionIgnore}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	d := o.withDefaults()
	if d.FlushLeastPages != LeastPagesAny || d.CommitLeastPages != LeastPagesAny || d.SlaveRetentionMaxBytes != SlaveRetentionIgnore {
		t.Errorf("explicit none lost: flush %d, commit %d, slave retention %d", d.FlushLeastPages, d.CommitLeastPages, d.SlaveRetentionMaxBytes)
	}
	if err := (Options{FlushLeastPages: -2}).validate(); err == nil {
		t.Error("FlushLeastPages -2 accepted")
	}

	p := DefaultOptions().newStoreParams()
	if p.SegmentSizeBytes != DefaultSegmentSizeBytes || p.ConsumeQueueFileSize != consumequeue.DefaultFileSizeBytes ||
		p.IndexSlotCount != indexfile.DefaultSlotCount || p.IndexMaxEntries != indexfile.DefaultMaxEntries {
		t.Errorf("new store parameters %+v, want the defaults", p)
	}
	small := Options{SegmentSizeBytes: 64 << 10}.withDefaults()
	small.withStoreParams(small.newStoreParams())
	if want := 64<<10 - 16; small.MaxMessageSizeBytes != want {
		t.Errorf("defaulted MaxMessageSizeBytes in a 64 KiB segment: %d, want %d", small.MaxMessageSizeBytes, want)
	}
	set := Options{SegmentSizeBytes: 64 << 10, MaxMessageSizeBytes: 1000}.withDefaults()
	set.withStoreParams(set.newStoreParams())
	if set.MaxMessageSizeBytes != 1000 {
		t.Errorf("set MaxMessageSizeBytes changed to %d", set.MaxMessageSizeBytes)
	}
}

// TestLeastPagesAnyFlushesEverything opens a store whose async flusher has
// no page minimum: a single small record is flushed by the periodic pass,
// where the default (4 pages) would hold it until the thorough interval.
func TestLeastPagesAnyFlushesEverything(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, t.TempDir(), memIndexSizes(Options{Backend: "mem", SegmentSizeBytes: 1 << 20, FlushLeastPages: LeastPagesAny,
		FlushInterval: time.Millisecond, FlushThoroughInterval: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Options().FlushLeastPages; got != LeastPagesAny {
		t.Fatalf("effective FlushLeastPages %d, want LeastPagesAny", got)
	}
	r, err := s.Put(ctx, &Message{Topic: "t", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	end := r.PhysicalOffset + int64(r.Size)
	deadline := time.Now().Add(10 * time.Second)
	for s.FlushedOffset() < end {
		if time.Now().After(deadline) {
			t.Fatalf("flushed offset %d, want %d: the record waits for a page minimum", s.FlushedOffset(), end)
		}
		time.Sleep(time.Millisecond)
	}
}
