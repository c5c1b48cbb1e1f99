package report

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/bench/runfile"
)

// aaRun is fakeRun with its A/A pair (mmap async and its twin) measured n
// times each, the twin's msgs/s at scale × the original's.
func aaRun(n int, scale float64) *runfile.RunFile {
	f := fakeRun()
	f.Config.Repeat = n
	msgs, twinMsgs, durable, p := make([]float64, n), make([]float64, n), make([]float64, n), make([]int, n)
	for i := range n {
		msgs[i] = 400e3 * (1 + 0.01*float64(i))
		twinMsgs[i] = scale * msgs[i]
		durable[i], p[i] = 440, 120
	}
	f.Cells[0] = mkCell("throughput-mmap-1024-async-p4", "throughput", "mmap", "async", msgs, durable, p)
	f.Cells[5] = mkCell("throughput-mmap-1024-async-p4-aa", "throughput", "mmap", "async", twinMsgs, durable, p)
	f.Cells[5].TwinOf = f.Cells[0].Name
	return f
}

func aaText(f *runfile.RunFile) string {
	Analyze(f)
	var b strings.Builder
	writeAA(&b, f)
	return b.String()
}

// TestAAVerdictIsTheTablesRule: with 3 repeats a side the U test cannot
// reach α = 0.05, yet a twin whose repeats all lie apart from the
// original's has separated intervals — and the tables would call that a
// difference, so the A/A check does too, and says the U test could not.
func TestAAVerdictIsTheTablesRule(t *testing.T) {
	s := aaText(aaRun(3, 1.5))
	for _, want := range []string{"| throughput-mmap-1024-async-p4 | msgsPerSec | 404k [400k–408k] | 606k [600k–612k] | p = 0.10 (n = 3); cannot reach α | **called different ✗** (intervals separate) |",
		"**The harness called an identical cell different in 1 of 3 figure(s)**",
		"With 3 repeats a side, two intervals of one and the same figure separate by chance alone with a probability of at most 10 %",
		"With 3 repeats a side the smallest p it can reach is 0.100 (the two sets of repeats entirely apart), not below α: with so few repeats it cannot call any difference."} {
		if !strings.Contains(s, want) {
			t.Errorf("A/A with 3 repeats, the twin 1.5×, lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "5 % chance") || strings.Contains(s, "barely overlap") {
		t.Errorf("A/A text claims what the U test cannot do at n = 3:\n%s", s)
	}
	// The same twin, identical: no difference called, and the text says
	// how likely a false call was at this n.
	s = aaText(aaRun(3, 1))
	if !strings.Contains(s, "No difference is called in any of the 3 figures") || !strings.Contains(s, "at most 10 %") || strings.Contains(s, "called different ✗") {
		t.Errorf("identical twin at n = 3:\n%s", s)
	}
}

// TestAATextIsTrueForEveryN: for 1 to 12 repeats a side, the chance the
// text states is separateByChance's, and the U test is said to be unable
// to call a difference exactly when its smallest p is not below α.
func TestAATextIsTrueForEveryN(t *testing.T) {
	for n := 1; n <= 12; n++ {
		s := aaText(aaRun(n, 1))
		if n == 1 {
			if !strings.Contains(s, "With one measured repeat there is no interval") || strings.Contains(s, "✓") {
				t.Errorf("n = 1:\n%s", s)
			}
			continue
		}
		chance := fmt.Sprintf("separate by chance alone with a probability of at most %s", probText(separateByChance(n, n)))
		cannot := uTestMinP(n, n) >= aaAlpha
		if !strings.Contains(s, chance) || strings.Contains(s, "cannot call any difference") != cannot || (n <= 3) != cannot {
			t.Errorf("n = %d (U test unable: %v):\n%s", n, cannot, s)
		}
		if want := fmt.Sprintf("With %d repeats a side the smallest p it can reach is %.3f", n, uTestMinP(n, n)); !strings.Contains(s, want) {
			t.Errorf("n = %d: lacks %q", n, want)
		}
	}
}

// TestSeparateByChance: the probability that two cells of one and the same
// distribution get separated intervals, against a simulation of the rule
// itself (runfile.MedianCI, runfile.Separated); for up to 7 repeats a side
// the intervals are the min–max ranges, and it is the U test's smallest p.
func TestSeparateByChance(t *testing.T) {
	for n := 2; n <= 7; n++ {
		if got, want := separateByChance(n, n), 2/binomial(2*n, n); math.Abs(got-want) > 1e-12 {
			t.Errorf("n = %d: %v, want 2/C(2n, n) = %v", n, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(7, 11))
	iv := func(n int) runfile.Interval {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = rng.Float64()
		}
		m, lo, hi, level := runfile.MedianCI(xs)
		return runfile.Interval{Median: m, Lo: lo, Hi: hi, Level: level}
	}
	const trials = 40000
	for _, sizes := range [][2]int{{3, 3}, {5, 5}, {9, 9}, {12, 12}, {5, 9}, {3, 12}} {
		hits := 0
		for range trials {
			if runfile.Separated(iv(sizes[0]), iv(sizes[1])) {
				hits++
			}
		}
		p := separateByChance(sizes[0], sizes[1])
		sd := math.Sqrt(p * (1 - p) / trials)
		if got := float64(hits) / trials; math.Abs(got-p) > 5*sd+1e-4 {
			t.Errorf("%v repeats: simulated %.5f, computed %.5f (sd %.5f)", sizes, got, p, sd)
		}
	}
}
