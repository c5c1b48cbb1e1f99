package report

import (
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/mqstore/mqstore/bench/runfile"
)

// TestRenderedThresholdsComeFromConstants: no string literal of the
// rendering code writes a decision threshold (a multiple, a percentage, a
// sample count) as a number: each is formatted from the constant its rule
// uses, so the text and the rule cannot disagree.
func TestRenderedThresholdsComeFromConstants(t *testing.T) {
	threshold := regexp.MustCompile(`(^|[^%.\w])\d+(\.\d+)? ?(×|x\b|%)|\d+ samples`)
	files := []string{"tables.go", "analyze.go", "summary.go", "benchtxt.go", "compare.go", "peers.go", "replication.go", "sweep.go"}
	fset := token.NewFileSet()
	for _, name := range files {
		file, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatalf("%s: %v", fset.Position(lit.Pos()), err)
			}
			for _, m := range threshold.FindAllStringIndex(s, -1) {
				if s[m[1]-1] == '%' && m[1] < len(s) && unicode.IsLetter(rune(s[m[1]])) {
					continue // a count before a format verb ("1%s"), not a percentage
				}
				t.Errorf("%s: %q is written as a literal in %.80q", fset.Position(lit.Pos()), strings.TrimSpace(s[m[0]:m[1]]), s)
			}
			return true
		})
	}
}

// TestLatencyFootnoteStatesTheDeadline: the latency table says in words
// when an arrival counts as unstarted, the thresholds from their constants.
func TestLatencyFootnoteStatesTheDeadline(t *testing.T) {
	f := fakeRun()
	Analyze(f)
	var b strings.Builder
	writeLatency(&b, f)
	out := b.String()
	wantAll(t, out,
		"never started by the deadline: the window's end plus a tenth of the window",
		"fewer than "+strconv.Itoa(runfile.MinSamplesAbove)+" samples above it",
		"p99.9 below "+strconv.Itoa(runfile.GeneratorBoundFactor)+"× the floor's",
	)
	if strings.Contains(out, "+ a tenth") {
		t.Errorf("the garbled deadline is still there:\n%s", out)
	}
}

// TestPeerRatiosNeedADenominator: a peer figure of zero (or a latency
// interval reaching zero) gives no ratio — never 0×, Inf or NaN — and the
// note says why.
func TestPeerRatiosNeedADenominator(t *testing.T) {
	f := baseRun()
	c := known("throughput-mmap-1024-sync-p16", "throughput", "mmap", "sync", 16, map[string][3]float64{"msgsPerSec": {40e3, 38e3, 42e3}})
	lat := known("latency-mmap-1024-sync-r1000", "latency", "mmap", "sync", 1000, map[string][3]float64{"p50Ns": {2e5, 1.9e5, 2.1e5}})
	lat.Tail = &runfile.Tail{Count: 1e5, Points: []runfile.TailPoint{{Name: "p50Ns", Quantile: 0.5, ValueNs: 2e5, LoNs: 1.9e5, HiNs: 2.1e5, Above: 5e4}}}
	p := known("throughput-pebble-wal-1024-sync-p16", "throughput", "pebble-wal", "sync", 16, map[string][3]float64{"msgsPerSec": {0, 0, 0}})
	pl := known("latency-pebble-wal-1024-sync-r1000", "latency", "pebble-wal", "sync", 1000, map[string][3]float64{"p50Ns": {1e5, 0, 1.1e5}})
	pl.Tail = &runfile.Tail{Count: 1e5, Points: []runfile.TailPoint{{Name: "p50Ns", Quantile: 0.5, ValueNs: 1e5, LoNs: 0, HiNs: 1.1e5, Above: 5e4}}}
	p.Peer, pl.Peer = true, true
	f.Cells, f.Peers = []runfile.Cell{c, lat}, []runfile.Cell{p, pl}
	rs := append(peerRatios(f, &f.Cells[0]), peerRatios(f, &f.Cells[1])...)
	if len(rs) != 2 {
		t.Fatalf("want a row for each pair, got %+v", rs)
	}
	for _, r := range rs {
		for _, v := range []float64{r.Median, r.Low, r.High} {
			if math.IsInf(v, 0) || math.IsNaN(v) || v != 0 {
				t.Errorf("%s ÷ %s %s: a ratio %v without a denominator", r.Cell, r.Against, r.Figure, v)
			}
		}
		if r.Missing == "" || ratioRange(r) != "—" {
			t.Errorf("%s ÷ %s %s: shown as %q, reason %q", r.Cell, r.Against, r.Figure, ratioRange(r), r.Missing)
		}
	}
	f.Ratios = rs
	var b strings.Builder
	writeRatios(&b, f)
	if out := b.String(); !strings.Contains(out, "no ratio: "+p.Name+"'s msgsPerSec is 0") || !strings.Contains(out, "no ratio: "+pl.Name+"'s p50Ns interval reaches 0") {
		t.Errorf("the reasons are not in the table:\n%s", out)
	}
}

// TestRatePlotShowsTheMergedTail: the p99.9-against-rate plot shows the
// p99.9 of the merged histogram of every repeat (the tables' figure), not
// the median of the repeats' p99.9s, with the repeats' range as its
// whisker, and its title says so. Four repeats of 1000 samples at 100 µs
// and one whose last 10 samples took 10 ms: the repeats' median p99.9 is
// 100 µs, the merged one 10 ms.
func TestRatePlotShowsTheMergedTail(t *testing.T) {
	f := baseRun()
	c := mkCell("latency-mmap-1024-sync-r1000", "latency", "mmap", "sync", []float64{1000, 1000, 1000, 1000, 1000}, []float64{1, 1, 1, 1, 1}, []int{100, 100, 100, 100, 100})
	for i := range c.Repeats {
		us := make([]int, 1000)
		for k := range us {
			us[k] = 100
			if i == 3 && k >= 990 {
				us[k] = 10_000
			}
		}
		c.Repeats[i].Result.Latency = histogramOf(us...)
		c.Repeats[i].Figures = runfile.FiguresOf(&c.Repeats[i].Result, nil)
	}
	var fs []runfile.Figures
	for _, r := range c.MeasuredRepeats() {
		fs = append(fs, r.Figures)
	}
	c.Figures = runfile.Summarize(fs).Median
	c.SetTails()
	f.Cells = []runfile.Cell{c}
	if c.P999Ns > 101_000 {
		t.Fatalf("the repeats' median p99.9 is %d ns: the test needs it at 100 µs", c.P999Ns)
	}
	order, series, _, _ := rateCurves(f, "sync")
	if len(order) != 1 || len(series[order[0]]) != 1 {
		t.Fatalf("curves %v %v", order, series)
	}
	pt, merged := series[order[0]][0], c.Tail.Point("p999Ns")
	if pt.y != us(float64(merged.ValueNs)) || merged.ValueNs < 9_900_000 {
		t.Errorf("plotted p99.9 %v µs, the tables' merged p99.9 %d ns", pt.y, merged.ValueNs)
	}
	if pt.lo > 101 || pt.hi < 9_900 {
		t.Errorf("whisker %v–%v µs, want the repeats' 100 µs–10 ms", pt.lo, pt.hi)
	}
	if title := latencyRatePlotTitle("sync"); !strings.Contains(title, "merged repeats, as in the tables") || !strings.Contains(title, "whiskers") {
		t.Errorf("title %q does not say what it shows", title)
	}
}

// TestPSIShareIsOverTheElapsedTime: a PSI share is the stall's growth over
// the wall time between the samples, whatever the sampling interval was —
// 50 ms of stall in 250 ms is 20 %, not 50 % of a nominal 100 ms. A sample
// without its interval (an older run file) takes it from the sample before;
// the first such sample has none and is not drawn.
func TestPSIShareIsOverTheElapsedTime(t *testing.T) {
	ms := int64(1e6)
	samples := []runfile.Sample{
		{UnixNs: 1000 * ms, IntervalNs: 250 * ms, IOSomeStallUs: 50_000, MemSomeStallUs: 25_000},
		{UnixNs: 1100 * ms, IntervalNs: 100 * ms, IOSomeStallUs: 50_000},
		{UnixNs: 1400 * ms, IOSomeStallUs: 30_000},           // no interval: 300 ms since the one before
		{UnixNs: 1500 * ms, IntervalNs: 0, IOSomeStallUs: 1}, // 100 ms
	}
	io, mem := psiShares(samples)
	want := []float64{20, 50, 10, 0.001}
	if len(io) != len(want) {
		t.Fatalf("io shares %v", io)
	}
	for i, w := range want {
		if math.Abs(io[i].Y-w) > 1e-9 || io[i].X != float64(samples[i].UnixNs) {
			t.Errorf("sample %d: io some %v%% at %v, want %v%%", i, io[i].Y, io[i].X, w)
		}
	}
	if math.Abs(mem[0].Y-10) > 1e-9 {
		t.Errorf("memory some %v%%, want 10%%", mem[0].Y)
	}
	old := []runfile.Sample{{UnixNs: 1000 * ms, IOSomeStallUs: 50_000}, {UnixNs: 1200 * ms, IOSomeStallUs: 50_000}}
	if io, _ := psiShares(old); len(io) != 1 || math.Abs(io[0].Y-25) > 1e-9 {
		t.Errorf("an older run's shares %v, want one point of 25%%", io)
	}
}

// TestConsumeSaysWhatItsSenderCPUCovers: the consume table's footnote says
// what the sender CPU counted — the sends alone, or (an older run file)
// until the reader had everything.
func TestConsumeSaysWhatItsSenderCPUCovers(t *testing.T) {
	f := baseRun()
	c := known("consume-mmap-1024-hot-copy", "consume", "mmap", "async", 1, map[string][3]float64{"msgsPerSec": {1e6, 1e6, 1e6}})
	c.Variant = "hot-copy"
	f.Cells = []runfile.Cell{c}
	var old strings.Builder
	writeConsume(&old, f)
	f.Cells[0].SenderCPU = runfile.SenderCPUSends
	var now strings.Builder
	writeConsume(&now, f)
	if !strings.Contains(old.String(), "counted its wait for the reader too") || !strings.Contains(now.String(), "until its last send returned (not the wait for the reader)") {
		t.Errorf("older run:\n%s\nthis harness:\n%s", old.String(), now.String())
	}
}

// TestSwapRateIsPerSecondOfWallTime: the pressure evidence gives swap
// traffic per second of the samples' own wall time, not per sample.
func TestSwapRateIsPerSecondOfWallTime(t *testing.T) {
	ms := int64(1e6)
	c := runfile.Cell{Repeats: []runfile.Repeat{{Index: 1, Status: runfile.StatusOK, Samples: []runfile.Sample{
		{UnixNs: 1000 * ms, IntervalNs: 250 * ms, PswpIn: 100, PswpOut: 50},
		{UnixNs: 1250 * ms, IntervalNs: 250 * ms, PswpIn: 50},
		{UnixNs: 1750 * ms, PswpOut: 100}, // no interval: 500 ms since the one before
	}}}}
	if got := meansOf(&c).swapPerSec; math.Abs(got-300) > 1e-9 { // 300 pages over 1 s
		t.Fatalf("swap %v pages/s, want 300", got)
	}
}

// TestTookIsTheMonotonicElapsed: the summary's "took" is the run's own
// monotonic measure when recorded, not the wall clock's difference (which a
// clock step moves).
func TestTookIsTheMonotonicElapsed(t *testing.T) {
	start := time.Date(2026, 12, 4, 1, 44, 38, 0, time.UTC)
	f := &runfile.RunFile{StartedAt: start, FinishedAt: start.Add(235 * time.Second), ElapsedNs: int64(230 * time.Second)}
	if got := runTook(f); got != 230*time.Second {
		t.Fatalf("took %v, want the recorded 3m50s", got)
	}
	f.ElapsedNs = 0
	if got := runTook(f); got != 235*time.Second {
		t.Fatalf("took %v for an older run file, want the wall clock's 3m55s", got)
	}
}
