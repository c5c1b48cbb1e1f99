package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
)

// floorJobs are the load generator's own latency at every rate of the
// ladder — the same schedule (rate, arrivals, workers, window, seeds)
// against an operation that does nothing — in the process that drives
// mqstore's cells (floorRun) and, when the phase has peers, in the peers'
// process (mqpeer --peer no-op), to be run interleaved with the cells,
// round by round.
func (r *runner) floorJobs(ph *phaseEnv, withPeers bool) []*job {
	var jobs []*job
	if r.isolate && !r.floorWorkersNoted {
		r.floorWorkersNoted = true
		r.note("the %s floors run as the store's repeats do (swap pressure in the run): each repeat in an mqbench worker process placed in its phase's cgroups "+
			"(under swap pressure the store's memory cgroup) — the generator is measured where it drives mqstore's cells, swapping as they do", runfile.FloorMQBench)
	}
	procs := []string{runfile.FloorMQBench}
	if withPeers && r.peerErr == nil {
		procs = append(procs, runfile.FloorPeers)
	}
	for _, proc := range procs {
		for _, rate := range r.cfg.Rates {
			c := runfile.Cell{Name: fmt.Sprintf("floor-r%.0f", rate), Workload: "floor", Backend: "no-op", Pressure: ph.pressure,
				Target: ph.t.label, RatePerSec: rate, InFlight: r.cfg.InFlight, Arrival: r.cfg.Arrival, WindowNs: r.window.Nanoseconds(),
				Peer: proc == runfile.FloorPeers}
			if c.Peer {
				c.Name += "-" + runfile.FloorPeers
			}
			if ph.pressure != PressureNone {
				c.Name += "-" + ph.pressure
			}
			jobs = append(jobs, &job{cell: c, run: r.floorRun(ph, rate, c.Peer)})
		}
	}
	return jobs
}

// recordFloors records the floors measured by floorJobs and returns, per
// process, the rates whose floor did not keep its schedule: there the
// generator, not the system, limits every cell.
func (r *runner) recordFloors(ph *phaseEnv, jobs []*job) map[string]map[float64]string {
	bad := map[string]map[float64]string{}
	for _, j := range jobs {
		finishCell(&j.cell)
		c := &j.cell
		proc := runfile.FloorProcess(c)
		fl := runfile.Floor{Process: proc, RatePerSec: c.RatePerSec, Pressure: ph.pressure, Target: ph.t.label, Arrival: c.Arrival, InFlight: c.InFlight,
			WindowNs: c.WindowNs, Status: c.Status, Reason: c.Reason, P50Ns: c.P50Ns, P99Ns: c.P99Ns, P999Ns: c.P999Ns,
			CILow: c.CILow, CIHigh: c.CIHigh, Repeats: c.Repeats}
		if c.Status == runfile.StatusSaturated {
			fl.Reason = "the load generator could not keep this rate against a no-op: " + strings.Join(c.Saturation, "; ")
		}
		r.file.Floors = append(r.file.Floors, fl)
		r.progress.cellDone(c.Name, c.Status, fl.Reason)
		if c.Status != runfile.StatusOK {
			if bad[proc] == nil {
				bad[proc] = map[float64]string{}
			}
			why := "the generator, not the system, limits this rate"
			if c.Status != runfile.StatusSaturated {
				// A floor that failed measured nothing: the generator is
				// not shown to limit the rate, the cells only lack the
				// floor they are judged against.
				why = "without its floor the cells at this rate are not judged"
			}
			bad[proc][c.RatePerSec] = fmt.Sprintf("the load generator's floor at %.0f msgs/s in %s is %s (%s): %s",
				c.RatePerSec, proc, c.Status, fl.Reason, why)
			r.note("rate %.0f msgs/s (%s, %s): its floor is %s — %s; the cells at this rate are not compared", c.RatePerSec, ph.pressure, proc, c.Status, fl.Reason)
		}
	}
	return bad
}

// floorRun is one repeat of a floor: the open loop against a no-op, in
// the process that drives the cells it is compared with — mqpeer's for
// the peers; for mqstore a worker process in the phase's cgroups when the
// store's repeats run in workers (runJob, r.isolate: under swap pressure
// the generator inside the memory cgroup swaps with the store, and its
// floor must see that), else this process.
func (r *runner) floorRun(ph *phaseEnv, rate float64, inPeers bool) func(context.Context, *runfile.Cell, int, uint64) runfile.Repeat {
	return func(ctx context.Context, c *runfile.Cell, round int, seed uint64) runfile.Repeat {
		sp := spec(&r.cfg, "latency", 1, 0, rate, time.Duration(c.WindowNs), seed)
		switch {
		case inPeers:
			dir := filepath.Join(ph.t.work, runfile.SafeName(fmt.Sprintf("%s-r%d", c.Name, round)))
			rep, _ := peerRepeat(ctx, r.peerCmd, dir, "no-op", "async", sp, StoreConfig{})
			return rep
		case r.isolate:
			return workerFloorRepeat(ctx, sp, ph.env.cgroups())
		}
		return floorRepeat(ctx, sp)
	}
}

// floorRepeat runs spec's schedule against an operation that does
// nothing, in the calling process (mqbench's, or a floor worker's).
func floorRepeat(ctx context.Context, sp load.Spec) runfile.Repeat {
	res := load.Run(ctx, sp, nil, nil, func(int) load.Op { return func(context.Context) error { return nil } })
	return repeatOf(res, nil)
}
