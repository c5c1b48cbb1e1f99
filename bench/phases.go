package bench

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench/host"
	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/engine"
)

// system is one thing measured: a backend or a peer at a body size under a
// flush policy.
type system struct {
	backend string
	peer    bool
	size    int
	pol     Policy
	// repl is the replication axis' value with a slave (async, sync; ""
	// without one, the cell's Replication): the store under test is the
	// slave's master; delay the EMULATED one-way network delay between
	// them (0 without a slave).
	repl  string
	delay time.Duration
}

func (s system) key(t *target) string {
	return fmt.Sprintf("%v|%s|%d|%s|%s|%s|%s|%v", s.peer, s.backend, s.size, s.pol.Flush, s.pol.Name, s.repl, s.delay, t.label)
}

func (s system) replicated() bool { return s.repl != "" }

// systems lists what a pressure phase measures: every backend × size ×
// policy × replication (without pressure; under pressure only the cells
// without a slave), and the peers × size × flush without pressure.
func systems(c *Config, pressure string) []system {
	var out []system
	for _, b := range c.Backends {
		for _, size := range c.Sizes {
			for _, pol := range policiesFor(c, b) {
				for _, repl := range replications(c) {
					if repl != ReplicationNone && pressure != PressureNone {
						continue
					}
					sys := system{backend: b, size: size, pol: pol}
					if repl != ReplicationNone {
						sys.repl, sys.delay = repl, c.HADelay
					}
					out = append(out, sys)
				}
			}
		}
	}
	if pressure == PressureNone {
		for _, p := range c.Peers {
			for _, size := range c.Sizes {
				for _, f := range c.Flushes {
					out = append(out, system{backend: p, peer: true, size: size, pol: Policy{Flush: f}})
				}
			}
		}
	}
	return out
}

// phaseEnv is where a phase runs.
type phaseEnv struct {
	ti       int
	t        *target
	pressure string
	env      *pressureEnv
}

func (r *runner) newCell(sys system, workload, pressure string, t *target) runfile.Cell {
	c := runfile.Cell{Workload: workload, Backend: sys.backend, Peer: sys.peer, SizeBytes: sys.size, Flush: sys.pol.Flush,
		Policy: sys.pol.Name, Pressure: pressure, Dir: r.cfg.Dir, WindowNs: r.window.Nanoseconds(), Repeats: []runfile.Repeat{}}
	if t != nil {
		c.Dir, c.Target, c.Emulated = t.device.Dir, t.label, t.emulated
	}
	if workload == string(load.Latency) || workload == WorkloadE2E {
		c.InFlight, c.Arrival = r.cfg.InFlight, r.cfg.Arrival
	}
	if !sys.peer {
		c.Message = messageKind(sys.pol.Store.Message)
		c.RecordBytes = storeRecordBytes(sys.pol.Store, sys.size)
		c.Replication, c.HADelayNs = sys.repl, sys.delay.Nanoseconds()
		c.Durability = cellDurability(sys, nil)
		_, c.Tuning, _ = backendOptions(sys.pol.Store, sys.backend, sys.pol.Flush)
	}
	return c
}

// loadCell is sys's named cell of workload at producers (the closed loop)
// or rate (the open loop).
func (r *runner) loadCell(sys system, workload, pressure string, t *target, producers int, rate float64) runfile.Cell {
	c := r.newCell(sys, workload, pressure, t)
	c.Producers, c.RatePerSec = producers, rate
	c.Name = runfile.CellName(&c, r.multiTarget())
	return c
}

// cellDurability is what a store cell's acknowledgement means: its
// backend's statement for the cell's options (storeDurabilitySemantics),
// and — once a repeat has recorded the store's effective options — whether
// the engine pre-wrote its segments (PrewriteSegments, as Store.Options
// resolved it).
func cellDurability(sys system, recorded map[string]string) *runfile.Durability {
	o, err := storeOptions(sys.pol.Store, sys.backend, sys.pol.Flush)
	if err != nil {
		return nil
	}
	o.Role = replicationRole(sys.repl)
	d, err := storeDurabilitySemantics(o, sys.repl)
	if err != nil {
		return nil
	}
	switch recorded["PrewriteSegments"] {
	case "on":
		d.Mechanism += "; the engine pre-writes every segment before use (PrewriteSegments on): a durable write commits data only, no extent conversion"
	case "auto":
		d.Mechanism += "; the engine pre-writes a new segment when the syncs since the last one covered fewer than " + recorded["PrewriteBelowSyncBytes"] +
			" bytes each (PrewriteSegments auto): then a durable write commits data only; otherwise the segment is fallocated and each sync also commits an extent conversion " +
			"(run.json's counters say how many segments went each way)"
	}
	return d
}

// job is one cell being measured: its repeats run interleaved with the
// other jobs of its phase.
type job struct {
	cell runfile.Cell
	sys  system
	// run runs one repeat with the arrivals' seed; it may fill the cell's
	// descriptive fields (options, peer label) on the way.
	run  func(ctx context.Context, c *runfile.Cell, index int, seed uint64) runfile.Repeat
	done bool
}

// finishJobs summarizes and records the jobs' cells. An open-loop cell at
// a rate whose floor (in its process) did not keep its schedule is
// skipped with the floor's reason: its figures are the generator's.
func (r *runner) finishJobs(ctx context.Context, jobs []*job, badRates map[string]map[float64]string) {
	for _, j := range jobs {
		finishCell(&j.cell)
		if len(j.cell.Repeats) == 0 && ctx.Err() != nil {
			j.cell.Status, j.cell.Reason = runfile.StatusInterrupted, "interrupted before it ran"
		}
		if why, ok := badRates[runfile.FloorProcess(&j.cell)][j.cell.RatePerSec]; ok && j.cell.Measured() {
			j.cell.Status, j.cell.Reason = runfile.StatusSkipped, why
		}
		r.record(j.cell)
	}
	r.checkpoint()
}

// runRounds runs the jobs' repeats in rounds: round 0 is every job's warm
// repeat (unmeasured), then cfg.Repeat measured rounds. Each round visits
// the jobs in a new random order, and every job of a round uses the same
// seed, so systems are compared on the same arrivals and neither drift of
// the machine nor position in the run favours one of them. A job whose
// repeat fails runs no more repeats.
func (r *runner) runRounds(ctx context.Context, ph *phaseEnv, jobs []*job) {
	for round := 0; round <= r.cfg.Repeat; round++ {
		seed := repeatSeed(r.cfg.Seed, round)
		for _, i := range r.rng.Perm(len(jobs)) {
			j := jobs[i]
			if j.done || ctx.Err() != nil {
				continue
			}
			r.progress.step(j.cell.Name, round, r.cfg.Repeat, j.cell.RatePerSec)
			var rep runfile.Repeat
			if err := ph.env.revive(ctx, r.journal); err != nil {
				rep = failedRepeat(err)
			} else {
				sampler := host.StartSampler(host.DefaultProcFiles, host.SampleInterval)
				rep = j.run(ctx, &j.cell, round, seed)
				rep.Samples, _ = sampler.Stop()
				if err := ph.env.alive(); err != nil && rep.Status != runfile.StatusFailed {
					rep.Status, rep.Reason = runfile.StatusFailed, err.Error()
				}
			}
			rep.Index, rep.Warm, rep.Seed = round, round == 0, seed
			j.cell.Repeats = append(j.cell.Repeats, rep)
			r.progress.advance(1)
			if rep.Status == runfile.StatusFailed || rep.Status == runfile.StatusInterrupted {
				j.done = true
			}
		}
		r.progress.roundDone(round, r.cfg.Repeat, len(jobs))
		r.checkpoint()
	}
	markCutShort(ctx, jobs, r.cfg.Repeat)
}

// markCutShort marks interrupted each job that Ctrl-C stopped before it
// ran every round — the rounds after the interruption skip every job
// without adding a repeat — unless a repeat of its own already failed or
// was interrupted (finishCell says so). Its figures would rest on fewer
// measured repeats than every other cell's, at a lower confidence than
// the run states, so finishCell gives it none.
func markCutShort(ctx context.Context, jobs []*job, repeat int) {
	if ctx.Err() == nil {
		return
	}
	for _, j := range jobs {
		ran := len(j.cell.Repeats) // the warm one included
		if j.done || ran > repeat {
			continue
		}
		j.cell.Status = runfile.StatusInterrupted
		if ran == 0 {
			j.cell.Reason = "interrupted (Ctrl-C) before it ran"
		} else {
			j.cell.Reason = fmt.Sprintf("interrupted (Ctrl-C) after %d of its %d measured repeats", ran-1, repeat)
		}
	}
}

// finishCell sets a cell's status and its summary figures from its
// repeats. A failed or interrupted repeat (the warm one included) fails
// the cell: no figures. A cell already marked interrupted (markCutShort:
// Ctrl-C stopped it before its last round) stays so, without figures,
// unless a repeat failed. An open-loop cell is saturated (its figures
// kept, as lower bounds) when cellSaturation says so.
func finishCell(c *runfile.Cell) {
	var fs []runfile.Figures
	var backlog []float64
	var measured []*runfile.Repeat
	durable := true
	for i := range c.Repeats {
		rep := &c.Repeats[i]
		switch rep.Status {
		case runfile.StatusOK, runfile.StatusSaturated:
			if rep.Warm {
				continue
			}
			measured = append(measured, rep)
			fs = append(fs, rep.Figures)
			if rep.Result.Durability == nil {
				durable = false
			} else {
				backlog = append(backlog, rep.Figures.BacklogShare)
			}
		case runfile.StatusInterrupted:
			if c.Status == "" {
				c.Status, c.Reason = runfile.StatusInterrupted, fmt.Sprintf("interrupted (Ctrl-C) during repeat %d", rep.Index)
			}
		default:
			if c.Status == "" || c.Status == runfile.StatusInterrupted {
				c.Status, c.Reason = runfile.StatusFailed, fmt.Sprintf("repeat %d: %s", rep.Index, rep.Reason)
			}
		}
	}
	c.Saturation = nil
	if c.Status != "" {
		c.Figures, c.CILow, c.CIHigh, c.Min, c.Max, c.Sustained = runfile.Figures{}, runfile.Figures{}, runfile.Figures{}, runfile.Figures{}, runfile.Figures{}, nil
		return
	}
	if len(fs) == 0 {
		c.Status, c.Reason = runfile.StatusFailed, "no measured repeat ran"
		return
	}
	c.Status = runfile.StatusOK
	if c.Saturation = cellSaturation(measured); len(c.Saturation) > 0 {
		c.Status = runfile.StatusSaturated
	}
	s := runfile.Summarize(fs)
	c.Figures, c.CILow, c.CIHigh, c.Min, c.Max, c.CILevel = s.Median, s.CILow, s.CIHigh, s.Min, s.Max, s.CILevel
	c.DurableAtDrainOnly = false
	switch {
	case durable && len(backlog) > 0 && c.Peer && runfile.DurableOnlyAtDrain(measured):
		// The peer reports durability only when drained: its durable rate
		// is not observable, so no sustained verdict either way.
		c.DurableAtDrainOnly = true
	case durable && len(backlog) > 0:
		// A replicated cell sustains only if its slave kept up too.
		ok := runfile.Median(backlog) <= load.SustainedBacklogShare
		if c.Replication != "" {
			ok = ok && c.Figures.ReplBacklogShare <= load.SustainedBacklogShare
		}
		c.Sustained = &ok
	}
}

// cellSaturation says why an open-loop cell's measured repeats show it did
// not keep its offered rate (nil: it did). Arrivals never started count in
// any repeat — they are dropped requests, not noise; the share of the
// schedule kept counts by its median over the repeats, and rising latency
// when most repeats show it, so that one repeat stalled by the machine
// (another process, a hypervisor pause near the window's end) does not
// make a cell — or a floor, and with it a whole rung — saturated.
func cellSaturation(measured []*runfile.Repeat) []string {
	var why []string
	var kept []float64
	rising := 0
	for _, rep := range measured {
		res := &rep.Result
		if res.Arrivals == 0 {
			continue
		}
		if res.Unstarted > 0 {
			why = append(why, fmt.Sprintf("repeat %d: %d of %d arrivals (%s) never started by the deadline", rep.Index, res.Unstarted, res.Arrivals,
				load.Percent(float64(res.Unstarted)/float64(res.Arrivals))))
		}
		kept = append(kept, res.KeptShare())
		if r, _ := load.Rising(res.Quarters); r {
			rising++
		}
	}
	if len(kept) == 0 {
		return nil
	}
	if m := runfile.Median(kept); m < load.MinKeptShare {
		why = append(why, fmt.Sprintf("kept %.1f%% of its schedule (median of the repeats; below %.0f%%)", 100*m, 100*load.MinKeptShare))
	}
	if 2*rising > len(kept) {
		why = append(why, fmt.Sprintf("latency rose in every quarter of the window in %d of %d repeats", rising, len(kept)))
	}
	return why
}

// runJob returns a job's repeat function: a store repeat (in this process
// or a worker), an e2e repeat, or a peer repeat.
func (r *runner) runJob(ph *phaseEnv, sys system, workload string, producers int, rate float64) func(context.Context, *runfile.Cell, int, uint64) runfile.Repeat {
	return func(ctx context.Context, c *runfile.Cell, round int, seed uint64) runfile.Repeat {
		sp := spec(&r.cfg, workload, sys.size, producers, rate, time.Duration(c.WindowNs), seed)
		dir := filepath.Join(ph.t.work, runfile.SafeName(fmt.Sprintf("%s-r%d", c.Name, round)))
		if sys.peer {
			if r.peerErr != nil {
				return failedRepeat(r.peerErr)
			}
			if workload == WorkloadE2E {
				return failedRepeat(fmt.Errorf("e2e is not built for peers"))
			}
			rep, info := peerRepeat(ctx, r.peerCmd, dir, sys.backend, sys.pol.Flush, sp, r.cfg.Store)
			applyPeer(c, info)
			return rep
		}
		storeCfg := sys.pol.Store
		var rep runfile.Repeat
		var options map[string]string
		switch {
		case sys.replicated():
			if workload == WorkloadE2E {
				return failedRepeat(fmt.Errorf("e2e is not built for replicated cells"))
			}
			slaveDir := dir + "-slave" // beside the master's, or in the --slave-dir work directory
			if r.slaveWork != "" {
				slaveDir = filepath.Join(r.slaveWork, filepath.Base(dir)+"-slave")
			}
			rep, options = runReplicatedRepeat(ctx, storeCfg, dir, slaveDir, sys, sp)
		case r.isolate:
			rep, options = workerStoreRepeat(ctx, storeCfg, dir, sys.backend, sys.pol.Flush, workload, sp, ph.env.cgroups())
		case workload == WorkloadE2E:
			rep, options = e2eRepeat(ctx, storeCfg, dir, sys.backend, sys.pol.Flush, sp)
		default:
			rep, options = storeRepeat(ctx, storeCfg, dir, sys.backend, sys.pol.Flush, sp, nil)
		}
		if options != nil {
			c.Options = options
			c.Durability = cellDurability(sys, options)
		}
		return rep
	}
}

// throughputPhase measures every system's closed loop at each producer
// count (and the A/A twin), then derives each system's sustained rate: the
// highest over producer counts of its completed msgs/s, scaled down by
// durable ÷ written when it did not keep up.
func (r *runner) throughputPhase(ctx context.Context, ph *phaseEnv) {
	var jobs []*job
	for _, sys := range systems(&r.cfg, ph.pressure) {
		for _, p := range r.cfg.Producers {
			c := r.loadCell(sys, "throughput", ph.pressure, ph.t, p, 0)
			jobs = append(jobs, &job{cell: c, sys: sys, run: r.runJob(ph, sys, "throughput", p, 0)})
		}
	}
	jobs = r.withTwin(ph, jobs)
	if len(jobs) == 0 {
		return
	}
	r.runRounds(ctx, ph, jobs)
	r.finishJobs(ctx, jobs, nil)
	for _, j := range jobs {
		if j.cell.TwinOf != "" || !j.cell.Measured() {
			continue
		}
		k := j.sys.key(ph.t)
		r.caps[k] = math.Max(r.caps[k], sustainedRate(&j.cell))
	}
	if ph.pressure == PressureNone && ph.ti == 0 && r.cfg.Profile && len(r.cfg.Policies) == 0 && ctx.Err() == nil {
		for _, j := range jobs {
			if !j.sys.peer && !j.sys.replicated() && j.cell.TwinOf == "" && j.cell.Producers == r.cfg.ProfiledProducers() && j.cell.Status == runfile.StatusOK {
				r.profile(ctx, j.sys, j.cell.Name)
			}
		}
	}
}

// sustainedRate is the rate a closed-loop cell kept durable — its
// acknowledged rate for a peer that reports durability only when drained
// (what it keeps durable meanwhile cannot be seen, and is not taken as 0).
func sustainedRate(c *runfile.Cell) float64 {
	if c.DurableAtDrainOnly {
		return c.MsgsPerSec
	}
	return durableRate(c.Figures)
}

// withTwin adds the A/A twin of the first job (once per run, without
// pressure): the same cell measured again under another name, interleaved
// with the rest, so the summary can show whether the harness calls two
// identical things different.
func (r *runner) withTwin(ph *phaseEnv, jobs []*job) []*job {
	if !r.cfg.AA || r.aaDone || ph.pressure != PressureNone || ph.ti != 0 || len(jobs) == 0 {
		return jobs
	}
	i := slices.IndexFunc(jobs, func(j *job) bool { return !j.sys.replicated() })
	if i < 0 {
		return jobs
	}
	first := jobs[i]
	twin := &job{cell: first.cell, sys: first.sys, run: first.run}
	twin.cell.Repeats = []runfile.Repeat{}
	twin.cell.TwinOf = first.cell.Name
	twin.cell.Name = runfile.CellName(&twin.cell, r.multiTarget())
	r.aaDone = true
	return append(jobs, twin)
}

// rungsFor is the ladder rates a system's open-loop cells run at: without
// pressure, every usable rate up to its sustained rate and the first one
// above it (whose saturation is a result); under pressure, the rates it ran
// at without (equal loads).
func (r *runner) rungsFor(ph *phaseEnv, sys system, usable []float64) []float64 {
	k := sys.key(ph.t)
	if ph.pressure != PressureNone {
		return r.rungs[k]
	}
	limit, capped := r.caps[k]
	var out, skipped []float64
	above := false
	for _, rate := range usable {
		switch {
		case !capped || rate <= limit:
			out = append(out, rate)
		case !above:
			out, above = append(out, rate), true
		default:
			skipped = append(skipped, rate)
		}
	}
	if len(skipped) > 0 {
		r.note("%s %s %s%s: rates %s msgs/s not run: above its sustained rate of %.0f msgs/s (throughput cells) and the first rung above it",
			sys.backend, runfile.SizeLabel(sys.size), sys.pol.Flush, replicationSuffix(sys), fmtRates(skipped), limit)
	}
	r.rungs[k] = out
	return out
}

// replicationSuffix names a system's slave in notes.
func replicationSuffix(sys system) string {
	if !sys.replicated() {
		return ""
	}
	out := " + " + replicationRole(sys.repl).String() + " slave"
	if sys.delay > 0 {
		out += fmt.Sprintf(" (EMULATED %v one-way delay)", sys.delay)
	}
	return out
}

func fmtRates(rs []float64) string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("%.0f", r))
	}
	return strings.Join(s, ", ")
}

// openLoopPhase measures the latency (and e2e) cells of every system at
// its rungs, interleaved round by round with the floors at every rate of
// the ladder (in the process that drives mqstore's cells — this one, or
// workers in the phase's cgroups with r.isolate — and in the peers' when
// the phase has peers), and, without pressure, searches each system's
// sustainable rate below the rates its process's floors did not keep.
func (r *runner) openLoopPhase(ctx context.Context, ph *phaseEnv) {
	var jobs []*job
	var groups []system
	withPeers := false
	for _, sys := range systems(&r.cfg, ph.pressure) {
		rungs := r.rungsFor(ph, sys, r.cfg.Rates)
		withPeers = withPeers || (sys.peer && len(rungs) > 0)
		// The search runs for the systems without a slave (a replicated
		// search would start a slave per probe; its cells report their
		// rungs' saturation all the same).
		if len(rungs) > 0 && runsUnder(&r.cfg, "latency", ph.pressure) && !sys.replicated() {
			groups = append(groups, sys)
		}
		for _, w := range []string{"latency", WorkloadE2E} {
			if !runsUnder(&r.cfg, w, ph.pressure) || (w == WorkloadE2E && (sys.peer || sys.replicated())) {
				continue
			}
			for _, rate := range rungs {
				c := r.loadCell(sys, w, ph.pressure, ph.t, 0, rate)
				jobs = append(jobs, &job{cell: c, sys: sys, run: r.runJob(ph, sys, w, 0, rate)})
			}
		}
	}
	jobs = r.withTwin(ph, jobs)
	if len(jobs) == 0 {
		return
	}
	floors := r.floorJobs(ph, withPeers)
	r.runRounds(ctx, ph, append(slices.Clone(jobs), floors...))
	bad := r.recordFloors(ph, floors)
	r.finishJobs(ctx, jobs, bad)
	if ph.pressure != PressureNone || r.cfg.SearchProbes == 0 {
		return
	}
	for _, sys := range groups {
		if ctx.Err() != nil {
			return
		}
		// The search is judged against the floors of the process that
		// drives its probes: at and above a rate whose floor did not keep
		// its schedule, a saturated probe is the generator's, not the
		// system's.
		proc := runfile.FloorMQBench
		if sys.peer {
			proc = runfile.FloorPeers
		}
		r.search(ctx, ph, sys, bad[proc])
	}
}

// profileRepeat is the profiled run of a throughput cell in a fresh store
// in dir: at Config.ProfiledProducers for ProfileDuration, after the
// warm-up the measured repeats get (storeRepeat runs it before the hook,
// which starts the profilers), with the engine's stage labels on.
func profileRepeat(ctx context.Context, cfg *Config, dir string, sys system, hook func(*engine.Store, func(window func() (end func())))) runfile.Repeat {
	sp := spec(cfg, "throughput", sys.size, cfg.ProfiledProducers(), 0, cfg.ProfileDuration, repeatSeed(cfg.Seed, 0))
	store := sys.pol.Store
	store.ProfileLabels = true // the engine labels its goroutines by stage: the CPU by stage
	rep, _ := storeRepeat(ctx, store, dir, sys.backend, sys.pol.Flush, sp, hook)
	return rep
}

// profile runs the throughput workload once more, unmeasured, under the
// CPU, heap, block and mutex profilers.
func (r *runner) profile(ctx context.Context, sys system, cell string) {
	r.progress.step(cell+" (profiling)", 0, 1, 0)
	var summaries []runfile.ProfileSummary
	var perr error
	rep := profileRepeat(ctx, &r.cfg, filepath.Join(r.work, cell+"-profile"), sys, func(_ *engine.Store, run func(window func() func())) {
		summaries, perr = profileRun(r.profDir, cell, run)
	})
	switch {
	case perr != nil:
		r.progress.note("profile %s: %v", cell, perr)
	case rep.Status == runfile.StatusFailed:
		r.progress.note("profile %s: the profiled run failed: %s", cell, rep.Reason)
	}
	for i := range summaries {
		perMessage(&summaries[i], rep.Result.CPUUserNs+rep.Result.CPUSysNs, rep.Result.Messages)
	}
	r.file.Profiles = append(r.file.Profiles, summaries...)
}
