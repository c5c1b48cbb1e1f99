package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/mqstore/mqstore/bench/load"
)

// SchemaVersion is run.json's "schema". Readers refuse other versions.
// Schema 1 (see .notes/README-bench.md for every field):
//
//	{ "schema": 1, "id", "command", "startedAt", "finishedAt", "interrupted",
//	  "machine": {host, os, arch, cpus, cpuModel, memTotalBytes, kernel, goVersion, commit, commitDirty},
//	  "devices": [{dir, device, fsType, model, rotational, scheduler, logicalBlockBytes, physicalBlockBytes, writeCache, fua}],
//	  "config": {…every flag…},
//	  "cells":  [Cell…]   mqstore backends
//	  "peers":  [Cell…]   the same workloads on other stores (backend = peer name)
//	  "limits": [Limit…]  copy ceiling, device probes, fio
//	  "ratios": [Ratio…]  store ÷ limit and mqstore ÷ peer
//	  "profiles": [ProfileSummary…] }
const SchemaVersion = 1

// Status of a cell or limit.
const (
	StatusOK          = "ok"
	StatusFailed      = "failed"
	StatusSkipped     = "skipped"
	StatusInterrupted = "interrupted"
)

// RunFile is run.json.
type RunFile struct {
	Schema      int              `json:"schema"`
	ID          string           `json:"id"`
	Command     string           `json:"command"`
	StartedAt   time.Time        `json:"startedAt"`
	FinishedAt  time.Time        `json:"finishedAt"`
	Interrupted bool             `json:"interrupted,omitempty"`
	Machine     Machine          `json:"machine"`
	Devices     []Device         `json:"devices"`
	Config      Config           `json:"config"`
	Cells       []Cell           `json:"cells"`
	Peers       []Cell           `json:"peers"`
	Limits      []Limit          `json:"limits"`
	Ratios      []Ratio          `json:"ratios"`
	Profiles    []ProfileSummary `json:"profiles"`
	// SystemChanges is what the run changed (sysctls, swap, cgroups, loop
	// devices, mounts, neighbour processes) and whether each was undone.
	SystemChanges []Change `json:"systemChanges,omitempty"`
	// Notes are run-level remarks (skipped pressures or devices, leftovers).
	Notes []string `json:"notes,omitempty"`
}

// Figures are one measurement's numbers (or the median, min or max of a
// cell's repeats, figure by figure). Latency percentiles: for a latency
// (open-loop) cell, completion − intended start; for a throughput cell,
// the service time (there is no intended start in a closed loop).
type Figures struct {
	MsgsPerSec   float64 `json:"msgsPerSec"`
	MBPerSec     float64 `json:"mbPerSec"`
	P50Ns        int64   `json:"p50Ns"`
	P90Ns        int64   `json:"p90Ns"`
	P99Ns        int64   `json:"p99Ns"`
	P999Ns       int64   `json:"p999Ns"`
	P9999Ns      int64   `json:"p9999Ns"`
	MaxNs        int64   `json:"maxNs"`
	CPUSecPerGiB float64 `json:"cpuSecPerGiB"`
	AllocsPerMsg float64 `json:"allocsPerMsg"`
	// Open loop only: service time (completion − actual start) percentiles,
	// the share of arrivals dropped, and the dispatcher's own p99 lag.
	ServiceP50Ns    int64   `json:"serviceP50Ns,omitempty"`
	ServiceP99Ns    int64   `json:"serviceP99Ns,omitempty"`
	ServiceP999Ns   int64   `json:"serviceP999Ns,omitempty"`
	DroppedFraction float64 `json:"droppedFraction,omitempty"`
	DispatchLagP99  int64   `json:"dispatchLagP99Ns,omitempty"`
	// Consume: the whole process's CPU per GiB sent (CPUSecPerGiB is the
	// sending thread's alone). Consume and recovery, cold variants: the
	// share of the store's pages still in the page cache after the drop.
	ProcessCPUSecPerGiB float64 `json:"processCpuSecPerGiB,omitempty"`
	ResidentFraction    float64 `json:"residentFraction,omitempty"`
	// Recovery: how long engine.Open of the crashed store took.
	OpenNs int64 `json:"openNs,omitempty"`
}

// Repeat is one run of a cell.
type Repeat struct {
	Index   int     `json:"index"`
	Status  string  `json:"status"`
	Reason  string  `json:"reason,omitempty"`
	Figures Figures `json:"figures"`
	// Result keeps the raw counts and the histograms (HdrHistogram V2
	// compressed, base64).
	Result load.Result `json:"result"`
	// Store counters after the run (mqstore cells).
	StoreFlushes  uint64 `json:"storeFlushes,omitempty"`
	StoreCommits  uint64 `json:"storeCommits,omitempty"`
	StoreRolls    uint64 `json:"storeRolls,omitempty"`
	StoreRecBytes uint64 `json:"storeRecordBytes,omitempty"`
	// Samples: the system every 100 ms during the repeat (see Sample).
	Samples []Sample `json:"samples,omitempty"`
}

// Cell is one point of the matrix: a workload on a backend (or peer) at a
// message size and flush policy, repeated.
type Cell struct {
	Name        string            `json:"name"`
	Workload    string            `json:"workload"`
	Backend     string            `json:"backend"`
	SizeBytes   int               `json:"sizeBytes"`
	Flush       string            `json:"flush"`
	FlushParams map[string]string `json:"flushParams,omitempty"`
	// Policy names a sweep's flush policy ("" outside a sweep).
	Policy   string `json:"policy,omitempty"`
	Variant  string `json:"variant,omitempty"` // consume: hot|cold-copy|sendfile; recovery: hot|cold
	Pressure string `json:"pressure"`
	// Target labels the device (devices[].label); Emulated repeats its flag.
	Target    string `json:"target,omitempty"`
	Emulated  bool   `json:"emulated,omitempty"`
	Producers int    `json:"producers"`
	InFlight  int    `json:"inFlight,omitempty"`
	Dir       string `json:"dir"`
	// Open loop: the target rate and where it came from.
	TargetRatePerSec float64  `json:"targetRatePerSec,omitempty"`
	RateSource       string   `json:"rateSource,omitempty"`
	Arrival          string   `json:"arrival,omitempty"`
	Status           string   `json:"status"`
	Reason           string   `json:"reason,omitempty"`
	Repeats          []Repeat `json:"repeats"`
	// Medians over the repeats, then the min and max of each figure.
	Figures
	Min Figures `json:"min"`
	Max Figures `json:"max"`
}

// Key identifies a cell across runs (compare matches on it).
func (c *Cell) Key() string { return c.Name }

// cellName is a cell's key from its fields: CellName, with the variant after
// the workload, the sweep policy and the target appended when set.
func cellName(c *Cell, withTarget bool) string {
	w := c.Workload
	if c.Variant != "" {
		w += "-" + c.Variant
	}
	name := CellName(w, c.Backend, c.SizeBytes, c.Flush, c.Pressure)
	if c.Policy != "" {
		name += "-" + safeName(c.Policy)
	}
	if withTarget && c.Target != "" {
		name += "@" + safeName(c.Target)
	}
	return name
}

// CellName is the cell's file-name-safe key.
func CellName(workload, backend string, sizeBytes int, flush, pressure string) string {
	name := fmt.Sprintf("%s-%s-%d-%s", workload, backend, sizeBytes, flush)
	if pressure != "" && pressure != "none" {
		name += "-" + pressure
	}
	return name
}

// Limit is a reference figure measured without the store: the page-cache
// copy ceiling, the device probes, fio.
type Limit struct {
	Name      string            `json:"name"`
	Target    string            `json:"target,omitempty"`
	Tool      string            `json:"tool"`
	SizeBytes int               `json:"sizeBytes,omitempty"`
	Dir       string            `json:"dir"`
	Params    map[string]string `json:"params,omitempty"`
	Status    string            `json:"status"`
	Reason    string            `json:"reason,omitempty"`
	Repeats   []Figures         `json:"repeats"`
	Figures
	Min Figures `json:"min"`
	Max Figures `json:"max"`
}

// Ratio is store ÷ reference for one figure: the ratio of the medians, and
// the widest ratio the repeats allow (min store ÷ max reference … max store
// ÷ min reference), so a reader sees whether noise could flip it.
type Ratio struct {
	Kind    string  `json:"kind"` // "copy-ceiling", "device", "peer"
	Cell    string  `json:"cell"`
	Against string  `json:"against"`
	Figure  string  `json:"figure"`
	Median  float64 `json:"median"`
	Low     float64 `json:"low"`
	High    float64 `json:"high"`
	Note    string  `json:"note,omitempty"`
}

// WriteRunFile writes run.json into dir.
func WriteRunFile(dir string, r *RunFile) error {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return fmt.Errorf("encode run.json: %w", err)
	}
	path := filepath.Join(dir, "run.json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write run.json: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write run.json: %w", err)
	}
	return nil
}

// ReadRunFile reads dir/run.json (or the file itself when path is one).
func ReadRunFile(path string) (*RunFile, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, "run.json")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read run: %w", err)
	}
	var r RunFile
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("read run %s: %w", path, err)
	}
	if r.Schema != SchemaVersion {
		return nil, fmt.Errorf("read run %s: schema %d, this mqbench reads schema %d", path, r.Schema, SchemaVersion)
	}
	return &r, nil
}

// figuresOf turns one load result into figures.
func figuresOf(r *load.Result) Figures {
	f := Figures{MsgsPerSec: r.MsgsPerSec(), MBPerSec: r.MBPerSec(), AllocsPerMsg: r.AllocsPerMsg()}
	lat := r.Service
	if r.Workload == load.Latency {
		lat = r.Latency
		s := r.Service.Percentiles()
		f.ServiceP50Ns, f.ServiceP99Ns, f.ServiceP999Ns = s.P50Ns, s.P99Ns, s.P999Ns
		if r.Arrivals > 0 {
			f.DroppedFraction = float64(r.Dropped) / float64(r.Arrivals)
		}
		if r.DispatchLag != nil {
			f.DispatchLagP99 = r.DispatchLag.Quantile(0.99)
		}
	} else {
		// CPU per GiB only in the closed loop: in the open loop the load
		// generator's dispatcher and idle workers would be counted too.
		f.CPUSecPerGiB = r.CPUSecPerGiB()
	}
	if lat != nil {
		p := lat.Percentiles()
		f.P50Ns, f.P90Ns, f.P99Ns, f.P999Ns, f.P9999Ns, f.MaxNs = p.P50Ns, p.P90Ns, p.P99Ns, p.P999Ns, p.P9999Ns, p.MaxNs
	}
	return f
}

// figureFields lists every figure with its accessor, so median/min/max are
// computed field by field.
var figureFields = []struct {
	name string
	get  func(*Figures) *float64
	geti func(*Figures) *int64
}{
	{name: "msgsPerSec", get: func(f *Figures) *float64 { return &f.MsgsPerSec }},
	{name: "mbPerSec", get: func(f *Figures) *float64 { return &f.MBPerSec }},
	{name: "p50Ns", geti: func(f *Figures) *int64 { return &f.P50Ns }},
	{name: "p90Ns", geti: func(f *Figures) *int64 { return &f.P90Ns }},
	{name: "p99Ns", geti: func(f *Figures) *int64 { return &f.P99Ns }},
	{name: "p999Ns", geti: func(f *Figures) *int64 { return &f.P999Ns }},
	{name: "p9999Ns", geti: func(f *Figures) *int64 { return &f.P9999Ns }},
	{name: "maxNs", geti: func(f *Figures) *int64 { return &f.MaxNs }},
	{name: "cpuSecPerGiB", get: func(f *Figures) *float64 { return &f.CPUSecPerGiB }},
	{name: "allocsPerMsg", get: func(f *Figures) *float64 { return &f.AllocsPerMsg }},
	{name: "serviceP50Ns", geti: func(f *Figures) *int64 { return &f.ServiceP50Ns }},
	{name: "serviceP99Ns", geti: func(f *Figures) *int64 { return &f.ServiceP99Ns }},
	{name: "serviceP999Ns", geti: func(f *Figures) *int64 { return &f.ServiceP999Ns }},
	{name: "droppedFraction", get: func(f *Figures) *float64 { return &f.DroppedFraction }},
	{name: "dispatchLagP99Ns", geti: func(f *Figures) *int64 { return &f.DispatchLagP99 }},
	{name: "processCpuSecPerGiB", get: func(f *Figures) *float64 { return &f.ProcessCPUSecPerGiB }},
	{name: "residentFraction", get: func(f *Figures) *float64 { return &f.ResidentFraction }},
	{name: "openNs", geti: func(f *Figures) *int64 { return &f.OpenNs }},
}

// Median returns the median of xs (the mean of the middle two when even).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// summarize returns the median, min and max of each figure over fs.
func summarize(fs []Figures) (med, lo, hi Figures) {
	if len(fs) == 0 {
		return
	}
	for _, fld := range figureFields {
		xs := make([]float64, len(fs))
		for i := range fs {
			if fld.get != nil {
				xs[i] = *fld.get(&fs[i])
			} else {
				xs[i] = float64(*fld.geti(&fs[i]))
			}
		}
		m, l, h := Median(xs), slices.Min(xs), slices.Max(xs)
		if fld.get != nil {
			*fld.get(&med), *fld.get(&lo), *fld.get(&hi) = m, l, h
		} else {
			*fld.geti(&med), *fld.geti(&lo), *fld.geti(&hi) = int64(m), int64(l), int64(h)
		}
	}
	return
}

// Figure returns the named figure as a float.
func (f *Figures) Figure(name string) float64 {
	for _, fld := range figureFields {
		if fld.name == name {
			if fld.get != nil {
				return *fld.get(f)
			}
			return float64(*fld.geti(f))
		}
	}
	panic("bench: unknown figure " + name)
}

// finishCell sets the cell's status and its median/min/max from its repeats:
// ok only when every repeat is ok; otherwise the figures stay zero.
func finishCell(c *Cell) {
	var fs []Figures
	for _, r := range c.Repeats {
		switch r.Status {
		case StatusOK:
			fs = append(fs, r.Figures)
		case StatusInterrupted:
			if c.Status == "" {
				c.Status, c.Reason = StatusInterrupted, "interrupted (Ctrl-C) during repeat "+fmt.Sprint(r.Index+1)
			}
		default:
			if c.Status == "" || c.Status == StatusInterrupted {
				c.Status, c.Reason = StatusFailed, fmt.Sprintf("repeat %d: %s", r.Index+1, r.Reason)
			}
		}
	}
	if c.Status != "" {
		c.Figures, c.Min, c.Max = Figures{}, Figures{}, Figures{}
		return
	}
	if len(fs) == 0 {
		c.Status, c.Reason = StatusFailed, "no repeat ran"
		return
	}
	c.Status = StatusOK
	c.Figures, c.Min, c.Max = summarize(fs)
}

func finishLimit(l *Limit) {
	if l.Status != "" {
		return
	}
	if len(l.Repeats) == 0 {
		l.Status, l.Reason = StatusFailed, "no repeat ran"
		return
	}
	l.Status = StatusOK
	l.Figures, l.Min, l.Max = summarize(l.Repeats)
}
