package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// MeasureDevice measures the limits alone (copy ceiling for cfg.Sizes, the device
// probes, fio) in a temporary directory inside cfg.Dir.
func MeasureDevice(ctx context.Context, cfg Config, o RunOptions) (*RunFile, error) {
	work, err := os.MkdirTemp(cfg.Dir, "mqbench-device-")
	if err != nil {
		return nil, fmt.Errorf("work directory in %s: %w", cfg.Dir, err)
	}
	defer os.RemoveAll(work)
	if work, err = filepath.Abs(work); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, work: work, prober: o.Prober}
	if r.prober == nil {
		r.prober = UringProber{}
	}
	r.file = &RunFile{Schema: SchemaVersion, Machine: DescribeMachine(), Devices: []Device{DescribeDevice(cfg.Dir)}, Config: cfg}
	r.progress = newProgress(o.Progress, o.Terminal, len(cfg.Sizes)+4)
	r.measureLimits(ctx)
	r.progress.close()
	if ctx.Err() != nil {
		return r.file, fmt.Errorf("%w", ErrInterrupted)
	}
	return r.file, nil
}

// DeviceReport renders the device description and the limits.
func DeviceReport(f *RunFile) string {
	var b strings.Builder
	for _, d := range f.Devices {
		fmt.Fprintf(&b, "%s: device %s (%s on %s), model %q, rotational %v, scheduler %q, blocks %d/%d B, write cache %q, FUA %v\n\n",
			d.Dir, d.Device, d.FSType, d.MountSource, d.Model, boolOr(d.Rotational), d.Scheduler, d.LogicalBlockBytes, d.PhysicalBlockBytes, d.WriteCache, boolOr(d.FUA))
	}
	writeLimits(&b, f)
	writeFailures(&b, f, nil)
	return b.String()
}

func boolOr(b *bool) string {
	if b == nil {
		return "unknown"
	}
	return fmt.Sprint(*b)
}

// Report re-renders a stored run's derived files (summary.md, plots,
// bench.txt, .hgrm) from its run.json.
func Report(dir string) (*RunFile, error) {
	f, err := ReadRunFile(dir)
	if err != nil {
		return nil, err
	}
	ComputeRatios(f)
	if err := Render(dir, f); err != nil {
		return nil, err
	}
	return f, nil
}

// compareFigures are the figures compare shows per workload.
var compareFigures = map[string][]string{
	"throughput": {"msgsPerSec", "p99Ns", "cpuSecPerGiB", "allocsPerMsg"},
	"latency":    {"p50Ns", "p99Ns", "p999Ns"},
}

// Compare renders two runs side by side: every cell (and limit) present in
// both, each figure as A median [min–max], B median [min–max], B ÷ A, and
// "~" when the two ranges overlap (this pair of runs does not show a
// difference).
func Compare(a, b *RunFile) string {
	var s strings.Builder
	fmt.Fprintf(&s, "A: %s (%s)\nB: %s (%s)\n\n", a.ID, shortCommit(a.Machine.Commit), b.ID, shortCommit(b.Machine.Commit))
	s.WriteString("| cell | figure | A | B | B ÷ A | |\n|---|---|---:|---:|---:|---|\n")
	index := map[string]*Cell{}
	for _, cells := range [][]Cell{b.Cells, b.Peers} {
		for i := range cells {
			index[cells[i].Name] = &cells[i]
		}
	}
	var onlyA []string
	for _, cells := range [][]Cell{a.Cells, a.Peers} {
		for i := range cells {
			ca := &cells[i]
			cb, ok := index[ca.Name]
			if !ok {
				onlyA = append(onlyA, ca.Name)
				continue
			}
			delete(index, ca.Name)
			if ca.Status != StatusOK || cb.Status != StatusOK {
				fmt.Fprintf(&s, "| %s | | %s | %s | | |\n", ca.Name, ca.Status, cb.Status)
				continue
			}
			for _, fig := range compareFigures[ca.Workload] {
				s.WriteString(compareRow(ca.Name, fig, &ca.Figures, &ca.Min, &ca.Max, &cb.Figures, &cb.Min, &cb.Max))
			}
		}
	}
	limits := map[string]*Limit{}
	for i := range b.Limits {
		limits[limitKey(&b.Limits[i])] = &b.Limits[i]
	}
	for i := range a.Limits {
		la := &a.Limits[i]
		lb, ok := limits[limitKey(la)]
		if !ok || la.Status != StatusOK || lb.Status != StatusOK {
			continue
		}
		fig := "mbPerSec"
		if la.P50Ns > 0 {
			fig = "p50Ns"
		}
		s.WriteString(compareRow("limit "+limitKey(la), fig, &la.Figures, &la.Min, &la.Max, &lb.Figures, &lb.Min, &lb.Max))
	}
	s.WriteString("\n`~`: the repeats' min–max ranges overlap — no difference shown. For a statistical test run `benchstat A/bench.txt B/bench.txt`.\n")
	if len(onlyA) > 0 {
		fmt.Fprintf(&s, "\nOnly in A: %s\n", strings.Join(onlyA, ", "))
	}
	if len(index) > 0 {
		var onlyB []string
		for _, cells := range [][]Cell{b.Cells, b.Peers} {
			for _, c := range cells {
				if _, ok := index[c.Name]; ok {
					onlyB = append(onlyB, c.Name)
				}
			}
		}
		fmt.Fprintf(&s, "Only in B: %s\n", strings.Join(onlyB, ", "))
	}
	return s.String()
}

func limitKey(l *Limit) string { return fmt.Sprintf("%s-%d", l.Name, l.SizeBytes) }

func compareRow(name, fig string, am, alo, ahi, bm, blo, bhi *Figures) string {
	f := func(x float64) string {
		if strings.HasSuffix(fig, "Ns") {
			return fmtNs(int64(x))
		}
		if fig == "msgsPerSec" {
			return fmtCount(x)
		}
		return fmtFloat(x)
	}
	ratio := "—"
	if v := am.Figure(fig); v != 0 {
		ratio = fmtFloat(bm.Figure(fig)/v) + "×"
	}
	overlap := ""
	if math.Max(alo.Figure(fig), blo.Figure(fig)) <= math.Min(ahi.Figure(fig), bhi.Figure(fig)) {
		overlap = "~"
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s |\n", name, fig,
		withRange(am.Figure(fig), alo.Figure(fig), ahi.Figure(fig), f), withRange(bm.Figure(fig), blo.Figure(fig), bhi.Figure(fig), f), ratio, overlap)
}
