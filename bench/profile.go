package bench

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/google/pprof/profile"
	"github.com/mqstore/mqstore/bench/runfile"
)

// ProfileKinds are the profiles taken of each profiled cell: the CPU
// profile, then the cumulative ones (ProfileKinds[1:]).
var ProfileKinds = []string{"cpu", "heap", "block", "mutex"}

// profileTopN is how many functions a summary keeps.
const profileTopN = 8

// Block and mutex sampling while a cell is profiled: every blocking event
// of ≥ 10 µs, one mutex contention in 10.
const (
	blockProfileRateNs   = 10_000
	mutexProfileFraction = 10
)

// profileRun captures the four profiles of the measured window of one run:
// run is handed a window function (load.Spec.Window) that starts the
// profilers as the window opens and stops them when its last worker has
// returned, so the profiles hold what the run's CPU figure counts — not the
// warm-up, the GC before the window, the merge of the workers' histograms
// after it, or the store's open and close. Heap (alloc_space), block and
// mutex profiles are cumulative in the runtime, so each is taken as the
// window opens and as it ends and the difference is written.
func profileRun(dir, cell string, run func(window func() (end func()))) ([]runfile.ProfileSummary, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("profiles: %w", err)
	}
	cpuPath := filepath.Join(dir, cell+".cpu.pprof")
	var (
		opened, closed bool
		startErr       error
		before         = map[string]*profile.Profile{}
		after          = map[string]*profile.Profile{}
		afterErr       = map[string]error{}
	)
	window := func() func() {
		if opened { // one window per profiled run
			return func() {}
		}
		opened = true
		runtime.SetBlockProfileRate(blockProfileRateNs)
		runtime.SetMutexProfileFraction(mutexProfileFraction)
		for _, kind := range ProfileKinds[1:] {
			p, err := snapshot(kind)
			if err != nil {
				startErr = err
				return func() {}
			}
			before[kind] = p
		}
		f, err := os.Create(cpuPath)
		if err == nil {
			if err = pprof.StartCPUProfile(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			startErr = fmt.Errorf("profiles: cpu: %w", err)
			return func() {}
		}
		return func() {
			pprof.StopCPUProfile()
			closed = true
			if err := f.Close(); err != nil {
				startErr = fmt.Errorf("profiles: %w", err)
			}
			for _, kind := range ProfileKinds[1:] {
				after[kind], afterErr[kind] = snapshot(kind)
			}
		}
	}
	run(window)
	runtime.SetBlockProfileRate(0)
	runtime.SetMutexProfileFraction(0)
	switch {
	case startErr != nil:
		return nil, startErr
	case !opened || !closed:
		return nil, fmt.Errorf("profiles: the run never opened and closed its measured window")
	}
	cpu := summarizeFile(cell, "cpu", cpuPath)
	cpu.WindowOnly = cpu.Error == ""
	out := []runfile.ProfileSummary{cpu}
	for _, kind := range ProfileKinds[1:] {
		path := filepath.Join(dir, cell+"."+kind+".pprof")
		err := afterErr[kind]
		if err == nil {
			err = writeDelta(path, before[kind], after[kind])
		}
		if err != nil {
			out = append(out, runfile.ProfileSummary{Cell: cell, Kind: kind, File: path, Error: err.Error()})
			continue
		}
		out = append(out, summarizeFile(cell, kind, path))
	}
	return out, nil
}

func snapshot(kind string) (*profile.Profile, error) {
	if kind == "heap" {
		runtime.GC() // the heap profile is as of the last GC
	}
	var buf bytes.Buffer
	if err := pprof.Lookup(kind).WriteTo(&buf, 0); err != nil {
		return nil, fmt.Errorf("profiles: %s: %w", kind, err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		return nil, fmt.Errorf("profiles: parse %s: %w", kind, err)
	}
	return p, nil
}

// writeDelta writes after − before.
func writeDelta(path string, before, after *profile.Profile) error {
	before = before.Copy()
	before.Scale(-1)
	delta, err := profile.Merge([]*profile.Profile{after, before})
	if err != nil {
		return fmt.Errorf("profiles: delta: %w", err)
	}
	delta.TimeNanos, delta.DurationNanos = after.TimeNanos, after.TimeNanos-before.TimeNanos
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("profiles: %w", err)
	}
	if err := delta.Write(f); err != nil {
		f.Close()
		return fmt.Errorf("profiles: write %s: %w", path, err)
	}
	return f.Close()
}

// sampleTypes names the sample type summarized for each kind.
var sampleTypes = map[string]string{"cpu": "cpu", "heap": "alloc_space", "block": "delay", "mutex": "delay"}

func summarizeFile(cell, kind, path string) runfile.ProfileSummary {
	var sum runfile.ProfileSummary
	f, err := os.Open(path)
	if err == nil {
		defer f.Close()
		var p *profile.Profile
		if p, err = profile.Parse(f); err == nil {
			sum, err = SummarizeProfile(p, sampleTypes[kind], profileTopN)
		}
	}
	if err != nil {
		sum = runfile.ProfileSummary{Error: err.Error()}
	}
	sum.Cell, sum.Kind, sum.File = cell, kind, path
	return sum
}

// SummarizeProfile returns the top n functions of p by flat value of the
// named sample type; cum counts a function once per sample however often
// it appears in the stack.
func SummarizeProfile(p *profile.Profile, sampleType string, n int) (runfile.ProfileSummary, error) {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == sampleType {
			idx = i
		}
	}
	if idx < 0 {
		return runfile.ProfileSummary{}, fmt.Errorf("profile has no %q samples", sampleType)
	}
	s := runfile.ProfileSummary{SampleType: sampleType, Unit: p.SampleType[idx].Unit}
	// The count of each sample, where the profile has one (a CPU profile's
	// "samples"), else 1 a sample.
	countIdx := slices.IndexFunc(p.SampleType, func(st *profile.ValueType) bool { return st.Type == "samples" })
	flat, cum, stages, counts := map[string]int64{}, map[string]int64{}, map[string]int64{}, map[string]int64{}
	labelled := false
	for _, sample := range p.Sample {
		v := sample.Value[idx]
		if v <= 0 {
			continue
		}
		s.Total += v
		stage := runfile.StageOther
		if vs := sample.Label[runfile.StageLabel]; len(vs) > 0 {
			stage, labelled = vs[0], true
		}
		if sampleType == "cpu" && profilerSample(sample) {
			stage = runfile.StageProfiler
		}
		stages[stage] += v
		n := int64(1)
		if countIdx >= 0 {
			n = sample.Value[countIdx]
		}
		counts[stage] += n
		s.Samples += n
		seen := map[string]bool{}
		for i, loc := range sample.Location {
			for j, line := range loc.Line {
				name := "?"
				if line.Function != nil {
					name = line.Function.Name
				}
				if i == 0 && j == 0 {
					flat[name] += v
				}
				if !seen[name] {
					seen[name] = true
					cum[name] += v
				}
			}
		}
	}
	names := slices.SortedFunc(maps.Keys(flat), func(a, b string) int {
		return cmp.Or(cmp.Compare(flat[b], flat[a]), strings.Compare(a, b))
	})
	for _, name := range names[:min(n, len(names))] {
		fc := runfile.FunctionCost{Function: name, Flat: flat[name], Cum: cum[name]}
		if s.Total > 0 {
			fc.FlatPct = 100 * float64(fc.Flat) / float64(s.Total)
			fc.CumPct = 100 * float64(fc.Cum) / float64(s.Total)
		}
		s.Top = append(s.Top, fc)
	}
	if sampleType == "cpu" && labelled {
		s.Stages = stageCosts(stages, counts, s.Total)
	}
	return s, nil
}

// profilerFrames are the runtime functions that record a block or mutex
// profile event (a stack capture and its bucket): CPU the profilers beside
// the CPU profile add, not the profiled code's. (Within a pprof Location,
// Line[0] is the innermost frame: inlined callees come first.)
var profilerFrames = map[string]bool{
	"runtime.saveblockevent":               true,
	"runtime.saveBlockEventStack":          true,
	"runtime.(*mLockProfile).captureStack": true,
	"runtime.(*mLockProfile).storeSlow":    true,
}

// profilerClockCallers are the runtime functions that read the cycle
// counter (runtime.cputicks) only while the block or mutex profiler is on:
// to time a channel, select or semaphore wait for it.
var profilerClockCallers = map[string]bool{
	"runtime.chanrecv":            true,
	"runtime.chansend":            true,
	"runtime.send":                true,
	"runtime.recv":                true,
	"runtime.closechan":           true,
	"runtime.selectgo":            true,
	"runtime.readyWithTime":       true,
	"runtime.semacquire1":         true,
	"runtime.notifyListWait":      true,
	"runtime.(*semaRoot).dequeue": true,
}

// profilerSample says whether a CPU sample ran inside the block or mutex
// profilers' recording, or in the clock reads that time a wait for them.
func profilerSample(sample *profile.Sample) bool {
	var frames []string
	for _, loc := range sample.Location {
		for _, line := range loc.Line {
			if line.Function != nil {
				frames = append(frames, line.Function.Name)
			}
		}
	}
	if len(frames) >= 2 && frames[0] == "runtime.cputicks" && profilerClockCallers[frames[1]] {
		return true
	}
	return slices.ContainsFunc(frames, func(f string) bool { return profilerFrames[f] })
}

// stageCosts splits a CPU profile's total by the engine's stage label
// (runfile.StageLabel; by is the value of each stage): the stages in
// runfile.StageOrder, then any other value of the label, then
// runfile.StageProfiler (the block and mutex profilers' recording, taken
// out of the stage it ran in), then runfile.StageOther for the samples
// without the label; counts is each stage's
// number of samples. It is called only when a sample carries the label: a
// store run without engine.Options.ProfileLabels has nothing to split.
func stageCosts(by, counts map[string]int64, total int64) []runfile.StageCost {
	if total <= 0 {
		return nil
	}
	order := slices.Clone(runfile.StageOrder)
	for stage := range by {
		if !slices.Contains(order, stage) && stage != runfile.StageOther && stage != runfile.StageProfiler {
			order = append(order, stage)
		}
	}
	slices.Sort(order[len(runfile.StageOrder):])
	var out []runfile.StageCost
	for _, stage := range append(order, runfile.StageProfiler, runfile.StageOther) {
		if v, ok := by[stage]; ok {
			out = append(out, runfile.StageCost{Stage: stage, Value: v, Pct: 100 * float64(v) / float64(total), Samples: counts[stage]})
		}
	}
	return out
}

// perMessage shares a CPU profile's stages out as µs per message: the
// profiled run's CPU (getrusage, cpuNs) per message, or — when the run
// reported none — the profile's own samples per message.
func perMessage(s *runfile.ProfileSummary, cpuNs, messages int64) {
	if len(s.Stages) == 0 || messages <= 0 {
		return
	}
	s.Messages, s.CPUSource = messages, "getrusage of the profiled run"
	if cpuNs <= 0 {
		cpuNs, s.CPUSource = s.Total, "the CPU profile's samples"
	}
	s.CPUPerMsgNs = float64(cpuNs) / float64(messages)
	for i := range s.Stages {
		s.Stages[i].UsPerMsg = s.Stages[i].Pct / 100 * s.CPUPerMsgNs / 1e3
	}
}
