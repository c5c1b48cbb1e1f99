package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/engine"
)

// recoveryCells fills a store of RecoveryBytes in a child process, kills it
// with SIGKILL, and times engine.Open of the abandoned store: hot (page
// cache as the dead process left it) and, as root, cold (caches dropped).
func (r *runner) recoveryCells(ctx context.Context, t *target, backend string, size int) {
	variants := []string{"hot"}
	if r.cfg.ColdReads && isRoot() {
		variants = append(variants, "cold")
	}
	for _, v := range variants {
		c := r.newCell(system{backend: backend, size: size, pol: Policy{Flush: "async", Store: r.cfg.Store}}, WorkloadRecovery, PressureNone, t)
		c.Variant = v
		c.Name = runfile.CellName(&c, r.multiTarget())
		for rep := 1; rep <= r.cfg.Repeat && ctx.Err() == nil; rep++ {
			r.progress.step(c.Name, rep, r.cfg.Repeat, 0)
			out, options := r.recoveryRepeat(ctx, backend, size, v == "cold", filepath.Join(t.work, fmt.Sprintf("%s-r%d", c.Name, rep)))
			out.Index = rep
			if options != nil {
				c.Options = options
			}
			c.Repeats = append(c.Repeats, out)
			if out.Status != runfile.StatusOK {
				break
			}
		}
		finishCell(&c)
		if len(c.Repeats) == 0 && ctx.Err() != nil {
			c.Status, c.Reason = runfile.StatusInterrupted, "interrupted before it ran"
		}
		r.record(c)
	}
}

func (r *runner) recoveryRepeat(ctx context.Context, backend string, size int, cold bool, dir string) (runfile.Repeat, map[string]string) {
	defer os.RemoveAll(dir)
	spec := load.Spec{SizeBytes: size}
	w, err := startWorker(ctx, workerRequest{Kind: workerProduceCrash, Store: r.cfg.Store, Backend: backend, Spec: spec, Dir: dir, Bytes: r.cfg.RecoveryBytes}, nil)
	if err != nil {
		return failedRepeat(err), nil
	}
	line, err := w.waitLine()
	if err != nil || line != "ready" {
		w.kill()
		if ctx.Err() != nil {
			return runfile.Repeat{Status: runfile.StatusInterrupted, Reason: "interrupted"}, nil
		}
		return failedRepeat(fmt.Errorf("producer: %q %v", line, err)), nil
	}
	w.kill() // SIGKILL with the store open
	resident := -1.0
	if cold {
		if resident, err = dropCaches(r.host, dir); err != nil {
			return failedRepeat(err), nil
		}
	}
	opts, err := storeOptions(r.cfg.Store, backend, "async")
	if err != nil {
		return failedRepeat(err), nil
	}
	start := time.Now()
	s, err := engine.Open(ctx, dir, opts)
	elapsed := time.Since(start)
	if err != nil {
		return failedRepeat(fmt.Errorf("reopen after SIGKILL: %w", err)), nil
	}
	scanned := s.MaxOffset() - s.RecoveredFrom()
	crashed := s.RecoveredAfterCrash()
	options := optionsMap(s.Options())
	if err := s.Close(); err != nil {
		return failedRepeat(fmt.Errorf("close after recovery: %w", err)), options
	}
	if !crashed {
		return failedRepeat(fmt.Errorf("the store did not see the crash (no abort file)")), options
	}
	res := load.Result{Workload: WorkloadRecovery, PayloadBytes: scanned, ElapsedNs: elapsed.Nanoseconds()}
	f := runfile.Figures{MBPerSec: res.MBPerSec(), OpenNs: elapsed.Nanoseconds(), ResidentFraction: max(resident, 0)}
	return runfile.Repeat{Status: runfile.StatusOK, Figures: f, Result: res}, options
}
