package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
)

// rateBandPeer writes an mqpeer stand-in into dir: for the no-op peer (the
// floor) it prints a saturated open-loop result at rates in
// [floorFrom, floorTo), for any other peer at rates in [sysFrom, sysTo),
// and a result that kept its schedule otherwise.
func rateBandPeer(t *testing.T, dir string, floorFrom, floorTo, sysFrom, sysTo float64) string {
	t.Helper()
	const window = 50 * time.Millisecond
	write := func(name string, res load.Result) string {
		b, err := json.Marshal(load.PeerOutput{Peer: "fake", Flush: "async", Result: res})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	kept := write("kept.json", load.Result{Workload: load.Latency, Messages: 1000, Arrivals: 1000, ElapsedNs: int64(window), WindowNs: int64(window),
		TargetRatePerSec: 1, LastIntendedNs: int64(window) - 1e6, LastStartNs: int64(window) - 1e6})
	saturated := write("saturated.json", load.Result{Workload: load.Latency, Messages: 500, Arrivals: 1000, Unstarted: 500, ElapsedNs: int64(window),
		WindowNs: int64(window), TargetRatePerSec: 1, LastIntendedNs: int64(window) / 2, LastStartNs: int64(window)})
	script := filepath.Join(dir, "peer.sh")
	body := fmt.Sprintf(`#!/bin/sh
peer= rate=0
while [ $# -gt 0 ]; do
	case "$1" in
	--peer) peer=$2; shift ;;
	--rate) rate=$2; shift ;;
	esac
	shift
done
from=%g to=%g
if [ "$peer" = no-op ]; then from=%g to=%g; fi
if awk -v r="$rate" -v f="$from" -v t="$to" 'BEGIN { exit !(r+0 >= f+0 && r+0 < t+0) }'; then cat %s; else cat %s; fi
`, sysFrom, sysTo, floorFrom, floorTo, saturated, kept)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// searchPhase runs the unpressured open-loop phase of one peer system
// (peer "fake", 1 KiB, async) on the ladder rates against peerCmd: its
// cells, the floors interleaved with them, and its search.
func searchPhase(t *testing.T, peerCmd string, rates []float64, probes int) *runner {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Backends, cfg.Peers, cfg.Sizes, cfg.Flushes, cfg.Workloads = nil, []string{"fake"}, []int{1024}, []string{"async"}, []string{"latency"}
	cfg.Rates, cfg.Repeat, cfg.InFlight, cfg.Warmup, cfg.AA = rates, 1, 8, 10*time.Millisecond, false
	cfg.SearchProbes, cfg.SearchDuration = probes, 50*time.Millisecond
	r := &runner{cfg: cfg, peerCmd: peerCmd, window: 50 * time.Millisecond, rng: rand.New(rand.NewPCG(1, 2)), progress: newProgress(nil, false, 0, 0),
		runDir: t.TempDir(), caps: map[string]float64{}, rungs: map[string][]float64{},
		file: &runfile.RunFile{Schema: runfile.SchemaVersion, Cells: []runfile.Cell{}, Peers: []runfile.Cell{}, Floors: []runfile.Floor{}, Searches: []runfile.RateSearch{}}}
	ph := &phaseEnv{t: &target{work: t.TempDir(), label: "dir"}, pressure: PressureNone}
	r.openLoopPhase(context.Background(), ph)
	if len(r.file.Searches) != 1 {
		t.Fatalf("%d searches, want 1; notes %v", len(r.file.Searches), r.file.Notes)
	}
	return r
}

func probesText(s *runfile.RateSearch) string {
	var out []string
	for _, p := range s.Probes {
		out = append(out, fmt.Sprintf("%.0f: %s (%s)", p.RatePerSec, p.Status, p.Reason))
	}
	return strings.Join(out, "; ")
}

// TestSearchStaysBelowTheGeneratorsLimit: the peers' floor cannot keep
// 100 000 msgs/s, so the cells at that rate are skipped; the system
// "saturates" there too, as the generator does. The search must not report
// the generator's limit as the system's: no probe at or above 100 000
// counts as the system saturating (none runs there: the floor's rate bounds
// the probes as a saturated rate would), no saturated rate is recorded, and
// the search says the generator limited it.
func TestSearchStaysBelowTheGeneratorsLimit(t *testing.T) {
	dir := t.TempDir()
	script := rateBandPeer(t, dir, 100000, 1e12, 100000, 1e12)
	r := searchPhase(t, script, []float64{50000, 100000}, 4)
	for _, c := range r.file.Peers {
		if c.RatePerSec == 100000 && c.Status != runfile.StatusSkipped {
			t.Errorf("%s at the floor's saturated rate: %s", c.Name, c.Status)
		}
	}
	s := &r.file.Searches[0]
	t.Logf("search: sustainable %.0f, saturated at %.0f, reason %q; probes %s", s.SustainableRatePerSec, s.SaturatedAtPerSec, s.Reason, probesText(s))
	if s.SaturatedAtPerSec != 0 {
		t.Errorf("the search records the system saturated at %.0f msgs/s: the generator's limit (its floor saturated at 100000) shown as the system's", s.SaturatedAtPerSec)
	}
	for _, p := range s.Probes {
		if p.RatePerSec >= 100000 && p.Status == runfile.StatusSaturated {
			t.Errorf("probe at %.0f (at or above the floor's saturated 100000) counted as the system saturating", p.RatePerSec)
		}
	}
	if s.SustainableRatePerSec < 50000 || s.SustainableRatePerSec >= 100000 {
		t.Errorf("sustainable rate %.0f, want the highest probe below the generator's 100000", s.SustainableRatePerSec)
	}
	if !strings.Contains(s.Reason, "load generator") || !strings.Contains(s.Reason, "100000") {
		t.Errorf("the search's reason does not say the generator limited it: %q", s.Reason)
	}
	if s.GeneratorLimitPerSec != 100000 || !strings.Contains(s.LowerBound(), "the load generator's floor did not keep 100000 msgs/s") {
		t.Errorf("the sustainable rate %.0f is not marked a lower bound for the generator's sake: limit %.0f, %q", s.SustainableRatePerSec, s.GeneratorLimitPerSec, s.LowerBound())
	}
}

// TestSearchProbeAboveAFailedFloorIsGeneratorBound: the floor at 50 000
// did not keep its schedule (the one at 100 000 did, and so did the
// system's cell there), and the system saturates from 120 000 on. A probe
// at or above 50 000 that saturates is marked generator-bound, not counted
// as the system's saturation, and bounds the next probes from above.
func TestSearchProbeAboveAFailedFloorIsGeneratorBound(t *testing.T) {
	dir := t.TempDir()
	script := rateBandPeer(t, dir, 40000, 60000, 120000, 1e12)
	r := searchPhase(t, script, []float64{50000, 100000}, 4)
	s := &r.file.Searches[0]
	t.Logf("search: sustainable %.0f, saturated at %.0f, reason %q; probes %s", s.SustainableRatePerSec, s.SaturatedAtPerSec, s.Reason, probesText(s))
	if s.SaturatedAtPerSec != 0 {
		t.Errorf("the search records the system saturated at %.0f msgs/s, above the rate whose floor failed (50000)", s.SaturatedAtPerSec)
	}
	bound := 0
	for i, p := range s.Probes {
		switch p.Status {
		case runfile.StatusSaturated:
			t.Errorf("probe at %.0f counted as the system saturating, above the failed floor at 50000", p.RatePerSec)
		case probeGeneratorBound:
			bound++
			if !strings.Contains(p.Reason, "50000") {
				t.Errorf("generator-bound probe at %.0f: reason %q does not name the floor", p.RatePerSec, p.Reason)
			}
			for _, q := range s.Probes[i+1:] {
				if q.RatePerSec >= p.RatePerSec {
					t.Errorf("probe at %.0f after a generator-bound one at %.0f", q.RatePerSec, p.RatePerSec)
				}
			}
		}
	}
	if bound == 0 {
		t.Errorf("no probe marked %s: %s", probeGeneratorBound, probesText(s))
	}
	if s.SustainableRatePerSec < 100000 || s.SustainableRatePerSec >= 120000 {
		t.Errorf("sustainable rate %.0f, want the highest kept probe in [100000, 120000)", s.SustainableRatePerSec)
	}
	if !strings.Contains(s.Reason, "load generator") {
		t.Errorf("the search's reason does not say the generator limited it: %q", s.Reason)
	}
}

// TestSearchWithoutFailedFloorsFindsTheSystemsSaturation: with every floor
// kept, a probe that saturates is the system's, as before.
func TestSearchWithoutFailedFloorsFindsTheSystemsSaturation(t *testing.T) {
	dir := t.TempDir()
	script := rateBandPeer(t, dir, 1e12, 1e12, 70000, 1e12)
	r := searchPhase(t, script, []float64{50000, 100000}, 4)
	s := &r.file.Searches[0]
	t.Logf("search: sustainable %.0f, saturated at %.0f, reason %q; probes %s", s.SustainableRatePerSec, s.SaturatedAtPerSec, s.Reason, probesText(s))
	if s.SaturatedAtPerSec < 70000 || s.SaturatedAtPerSec > 100000 || s.SustainableRatePerSec < 50000 || s.SustainableRatePerSec >= 70000 || s.Reason != "" {
		t.Errorf("search %+v", *s)
	}
}
