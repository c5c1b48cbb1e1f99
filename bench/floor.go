package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
)

// floorPhase measures the load generator's own latency at every rate of
// the ladder — the same schedule (rate, arrivals, workers, window, seeds)
// against an operation that does nothing, interleaved like the cells — and
// returns the rates the generator can offer: a rate whose floor saturates
// (the generator cannot keep its own schedule on this machine) is dropped
// for every system.
func (r *runner) floorPhase(ctx context.Context, ph *phaseEnv) []float64 {
	var jobs []*job
	for _, rate := range r.cfg.Rates {
		c := runfile.Cell{Name: fmt.Sprintf("floor-r%.0f", rate), Workload: "floor", Backend: "no-op", Pressure: ph.pressure,
			Target: ph.t.label, RatePerSec: rate, InFlight: r.cfg.InFlight, Arrival: r.cfg.Arrival, WindowNs: r.window.Nanoseconds()}
		if ph.pressure != PressureNone {
			c.Name += "-" + ph.pressure
		}
		jobs = append(jobs, &job{cell: c, run: r.floorRun(rate)})
	}
	r.runRounds(ctx, ph, jobs)
	var usable []float64
	for _, j := range jobs {
		finishCell(&j.cell)
		c := &j.cell
		fl := runfile.Floor{RatePerSec: c.RatePerSec, Pressure: ph.pressure, Target: ph.t.label, Arrival: c.Arrival, InFlight: c.InFlight,
			WindowNs: c.WindowNs, Status: c.Status, Reason: c.Reason, P50Ns: c.P50Ns, P99Ns: c.P99Ns, P999Ns: c.P999Ns,
			CILow: c.CILow, CIHigh: c.CIHigh, Repeats: c.Repeats}
		if c.Status == runfile.StatusSaturated {
			fl.Reason = "the load generator could not keep this rate against a no-op: " + joinReasons(c.Saturation)
		}
		r.file.Floors = append(r.file.Floors, fl)
		r.progress.cellDone(c.Name, c.Status, fl.Reason)
		switch c.Status {
		case runfile.StatusOK:
			usable = append(usable, c.RatePerSec)
		default:
			r.note("rate %.0f msgs/s not run (%s): its floor is %s — %s", c.RatePerSec, ph.pressure, c.Status, fl.Reason)
		}
	}
	r.checkpoint()
	return usable
}

// floorRun is one repeat of a floor: the open loop against a no-op.
func (r *runner) floorRun(rate float64) func(context.Context, *runfile.Cell, int, uint64) runfile.Repeat {
	return func(ctx context.Context, c *runfile.Cell, _ int, seed uint64) runfile.Repeat {
		sp := spec(&r.cfg, "latency", 1, 0, rate, time.Duration(c.WindowNs), seed)
		res := load.Run(ctx, sp, nil, nil, func(int) load.Op { return func(context.Context) error { return nil } })
		return repeatOf(res, nil)
	}
}

func joinReasons(rs []string) string {
	out := ""
	for i, s := range rs {
		if i > 0 {
			out += "; "
		}
		out += s
	}
	return out
}
