package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mqstore/mqstore/engine/storefs"
	"github.com/mqstore/mqstore/mappedfile"
)

// allocator is the allocation service (RocketMQ's AllocateMappedFileService):
// one goroutine that keeps the next and next-next segment created, and warmed
// when asked, so a roll takes a ready file instead of waiting for fallocate.
type allocator struct {
	backend mappedfile.Backend
	fs      storefs.FS
	warm    mappedfile.WarmOptions
	doWarm  bool
	timeout time.Duration
	log     *slog.Logger
	labels  bool // Options.ProfileLabels
	pace    bool // Options.PacePrewrite

	// prewrite says whether the next new segment is written with zeros
	// and synced before use (Options.PrewriteSegments, resolved; with
	// PrewriteAuto it asks the store's sync figures each time). canWait,
	// nil for a segment a roll waits for, says whether it may still wait
	// for figures (see Store.prewriteNext).
	prewrite func(ctx context.Context, canWait func() bool) bool
	// prewritten and fallocated count the segments made each way, and
	// zeros the pre-written ones by how their zeros were written
	// (mappedfile.Zeros − 1: by the device, O_DIRECT, through the cache).
	prewritten, fallocated atomic.Uint64
	zeros                  [3]atomic.Uint64
	// pool: retired segments to take before making a file (nil: none).
	pool *segmentPool

	mu       sync.Mutex
	requests map[string]*allocation // by path, pending or ready
	work     chan *allocation       // bounded: at most two in flight
	stop     chan struct{}
	done     chan struct{}
	stopped  bool
}

type allocation struct {
	spec  mappedfile.Spec
	ready chan struct{} // closed when file or err is set
	file  mappedfile.MappedFile
	err   error
	// ahead: queued as a head start, nobody waiting for it yet; needed is
	// set when a roll starts waiting for it.
	ahead  bool
	needed atomic.Bool
}

func newAllocator(backend mappedfile.Backend, fsys storefs.FS, o Options, prewrite func(context.Context, func() bool) bool, pool *segmentPool) *allocator {
	a := &allocator{
		pool:     pool,
		backend:  backend,
		fs:       fsys,
		warm:     mappedfile.WarmOptions{Touch: true, FlushEveryPages: o.WarmFlushEveryPages, Lock: o.LockSegments, Advise: true},
		doWarm:   o.WarmSegments,
		prewrite: prewrite,
		timeout:  o.AllocationTimeout,
		log:      o.Logger,
		labels:   o.ProfileLabels,
		pace:     o.PacePrewrite,
		requests: make(map[string]*allocation),
		work:     make(chan *allocation, 4),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go a.run()
	return a
}

func (a *allocator) run() {
	defer close(a.done)
	labelService(a.labels, StagePrewrite)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-a.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		select {
		case <-a.stop:
			return
		case req := <-a.work:
			var canWait func() bool
			if req.ahead {
				canWait = func() bool { return !req.needed.Load() }
			}
			req.file, req.err = a.create(ctx, req.spec, canWait)
			close(req.ready)
		}
	}
}

// countZeros counts a pre-written segment by how its zeros were written
// (mappedfile.Spec.Prewrote).
func (a *allocator) countZeros(z mappedfile.Zeros) {
	if z >= mappedfile.ZerosByDevice && z <= mappedfile.ZerosCached {
		a.zeros[z-mappedfile.ZerosByDevice].Add(1)
	}
}

// create makes the segment at spec, empty and (when asked) warmed. A file
// already there is a leftover of a creation that failed (every file present
// at Open belongs to the CommitLog, and the log never reaches this offset
// before this allocation): it is removed and made again. When the warm-up
// fails (mlock over RLIMIT_MEMLOCK, say) the new file is removed too, so a
// retried roll never opens it as an existing, full segment.
func (a *allocator) create(ctx context.Context, spec mappedfile.Spec, canWait func() bool) (mappedfile.MappedFile, error) {
	start := time.Now()
	if spec.RecycleFrom = a.takePooled(ctx, spec.FromOffset); spec.RecycleFrom == "" {
		spec.Prewrite = a.prewrite(ctx, canWait)
		spec.Prewrote = a.countZeros
		if a.pace {
			// Options.PacePrewrite: a segment made ahead is pre-written in
			// synced steps until a roll waits for it.
			spec.PrewritePace = canWait
		}
	}
	mf, err := a.backend.Open(ctx, spec)
	if err != nil {
		return nil, err
	}
	switch {
	case spec.RecycleFrom != "":
		a.pool.recycled.Add(1)
	case spec.Prewrite:
		a.prewritten.Add(1)
	default:
		a.fallocated.Add(1)
	}
	if mf.WrotePosition() != 0 {
		a.log.Warn("removing a leftover segment file before creating it again", slog.String("path", spec.Path))
		if err := a.remove(mf); err != nil {
			return nil, fmt.Errorf("create %s: remove a leftover: %w", spec.Path, err)
		}
		if mf, err = a.backend.Open(ctx, spec); err != nil {
			return nil, err
		}
		if mf.WrotePosition() != 0 {
			mf.Close()
			return nil, fmt.Errorf("create %s: the file is not empty after being made again: %w", spec.Path, mappedfile.ErrInvalidArgument)
		}
	}
	if a.doWarm {
		if err := mappedfile.Warm(ctx, mf, a.warm); err != nil {
			err = fmt.Errorf("warm %s: %w", spec.Path, err)
			if rerr := a.remove(mf); rerr != nil {
				return nil, fmt.Errorf("%w (and removing the file: %v)", err, rerr)
			}
			return nil, err
		}
	}
	a.log.Debug("segment preallocated", slog.String("path", spec.Path), slog.Bool("prewrite", spec.Prewrite), slog.Bool("recycled", spec.RecycleFrom != ""), slog.Duration("took", time.Since(start)))
	return mf, nil
}

// takePooled returns the path of a pooled file made ready to become the
// segment at from ("": none). A file that cannot be made ready is removed.
func (a *allocator) takePooled(ctx context.Context, from int64) string {
	if a.pool == nil {
		return ""
	}
	for {
		ps := a.pool.take(from)
		if ps == nil {
			return ""
		}
		err := a.pool.prepare(ctx, ps)
		if err == nil {
			return ps.path
		}
		a.log.Warn("removing a pooled CommitLog segment that could not be made ready for reuse", slog.String("path", ps.path), slog.Any("err", err))
		if rerr := storefs.RemoveDurably(a.fs, ps.path); rerr != nil {
			a.log.Warn("removing a pooled CommitLog segment", slog.String("path", ps.path), slog.Any("err", rerr))
		}
		if ctx.Err() != nil {
			return ""
		}
	}
}

// remove deletes a segment file the allocator made, durably.
func (a *allocator) remove(mf mappedfile.MappedFile) error {
	if err := mf.Delete(); err != nil {
		return err
	}
	return a.fs.SyncDir(filepath.Dir(mf.Path()))
}

// request queues the creation of spec unless it is already queued.
func (a *allocator) requestLocked(spec mappedfile.Spec, ahead bool) (*allocation, error) {
	if req, ok := a.requests[spec.Path]; ok {
		if !ahead {
			req.needed.Store(true)
		}
		return req, nil
	}
	req := &allocation{spec: spec, ready: make(chan struct{}), ahead: ahead}
	select {
	case a.work <- req:
	default:
		return nil, fmt.Errorf("allocation queue full for %s", spec.Path)
	}
	a.requests[spec.Path] = req
	return req, nil
}

// Allocate implements segment.Allocator: it returns the file at spec
// (waiting at most the allocation timeout) and queues next for later.
func (a *allocator) Allocate(ctx context.Context, spec, next mappedfile.Spec) (mappedfile.MappedFile, error) {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		return nil, ErrClosed
	}
	req, err := a.requestLocked(spec, false)
	if err == nil {
		_, _ = a.requestLocked(next, true) // best effort: it is only a head start
	}
	a.mu.Unlock()
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(a.timeout)
	defer timer.Stop()
	select {
	case <-req.ready:
	case <-timer.C:
		return nil, fmt.Errorf("segment %s not ready after %v (is the disk slow or full?): %w", spec.Path, a.timeout, errAllocationTimeout)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	a.mu.Lock()
	delete(a.requests, spec.Path)
	a.mu.Unlock()
	if req.err != nil {
		return nil, req.err
	}
	return req.file, nil
}

// Close stops the service and closes files it made that nobody took.
func (a *allocator) Close() error {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		return nil
	}
	a.stopped = true
	a.mu.Unlock()
	close(a.stop)
	<-a.done
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for path, req := range a.requests {
		select {
		case <-req.ready:
			if req.file != nil {
				// Made ahead and never written: back to the pool, where
				// there is one with room (under the name of the offset it
				// was made for, so it is not taken for that offset: a
				// reopened log may reach it before its next roll);
				// otherwise it stays, and the next open's recovery removes
				// it as a segment past the log's end.
				if a.pool != nil && req.file.WrotePosition() == 0 {
					kept, err := a.pool.retire(req.file, false)
					if err != nil {
						errs = append(errs, err)
					}
					if kept || err != nil {
						continue
					}
				}
				if err := req.file.Close(); err != nil {
					errs = append(errs, err)
				}
			}
		default: // never started
		}
		delete(a.requests, path)
	}
	return errors.Join(errs...)
}
