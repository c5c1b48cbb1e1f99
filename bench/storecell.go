package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/mappedfile"
)

const benchTopic = "BenchTopic"

// storeOptions are the engine options of a cell: the run's store
// settings, the backend's options (backendOptions) and the flush mode.
func storeOptions(s StoreConfig, backend, flush string) (engine.Options, error) {
	mode, err := engine.ParseFlushMode(flush)
	if err != nil {
		return engine.Options{}, err
	}
	bo, _, err := backendOptions(s, backend, flush)
	if err != nil {
		return engine.Options{}, err
	}
	batching, err := engine.ParseBatchingMode(s.GroupCommitBatching)
	if err != nil {
		return engine.Options{}, fmt.Errorf("--group-commit-batching: %w", err)
	}
	return engine.Options{Backend: backend, BackendOptions: bo, FlushMode: mode, SegmentSizeBytes: s.SegmentSizeBytes,
		FlushInterval: s.FlushInterval, FlushLeastPages: s.FlushLeastPages, FlushThoroughInterval: s.FlushThoroughInterval,
		SyncFlushTimeout: s.SyncFlushTimeout, CommitInterval: s.CommitInterval, CommitLeastPages: s.CommitLeastPages,
		GroupCommitBatching: batching,
		WarmSegments:        s.WarmSegments, LockSegments: s.LockSegments, ProfileLabels: s.ProfileLabels,
		PacePrewrite: s.PacePrewrite, RecycleSegments: s.RecycleSegments,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, nil
}

func storeOpen(ctx context.Context, store StoreConfig, dir, backend, flush string) (*engine.Store, error) {
	opts, err := storeOptions(store, backend, flush)
	if err != nil {
		return nil, err
	}
	s, err := engine.Open(ctx, dir, opts)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", backend, err)
	}
	return s, nil
}

// backendOptions are the options a cell's backend runs with, and where
// they come from ("" for the backend's own defaults): --backend-options
// for that backend when given, else mqbench's tuned settings — the options
// its registration's Tuned names for the flush mode (nil Tuned: the
// backend's defaults, no reason given).
func backendOptions(s StoreConfig, backend, flush string) (any, string, error) {
	if js, ok := s.BackendOptions[backend]; ok {
		o, err := engine.DecodeBackendOptions(backend, []byte(js))
		if err != nil {
			return nil, "", fmt.Errorf("--backend-options %s: %w", backend, err)
		}
		return o, "given with --backend-options", nil
	}
	reg, err := mappedfile.Registered().Lookup(backend)
	if err != nil || reg.Tuned == nil {
		return nil, "", nil
	}
	o, why := reg.Tuned(mappedfile.Config{SyncFlush: flush == "sync"})
	if why != "" {
		why = "mqbench's choice: " + why
	}
	return o, why, nil
}

// optionsMap records the effective engine options of an open store: every
// exported field that is a plain value (durations, counts, flags, names),
// so options added to the engine later are recorded without a change here,
// and the backend's own options as JSON (its defaults when none were
// given).
func optionsMap(o engine.Options) map[string]string {
	out := map[string]string{}
	bo := o.BackendOptions
	if reg, err := mappedfile.Registered().Lookup(o.Backend); bo == nil && err == nil && reg.NewOptions != nil {
		bo = reg.NewOptions()
	}
	if bo != nil {
		if b, err := json.Marshal(bo); err == nil {
			out["BackendOptions"] = string(b)
		}
	}
	v := reflect.ValueOf(o)
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		fv := v.Field(i)
		switch fv.Kind() {
		case reflect.Func, reflect.Interface, reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan:
			continue
		}
		if s, ok := fv.Interface().(fmt.Stringer); ok {
			out[f.Name] = s.String()
		} else {
			out[f.Name] = fmt.Sprint(fv.Interface())
		}
	}
	return out
}

// storeDurability is load.Durability for an mqstore cell: written is the
// CommitLog's write offset, durable its flushed offset (engine.Stats), and
// Drain is Store.Flush — commit and flush everything written, the CommitLog
// only, as a peer's Drain syncs its log only. Close (dispatch, the
// ConsumeQueue and index flush, the checkpoint) is timed apart (closeNs).
// It keeps the Stats read at each Positions call, so the harness knows the
// store's counters at the window's edges.
type storeDurability struct {
	s     *engine.Store
	stats []engine.Stats
}

func (d *storeDurability) Positions() (int64, int64) {
	st := d.s.Stats()
	d.stats = append(d.stats, st)
	return st.WroteOffset, st.FlushedOffset
}

func (d *storeDurability) Drain(ctx context.Context) error {
	_, err := d.s.Flush(ctx)
	return err
}

// counters are the engine's counters over the window: the difference of
// the Stats taken at the window's start and end.
func (d *storeDurability) counters() *runfile.StoreCounters {
	if len(d.stats) < 2 {
		return nil
	}
	a, b := d.stats[0], d.stats[1]
	return &runfile.StoreCounters{Puts: b.Puts - a.Puts, Flushes: b.Flushes - a.Flushes, Commits: b.Commits - a.Commits,
		Rolls: b.Rolls - a.Rolls, FlushDiskTimeouts: b.FlushDiskTimeouts - a.FlushDiskTimeouts,
		SegmentsPrewritten: b.SegmentsPrewritten - a.SegmentsPrewritten, SegmentsFallocated: b.SegmentsFallocated - a.SegmentsFallocated,
		SegmentsRecycled: b.SegmentsRecycled - a.SegmentsRecycled,
		ZerosByDevice:    b.ZerosByDevice - a.ZerosByDevice, ZerosDirect: b.ZerosDirect - a.ZerosDirect, ZerosCached: b.ZerosCached - a.ZerosCached,
		FlushNs: int64(b.FlushLatency.Total - a.FlushLatency.Total)}
}

// storeRepeat opens a fresh store in dir (aged first: ageStore), runs
// spec against it with its durability reported, drains it (Store.Flush),
// closes it (timed: closeNs) and removes it. The returned options are the store's effective ones
// (nil when Open failed). A hook (the profiler) is handed the store and
// the run of the window, which takes a load.Spec.Window for the hook's
// own start and stop: the warm-up runs before it, on the same store and
// messages, so what the hook sees is the window the measured repeats
// measure, warm.
func storeRepeat(ctx context.Context, cfg StoreConfig, dir, backend, flush string, spec load.Spec, hook func(s *engine.Store, run func(window func() (end func())))) (runfile.Repeat, map[string]string) {
	defer os.RemoveAll(dir)
	if err := ageStore(ctx, cfg, dir, backend); err != nil {
		return setupFailed(ctx, err), nil
	}
	s, err := storeOpen(ctx, cfg, dir, backend, flush)
	if err != nil {
		return failedRepeat(err), nil
	}
	options := optionsMap(s.Options())
	d := &storeDurability{s: s}
	producers := map[int]*producerMessages{} // each worker's, kept from the warm-up to the window
	newOp := func(worker int) load.Op {
		g := producers[worker]
		if g == nil {
			g = newProducerMessages(cfg.Message, worker, spec.SizeBytes)
			producers[worker] = g
		}
		return func(ctx context.Context) error {
			_, err := s.Put(ctx, g.next())
			return err
		}
	}
	var res load.Result
	if hook != nil && spec.Warmup > 0 {
		warm := spec
		warm.Duration, warm.Warmup, warm.SeriesInterval = spec.Warmup, 0, 0
		if w := load.Run(ctx, warm, nil, nil, newOp); w.Error != "" {
			res = w
			res.Error = "warm-up: " + w.Error
			hook = nil
		}
		spec.Warmup = 0
	}
	run := func(window func() func()) {
		sp := spec
		sp.Window = window
		res = load.Run(ctx, sp, nil, d, newOp)
	}
	switch {
	case res.Error != "": // the warm-up failed: no window
	case hook != nil:
		hook(s, run)
	default:
		run(nil)
	}
	closeStart := time.Now()
	closeErr := s.Close()
	closeNs := time.Since(closeStart).Nanoseconds()
	rep := repeatOf(res, d.counters())
	rep.Figures.CloseNs = closeNs
	if closeErr != nil && rep.Status != runfile.StatusFailed {
		rep.Status, rep.Reason = runfile.StatusFailed, "close: "+closeErr.Error()
	}
	return rep, options
}

// repeatOf classifies a load result and derives its figures.
func repeatOf(res load.Result, store *runfile.StoreCounters) runfile.Repeat {
	rep := runfile.Repeat{Result: res, Store: store, Figures: runfile.FiguresOf(&res, store)}
	switch {
	case res.Interrupted:
		rep.Status, rep.Reason = runfile.StatusInterrupted, "interrupted"
	case res.Error != "":
		rep.Status, rep.Reason = runfile.StatusFailed, res.Error
	case res.Messages == 0 && res.Unstarted == 0:
		rep.Status, rep.Reason = runfile.StatusFailed, "no message completed in the window"
	default:
		rep.Status = runfile.StatusOK
		if sat, why := res.Saturation(); sat {
			rep.Status, rep.Saturation = runfile.StatusSaturated, why
		}
	}
	return rep
}

func failedRepeat(err error) runfile.Repeat {
	return runfile.Repeat{Status: runfile.StatusFailed, Reason: err.Error()}
}
