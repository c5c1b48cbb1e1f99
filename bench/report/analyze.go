package report

import (
	"fmt"
	"iter"
	"slices"
	"sort"
	"strings"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/mappedfile"
)

// Analyze derives what run.json records about its own cells, from the
// cells, floors and limits alone (so `mqbench report` recomputes it the
// same way): the merged tails, which open-loop cells are generator-bound,
// the ratios, the A/A comparisons and the recommendations.
func Analyze(f *runfile.RunFile) {
	for _, c := range allCells(f) {
		c.SetTails()
	}
	for i := range f.Floors {
		f.Floors[i].SetTail()
	}
	markGeneratorBound(f)
	f.Ratios = ratios(f)
	f.AA = aaComparisons(f)
	f.Recommendations = recommendations(f)
}

// floorFor is the floor at a cell's rate, pressure and target, measured
// in the process that drove the cell.
func floorFor(f *runfile.RunFile, c *runfile.Cell) *runfile.Floor {
	for fl := range ptrs(f.Floors) {
		if fl.RatePerSec == c.RatePerSec && fl.Pressure == c.Pressure && fl.Target == c.Target && floorP999(fl) > 0 &&
			orDefault(fl.Process, runfile.FloorMQBench) == runfile.FloorProcess(c) {
			return fl
		}
	}
	return nil
}

// floorP999 is a floor's p99.9: its merged tail's, else the median of its
// repeats'.
func floorP999(fl *runfile.Floor) int64 { return tailNs(fl.Tail, "p999Ns", fl.P999Ns) }

// tailNs is a cell's percentile from its merged tail (the median of its
// repeats' when it has none).
func tailNs(t *runfile.Tail, name string, median int64) int64 {
	if p := t.Point(name); p != nil {
		return p.ValueNs
	}
	return median
}

// markGeneratorBound flags each measured open-loop cell whose tail is the
// load generator's, by the rule runfile.Cell.GeneratorBound states.
func markGeneratorBound(f *runfile.RunFile) {
	for _, c := range allCells(f) {
		c.GeneratorBound, c.FloorP999Ns = false, 0
		if (c.Workload != "latency" && c.Workload != "e2e") || !c.Measured() {
			continue
		}
		if fl := floorFor(f, c); fl != nil {
			floor := floorP999(fl)
			c.FloorP999Ns = floor
			lat, svc := tailNs(c.Tail, "p999Ns", c.P999Ns), tailNs(c.ServiceTail, "p999Ns", c.ServiceP999Ns)
			c.GeneratorBound = float64(lat) < runfile.GeneratorBoundFactor*float64(floor) && svc <= floor
		}
	}
}

func ptrs[T any](s []T) iter.Seq[*T] {
	return func(yield func(*T) bool) {
		for i := range s {
			if !yield(&s[i]) {
				return
			}
		}
	}
}

func appendNew[T comparable](s []T, v T) []T {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// firstByKey keeps the first of xs for each key, in order.
func firstByKey[T any, K comparable](xs []T, key func(T) K) []T {
	seen := map[K]bool{}
	return slices.DeleteFunc(slices.Clone(xs), func(x T) bool {
		k := key(x)
		dup := seen[k]
		seen[k] = true
		return dup
	})
}

// distinct is xs without repeats, in order.
func distinct[T comparable](xs []T) []T { return firstByKey(xs, func(x T) T { return x }) }

// allCells is every cell, mqstore's then the peers'.
func allCells(f *runfile.RunFile) []*runfile.Cell {
	return slices.AppendSeq(slices.Collect(ptrs(f.Cells)), ptrs(f.Peers))
}

// samePoint reports whether two cells differ only in pressure (and name).
func samePoint(a, b *runfile.Cell) bool {
	return a.Workload == b.Workload && a.Backend == b.Backend && a.Peer == b.Peer && a.SizeBytes == b.SizeBytes && a.Flush == b.Flush &&
		a.Policy == b.Policy && a.Target == b.Target && a.Producers == b.Producers && a.RatePerSec == b.RatePerSec && a.Variant == b.Variant &&
		a.Replication == b.Replication && a.HADelayNs == b.HADelayNs && a.TwinOf == "" && b.TwinOf == ""
}

// volatile: the backend keeps its files in memory only (mem).
func volatile(backend string) bool {
	reg, err := mappedfile.Registered().Lookup(backend)
	return err == nil && reg.Volatile
}

// ratioOf is c's figure ÷ ref, with the widest ratio the intervals allow.
func ratioOf(kind string, c *runfile.Cell, against, fig string, ref runfile.Interval, note string) runfile.Ratio {
	return ratioIv(kind, c.Name, against, fig, c.Interval(fig), ref, note)
}

// ratioIv is iv ÷ ref: the ratio of the medians and the widest the
// intervals allow. A denominator that is zero or missing gives no ratio
// (never 0×, Inf or NaN): Missing says why.
func ratioIv(kind, cell, against, fig string, iv, ref runfile.Interval, note string) runfile.Ratio {
	r := runfile.Ratio{Kind: kind, Cell: cell, Against: against, Figure: fig, Note: note}
	switch {
	case !(ref.Median > 0):
		r.Missing = fmt.Sprintf("no ratio: %s's %s is 0", against, fig)
	case !(ref.Lo > 0):
		r.Missing = fmt.Sprintf("no ratio: %s's %s interval reaches 0", against, fig)
	default:
		r.Median, r.Low, r.High = iv.Median/ref.Median, iv.Lo/ref.Hi, iv.Hi/ref.Lo
	}
	return r
}

// ratios relates comparable cells (ok, not generator-bound) to the limits
// they are bounded by, to the peers and to themselves under pressure.
func ratios(f *runfile.RunFile) []runfile.Ratio {
	out := []runfile.Ratio{}
	for c := range ptrs(f.Cells) {
		if !c.Comparable() || c.Pressure != "none" || c.Policy != "" || c.TwinOf != "" || c.Replication != "" {
			continue // replicated cells have their own section
		}
		out = append(out, limitRatios(f, c)...)
		out = append(out, peerRatios(f, c)...)
	}
	out = append(out, pressureRatios(f)...)
	return append(out, sendfileRatios(f)...)
}

func peerRatios(f *runfile.RunFile, c *runfile.Cell) []runfile.Ratio {
	var out []runfile.Ratio
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
			civ, cs := ruleFigure(c, fig)
			piv, ps := ruleFigure(&p, fig)
			if cs != exact || ps != exact {
				continue // a bound on either side: no ratio to state
			}
			out = append(out, ratioIv("peer", c.Name, p.Name, fig, civ, piv, fmt.Sprintf("merged tails, both at %.0f msgs/s; lower: mqstore faster", c.RatePerSec)))
		}
	}
	return out
}

func pressureRatios(f *runfile.RunFile) []runfile.Ratio {
	var out []runfile.Ratio
	for c := range ptrs(f.Cells) {
		if !c.Measured() || c.Pressure == "none" || c.Variant != "" {
			continue
		}
		for b := range ptrs(f.Cells) {
			if !b.Measured() || b.Pressure != "none" || !samePoint(c, b) {
				continue
			}
			switch {
			case c.Workload == "throughput" && c.Comparable() && b.Comparable():
				for _, fig := range []string{"msgsPerSec", "durableMBps"} {
					out = append(out, ratioOf("pressure", c, b.Name, fig, b.Interval(fig), "throughput under pressure ÷ without"))
				}
			case c.Workload == "latency":
				// The gate's own comparison: merged tails, bounds respected.
				verdict, r, _ := gate(c, b)
				r.Note = fmt.Sprintf("merged tail under pressure ÷ without, at the same rate; gate (≤ %d×): %s", PressureBar, verdict)
				if verdict == "undetermined" {
					r.Note += " — " + whyBound(b, c)
				}
				out = append(out, r)
			}
		}
	}
	return out
}

// sendfileRatios relate each consume cell that sends with sendfile to its
// copying twin.
func sendfileRatios(f *runfile.RunFile) []runfile.Ratio {
	var out []runfile.Ratio
	for c := range ptrs(f.Cells) {
		if c.Status != runfile.StatusOK || c.Workload != "consume" || !strings.HasSuffix(c.Variant, "-sendfile") {
			continue
		}
		copyVariant := strings.TrimSuffix(c.Variant, "-sendfile") + "-copy"
		for b := range ptrs(f.Cells) {
			if b.Status == runfile.StatusOK && b.Workload == "consume" && b.Variant == copyVariant && b.Backend == c.Backend && b.SizeBytes == c.SizeBytes && b.Target == c.Target {
				out = append(out, ratioOf("sendfile", c, b.Name, "cpuSecPerGiB", b.Interval("cpuSecPerGiB"),
					"sending thread CPU per GiB, sendfile ÷ copy; lower: sendfile cheaper"))
				out = append(out, ratioOf("sendfile", c, b.Name, "mbPerSec", b.Interval("mbPerSec"), "throughput, sendfile ÷ copy"))
			}
		}
	}
	return out
}

func sustainedNo(c *runfile.Cell) bool { return c.Sustained != nil && !*c.Sustained }

func notSustained(cs ...*runfile.Cell) []string {
	cs = slices.DeleteFunc(cs, func(c *runfile.Cell) bool { return !sustainedNo(c) })
	return mapped(cs, func(c *runfile.Cell) string { return c.Backend })
}

// candidate is one backend × flush policy for a recommendation, at the
// producer count chosen for it (choosePolicyCell).
type candidate struct {
	label    string
	thr      *runfile.Cell
	excluded string
	notes    []string
	// undetermined says what this run cannot decide about the candidate
	// (its backlog's interval straddles the 10 % bar; a pressure gate that
	// has no figure to decide on): kept, but never a pick on its own —
	// neither by durable MB/s nor by CPU per GiB.
	undetermined []string
	// pressureOnly: excluded by the pressure gate alone (a tail above the
	// bar, or saturated under pressure at a rate it sustained without). When every
	// candidate of a class is, the gate does not tell them apart, and they
	// are ranked without it (said so).
	pressureOnly bool
	// notFastest says, when thr is not the policy's producer count with
	// the most durable MB/s, what each faster count was and why it was not
	// taken ("" when thr is the fastest).
	notFastest string
}

const sustainUndetermined = "whether it sustains is undetermined"

// recommendations picks, per target and size and for async, sync and any
// durability, the backend and flush policy with the highest durable
// throughput among those that qualify (see qualify). Each policy's cell at
// every producer count is qualified, and the policy stands for the best
// one that qualifies (choosePolicyCell). A pick is named only when its
// interval separates from every other qualifying candidate's and nothing
// about it is undetermined; otherwise the contenders are listed as tied
// ("no significant difference") with no pick. For "any" (an
// acknowledgement may mean in memory), an async candidate that does not
// separate above a qualifying sync one is dominated: the sync one gives a
// durable acknowledgement at no measurable cost.
func recommendations(f *runfile.RunFile) []runfile.Recommendation {
	out := []runfile.Recommendation{}
	type key struct {
		target string
		size   int
	}
	type policy struct {
		k     key
		label string
		cells []*runfile.Cell
	}
	var policies []*policy
	byID := map[string]*policy{}
	for c := range ptrs(f.Cells) {
		if c.Workload != "throughput" || c.Pressure != "none" || c.TwinOf != "" || volatile(c.Backend) || c.Replication != "" {
			continue // a replicated configuration is compared in its own section, not picked here
		}
		label := c.Backend + " " + orDefault(c.Policy, c.Flush)
		id := fmt.Sprintf("%s|%d|%s", c.Target, c.SizeBytes, label)
		p := byID[id]
		if p == nil {
			p = &policy{k: key{c.Target, c.SizeBytes}, label: label}
			byID[id] = p
			policies = append(policies, p)
		}
		p.cells = append(p.cells, c)
	}
	groups := map[key][]*candidate{}
	var order []key
	for _, p := range policies {
		if _, ok := groups[p.k]; !ok {
			order = append(order, p.k)
		}
		groups[p.k] = append(groups[p.k], choosePolicyCell(f, p.label, p.cells))
	}
	for _, k := range order {
		for _, durability := range []string{"async", "sync", "any"} {
			if rec, ok := recommend(k.target, k.size, durability, groups[k]); ok {
				out = append(out, rec)
			}
		}
	}
	return out
}

// choosePolicyCell qualifies a policy's throughput cell at every producer
// count and returns the candidate it stands for: the cell with the most
// durable MB/s among those that qualify fully determined, else among those
// that qualify with something undetermined, else among those the pressure
// gate alone excluded (ranked without the gate when every policy of a
// class is), else the fastest measured one, excluded. An excluded policy
// says why at each producer count; a policy taken at a count that is not
// its fastest says what each faster count gave and why it was not taken.
func choosePolicyCell(f *runfile.RunFile, label string, cells []*runfile.Cell) *candidate {
	cands := mapped(cells, func(c *runfile.Cell) *candidate {
		cd := &candidate{label: label, thr: c}
		qualify(f, cd)
		return cd
	})
	rank := func(cd *candidate) int {
		switch {
		case cd.excluded == "" && len(cd.undetermined) == 0:
			return 0
		case cd.excluded == "":
			return 1
		case cd.pressureOnly:
			return 2
		}
		return 3
	}
	faster := func(a, b *candidate) bool { // a has more durable MB/s than b (a measured cell before one that is not)
		if a.thr.Measured() != b.thr.Measured() {
			return a.thr.Measured()
		}
		return a.thr.DurableMBps > b.thr.DurableMBps
	}
	best := cands[0]
	for _, cd := range cands[1:] {
		if rank(cd) < rank(best) || rank(cd) == rank(best) && faster(cd, best) {
			best = cd
		}
	}
	var why []string
	for _, cd := range cands {
		if cd == best || !cd.thr.Measured() || !faster(cd, best) || rank(best) == 3 {
			continue
		}
		reason := cd.excluded
		if reason == "" {
			reason = strings.Join(cd.undetermined, ", ")
		}
		why = append(why, fmt.Sprintf("%d producers: %s durable MB/s, %s", cd.thr.Producers, ci(durableIv(cd), fmtFloat), reason))
	}
	if len(why) > 0 {
		best.notFastest = "not its fastest producer count — " + strings.Join(why, "; ")
	}
	if best.excluded != "" && len(cands) > 1 {
		// Excluded at every producer count: why, at each.
		var reasons []string
		counts := map[string][]string{}
		for _, cd := range cands {
			if _, ok := counts[cd.excluded]; !ok {
				reasons = append(reasons, cd.excluded)
			}
			counts[cd.excluded] = append(counts[cd.excluded], fmt.Sprint(cd.thr.Producers))
		}
		best.excluded = join(reasons, func(r string) string {
			return fmt.Sprintf("at %s producers: %s", strings.Join(counts[r], ", "), r)
		}, "; ")
	}
	return best
}

func durableIv(cd *candidate) runfile.Interval { return cd.thr.Interval("durableMBps") }

// recommend is one recommendation of a durability class.
//
// When every candidate of the class is excluded by the pressure gate alone
// (on a shared device, every sync policy's tail grows under a neighbour's
// writeback), the gate does not separate them: they are ranked without it,
// and the text says so and keeps each one's exclusion. When the top ties
// with others on durable MB/s, a tied candidate whose CPU per GiB is
// significantly below every other tied one's is the pick (as fast, and
// cheaper) — only when nothing about any tied candidate is undetermined
// and all of them ran at one producer count (cheapestOf); otherwise there
// is no single pick.
func recommend(target string, size int, durability string, cands []*candidate) (runfile.Recommendation, bool) {
	rec := runfile.Recommendation{Target: target, SizeBytes: size, Durability: durability, Figure: "durableMBps"}
	var ok, gated []*candidate
	for _, cd := range cands {
		if durability != "any" && cd.thr.Flush != durability {
			continue
		}
		if cd.excluded != "" {
			rec.Excluded = append(rec.Excluded, cd.label+": "+cd.excluded)
			if cd.pressureOnly {
				gated = append(gated, cd)
			}
			continue
		}
		ok = append(ok, cd)
	}
	if len(ok) == 0 && len(rec.Excluded) == 0 {
		return rec, false
	}
	ungated := false
	if len(ok) == 0 && len(gated) > 0 {
		ok, ungated = gated, true
	}
	var dominated []string
	if durability == "any" {
		ok, dominated = setAsideDominated(ok)
	}
	sort.SliceStable(ok, func(i, j int) bool { return ok[i].thr.DurableMBps > ok[j].thr.DurableMBps })
	if len(ok) == 0 {
		rec.Text = "nothing qualifies: " + strings.Join(rec.Excluded, "; ")
		return rec, true
	}
	top := ok[0]
	rec.Cell, rec.Interval = top.thr.Name, durableIv(top)
	var tied []*candidate
	var next, fallback *candidate // fallback: the best that is fully determined, when the top is not
	for _, cd := range ok[1:] {
		switch {
		case !runfile.Separated(rec.Interval, durableIv(cd)):
			tied = append(tied, cd)
		case next == nil:
			next = cd
		}
		if len(top.undetermined) > 0 && fallback == nil && len(cd.undetermined) == 0 {
			fallback = cd
		}
	}
	picked := top
	group := append([]*candidate{top}, tied...)
	cheap, notAPick := cheapestOf(group)
	if cheap != nil && notAPick == "" {
		picked = cheap
		writeCheaper(&rec, picked, group)
	} else {
		writeRecommendation(&rec, top, tied, next, fallback)
		if cheap != nil {
			rec.Text += fmt.Sprintf("; %s has significantly less CPU per GiB than the others tied with it, but that makes no pick: %s", cheap.label, notAPick)
		}
	}
	if len(picked.notes) > 0 {
		rec.Text += "; " + strings.Join(picked.notes, "; ")
	}
	if len(dominated) > 0 {
		rec.Text += "; set aside: " + strings.Join(dominated, ", ")
	}
	if ungated {
		class := orDefault(map[string]string{"any": "qualifying"}[durability], durability)
		who := fmt.Sprintf("every %s policy's tail under pressure is", class)
		if len(gated) < len(rec.Excluded) {
			who = fmt.Sprintf("the tail under pressure of every %s policy that no other rule excludes is", class)
		}
		rec.Text = fmt.Sprintf("%s above %d× its own or saturated (each exclusion below), so that gate does not tell them apart: ranked without it — %s",
			who, PressureBar, rec.Text)
	}
	return rec, true
}

// cheapestOf is the candidate of group whose CPU per GiB is significantly
// below every other's, nil when none is (or the group has one member, or
// a member has no CPU figure). notAPick says why that candidate may not
// be picked on CPU ("" when it may): a member of the group is undetermined
// (the rule never picks from a group it cannot fully judge), or the
// members ran at different producer counts (CPU per GiB is compared only
// between cells at equal producer counts).
func cheapestOf(group []*candidate) (cheapest *candidate, notAPick string) {
	if len(group) < 2 {
		return nil, ""
	}
	best := group[0]
	for _, cd := range group {
		if cd.thr.CPUSecPerGiB <= 0 {
			return nil, ""
		}
		if cd.thr.CPUSecPerGiB < best.thr.CPUSecPerGiB {
			best = cd
		}
	}
	bi := best.thr.Interval("cpuSecPerGiB")
	for _, cd := range group {
		if cd != best && !(runfile.Separated(bi, cd.thr.Interval("cpuSecPerGiB")) && bi.Hi < cd.thr.Interval("cpuSecPerGiB").Lo) {
			return nil, ""
		}
	}
	var why []string
	if u := slices.DeleteFunc(slices.Clone(group), func(cd *candidate) bool { return len(cd.undetermined) == 0 }); len(u) > 0 {
		why = append(why, "something about "+join(u, func(cd *candidate) string { return cd.label }, ", ")+" is undetermined (said above), and a tie with an undetermined member gives no pick")
	}
	if slices.ContainsFunc(group, func(cd *candidate) bool { return cd.thr.Producers != best.thr.Producers }) {
		why = append(why, "they ran at different producer counts ("+join(group, func(cd *candidate) string {
			return fmt.Sprintf("%s at %d", cd.label, cd.thr.Producers)
		}, ", ")+"), and CPU per GiB is compared only at equal producer counts")
	}
	return best, strings.Join(why, "; and ")
}

// writeCheaper sets rec to the pick made on CPU among candidates tied on
// durable MB/s.
func writeCheaper(rec *runfile.Recommendation, pick *candidate, group []*candidate) {
	rec.Pick, rec.Cell, rec.Interval = pick.label, pick.thr.Name, durableIv(pick)
	var others, cpus []string
	for _, cd := range group {
		if cd == pick {
			continue
		}
		others = append(others, describe(cd))
		cpus = append(cpus, fmt.Sprintf("%s %s", cd.label, ci(cd.thr.Interval("cpuSecPerGiB"), fmtFloat)))
	}
	rec.Text = fmt.Sprintf("%s: %s durable MB/s (%s) at %d producers%s, no significant difference from %s, and significantly less CPU: %s s/GiB against %s",
		pick.label, ci(rec.Interval, fmtFloat), ciWords(pick.thr.CILevel), pick.thr.Producers, parenthesized(pick.notFastest), strings.Join(others, ", "),
		ci(pick.thr.Interval("cpuSecPerGiB"), fmtFloat), strings.Join(cpus, ", "))
}

// setAsideDominated drops, for "any", each async policy no faster than a
// sync one (the sync one acknowledges only what is durable at no
// measurable cost), saying so.
func setAsideDominated(ok []*candidate) (kept []*candidate, dominated []string) {
	for _, cd := range ok {
		by := slices.IndexFunc(ok, func(s *candidate) bool {
			return cd.thr.Flush == "async" && s.thr.Flush == "sync" && !(runfile.Separated(durableIv(cd), durableIv(s)) && cd.thr.DurableMBps > s.thr.DurableMBps)
		})
		if by < 0 {
			kept = append(kept, cd)
			continue
		}
		dominated = append(dominated, fmt.Sprintf("%s (no faster than %s, which acknowledges only what is durable)", cd.label, ok[by].label))
	}
	return kept, dominated
}

// describe is a candidate with its durable MB/s interval (and, when it is
// not its policy's fastest producer count, which count it is and why; and
// what is undetermined about it).
func describe(cd *candidate) string {
	parts := []string{ci(durableIv(cd), fmtFloat)}
	if cd.notFastest != "" {
		parts = append(parts, fmt.Sprintf("at %d producers, %s", cd.thr.Producers, cd.notFastest))
	}
	parts = append(parts, cd.undetermined...)
	return fmt.Sprintf("%s (%s)", cd.label, strings.Join(parts, "; "))
}

// parenthesized is " (s)", or "" for an empty s.
func parenthesized(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// writeRecommendation sets rec's pick, ties and text from the ranked
// candidates: the top, those tied with it, the next separated one and the
// best fully determined one (when the top is not).
func writeRecommendation(rec *runfile.Recommendation, top *candidate, tied []*candidate, next, fallback *candidate) {
	head := fmt.Sprintf("%s: %s durable MB/s (%s) at %d producers%s", top.label, ci(rec.Interval, fmtFloat), ciWords(top.thr.CILevel), top.thr.Producers,
		parenthesized(top.notFastest))
	for _, u := range top.undetermined {
		if u == sustainUndetermined {
			head += fmt.Sprintf(", %s (backlog %s of what it wrote)", u, ci(top.thr.Interval("backlogShare"), fmtPct))
		} else {
			head += ", " + u
		}
	}
	switch {
	case len(tied) > 0:
		rec.Tied = append(append(rec.Tied, top.label), mapped(tied, func(cd *candidate) string { return cd.label })...)
		rec.Text = fmt.Sprintf("no significant difference between %s and %s — longer windows or more repeats would separate them", head, join(tied, describe, ", "))
	case len(top.undetermined) > 0:
		rec.Text = head
	case next != nil:
		rec.Pick = top.label
		rec.Text = head + ", significantly above the next, " + describe(next)
	default:
		rec.Pick = top.label
		rec.Text = head + " (the only one that qualifies)"
	}
	// A top that is undetermined does not stand alone: the best that is
	// fully determined is named beside it.
	if len(top.undetermined) > 0 {
		rec.Tied = appendNew(rec.Tied, top.label)
		if fallback != nil {
			rec.Tied = appendNew(rec.Tied, fallback.label)
			rec.Text += "; of those fully determined, the best is " + describe(fallback)
		} else {
			rec.Text += "; none of the others is fully determined"
		}
	}
}

func ciWords(level float64) string {
	if level == 0 {
		return "one measured repeat: no interval, nothing can be called different"
	}
	return fmt.Sprintf("median [%.0f%% CI]", 100*level)
}

// side says which way a latency figure may be wrong about the store.
type side int

const (
	exact side = iota
	// atMost: generator-bound — the store's own tail is at most this.
	atMost
	// atLeast: saturated, or too few samples above the percentile.
	atLeast
	// unknown: both, or no tail at all.
	unknown
)

func combine(a, b side) side {
	switch {
	case a == exact:
		return b
	case b == exact || a == b:
		return a
	}
	return unknown
}

// ruleFigure is a cell's percentile as a rule may use it: the merged
// tail's value and interval, and which way it may be wrong.
func ruleFigure(c *runfile.Cell, name string) (runfile.Interval, side) {
	p := c.Tail.Point(name)
	if p == nil {
		return c.Interval(name), unknown
	}
	s := exact
	if c.GeneratorBound {
		s = combine(s, atMost)
	}
	if c.Status == runfile.StatusSaturated || p.Bound {
		s = combine(s, atLeast)
	}
	return p.Interval(), s
}

// gateFigure is the highest percentile of p99.9 and p99 that both cells'
// tails have enough samples above (p99.9 when neither does).
func gateFigure(p, base *runfile.Cell) string {
	for _, name := range []string{"p999Ns", "p99Ns"} {
		if a, b := p.Tail.Point(name), base.Tail.Point(name); a != nil && b != nil && !a.Bound && !b.Bound {
			return name
		}
	}
	return "p999Ns"
}

// PressureBar: a cell whose tail under pressure is above this multiple
// of its unpressured tail, at the run's confidence, is excluded.
const PressureBar = 2

// gate is the pressure rule for one pressured cell against its
// unpressured twin: "exclude" (the ratio's interval above PressureBar),
// "pass" (at or below it) or "undetermined" (straddling it, or bounds that
// allow neither), with the ratio and the figure it compared. A generator-bound unpressured tail bounds
// the store's from above, so the ratio it gives is a lower bound of the
// store's: it can exclude, never pass. A saturated cell's, or one with too
// few samples above its percentile, bounds from below. The gate decides
// only what the bounds allow and says undetermined otherwise.
func gate(p, base *runfile.Cell) (verdict string, r runfile.Ratio, figure string) {
	figure = gateFigure(p, base)
	piv, ps := ruleFigure(p, figure)
	biv, bs := ruleFigure(base, figure)
	r = ratioIv("pressure", p.Name, base.Name, figure, piv, biv, "")
	if r.Missing != "" {
		return "undetermined", r, figure
	}
	ratioAtLeast := (ps == exact || ps == atLeast) && (bs == exact || bs == atMost)
	ratioAtMost := (ps == exact || ps == atMost) && (bs == exact || bs == atLeast)
	// Above the bar at the run's confidence excludes; at or below it at
	// that confidence passes; an interval that straddles it decides
	// nothing (its median may be on either side).
	switch {
	case ratioAtLeast && r.Low > PressureBar:
		return "exclude", r, figure
	case ratioAtMost && r.High <= PressureBar:
		return "pass", r, figure
	}
	return "undetermined", r, figure
}

func figureName(name string) string {
	return map[string]string{"p50Ns": "p50", "p90Ns": "p90", "p99Ns": "p99", "p999Ns": "p99.9", "p9999Ns": "p99.99", "maxNs": "max"}[name]
}

// qualify sets why a candidate is excluded (empty: it qualifies), what
// this run cannot decide about it, and notes what its pressure check
// found; each case below says what it excludes.
func qualify(f *runfile.RunFile, cd *candidate) {
	c := cd.thr
	switch {
	case !c.Measured():
		cd.excluded = fmt.Sprintf("its throughput cell %s", c.Status)
		return
	case shortOfRepeats(f, c):
		// A cell cut short (a run file from before the harness marked such
		// cells interrupted): its interval is not the run's.
		cd.excluded = fmt.Sprintf("its throughput cell has %d of the %d measured repeats the run asked for", len(c.MeasuredRepeats()), f.Config.Repeat)
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
		cd.undetermined = append(cd.undetermined, sustainUndetermined)
	}
	for _, d := range f.Devices {
		switch {
		case d.Label != c.Target || !d.Emulated:
		case !d.ModelsSeeks:
			cd.excluded = "on an emulated device that models no seek or rotation (a bandwidth and IOPS limit): its figures do not stand for a rotating disk"
			return
		case !d.BufferedWritebackThrottled && c.Flush == "async":
			cd.excluded = "async on an emulated device whose throttle does not reach the kernel's writeback"
			return
		}
	}
	// The pressure gate, at every rate the latency cells share.
	for base := range ptrs(f.Cells) {
		if base.Workload != "latency" || base.Pressure != "none" || base.Backend != c.Backend || base.Flush != c.Flush ||
			base.Policy != c.Policy || base.SizeBytes != c.SizeBytes || base.Target != c.Target || base.TwinOf != "" || !base.Measured() ||
			base.Replication != "" {
			continue
		}
		for p := range ptrs(f.Cells) {
			if p.Pressure == "none" || !samePoint(base, p) {
				continue
			}
			at := fmt.Sprintf("%s pressure at %.0f/s", p.Pressure, p.RatePerSec)
			if short := slices.DeleteFunc([]*runfile.Cell{base, p}, func(c *runfile.Cell) bool { return !shortOfRepeats(f, c) }); len(short) > 0 {
				cd.undetermined = append(cd.undetermined, fmt.Sprintf("the pressure gate is undetermined (%s: %s)", at, join(short, func(c *runfile.Cell) string {
					return fmt.Sprintf("%s has %d of the %d measured repeats the run asked for", c.Name, len(c.MeasuredRepeats()), f.Config.Repeat)
				}, ", ")))
				continue
			}
			switch {
			case p.Status == runfile.StatusSaturated && base.Status == runfile.StatusOK:
				cd.excluded = fmt.Sprintf("saturated under %s pressure at %.0f msgs/s, a rate it sustained without", p.Pressure, p.RatePerSec)
				cd.pressureOnly = true // the pressure gate too: its tail under pressure is unbounded
				return
			case !p.Measured():
				cd.notes = append(cd.notes, fmt.Sprintf("%s: %s", at, p.Status))
				continue
			}
			verdict, r, figure := gate(p, base)
			ratio := withRange(r.Median, r.Low, r.High, fmtFloat)
			if r.Missing != "" {
				ratio = "— (" + r.Missing + ")"
			}
			switch verdict {
			case "exclude":
				cd.excluded = fmt.Sprintf("%s under %s is %s× its unpressured %s (above %d× at the run's confidence)",
					figureName(figure), at, ratio, figureName(figure), PressureBar)
				cd.pressureOnly = true
				return
			case "pass":
				cd.notes = append(cd.notes, fmt.Sprintf("%s: %s %s× unpressured", at, figureName(figure), ratio))
			default:
				cd.undetermined = append(cd.undetermined, fmt.Sprintf("the pressure gate is undetermined (%s: %s %s× unpressured, %s)",
					at, figureName(figure), ratio, whyBound(base, p)))
			}
		}
	}
}

// shortOfRepeats reports whether a measured cell has fewer measured
// repeats than the run asked for (--repeat): a run cut short by Ctrl-C
// before the harness marked such cells interrupted.
func shortOfRepeats(f *runfile.RunFile, c *runfile.Cell) bool {
	return c.Measured() && len(c.Repeats) > 0 && len(c.MeasuredRepeats()) < f.Config.Repeat
}

// whyBound says why a gate could not decide: which figures are bounds.
func whyBound(cs ...*runfile.Cell) string {
	var out []string
	for _, c := range cs {
		switch {
		case c.Status == runfile.StatusSaturated:
			out = append(out, c.Pressure+" saturated (its tail a lower bound)")
		case c.GeneratorBound:
			out = append(out, c.Pressure+" generator-bound (its tail an upper bound)")
		}
	}
	return orDefault(strings.Join(out, ", "), "too few samples above the percentile")
}
