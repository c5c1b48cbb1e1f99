package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/record"
)

const benchTopic = "BenchTopic"

// benchMessage is worker's message: a fixed, incompressible body of
// sizeBytes, no properties (the body is the payload every system stores).
func benchMessage(worker, sizeBytes int) *engine.Message {
	return &engine.Message{Topic: benchTopic, QueueID: int32(worker % 8), Body: Body(worker, sizeBytes)}
}

// Body returns a deterministic, incompressible body (an xorshift stream).
func Body(worker, sizeBytes int) []byte {
	b := make([]byte, sizeBytes)
	x := uint64(worker)*0x9E3779B97F4A7C15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// recordBytes is the size of the CommitLog record the store writes for a
// body of sizeBytes (what the copy ceiling copies).
func recordBytes(sizeBytes int) int {
	m := benchMessage(0, sizeBytes)
	return record.Size(m, 0)
}

func (c *Config) storeOptions(backend, flush string) (engine.Options, error) {
	mode, err := engine.ParseFlushMode(flush)
	if err != nil {
		return engine.Options{}, err
	}
	s := c.Store
	return engine.Options{Backend: backend, FlushMode: mode, SegmentSizeBytes: s.SegmentSizeBytes,
		FlushInterval: s.FlushInterval, FlushLeastPages: s.FlushLeastPages, FlushThoroughInterval: s.FlushThoroughInterval,
		SyncFlushTimeout: s.SyncFlushTimeout, CommitInterval: s.CommitInterval, CommitLeastPages: s.CommitLeastPages,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, nil
}

// flushParams records the effective flush policy of an open store.
func flushParams(o engine.Options) map[string]string {
	p := map[string]string{"mode": o.FlushMode.String(), "segmentSizeBytes": strconv.FormatInt(o.SegmentSizeBytes, 10)}
	if o.FlushMode == engine.FlushSync {
		p["groupCommit"] = "on"
		p["syncFlushTimeout"] = o.SyncFlushTimeout.String()
		p["groupCommitQueueSize"] = strconv.Itoa(o.GroupCommitQueueSize)
	} else {
		p["flushInterval"] = o.FlushInterval.String()
		p["flushLeastPages"] = strconv.Itoa(o.FlushLeastPages)
		p["flushThoroughInterval"] = o.FlushThoroughInterval.String()
	}
	p["commitInterval"] = o.CommitInterval.String()
	p["commitLeastPages"] = strconv.Itoa(o.CommitLeastPages)
	return p
}

// storeRepeat opens a fresh store in dir, runs spec and closes it. The
// returned params are the effective flush policy (nil when Open failed).
func (c *Config) storeRepeat(ctx context.Context, dir, backend, flush string, spec load.Spec, hook func(func())) (Repeat, map[string]string) {
	rep := Repeat{Status: StatusOK}
	defer os.RemoveAll(dir)
	opts, err := c.storeOptions(backend, flush)
	if err != nil {
		return failedRepeat(err), nil
	}
	s, err := engine.Open(ctx, dir, opts)
	if err != nil {
		return failedRepeat(fmt.Errorf("open %s: %w", backend, err)), nil
	}
	params := flushParams(s.Options())
	run := func() {
		rep.Result = load.Run(ctx, spec, nil, func(worker int) load.Op {
			m := benchMessage(worker, spec.SizeBytes)
			return func(ctx context.Context) error {
				_, err := s.Put(ctx, m)
				return err
			}
		})
	}
	if hook != nil {
		hook(run)
	} else {
		run()
	}
	st := s.Stats()
	rep.StoreFlushes, rep.StoreCommits, rep.StoreRolls, rep.StoreRecBytes = st.Flushes, st.Commits, st.Rolls, st.PutBytes
	closeErr := s.Close()
	rep.Figures = figuresOf(&rep.Result)
	rep.Status, rep.Reason = resultStatus(&rep.Result)
	if closeErr != nil && rep.Status == StatusOK {
		rep.Status, rep.Reason = StatusFailed, "close: "+closeErr.Error()
	}
	return rep, params
}

func failedRepeat(err error) Repeat {
	return Repeat{Status: StatusFailed, Reason: err.Error()}
}

// resultStatus classifies a load result.
func resultStatus(r *load.Result) (string, string) {
	switch {
	case r.Interrupted:
		return StatusInterrupted, "interrupted"
	case r.Error != "":
		return StatusFailed, r.Error
	case r.Messages == 0:
		return StatusFailed, "no message completed in the window"
	}
	return StatusOK, ""
}
