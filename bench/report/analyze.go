package report

import (
	"fmt"
	"slices"
	"strconv"

	"sort"
	"strings"

	"github.com/mqstore/mqstore/bench/load"

	"github.com/mqstore/mqstore/bench/runfile"
)

// Analyze derives what run.json records about its own cells, from the
// cells, floors and limits alone (so `mqbench report` recomputes it the
// same way): which open-loop cells are generator-bound, the ratios, the
// A/A comparisons and the recommendations.
func Analyze(f *runfile.RunFile) {
	markGeneratorBound(f)
	f.Ratios = ratios(f)
	f.AA = aaComparisons(f)
	f.Recommendations = recommendations(f)
}

func isOpenLoop(c *runfile.Cell) bool { return c.Workload == "latency" || c.Workload == "e2e" }

// floorFor is the floor at a cell's rate, pressure and target.
func floorFor(f *runfile.RunFile, c *runfile.Cell) *runfile.Floor {
	for i := range f.Floors {
		fl := &f.Floors[i]
		if fl.RatePerSec == c.RatePerSec && fl.Pressure == c.Pressure && fl.Target == c.Target && fl.P999Ns > 0 {
			return fl
		}
	}
	return nil
}

// markGeneratorBound flags each measured open-loop cell whose p99.9 is
// below GeneratorBoundFactor × the floor's at its rate: its tail is the
// load generator's, not the system's.
func markGeneratorBound(f *runfile.RunFile) {
	for _, cells := range [][]runfile.Cell{f.Cells, f.Peers} {
		for i := range cells {
			c := &cells[i]
			c.GeneratorBound, c.FloorP999Ns = false, 0
			if !isOpenLoop(c) || !c.Measured() {
				continue
			}
			if fl := floorFor(f, c); fl != nil {
				c.FloorP999Ns = fl.P999Ns
				c.GeneratorBound = float64(c.P999Ns) < runfile.GeneratorBoundFactor*float64(fl.P999Ns)
			}
		}
	}
}

// allCells is every cell, mqstore's then the peers'.
func allCells(f *runfile.RunFile) []*runfile.Cell {
	var out []*runfile.Cell
	for _, cells := range [][]runfile.Cell{f.Cells, f.Peers} {
		for i := range cells {
			out = append(out, &cells[i])
		}
	}
	return out
}

// samePoint reports whether two cells differ only in pressure (and name).
func samePoint(a, b *runfile.Cell) bool {
	return a.Workload == b.Workload && a.Backend == b.Backend && a.Peer == b.Peer && a.SizeBytes == b.SizeBytes && a.Flush == b.Flush &&
		a.Policy == b.Policy && a.Target == b.Target && a.Producers == b.Producers && a.RatePerSec == b.RatePerSec && a.Variant == b.Variant &&
		a.Replication == b.Replication && a.HADelayNs == b.HADelayNs && a.TwinOf == "" && b.TwinOf == ""
}

// warmedSegments reports whether an mmap cell appended into pre-touched
// segments.
func warmedSegments(c *runfile.Cell) bool { return c.Options["WarmSegments"] == "true" }

func ratioOf(kind string, c *runfile.Cell, against, fig string, ref runfile.Interval, note string) runfile.Ratio {
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	iv := c.Interval(fig)
	return runfile.Ratio{Kind: kind, Cell: c.Name, Against: against, Figure: fig, Note: note,
		Median: div(iv.Median, ref.Median), Low: div(iv.Lo, ref.Hi), High: div(iv.Hi, ref.Lo)}
}

// ratios relates comparable cells (ok, not generator-bound) to the limits
// they are bounded by, to the peers and to themselves under pressure.
func ratios(f *runfile.RunFile) []runfile.Ratio {
	out := []runfile.Ratio{}
	limit := func(name string, size int, target string) *runfile.Limit {
		for i := range f.Limits {
			l := &f.Limits[i]
			if l.Name == name && l.Status == runfile.StatusOK && (size == 0 || l.SizeBytes == size) && l.Target == target {
				return l
			}
		}
		return nil
	}
	for i := range f.Cells {
		c := &f.Cells[i]
		if !c.Comparable() || c.Pressure != "none" || c.Policy != "" || c.TwinOf != "" || c.Replication != "" {
			continue // replicated cells have their own section
		}
		if c.Workload == "throughput" && c.Flush == "async" {
			// The append path's ceilings and the device's bandwidth bound
			// async cells; sync cells are bound by the device's flush
			// latency (below).
			if c.WrittenMBps > 0 {
				switch {
				case c.Backend == "mmap" && !warmedSegments(c):
					if l := limit(runfile.LimitFaults, 0, c.Target); l != nil {
						out = append(out, ratioOf("fault-ceiling", c, l.Name, "writtenMBps", l.Interval("mbPerSec"),
							"accepted record MB/s ÷ first-touch page faults' MB/s: appends into cold mmap pages"))
					}
				case c.Backend != "mem":
					if l := limit(runfile.LimitMemcpy, c.SizeBytes, c.Target); l != nil {
						out = append(out, ratioOf("memcpy-ceiling", c, l.Name, "writtenMBps", l.Interval("mbPerSec"),
							"accepted record MB/s ÷ one goroutine's memcpy into present pages"))
					}
				}
			}
			if c.DurableMBps > 0 {
				for _, name := range []string{runfile.LimitDeviceSeq, runfile.LimitFioSeq} {
					if l := limit(name, 0, c.Target); l != nil {
						out = append(out, ratioOf("device", c, l.Name, "durableMBps", l.Interval("mbPerSec"),
							"durable record MB/s ÷ sequential O_DIRECT MB/s"))
					}
				}
			}
		}
		if c.Workload == "throughput" && c.Flush == "sync" {
			if ref, against, ok := groupCommitLimit(f, c); ok {
				out = append(out, ratioOf("group-commit", c, against, "msgsPerSec", ref,
					fmt.Sprintf("acknowledged msgs/s ÷ the device's %d records of %d B as one write+fdatasync (msgs/s, the better of one and two in flight): how close the group commit comes to the device", c.Producers, c.RecordBytes)))
			}
		}
		if c.Workload == "latency" && c.Flush == "sync" {
			for _, name := range []string{runfile.LimitDeviceSync, runfile.LimitDeviceSyncPrewritten, runfile.LimitFioSync} {
				if l := limit(name, 0, c.Target); l != nil {
					out = append(out, ratioOf("device", c, l.Name, "p50Ns", l.Interval("p50Ns"),
						"open-loop p50 ÷ one 4 KiB write+fdatasync p50: how many device syncs a durable append costs"))
				}
			}
		}
		for _, p := range f.Peers {
			if !p.Comparable() || p.Workload != c.Workload || p.SizeBytes != c.SizeBytes || p.Flush != c.Flush || p.Target != c.Target ||
				p.Producers != c.Producers || p.RatePerSec != c.RatePerSec {
				continue
			}
			if c.Workload == "throughput" {
				note := "accepted msgs/s, same producers; higher: mqstore faster"
				if c.Message != "" && c.Message != "bare" {
					note += " (mqstore puts the " + c.Message + " message, the peer the body alone)"
				}
				if sustainedNo(c) || sustainedNo(&p) {
					note += " — but " + strings.Join(notSustained(c, &p), " and ") + " did not keep durable up with what it accepted"
				}
				out = append(out, ratioOf("peer", c, p.Name, "msgsPerSec", p.Interval("msgsPerSec"), note))
				if c.DurableMBps > 0 && p.DurableMBps > 0 {
					out = append(out, ratioOf("peer", c, p.Name, "durableMBps", p.Interval("durableMBps"),
						"durable MB/s of each one's own records (formats differ); higher: mqstore faster"))
				}
				continue
			}
			if c.Workload != "latency" {
				continue
			}
			for _, fig := range []string{"p50Ns", "p99Ns", "p999Ns"} {
				out = append(out, ratioOf("peer", c, p.Name, fig, p.Interval(fig), fmt.Sprintf("both at %.0f msgs/s; lower: mqstore faster", c.RatePerSec)))
			}
		}
	}
	for i := range f.Cells {
		c := &f.Cells[i]
		if !c.Comparable() || c.Pressure == "none" || c.Variant != "" {
			continue
		}
		for j := range f.Cells {
			b := &f.Cells[j]
			if !b.Comparable() || b.Pressure != "none" || !samePoint(c, b) {
				continue
			}
			figs, note := []string{"p999Ns", "p99Ns"}, "latency under pressure ÷ without, at the same rate; ≤ 2 is the recommendation's bar"
			if c.Workload == "throughput" {
				figs, note = []string{"msgsPerSec", "durableMBps"}, "throughput under pressure ÷ without"
			}
			for _, fig := range figs {
				out = append(out, ratioOf("pressure", c, b.Name, fig, b.Interval(fig), note))
			}
		}
	}
	for i := range f.Cells {
		c := &f.Cells[i]
		if c.Status != runfile.StatusOK || c.Workload != "consume" || !strings.HasSuffix(c.Variant, "-sendfile") {
			continue
		}
		copyVariant := strings.TrimSuffix(c.Variant, "-sendfile") + "-copy"
		for j := range f.Cells {
			b := &f.Cells[j]
			if b.Status == runfile.StatusOK && b.Workload == "consume" && b.Variant == copyVariant && b.Backend == c.Backend && b.SizeBytes == c.SizeBytes && b.Target == c.Target {
				out = append(out, ratioOf("sendfile", c, b.Name, "cpuSecPerGiB", b.Interval("cpuSecPerGiB"),
					"sending thread CPU per GiB, sendfile ÷ copy; lower: sendfile cheaper"))
				out = append(out, ratioOf("sendfile", c, b.Name, "mbPerSec", b.Interval("mbPerSec"), "throughput, sendfile ÷ copy"))
			}
		}
	}
	return out
}

// groupCommitLimit is the device's group-commit limit for a sync
// throughput cell: the better of the one- and two-in-flight limits'
// msgs/s at its producer count and record size, on its target. The
// interval of the better of two figures, each within its own interval, is
// [the higher low, the higher high].
func groupCommitLimit(f *runfile.RunFile, c *runfile.Cell) (runfile.Interval, string, bool) {
	var best runfile.Interval
	var from []string
	for i := range f.Limits {
		l := &f.Limits[i]
		if l.Name != runfile.LimitGroupCommit || l.Status != runfile.StatusOK || l.Target != c.Target || l.Producers != c.Producers ||
			l.SizeBytes != c.SizeBytes || l.RecordBytes != c.RecordBytes || c.RecordBytes == 0 {
			continue
		}
		iv := l.Interval("msgsPerSec")
		if iv.Median > best.Median {
			best.Median, best.Level = iv.Median, iv.Level
		}
		best.Lo, best.Hi = max(best.Lo, iv.Lo), max(best.Hi, iv.Hi)
		from = append(from, strconv.Itoa(l.InFlight))
	}
	if len(from) == 0 {
		return best, "", false
	}
	return best, fmt.Sprintf("%s ×%d (%s in flight)", runfile.LimitGroupCommit, c.Producers, strings.Join(from, " or ")), true
}

func sustainedNo(c *runfile.Cell) bool { return c.Sustained != nil && !*c.Sustained }

func notSustained(cs ...*runfile.Cell) []string {
	var out []string
	for _, c := range cs {
		if sustainedNo(c) {
			out = append(out, c.Backend)
		}
	}
	return out
}

// aaFigures are the figures the A/A check compares per workload.
var aaFigures = map[string][]string{
	"throughput": {"msgsPerSec", "durableMBps", "p99Ns"},
	"latency":    {"p50Ns", "p99Ns", "p999Ns"},
	"e2e":        {"p50Ns", "p99Ns", "p999Ns"},
}

// aaComparisons compares each A/A twin with the cell it repeats.
func aaComparisons(f *runfile.RunFile) []runfile.Comparison {
	out := []runfile.Comparison{}
	cells := allCells(f)
	for _, twin := range cells {
		if twin.TwinOf == "" {
			continue
		}
		for _, a := range cells {
			if a.Name != twin.TwinOf || !a.Measured() || !twin.Measured() {
				continue
			}
			for _, fig := range aaFigures[a.Workload] {
				if a.Figures.Figure(fig) == 0 && twin.Figures.Figure(fig) == 0 {
					continue
				}
				ai, bi := a.Interval(fig), twin.Interval(fig)
				out = append(out, runfile.Comparison{A: a.Name, B: twin.Name, Figure: fig, AInterval: ai, BInterval: bi, Different: runfile.Separated(ai, bi)})
			}
		}
	}
	return out
}

// candidate is one backend × flush policy for a recommendation.
type candidate struct {
	label    string
	thr      *runfile.Cell
	excluded string
	notes    []string
	// undetermined: its backlog's interval straddles the 10 % bar, so this
	// run cannot tell whether it sustains what it accepts.
	undetermined bool
}

// recommendations picks, per target and size and for async, sync and any
// durability, the backend and flush policy with the highest durable
// throughput among those that qualify: sustained (durable keeps up with
// accepted; one whose backlog interval straddles the 10 % bar is
// undetermined — kept, but never a pick on its own), not an async cell on an emulated device that does not
// throttle buffered writeback, not saturated under pressure at the rates it
// sustained without, and whose p99.9 under pressure is not above 2× its
// unpressured p99.9 at the run's confidence. A pick whose interval overlaps
// another's is reported as "no significant difference" between them.
func recommendations(f *runfile.RunFile) []runfile.Recommendation {
	out := []runfile.Recommendation{}
	type key struct {
		target string
		size   int
	}
	groups := map[key][]*candidate{}
	var order []key
	best := map[string]*candidate{}
	for i := range f.Cells {
		c := &f.Cells[i]
		if c.Workload != "throughput" || c.Pressure != "none" || c.TwinOf != "" || c.Backend == "mem" || c.Replication != "" {
			continue // a replicated configuration is compared in its own section, not picked here
		}
		label := c.Backend + " " + c.Flush
		if c.Policy != "" {
			label = c.Backend + " " + c.Policy
		}
		k := key{c.Target, c.SizeBytes}
		id := fmt.Sprintf("%s|%d|%s", c.Target, c.SizeBytes, label)
		cd := &candidate{label: label, thr: c}
		if prev, ok := best[id]; ok {
			// Several producer counts: the one with the most durable MB/s.
			if c.Measured() && (!prev.thr.Measured() || c.DurableMBps > prev.thr.DurableMBps) {
				*prev = *cd
			}
			continue
		}
		best[id] = cd
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], cd)
	}
	for _, k := range order {
		cands := groups[k]
		for _, cd := range cands {
			qualify(f, cd)
		}
		for _, durability := range []string{"async", "sync", "any"} {
			rec := runfile.Recommendation{Target: k.target, SizeBytes: k.size, Durability: durability, Figure: "durableMBps"}
			var ok []*candidate
			for _, cd := range cands {
				if durability != "any" && cd.thr.Flush != durability {
					continue
				}
				if cd.excluded != "" {
					rec.Excluded = append(rec.Excluded, cd.label+": "+cd.excluded)
					continue
				}
				ok = append(ok, cd)
			}
			if len(ok) == 0 && len(rec.Excluded) == 0 {
				continue
			}
			sort.SliceStable(ok, func(i, j int) bool { return ok[i].thr.DurableMBps > ok[j].thr.DurableMBps })
			if len(ok) == 0 {
				rec.Text = "nothing qualifies: " + strings.Join(rec.Excluded, "; ")
				out = append(out, rec)
				continue
			}
			top := ok[0]
			rec.Pick, rec.Cell, rec.Interval = top.label, top.thr.Name, top.thr.Interval("durableMBps")
			describe := func(cd *candidate) string {
				iv := cd.thr.Interval("durableMBps")
				if cd.undetermined {
					return fmt.Sprintf("%s (%s; whether it sustains is undetermined)", cd.label, ci(iv, fmtFloat))
				}
				return fmt.Sprintf("%s (%s)", cd.label, ci(iv, fmtFloat))
			}
			var tiedText, nextText []string
			var fallback *candidate // the best that clearly sustains, when the top's sustaining is undetermined
			for _, cd := range ok[1:] {
				switch {
				case !runfile.Separated(rec.Interval, cd.thr.Interval("durableMBps")):
					rec.Tied = append(rec.Tied, cd.label)
					tiedText = append(tiedText, describe(cd))
				case len(nextText) == 0:
					nextText = append(nextText, describe(cd))
				}
				if top.undetermined && fallback == nil && !cd.undetermined {
					fallback = cd
				}
			}
			head := fmt.Sprintf("%s: %s durable MB/s (%s) at %d producers", top.label, ci(rec.Interval, fmtFloat),
				ciWords(top.thr.CILevel), top.thr.Producers)
			if top.undetermined {
				head += fmt.Sprintf(", whether it sustains is undetermined (backlog %s of what it wrote)",
					ci(top.thr.Interval("backlogShare"), fmtPct))
			}
			switch {
			case len(tiedText) > 0:
				rec.Text = fmt.Sprintf("no significant difference between %s and %s", head, strings.Join(tiedText, ", "))
			case top.undetermined:
				rec.Text = head
			case len(nextText) > 0:
				rec.Text = head + ", significantly above the next, " + nextText[0]
			default:
				rec.Text = head + " (the only one that qualifies)"
			}
			// A pick whose sustaining is undetermined does not stand alone:
			// the best that clearly sustains is named beside it.
			if top.undetermined {
				if fallback != nil {
					if !slices.Contains(rec.Tied, fallback.label) {
						rec.Tied = append(rec.Tied, fallback.label)
					}
					rec.Text += "; of those that clearly sustain, the best is " + describe(fallback)
				} else {
					rec.Text += "; none of the others clearly sustains"
				}
			}
			if len(top.notes) > 0 {
				rec.Text += "; " + strings.Join(top.notes, "; ")
			}
			out = append(out, rec)
		}
	}
	return out
}

// ciWords says what the interval after a median is.
func ciWords(level float64) string {
	if level == 0 {
		return "one measured repeat: no interval, nothing can be called different"
	}
	return fmt.Sprintf("median [%.0f%% CI]", 100*level)
}

// qualify sets why a candidate is excluded (empty: it qualifies) and notes
// what its pressure check found.
func qualify(f *runfile.RunFile, cd *candidate) {
	c := cd.thr
	switch {
	case !c.Measured():
		cd.excluded = fmt.Sprintf("its throughput cell %s", c.Status)
		return
	case c.Sustained == nil:
		cd.excluded = "reports no durability"
		return
	case c.CILow.BacklogShare > load.SustainedBacklogShare:
		cd.excluded = fmt.Sprintf("not sustained: %s backlog at the window's end, %s [%s–%s] of what it wrote (durable %s of %s MB/s accepted)",
			fmtBytes(c.BacklogBytes), fmtPct(c.BacklogShare), fmtPct(c.CILow.BacklogShare), fmtPct(c.CIHigh.BacklogShare),
			fmtFloat(c.DurableMBps), fmtFloat(c.WrittenMBps))
		return
	case c.CIHigh.BacklogShare > load.SustainedBacklogShare || c.CILevel == 0:
		cd.undetermined = true
	}
	for _, d := range f.Devices {
		if d.Label == c.Target && d.Emulated && !d.BufferedWritebackThrottled && c.Flush == "async" {
			cd.excluded = "async on an emulated device whose throttle does not reach the kernel's writeback"
			return
		}
	}
	// The pressure check, at every rate the latency cells share.
	for i := range f.Cells {
		base := &f.Cells[i]
		if base.Workload != "latency" || base.Pressure != "none" || base.Backend != c.Backend || base.Flush != c.Flush ||
			base.Policy != c.Policy || base.SizeBytes != c.SizeBytes || base.Target != c.Target || base.TwinOf != "" || base.Status != runfile.StatusOK ||
			base.Replication != "" {
			continue
		}
		for j := range f.Cells {
			p := &f.Cells[j]
			if p.Pressure == "none" || !samePoint(base, p) {
				continue
			}
			switch {
			case p.Status == runfile.StatusSaturated:
				cd.excluded = fmt.Sprintf("saturated under %s pressure at %.0f msgs/s, a rate it sustained without", p.Pressure, p.RatePerSec)
				return
			case !p.Measured():
				cd.notes = append(cd.notes, fmt.Sprintf("%s pressure at %.0f/s: %s", p.Pressure, p.RatePerSec, p.Status))
			case base.GeneratorBound:
				cd.notes = append(cd.notes, fmt.Sprintf("%s pressure at %.0f/s: p99.9 %s, not comparable with the unpressured tail (generator-bound)",
					p.Pressure, p.RatePerSec, fmtNs(p.P999Ns)))
			default:
				r := ratioOf("pressure", p, base.Name, "p999Ns", base.Interval("p999Ns"), "")
				if r.Low > 2 {
					cd.excluded = fmt.Sprintf("p99.9 under %s pressure at %.0f/s is %s× its unpressured p99.9 (above 2× at the run's confidence)",
						p.Pressure, p.RatePerSec, withRange(r.Median, r.Low, r.High, fmtFloat))
					return
				}
				cd.notes = append(cd.notes, fmt.Sprintf("%s pressure at %.0f/s: p99.9 %s× unpressured", p.Pressure, p.RatePerSec,
					withRange(r.Median, r.Low, r.High, fmtFloat)))
			}
		}
	}
}
