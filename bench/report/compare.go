package report

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/mqstore/mqstore/bench/runfile"
)

var compareFigures = map[string][]string{
	"throughput": {"msgsPerSec", "durableMBps", "p99Ns", "cpuSecPerGiB", "replLagP99Ns"},
	"latency":    {"p50Ns", "p99Ns", "p999Ns"},
	"e2e":        {"p50Ns", "p99Ns", "p999Ns"},
	"consume":    {"mbPerSec", "cpuSecPerGiB"},
	"recovery":   {"openNs"},
}

// pointKey identifies a cell across runs up to its open-loop rate (a
// store cell's message included: a bare and a rocketmq cell differ).
func pointKey(c *runfile.Cell) string {
	msg := c.Message
	if msg == "" && !c.Peer {
		msg = "bare" // before the message was recorded, every cell put the body alone
	}
	return fmt.Sprintf("%s|%s|%s|%v|%d|%s|%s|%s|%s|%d|%s|%s|%d|%s", c.Workload, c.Variant, c.Backend, c.Peer, c.SizeBytes, c.Flush, c.Pressure, c.Policy,
		c.Target, c.Producers, c.TwinOf, c.Replication, c.HADelayNs, msg)
}

// rateTolerance: two open-loop cells are compared only when their offered
// rates differ by at most this share of the higher.
const rateTolerance = 0.01

// Compare renders two runs side by side: every cell present in both (open-
// loop cells matched by system and rate: cells whose target rates differ by
// more than 1 % are "not comparable"), each figure as A and B median
// [interval], B ÷ A, and a verdict that calls a difference only when the
// intervals separate. Saturated and generator-bound cells get no verdict.
func Compare(a, b *runfile.RunFile) string {
	var s strings.Builder
	fmt.Fprintf(&s, "A: %s (commit %s, %d measured repeats, %s)\nB: %s (commit %s, %d measured repeats, %s)\n\n", a.ID, shortCommit(a.Machine.Commit), a.Config.Repeat,
		ciLevelText(a.Config.Repeat), b.ID, shortCommit(b.Machine.Commit), b.Config.Repeat, ciLevelText(b.Config.Repeat))
	if diff := storeDiff(a.Config.Store, b.Config.Store); len(diff) > 0 {
		fmt.Fprintf(&s, "**The runs' store options differ**, so every store cell below compares them too: %s.\n\n", strings.Join(diff, "; "))
	}
	t := newTable(&s, "cell", "figure", "A>", "B>", "B ÷ A>", "verdict")
	byKey := map[string][]*runfile.Cell{}
	for _, c := range allCells(b) {
		byKey[pointKey(c)] = append(byKey[pointKey(c)], c)
	}
	matched := map[*runfile.Cell]bool{}
	var onlyA []string
	for _, ca := range allCells(a) {
		cb := closestRate(byKey[pointKey(ca)], ca.RatePerSec, matched)
		if cb == nil {
			onlyA = append(onlyA, ca.Name)
			continue
		}
		matched[cb] = true
		name := ca.Name
		if ca.RatePerSec > 0 || cb.RatePerSec > 0 {
			name = fmt.Sprintf("%s (A at %s/s, B at %s/s)", ca.Name, fmtCount(ca.RatePerSec), fmtCount(cb.RatePerSec))
			if math.Abs(cb.RatePerSec-ca.RatePerSec) > rateTolerance*math.Max(ca.RatePerSec, cb.RatePerSec) {
				fmt.Fprintf(&s, "| %s | | | | | not comparable: the offered rates differ by more than %s |\n", name, pctText(rateTolerance))
				continue
			}
		}
		if why := notComparable([]string{"A", "B"}, " is ", "", ca, cb); why != "" {
			fmt.Fprintf(&s, "| %s | | %s | %s | | not compared: %s |\n", name, ca.Status, cb.Status, why)
			continue
		}
		for _, figName := range compareFigures[ca.Workload] {
			if ca.Figures.Figure(figName) == 0 && cb.Figures.Figure(figName) == 0 {
				continue
			}
			compareRow(t, name, figName, ca.Interval(figName), cb.Interval(figName))
		}
	}
	limits := map[string]*runfile.Limit{}
	for l := range ptrs(b.Limits) {
		limits[limitKey(l)] = l
	}
	for la := range ptrs(a.Limits) {
		lb, ok := limits[limitKey(la)]
		if !ok || la.Status != runfile.StatusOK || lb.Status != runfile.StatusOK {
			continue
		}
		figName := map[bool]string{true: "p50Ns", false: "mbPerSec"}[la.P50Ns > 0]
		if boundsItsProducers(a, la) != boundsItsProducers(b, lb) {
			// One wrote N records in each of its two writers (before
			// schema 5), the other split N between them: other ops.
			t.row("limit "+limitKey(la), figName, "", "", "", "not comparable: one run's two writers each wrote N records per op (schema 4 or older), the other's split N between them")
			continue
		}
		compareRow(t, "limit "+limitKey(la), figName, la.Interval(figName), lb.Interval(figName))
	}
	if len(matched) == 0 {
		s.WriteString("\n**No cell of A has a counterpart in B** (same workload, system, size, flush, pressure, policy, target, producers or rate, message): nothing was compared.\n")
	}
	s.WriteString("\nA verdict names a difference only when the two confidence intervals of the median do not overlap; otherwise there is no significant difference between the runs. For a rank test on the repeats: `benchstat A/bench.txt B/bench.txt` (bench.txt has one line per measured repeat).\n")
	if len(onlyA) > 0 {
		fmt.Fprintf(&s, "\nOnly in A: %s\n", strings.Join(onlyA, ", "))
	}
	onlyB := slices.DeleteFunc(allCells(b), func(c *runfile.Cell) bool { return matched[c] })
	if len(onlyB) > 0 {
		fmt.Fprintf(&s, "Only in B: %s\n", join(onlyB, func(c *runfile.Cell) string { return c.Name }, ", "))
	}
	return s.String()
}

func closestRate(cs []*runfile.Cell, rate float64, matched map[*runfile.Cell]bool) *runfile.Cell {
	var best *runfile.Cell
	for _, c := range cs {
		if !matched[c] && (best == nil || math.Abs(c.RatePerSec-rate) < math.Abs(best.RatePerSec-rate)) {
			best = c
		}
	}
	return best
}

// notComparable names each cell that gets no verdict — not measured,
// saturated or generator-bound (genMark after that) — as "name" + is +
// why ("" when every cell gets one).
func notComparable(names []string, is, genMark string, cells ...*runfile.Cell) string {
	var why []string
	for i, c := range cells {
		switch {
		case !c.Measured():
			why = append(why, names[i]+is+c.Status)
		case c.Status == runfile.StatusSaturated:
			why = append(why, names[i]+is+"saturated")
		case c.GeneratorBound:
			why = append(why, names[i]+is+"generator-bound"+genMark)
		}
	}
	return strings.Join(why, ", ")
}

func limitKey(l *runfile.Limit) string {
	k := fmt.Sprintf("%s-%d", l.Name, l.SizeBytes)
	if l.Producers > 0 {
		k += fmt.Sprintf("-%dB×%d-inflight%d", l.RecordBytes, l.Producers, l.InFlight)
	}
	return k
}

func higherIsBetter(figure string) bool {
	return figure == "msgsPerSec" || figure == "mbPerSec" || figure == "durableMBps" || figure == "writtenMBps" || figure == "timeToDurableMBps"
}

func compareRow(t table, name, figure string, a, b runfile.Interval) {
	f := figFormat(figure)
	ratio := orDash(a.Median != 0, fmtFloat(b.Median/a.Median)+"×")
	verdict := "no significant difference"
	if runfile.Separated(a, b) {
		better := (b.Median > a.Median) == higherIsBetter(figure)
		verdict = map[bool]string{true: "B better", false: "B worse"}[better] + " (intervals separate)"
	}
	t.row(name, figure, ci(a, f), ci(b, f), ratio, verdict)
}

// storeDiff names the store options two runs set differently (the
// profile labels aside: the profiled runs' own), each as A and B.
func storeDiff(a, b runfile.StoreConfig) []string {
	a.ProfileLabels, b.ProfileLabels = false, false
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	if errA != nil || errB != nil {
		return nil
	}
	var ma, mb map[string]any
	if json.Unmarshal(ja, &ma) != nil || json.Unmarshal(jb, &mb) != nil {
		return nil
	}
	var keys []string
	for k := range ma {
		keys = append(keys, k)
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []string
	show := func(v any, ok bool) string {
		if !ok {
			return "(default)"
		}
		b, _ := json.Marshal(v)
		return string(b)
	}
	for _, k := range keys {
		va, okA := ma[k]
		vb, okB := mb[k]
		if show(va, okA) != show(vb, okB) {
			out = append(out, fmt.Sprintf("%s A %s, B %s", k, show(va, okA), show(vb, okB)))
		}
	}
	return out
}
