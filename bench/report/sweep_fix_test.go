package report

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/bench/runfile"
)

// sweepThrCell is a policy's closed-loop cell of a sweep on mmap async at
// producers: repeat i completes msgs[i] msgs/s, of whose bytes the share
// durable[i] became durable in the window.
func sweepThrCell(policy string, producers int, msgs, durable []float64, p999us []int) runfile.Cell {
	mb := make([]float64, len(msgs))
	for i := range msgs {
		mb[i] = msgs[i] * 1100 * durable[i] / 1e6 // mkCell writes 1100 bytes a message
	}
	c := mkCell(fmt.Sprintf("throughput-mmap-1024-async-p%d-%s", producers, policy), "throughput", "mmap", "async", msgs, mb, p999us)
	c.Policy, c.Producers = policy, producers
	return c
}

// sweepRun is a sweep of the given policies (all mmap async) with cells.
func sweepRun(policies []string, cells ...runfile.Cell) *runfile.RunFile {
	f := fakeRun()
	f.ID = "20250102-000000-sweep"
	f.Config.Policies = nil
	for _, p := range policies {
		f.Config.Policies = append(f.Config.Policies, runfile.Policy{Name: p, Flush: "async"})
	}
	f.Cells = cells
	f.Peers, f.Floors, f.Limits = nil, nil, nil
	return f
}

// TestSweepDurableMsgsIsPerRepeat: a policy's durable msgs/s is each
// repeat's msgs/s × its own durable ÷ written, summarized over the repeats
// as every figure is — not the msgs/s interval times one ratio of medians.
// The repeats are those of mmap `async fi=50ms flp=0` in
// results/20261202-212928-vm (253k, 63.5k and 314k durable msgs/s).
func TestSweepDurableMsgsIsPerRepeat(t *testing.T) {
	msgs, share := []float64{390e3, 440e3, 409e3}, []float64{0.65, 0.144, 0.77}
	wide := sweepThrCell("async fi=50ms flp=0", 16, msgs, share, []int{100, 100, 100})
	// Another policy, not sustained either (half of what it wrote durable):
	// 228k–232k durable msgs/s, a higher tail. The msgs/s interval scaled by
	// one ratio (241k–272k) separates from it and would push it off the
	// front; the repeats' own (63k–315k) does not.
	other := sweepThrCell("async fi=500ms flp=64", 16, []float64{456e3, 460e3, 464e3}, []float64{0.5, 0.5, 0.5}, []int{150, 150, 150})
	f := sweepRun([]string{"async fi=50ms flp=0", "async fi=500ms flp=64"}, wide, other)
	Analyze(f)
	var per []float64
	for i := range msgs {
		per = append(per, msgs[i]*share[i])
	}
	m, lo, hi, level := runfile.MedianCI(per)
	s := sweepOf(f)
	if len(s) != 1 || len(s[0].points) != 2 {
		t.Fatalf("series %+v", s)
	}
	got := s[0].points[0].Thr
	if !near(got.Median, m) || !near(got.Lo, lo) || !near(got.Hi, hi) || got.Level != level {
		t.Errorf("durable msgs/s %+v, want the repeats' own: %v [%v–%v] at %v (repeats %v)", got, m, lo, hi, level, per)
	}
	if got.Lo > 70e3 || got.Hi < 310e3 {
		t.Errorf("durable msgs/s interval %+v is narrower than its repeats %v", got, per)
	}
	var b strings.Builder
	writeSweep(&b, f)
	for l := range strings.SplitSeq(b.String(), "\n") {
		if strings.HasPrefix(l, "| async fi=500ms flp=64 | 230k [228k–232k] |") && !strings.Contains(l, "★") {
			t.Errorf("a policy not measurably beaten left the front:\n%s", b.String())
		}
	}
}

// TestSweepMarksWhatDidNotSustain: the sweep table says whether each
// policy sustained; a policy that did not never pushes one that did off the
// front, and the first screen never quotes it as a front's end — it quotes
// the best sustained one and says how many it left out and why.
func TestSweepMarksWhatDidNotSustain(t *testing.T) {
	// fast: more durable msgs/s and a lower tail, measurably, but 50 % of
	// what it wrote left as backlog; slow: sustained.
	fast := sweepThrCell("async fi=50ms flp=0", 16, []float64{800e3, 810e3, 820e3}, []float64{0.5, 0.5, 0.5}, []int{50, 50, 50})
	slow := sweepThrCell("async fi=500ms flp=64", 16, []float64{200e3, 201e3, 202e3}, []float64{1, 1, 1}, []int{900, 900, 900})
	if fast.Sustained == nil || *fast.Sustained || slow.Sustained == nil || !*slow.Sustained {
		t.Fatalf("fixture: sustained %v %v", fast.Sustained, slow.Sustained)
	}
	sw := sweepRun([]string{"async fi=50ms flp=0", "async fi=500ms flp=64"}, fast, slow)
	Analyze(sw)
	var b strings.Builder
	writeSweep(&b, sw)
	table := b.String()
	for _, want := range []string{"| policy | durable msgs/s | p99.9 | sustained | front |",
		"| async fi=50ms flp=0 | 405k [400k–410k] | 50µs | **no** | ★ (not sustained) |",
		"| async fi=500ms flp=64 | 201k [200k–202k] | 900µs | yes | ★ |"} {
		if !strings.Contains(table, want) {
			t.Errorf("the sweep table lacks %q:\n%s", want, table)
		}
	}
	dir := t.TempDir()
	if err := runfile.Write(dir, sw); err != nil {
		t.Fatal(err)
	}
	ref, err := LoadSweepReference(dir)
	if err != nil {
		t.Fatal(err)
	}
	f := fakeRun()
	f.SweepReference = ref
	Analyze(f)
	first := strings.Join(strings.Split(Summary(f), "\n")[:25], "\n")
	line := ""
	for l := range strings.SplitSeq(first, "\n") {
		if strings.HasPrefix(l, "  - mmap async on vda") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no quote of the front:\n%s", first)
	}
	if !strings.Contains(line, "`async fi=500ms flp=64` 201k [200k–202k] msgs/s") || strings.Contains(line, "most throughput `async fi=50ms flp=0`") ||
		!strings.Contains(line, "1 on the front that did not sustain") || !strings.Contains(line, "never recommended") {
		t.Errorf("the quote of a front whose fastest end did not sustain: %s", line)
	}
	// No policy sustained: nothing is quoted as an end.
	slow2 := sweepThrCell("async fi=500ms flp=64", 16, []float64{200e3, 201e3, 202e3}, []float64{0.5, 0.5, 0.5}, []int{900, 900, 900})
	sw = sweepRun([]string{"async fi=50ms flp=0", "async fi=500ms flp=64"}, fast, slow2)
	Analyze(sw)
	dir = t.TempDir()
	if err := runfile.Write(dir, sw); err != nil {
		t.Fatal(err)
	}
	if ref, err = LoadSweepReference(dir); err != nil {
		t.Fatal(err)
	}
	f.SweepReference = ref
	Analyze(f)
	first = strings.Join(strings.Split(Summary(f), "\n")[:25], "\n")
	if strings.Contains(first, "most throughput") || strings.Contains(first, "alone on the front") || !strings.Contains(first, "none of its 2 policies sustained") {
		t.Errorf("a front of which nothing sustained:\n%s", first)
	}
}

// TestSweepQuoteOfAnOldReference: a reference copied before sweeps
// recorded whether each point sustained (and with one ratio times the
// msgs/s interval) is not quoted as fronts' ends; the first screen says
// why and how to copy it again.
func TestSweepQuoteOfAnOldReference(t *testing.T) {
	iv := func(v float64) runfile.Interval { return runfile.Interval{Median: v, Lo: v, Hi: v} }
	f := fakeRun()
	f.SweepReference = &runfile.SweepReference{ID: "20250102-000000-sweep", Path: "results/20250102-000000-sweep", Repeat: 3, Series: []runfile.SweepSeries{
		{Backend: "mmap", SizeBytes: 1024, Flush: "async", Target: "vda", Policies: 2, Front: []runfile.SweepPoint{
			{Policy: "a", DurableMsgs: iv(100e3), P999Ns: iv(7e6)}, {Policy: "b", DurableMsgs: iv(150e3), P999Ns: iv(8e6)}}}}}
	Analyze(f)
	var b strings.Builder
	writeSweepQuote(&b, f, 1024)
	got := b.String()
	if strings.Contains(got, "most throughput") || strings.Contains(got, "`b`") || !strings.Contains(got, "is not quoted") ||
		!strings.Contains(got, "--sweep-from results/20250102-000000-sweep") {
		t.Errorf("an old reference's fronts: %s", got)
	}
}

// TestSweepSeriesHaveOneProducerCount: a sweep run at several producer
// counts has a series per count — each point's durable msgs/s and the
// closed loop's p99.9 from the cell at the count its heading names.
func TestSweepSeriesHaveOneProducerCount(t *testing.T) {
	one := []float64{1, 1, 1}
	three := func(v float64) []float64 { return []float64{v * 0.99, v, v * 1.01} }
	f := sweepRun([]string{"async fi=50ms", "async fi=500ms"},
		sweepThrCell("async fi=50ms", 4, three(100e3), one, []int{100, 100, 100}),
		sweepThrCell("async fi=50ms", 16, three(300e3), one, []int{900, 900, 900}),
		sweepThrCell("async fi=500ms", 4, three(200e3), one, []int{200, 200, 200}),
		sweepThrCell("async fi=500ms", 16, three(150e3), one, []int{800, 800, 800}))
	f.Config.Producers = []int{4, 16}
	Analyze(f)
	s := sweepOf(f)
	if len(s) != 2 {
		t.Fatalf("%d series, want one per producer count: %+v", len(s), s)
	}
	for i, want := range []struct {
		producers int
		thr       [2]float64
	}{{4, [2]float64{100e3, 200e3}}, {16, [2]float64{300e3, 150e3}}} {
		if !strings.Contains(s[i].key, fmt.Sprintf("producers=%d", want.producers)) || s[i].tail != fmt.Sprintf(sweepTailClosed, want.producers) {
			t.Errorf("series %d: key %q, tail %q; want %d producers", i, s[i].key, s[i].tail, want.producers)
		}
		for j, p := range s[i].points {
			if !near(p.Thr.Median, want.thr[j]) {
				t.Errorf("series %s, %s: %v durable msgs/s, want %v (its cell at %d producers)", s[i].key, p.Label, p.Thr.Median, want.thr[j], want.producers)
			}
		}
	}
}

// TestSweepTailAtOneRate: the open loop's p99.9 of every point of a series
// is at the rate its heading names, even when a policy's cell at the
// lowest rate did not measure.
func TestSweepTailAtOneRate(t *testing.T) {
	one := []float64{1, 1, 1}
	three := func(v float64) []float64 { return []float64{v * 0.99, v, v * 1.01} }
	f := sweepRun([]string{"async fi=50ms", "async fi=500ms"},
		sweepThrCell("async fi=50ms", 16, three(100e3), one, []int{100, 100, 100}),
		sweepThrCell("async fi=500ms", 16, three(200e3), one, []int{200, 200, 200}))
	lat := func(policy string, rate float64, us float64) runfile.Cell {
		c := spreadCell(fmt.Sprintf("latency-mmap-1024-async-r%.0f-%s", rate, policy), "mmap", "async", "none", us, 0.5)
		c.Policy, c.RatePerSec = policy, rate
		return c
	}
	low := lat("async fi=500ms", 1000, 1000)
	low.Status, low.Reason = runfile.StatusFailed, "repeat 1: failed"
	f.Cells = append(f.Cells, lat("async fi=50ms", 1000, 1000), low, lat("async fi=50ms", 5000, 3000), lat("async fi=500ms", 5000, 3000))
	Analyze(f)
	s := sweepOf(f)
	if len(s) != 1 {
		t.Fatalf("series %+v", s)
	}
	if !strings.Contains(s[0].tail, "at 5k msgs/s") {
		t.Errorf("tail %q: both policies have a latency cell at 5k msgs/s only", s[0].tail)
	}
	for _, p := range s[0].points {
		if p.P999.Median < 4e6 {
			t.Errorf("%s: p99.9 %v is not its cell's at 5k msgs/s (≈ 6ms)", p.Label, p.P999.Median)
		}
	}
}
