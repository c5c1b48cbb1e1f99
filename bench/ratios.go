package bench

import "fmt"

// ComputeRatios fills f.Ratios: each store cell against the copy ceiling of
// its size and the device probes, and each store cell against each peer's
// cell of the same workload, size and flush. Only ok cells and limits
// count; a ratio is the ratio of medians with the widest range the repeats
// allow.
func ComputeRatios(f *RunFile) {
	f.Ratios = []Ratio{}
	limit := func(name string, size int) *Limit {
		for i := range f.Limits {
			l := &f.Limits[i]
			if l.Name == name && l.Status == StatusOK && (size == 0 || l.SizeBytes == size) {
				return l
			}
		}
		return nil
	}
	for i := range f.Cells {
		c := &f.Cells[i]
		if c.Status != StatusOK {
			continue
		}
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
			if p.Status != StatusOK || p.Workload != c.Workload || p.SizeBytes != c.SizeBytes || p.Flush != c.Flush {
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
