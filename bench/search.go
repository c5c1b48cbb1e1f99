package bench

import (
	"context"
	"fmt"
	"math"

	"github.com/mqstore/mqstore/bench/runfile"
)

// search finds the highest rate sys sustains in the open loop — keeps its
// schedule and, for a system that reports durability, keeps what it
// accepts durable (backlog ≤ 10 % of what it wrote): one-repeat probes of
// cfg.SearchDuration. It starts from what the ladder showed (the
// highest rung the system sustained, the lowest it saturated at) and an
// estimate of its capacity: a saturated run completes about as fast as the
// system can, so just below the achieved rate of the lowest saturated rung
// (or, when none saturated, the sustained rate of its throughput cells) is
// tried first; each saturated probe's achieved rate gives the next such
// guess. Otherwise it grows ×1.5 while the system keeps up and bisects
// (geometrically) until the two bounds are within 10 % or the probes run
// out. The highest rate that did not saturate is recorded on the search
// and on every latency cell of the system.
func (r *runner) search(ctx context.Context, ph *phaseEnv, sys system) {
	s := runfile.RateSearch{Group: runfile.SearchGroup(sys.backend, sys.size, sys.pol.Flush, sys.pol.Name), Backend: sys.backend, Peer: sys.peer,
		Flush: sys.pol.Flush, Size: sys.size, Target: ph.t.label, Pressure: ph.pressure, InFlight: r.cfg.InFlight}
	cells, guess := r.searchStart(ph, sys, &s)
	seed := repeatSeed(r.cfg.Seed, 1)
	near := false // the last probe was a guess at the capacity, and it held
	for probe := 0; probe < r.cfg.SearchProbes && ctx.Err() == nil; probe++ {
		lo, hi := s.SustainableRatePerSec, s.SaturatedAtPerSec
		if lo > 0 && hi > 0 && hi/lo <= runfile.SearchResolution {
			break
		}
		rate := nextProbe(lo, hi, guess, near)
		wasGuess := guess > lo && (hi == 0 || guess < hi)
		guess, near = 0, false
		p, rep, atDrainOnly := r.probe(ctx, ph, sys, s.Group, rate, seed)
		s.Probes = append(s.Probes, p)
		switch p.Status {
		case runfile.StatusOK:
			s.SustainableRatePerSec = math.Max(s.SustainableRatePerSec, rate)
			near = wasGuess
		case runfile.StatusSaturated, probeNotSustained:
			if s.SaturatedAtPerSec == 0 || rate < s.SaturatedAtPerSec {
				s.SaturatedAtPerSec = rate
			}
			guess = guessBelow * durableRate(rep.Figures)
			if atDrainOnly {
				guess = guessBelow * rep.Figures.MsgsPerSec
			}
		default:
			s.Reason = fmt.Sprintf("probe at %.0f msgs/s %s: %s", rate, rep.Status, rep.Reason)
		}
		if s.Reason != "" {
			break
		}
	}
	if s.SustainableRatePerSec == 0 && s.Reason == "" {
		s.Reason = "no probed rate was sustained"
	}
	for _, c := range cells {
		c.SustainableRatePerSec = s.SustainableRatePerSec
	}
	r.file.Searches = append(r.file.Searches, s)
	r.progress.cellDone("search "+s.Group, runfile.StatusOK, "")
	r.checkpoint()
}

// searchStart reads what the rate ladder already showed of sys: its
// open-loop cells (which get the search's answer), the highest rate it
// sustained and the lowest it did not, and a first guess at its capacity.
func (r *runner) searchStart(ph *phaseEnv, sys system, s *runfile.RateSearch) ([]*runfile.Cell, float64) {
	var cells []*runfile.Cell
	all := &r.file.Cells
	if sys.peer {
		all = &r.file.Peers
	}
	guess := r.caps[sys.key(ph.t)]
	for i := range *all {
		c := &(*all)[i]
		if c.Workload != "latency" || c.Backend != sys.backend || c.SizeBytes != sys.size || c.Flush != sys.pol.Flush ||
			c.Policy != sys.pol.Name || c.Target != ph.t.label || c.Pressure != ph.pressure || c.TwinOf != "" || c.Replication != sys.repl {
			continue
		}
		cells = append(cells, c)
		switch {
		case c.Status == runfile.StatusOK && (c.Sustained == nil || *c.Sustained):
			s.SustainableRatePerSec = math.Max(s.SustainableRatePerSec, c.RatePerSec)
		case c.Measured():
			if s.SaturatedAtPerSec == 0 || c.RatePerSec < s.SaturatedAtPerSec {
				s.SaturatedAtPerSec = c.RatePerSec
				guess = guessBelow * sustainedRate(c)
			}
		}
	}
	return cells, guess
}

// probe runs one search probe of sys at rate: its status (not sustained
// when its backlog grew), what it achieved and the cap its in-flight
// limit put on it; atDrainOnly for a peer that reports durability only
// when drained, which cannot be judged by its backlog (see
// runfile.DurableOnlyAtDrain).
func (r *runner) probe(ctx context.Context, ph *phaseEnv, sys system, group string, rate float64, seed uint64) (runfile.Probe, runfile.Repeat, bool) {
	c := r.newCell(sys, "latency", ph.pressure, ph.t)
	c.RatePerSec, c.WindowNs = rate, r.cfg.SearchDuration.Nanoseconds()
	c.Name = fmt.Sprintf("search-%s-r%.0f", group, rate)
	r.progress.step(c.Name, 1, 1, rate)
	rep := r.runJob(ph, sys, "latency", 0, rate)(ctx, &c, 1, seed)
	r.progress.advance(1)
	status := rep.Status
	atDrainOnly := sys.peer && runfile.DurableOnlyAtDrain([]*runfile.Repeat{&rep})
	if d := rep.Result.Durability; status == runfile.StatusOK && d != nil && !d.Sustained() && !atDrainOnly {
		status = probeNotSustained
	}
	p := runfile.Probe{RatePerSec: rate, Status: status, Saturation: rep.Saturation, AchievedPerSec: rep.Figures.MsgsPerSec,
		P999Ns: rep.Figures.P999Ns, Reason: rep.Reason}
	if svc := rep.Result.Service; svc != nil && svc.Count() > 0 && svc.Mean() > 0 {
		p.InFlightCapPerSec = float64(r.cfg.InFlight) / (svc.Mean() / 1e9)
	}
	return p, rep, atDrainOnly
}

// probeNotSustained is a probe that kept its schedule but not durably:
// its backlog grew past 10 % of what it wrote (async, buffers filling).
const probeNotSustained = "not sustained"

// durableRate is the rate a run kept durable: its completed msgs/s, scaled
// by durable ÷ written when it fell behind.
func durableRate(f runfile.Figures) float64 {
	if f.WrittenMBps > 0 && f.DurableMBps < f.WrittenMBps {
		return f.MsgsPerSec * f.DurableMBps / f.WrittenMBps
	}
	return f.MsgsPerSec
}

// guessBelow: the next guess is this share of a saturated run's achieved
// rate (just below what it managed).
const guessBelow = 0.95

// nextProbe is the next rate to try between the highest sustained rate lo
// and the lowest saturated one hi (0 when unknown), given a guess of the
// capacity (0: none) and whether lo is a guess that held (near: the
// capacity is just above it): the guess when it lies between the bounds,
// else ×1.5 above lo while nothing saturated, half of hi while nothing was
// sustained, and their geometric mean otherwise — but no more than ×1.25
// above a guess that held.
func nextProbe(lo, hi, guess float64, near bool) float64 {
	switch {
	case guess > lo && (hi == 0 || guess < hi):
		return guess
	case lo == 0 && hi == 0:
		return 1000
	case hi == 0:
		return lo * 1.5
	case lo == 0:
		return hi / 2
	case near:
		return math.Min(lo*1.25, math.Sqrt(lo*hi))
	}
	return math.Sqrt(lo * hi)
}
