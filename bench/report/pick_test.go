package report

import (
	"slices"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/bench/runfile"
)

func setDurable(c *runfile.Cell, med, lo, hi float64) {
	c.DurableMBps, c.CILow.DurableMBps, c.CIHigh.DurableMBps = med, lo, hi
}

func setCPUOf(c *runfile.Cell, med, lo, hi float64) {
	c.CPUSecPerGiB, c.CILow.CPUSecPerGiB, c.CIHigh.CPUSecPerGiB = med, lo, hi
}

func setBacklog(c *runfile.Cell, med, lo, hi float64) {
	c.BacklogShare, c.CILow.BacklogShare, c.CIHigh.BacklogShare = med, lo, hi
	ok := med <= 0.1
	c.Sustained = &ok
}

// atProducers is a copy of c at another producer count (its own repeats).
func atProducers(c runfile.Cell, producers int, name string) runfile.Cell {
	c.Producers, c.Name = producers, name
	c.Repeats = slices.Clone(c.Repeats)
	return c
}

// TestCPUPickNeverFromAGroupWithAnUndeterminedMember: uring-direct async
// 820 [621–1022] (determined) tied with a policy whose backlog is
// undetermined and whose CPU is lower: no pick, on CPU or otherwise — and
// the text says why CPU did not decide.
func TestCPUPickNeverFromAGroupWithAnUndeterminedMember(t *testing.T) {
	f := fakeRun()
	top, und := &f.Cells[0], &f.Cells[1] // mmap async, uring async
	setDurable(top, 820, 621, 1022)
	setCPUOf(top, 2.4, 2, 2.7)
	setDurable(und, 780, 600, 900)
	setBacklog(und, 0.07, 0.007, 0.12) // straddles the 10 % bar
	setCPUOf(und, 1.2, 1, 1.4)
	Analyze(f)
	a := recOf(t, f, "async")
	if a.Pick != "" || !slices.Contains(a.Tied, "mmap async") || !slices.Contains(a.Tied, "uring async") {
		t.Fatalf("a tie with an undetermined member gave a pick: %+v", a)
	}
	for _, want := range []string{"no significant difference between mmap async", "uring async has significantly less CPU per GiB",
		"something about uring async is undetermined", "a tie with an undetermined member gives no pick"} {
		if !strings.Contains(a.Text, want) {
			t.Errorf("async text lacks %q: %s", want, a.Text)
		}
	}
	// Determined: the cheaper one is the pick, as before.
	setBacklog(und, 0.05, 0.01, 0.08)
	Analyze(f)
	if a = recOf(t, f, "async"); a.Pick != "uring async" || !strings.Contains(a.Text, "significantly less CPU") {
		t.Errorf("a determined tie, uring clearly cheaper: %+v", a)
	}
}

// TestCPUPickOnlyAtEqualProducerCounts: two policies tied on durable MB/s
// at different producer counts are not told apart by CPU per GiB.
func TestCPUPickOnlyAtEqualProducerCounts(t *testing.T) {
	f := fakeRun()
	setCPUOf(&f.Cells[3], 10, 9.5, 10.5) // mmap sync at 4 producers
	setCPUOf(&f.Cells[4], 20, 19, 21)    // uring sync
	f.Cells[4].Producers, f.Cells[4].Name = 16, "throughput-uring-1024-sync-p16"
	Analyze(f)
	s := recOf(t, f, "sync")
	if s.Pick != "" || len(s.Tied) != 2 || !strings.Contains(s.Text, "mmap sync has significantly less CPU per GiB than the others tied with it, but that makes no pick: they ran at different producer counts (uring sync at 16, mmap sync at 4)") ||
		!strings.Contains(s.Text, "CPU per GiB is compared only at equal producer counts") {
		t.Errorf("a CPU pick across producer counts: %+v", s)
	}
}

// TestPolicyQualifiedAtEveryProducerCount: a policy whose fastest
// producer count is not sustained stays a candidate at the count that
// qualifies, and the text says which count was taken and why.
func TestPolicyQualifiedAtEveryProducerCount(t *testing.T) {
	f := fakeRun()
	fast := atProducers(f.Cells[0], 16, "throughput-mmap-1024-async-p16")
	setDurable(&fast, 900, 880, 920)
	setBacklog(&fast, 0.5, 0.4, 0.6) // not sustained
	f.Cells = append(f.Cells, fast)
	Analyze(f)
	a := recOf(t, f, "async")
	if a.Pick != "" || strings.Join(a.Tied, ",") != "mmap async,uring async" || a.Cell != "throughput-mmap-1024-async-p4" {
		t.Fatalf("mmap async, not sustained at 16 producers, not taken at 4: %+v", a)
	}
	if !strings.Contains(a.Text, "at 4 producers (not its fastest producer count — 16 producers: 900 [880–920] durable MB/s, not sustained") {
		t.Errorf("the text does not say which count was taken and why: %s", a.Text)
	}
	if strings.Contains(strings.Join(a.Excluded, " "), "mmap async") {
		t.Errorf("mmap async excluded although it qualifies at 4 producers: %v", a.Excluded)
	}

	// Determined before undetermined: a faster count whose backlog
	// straddles the bar is not taken over a determined one.
	setBacklog(&f.Cells[len(f.Cells)-1], 0.08, 0.05, 0.2)
	Analyze(f)
	a = recOf(t, f, "async")
	if a.Cell != "throughput-mmap-1024-async-p4" || !strings.Contains(a.Text, "16 producers: 900 [880–920] durable MB/s, whether it sustains is undetermined") {
		t.Errorf("the undetermined faster count was taken: %+v", a)
	}

	// Excluded at every producer count: why, at each.
	setBacklog(&f.Cells[0], 0.5, 0.4, 0.6)
	setBacklog(&f.Cells[len(f.Cells)-1], 0.5, 0.4, 0.6)
	Analyze(f)
	a = recOf(t, f, "async")
	ex := strings.Join(a.Excluded, " | ")
	if !strings.Contains(ex, "mmap async: at 4 producers: not sustained") || !strings.Contains(ex, "; at 16 producers: not sustained") {
		t.Errorf("exclusions at every count: %v", a.Excluded)
	}
}

// TestShortCellLeavesTheRecommendation: a cell with fewer measured repeats
// than the run asked for (a run file from before such cells were marked
// interrupted) does not enter the recommendation, and the summary's header
// names it with its real count instead of claiming the run's.
func TestShortCellLeavesTheRecommendation(t *testing.T) {
	f := fakeRun()
	f.Interrupted = true
	c := &f.Cells[0] // mmap async: 1 warm + 2 measured of 5
	c.Repeats = c.Repeats[:3]
	Analyze(f)
	a := recOf(t, f, "async")
	if !strings.Contains(strings.Join(a.Excluded, " "), "mmap async: its throughput cell has 2 of the 5 measured repeats the run asked for") ||
		slices.Contains(a.Tied, "mmap async") || a.Pick == "mmap async" {
		t.Errorf("a cell with 2 of 5 repeats entered the recommendation: %+v", a)
	}
	s := Summary(f)
	for _, want := range []string{"- each cell (except those named in the next line): one unmeasured warm repeat, then 5 measured repeats",
		"- **fewer measured repeats than 5** (the run cut them short): `throughput-mmap-1024-async-p4` 2 (50.0% confidence)",
		"**interrupted (Ctrl-C)**: what it had not reached is missing; what it cut short and still shows with figures is named below"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s[:min(len(s), 3000)])
		}
	}
	if strings.Contains(s, "only the cells that finished are shown") {
		t.Error("the summary says only finished cells are shown while it shows one cut short")
	}

	// Every cell complete: no exception, and the header says where the
	// cells it cut short went.
	f = fakeRun()
	f.Interrupted = true
	Analyze(f)
	s = Summary(f)
	if strings.Contains(s, "fewer measured repeats") || strings.Contains(s, "except those") ||
		!strings.Contains(s, "a cell it cut short has no figures (listed as interrupted under *Failed, skipped or interrupted*)") {
		t.Errorf("header of an interrupted run with every shown cell complete:\n%s", s[:min(len(s), 3000)])
	}
}

// TestVersusSaysWhatHappened: a ÷ pebble-wal entry without a ratio says
// which side failed, and tells a cell that reports no durability from one
// that made nothing durable in the window.
func TestVersusSaysWhatHappened(t *testing.T) {
	p := []int{100, 110, 120, 130, 140}
	mk := func(backend string, durable float64) runfile.Cell {
		return mkCell("throughput-"+backend, "throughput", backend, "async", []float64{9.8e3, 9.9e3, 10e3, 10.1e3, 10.2e3},
			[]float64{durable, durable, durable, durable, durable}, p)
	}
	c, ref := mk("uring", 11), mk("pebble-wal", 11)
	c.Status = runfile.StatusFailed
	if got, _ := versus(&c, &ref, "msgsPerSec"); got != "— (uring failed)" {
		t.Errorf("the cell failed: %q", got)
	}
	c.Status, ref.Status = runfile.StatusOK, runfile.StatusInterrupted
	if got, _ := versus(&c, &ref, "msgsPerSec"); got != "— (pebble-wal interrupted)" {
		t.Errorf("the reference was interrupted: %q", got)
	}
	ref.Status = runfile.StatusOK
	none := mk("nats", 0)
	for i := range none.Repeats {
		none.Repeats[i].Result.Durability = nil
	}
	none.Sustained = nil
	if got, _ := versus(&none, &ref, "durableMBps"); got != "— (nats reports no durable position)" {
		t.Errorf("a cell without durability reporting: %q", got)
	}
	zero := mk("uring", 0)
	if got, _ := versus(&zero, &ref, "durableMBps"); got != "— (uring's durable MB/s in the window is 0 (median of its repeats))" {
		t.Errorf("a cell that made nothing durable: %q", got)
	}
}
