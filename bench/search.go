package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

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
//
// badFloors are the ladder's rates whose floor, in the process that
// drives sys (recordFloors: mqbench's for mqstore, mqpeer's for the
// peers), did not keep its schedule or failed: from the lowest of them up
// the generator is not shown to keep the schedule, so a probe there that
// saturates is generator-bound (probeGeneratorBound), not the system's
// saturation; that rate bounds the probes from above like a saturated
// one, and a search it limited says so in its Reason.
func (r *runner) search(ctx context.Context, ph *phaseEnv, sys system, badFloors map[float64]string) {
	s := runfile.RateSearch{Group: runfile.SearchGroup(sys.backend, sys.size, sys.pol.Flush, sys.pol.Name), Backend: sys.backend, Peer: sys.peer,
		Flush: sys.pol.Flush, Size: sys.size, Target: ph.t.label, Pressure: ph.pressure, InFlight: r.cfg.InFlight}
	cells, guess := r.searchStart(ph, sys, &s)
	gen, genWhy := generatorLimit(badFloors)
	seed := repeatSeed(r.cfg.Seed, 1)
	near := false // the last probe was a guess at the capacity, and it held
	for probe := 0; probe < r.cfg.SearchProbes && ctx.Err() == nil; probe++ {
		lo, hi := s.SustainableRatePerSec, s.SaturatedAtPerSec
		if c := generatorCeiling(gen, lo, s.Probes); c > 0 && (hi == 0 || c < hi) {
			hi = c
		}
		if lo > 0 && hi > 0 && hi/lo <= runfile.SearchResolution {
			break
		}
		rate := nextProbe(lo, hi, guess, near)
		wasGuess := guess > lo && (hi == 0 || guess < hi)
		guess, near = 0, false
		p, rep, atDrainOnly := r.probe(ctx, ph, sys, s.Group, rate, seed)
		if gen > 0 && rate >= gen && p.Status == runfile.StatusSaturated {
			p.Status = probeGeneratorBound
			p.Reason = strings.TrimPrefix(p.Reason+"; ", "; ") + fmt.Sprintf("not the system's saturation: at or above %.0f msgs/s, where %s", gen, genWhy)
		}
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
		case probeGeneratorBound:
			// Its rate bounds the next probes (generatorCeiling); what it
			// achieved is the generator's, no guess at the system's capacity.
		default:
			s.Reason = fmt.Sprintf("probe at %.0f msgs/s %s: %s", rate, rep.Status, rep.Reason)
		}
		if s.Reason != "" {
			break
		}
	}
	genLimited := s.Reason == "" && s.SaturatedAtPerSec == 0 && gen > 0 && (gen > s.SustainableRatePerSec || slices.ContainsFunc(s.Probes, isGeneratorBound))
	if genLimited {
		s.GeneratorLimitPerSec = gen
		s.Reason = fmt.Sprintf("the load generator, not the system, limited the search: %s — no probe at or above %.0f msgs/s counts as the system saturating, "+
			"so the system's sustainable rate may be higher", genWhy, gen)
	}
	if s.SustainableRatePerSec == 0 && (s.Reason == "" || genLimited) {
		s.Reason = strings.TrimPrefix(s.Reason+"; ", "; ") + "no probed rate was sustained"
	}
	for _, c := range cells {
		c.SustainableRatePerSec = s.SustainableRatePerSec
	}
	r.file.Searches = append(r.file.Searches, s)
	r.progress.cellDone("search "+s.Group, runfile.StatusOK, "")
	r.checkpoint()
}

// generatorLimit is the lowest of the rates whose floor did not keep its
// schedule or failed (recordFloors' map for one process) and the floor's
// reason; 0 when every floor kept its schedule.
func generatorLimit(bad map[float64]string) (float64, string) {
	var rate float64
	var why string
	for r, w := range bad {
		if rate == 0 || r < rate {
			rate, why = r, w
		}
	}
	return rate, why
}

// generatorCeiling is the lowest rate above lo at which the generator is
// not shown to keep the schedule — gen (generatorLimit), or a probe that
// was generator-bound — or 0: the search probes below it, as below a rate
// the system saturated at.
func generatorCeiling(gen, lo float64, probes []runfile.Probe) float64 {
	var c float64
	if gen > lo {
		c = gen
	}
	for _, p := range probes {
		if isGeneratorBound(p) && p.RatePerSec > lo && (c == 0 || p.RatePerSec < c) {
			c = p.RatePerSec
		}
	}
	return c
}

func isGeneratorBound(p runfile.Probe) bool { return p.Status == probeGeneratorBound }

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

// probeGeneratorBound is a probe that saturated at or above a rate whose
// floor did not keep its schedule (or failed) in the process that drove
// it: the load generator is not shown to keep that rate, so its
// saturation is not counted as the system's.
const probeGeneratorBound = "generator-bound"

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
