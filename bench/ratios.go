package bench

import (
	"fmt"
	"strings"
)

// ComputeRatios fills f.Ratios: each store cell against the copy ceiling of
// its size and the device probes, and each store cell against each peer's
// cell of the same workload, size and flush. Only ok cells and limits
// count; a ratio is the ratio of medians with the widest range the repeats
// allow.
func ComputeRatios(f *RunFile) {
	f.Ratios = []Ratio{}
	defer sendfileRatios(f)
	defer pressureRatios(f)
	var target string
	limit := func(name string, size int) *Limit {
		for i := range f.Limits {
			l := &f.Limits[i]
			if l.Name == name && l.Status == StatusOK && (size == 0 || l.SizeBytes == size) && l.Target == target {
				return l
			}
		}
		return nil
	}
	for i := range f.Cells {
		c := &f.Cells[i]
		if c.Status != StatusOK || c.Pressure != PressureNone || c.Policy != "" {
			continue
		}
		target = c.Target
		if c.Workload == "throughput" {
			if l := limit(LimitCopyCeiling, c.SizeBytes); l != nil {
				f.Ratios = append(f.Ratios, ratioOf("copy-ceiling", c.Name, l.Name, "mbPerSec", &c.Figures, &c.Min, &c.Max, &l.Figures, &l.Min, &l.Max, "higher is closer to the ceiling"))
			}
			for _, name := range []string{LimitDeviceSeq, LimitFioSeq} {
				if l := limit(name, 0); l != nil {
					f.Ratios = append(f.Ratios, ratioOf("device", c.Name, l.Name, "mbPerSec", &c.Figures, &c.Min, &c.Max, &l.Figures, &l.Min, &l.Max,
						"store payload MB/s ÷ sequential O_DIRECT MB/s"))
				}
			}
		}
		if c.Flush == "sync" {
			for _, name := range []string{LimitDeviceSync, LimitFioSync} {
				if l := limit(name, 0); l != nil {
					f.Ratios = append(f.Ratios, ratioOf("device", c.Name, l.Name, "p50Ns", &c.Figures, &c.Min, &c.Max, &l.Figures, &l.Min, &l.Max,
						"store p50 ÷ one 4 KiB write+fdatasync p50: how many device syncs a durable append costs"))
				}
			}
		}
		for j := range f.Peers {
			p := &f.Peers[j]
			if p.Status != StatusOK || p.Workload != c.Workload || p.SizeBytes != c.SizeBytes || p.Flush != c.Flush || p.Target != c.Target {
				continue
			}
			if c.Workload == "throughput" {
				f.Ratios = append(f.Ratios, ratioOf("peer", c.Name, p.Name, "msgsPerSec", &c.Figures, &c.Min, &c.Max, &p.Figures, &p.Min, &p.Max, "higher: mqstore faster"))
				continue
			}
			note := fmt.Sprintf("lower: mqstore faster; both at --rate %.0f msgs/s", c.TargetRatePerSec)
			if f.Config.Rate == 0 {
				note = fmt.Sprintf("lower: mqstore faster; each at %.0f%% of its own throughput (%.0f vs %.0f msgs/s)",
					100*f.Config.RateFraction, c.TargetRatePerSec, p.TargetRatePerSec)
			}
			for _, fig := range []string{"p50Ns", "p99Ns", "p999Ns"} {
				f.Ratios = append(f.Ratios, ratioOf("peer", c.Name, p.Name, fig, &c.Figures, &c.Min, &c.Max, &p.Figures, &p.Min, &p.Max, note))
			}
		}
	}
}

// samePoint reports whether two cells differ only in pressure (or variant).
func samePoint(a, b *Cell) bool {
	return a.Workload == b.Workload && a.Backend == b.Backend && a.SizeBytes == b.SizeBytes && a.Flush == b.Flush &&
		a.Policy == b.Policy && a.Target == b.Target
}

// pressureRatios: each pressured cell ÷ its unpressured twin (latency
// p99.9 and p99 for open-loop and e2e cells, msgs/s for throughput cells).
func pressureRatios(f *RunFile) {
	for i := range f.Cells {
		c := &f.Cells[i]
		if c.Status != StatusOK || c.Pressure == PressureNone || c.Variant != "" {
			continue
		}
		for j := range f.Cells {
			b := &f.Cells[j]
			if b.Status != StatusOK || b.Pressure != PressureNone || !samePoint(c, b) {
				continue
			}
			figs, note := []string{"p999Ns", "p99Ns"}, "latency under pressure ÷ without; lower is better, ≤ 2 is the recommendation's bar"
			if c.Workload == "throughput" {
				figs, note = []string{"msgsPerSec"}, "throughput under pressure ÷ without"
			}
			for _, fig := range figs {
				f.Ratios = append(f.Ratios, ratioOf("pressure", c.Name, b.Name, fig, &c.Figures, &c.Min, &c.Max, &b.Figures, &b.Min, &b.Max, note))
			}
		}
	}
}

// sendfileRatios: each consume sendfile cell ÷ the copy cell of the same
// temperature, on the sending thread's CPU per GiB.
func sendfileRatios(f *RunFile) {
	for i := range f.Cells {
		c := &f.Cells[i]
		if c.Status != StatusOK || c.Workload != WorkloadConsume || !strings.HasSuffix(c.Variant, "-sendfile") {
			continue
		}
		copyVariant := strings.TrimSuffix(c.Variant, "-sendfile") + "-copy"
		for j := range f.Cells {
			b := &f.Cells[j]
			if b.Status == StatusOK && b.Variant == copyVariant && samePoint(c, b) && b.Pressure == c.Pressure {
				f.Ratios = append(f.Ratios, ratioOf("sendfile", c.Name, b.Name, "cpuSecPerGiB", &c.Figures, &c.Min, &c.Max, &b.Figures, &b.Min, &b.Max,
					"sending thread CPU per GiB, sendfile ÷ copy; lower: sendfile cheaper"))
				f.Ratios = append(f.Ratios, ratioOf("sendfile", c.Name, b.Name, "mbPerSec", &c.Figures, &c.Min, &c.Max, &b.Figures, &b.Min, &b.Max,
					"throughput, sendfile ÷ copy"))
			}
		}
	}
}

func ratioOf(kind, cell, against, fig string, med, lo, hi, refMed, refLo, refHi *Figures, note string) Ratio {
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	return Ratio{Kind: kind, Cell: cell, Against: against, Figure: fig, Note: note,
		Median: div(med.Figure(fig), refMed.Figure(fig)),
		Low:    div(lo.Figure(fig), refHi.Figure(fig)),
		High:   div(hi.Figure(fig), refLo.Figure(fig))}
}
