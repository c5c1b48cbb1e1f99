package runfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/bench/load"
)

func TestMedianCI(t *testing.T) {
	for _, c := range []struct {
		xs             []float64
		med, lo, hi    float64
		level          float64
		levelTolerance float64
	}{
		{[]float64{5}, 5, 5, 5, 0, 0},
		{[]float64{3, 1, 2, 5, 4}, 3, 1, 5, 0.9375, 1e-12},            // n=5: only min–max, 93.75 %
		{[]float64{6, 1, 2, 5, 4, 3}, 3.5, 1, 6, 0.96875, 1e-12},      // n=6: min–max, 96.9 %
		{[]float64{9, 1, 2, 5, 4, 3, 7, 8, 6}, 5, 2, 8, 0.9609, 1e-4}, // n=9: the 2nd and 8th, 96.1 %
	} {
		med, lo, hi, level := MedianCI(c.xs)
		if med != c.med || lo != c.lo || hi != c.hi || math.Abs(level-c.level) > c.levelTolerance {
			t.Errorf("MedianCI(%v) = %v [%v, %v] at %v; want %v [%v, %v] at %v", c.xs, med, lo, hi, level, c.med, c.lo, c.hi, c.level)
		}
	}
	// The stated coverage is the true one: draw 5 samples from a known
	// distribution many times and count how often [min, max] holds its median.
	seed := uint64(1)
	next := func() float64 {
		seed = seed*6364136223846793005 + 1442695040888963407
		return float64(seed>>11) / (1 << 53)
	}
	hits := 0
	const trials = 20000
	for range trials {
		xs := []float64{next(), next(), next(), next(), next()}
		if _, lo, hi, _ := MedianCI(xs); lo <= 0.5 && 0.5 <= hi {
			hits++
		}
	}
	if got := float64(hits) / trials; math.Abs(got-0.9375) > 0.01 {
		t.Errorf("empirical coverage %.4f, want 0.9375 ±0.01", got)
	}
}

func TestSeparated(t *testing.T) {
	if !Separated(Interval{10, 9, 11, 0.9}, Interval{20, 12, 25, 0.9}) || Separated(Interval{10, 9, 12, 0.9}, Interval{20, 12, 25, 0.9}) {
		t.Error("separation")
	}
	if Separated(Interval{10, 10, 10, 0}, Interval{20, 20, 20, 0}) {
		t.Error("two single measurements called different")
	}
}

func histogramOf(us ...int) *load.Histogram {
	h := load.NewHistogram()
	for _, v := range us {
		h.Record(time.Duration(v) * time.Microsecond)
	}
	return h
}

func TestFiguresOfDurability(t *testing.T) {
	r := load.Result{Workload: load.Throughput, Messages: 1000, PayloadBytes: 1000 * 1000, ElapsedNs: 2e9, WindowNs: 2e9,
		Service: histogramOf(1, 2, 3),
		Durability: &load.DurabilityResult{WrittenStartBytes: 100, DurableStartBytes: 100, WrittenEndBytes: 100 + 4e6, DurableEndBytes: 100 + 3e6,
			DrainNs: 2e9, WrittenAfterDrainBytes: 100 + 4e6, DurableAfterDrainBytes: 100 + 4e6}}
	f := FiguresOf(&r, &StoreCounters{Puts: 1000, Flushes: 40, FlushNs: 1.5e9})
	want := Figures{MsgsPerSec: 500, MBPerSec: 0.5, WrittenMBps: 2, DurableMBps: 1.5, BacklogBytes: 1e6, BacklogShare: 0.25, DrainNs: 2e9,
		TimeToDurableMBps: 1, MsgsPerGroupCommit: 25, FlushBusyShare: 0.75, FlushMeanNs: 37.5e6}
	for _, name := range []string{"msgsPerSec", "mbPerSec", "writtenMBps", "durableMBps", "backlogBytes", "backlogShare", "drainNs", "timeToDurableMBps", "msgsPerGroupCommit",
		"flushBusyShare", "flushMeanNs"} {
		if got, w := f.Figure(name), want.Figure(name); math.Abs(got-w) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, w)
		}
	}
}

// TestFiguresOfOldCounters: counters without the flush time (older run
// files, or a window with no flush) give no busy share or mean flush.
func TestFiguresOfOldCounters(t *testing.T) {
	r := load.Result{Workload: load.Throughput, Messages: 10, ElapsedNs: 1e9, WindowNs: 1e9, Service: histogramOf(1)}
	for _, c := range []*StoreCounters{{Puts: 10, Flushes: 2}, {Puts: 10, FlushNs: 5}, nil} {
		if f := FiguresOf(&r, c); f.FlushBusyShare != 0 || f.FlushMeanNs != 0 {
			t.Errorf("%+v: busy %v, mean %v, want none", c, f.FlushBusyShare, f.FlushMeanNs)
		}
	}
}

func TestFiguresOfOpenLoop(t *testing.T) {
	r := load.Result{Workload: load.Latency, Messages: 8, Arrivals: 10, Unstarted: 2, ElapsedNs: 1e9, WindowNs: 1e9,
		Service: histogramOf(1, 1, 1, 1, 1, 1, 1, 1), Latency: histogramOf(1, 1, 1, 1, 1, 1, 1, 1, 900, 1000), DispatchLag: histogramOf(3)}
	f := FiguresOf(&r, nil)
	if f.OfferedPerSec != 10 || f.UnstartedFraction != 0.2 || f.ServiceP50Ns == 0 || f.P99Ns < 900_000 || f.CPUSecPerGiB != 0 {
		t.Errorf("open-loop figures %+v", f)
	}
	e := r
	e.Workload, e.Delivery, e.Delivered = "e2e", histogramOf(50, 60), 5
	if f := FiguresOf(&e, nil); f.MsgsPerSec != 5 || f.P50Ns > 51_000 || f.UnstartedFraction != 0.2 {
		t.Errorf("e2e is an open loop with delivery latency: %+v", f)
	}
}

func TestSummarize(t *testing.T) {
	var fs []Figures
	for _, v := range []float64{300, 100, 200, 500, 400} {
		fs = append(fs, Figures{MsgsPerSec: v, P99Ns: int64(v)})
	}
	s := Summarize(fs)
	if s.Median.MsgsPerSec != 300 || s.CILow.MsgsPerSec != 100 || s.CIHigh.MsgsPerSec != 500 || s.Min.P99Ns != 100 || s.Max.P99Ns != 500 || s.CILevel != 0.9375 {
		t.Errorf("summary %+v", s)
	}
}

func TestWriteReadAndOldSchemas(t *testing.T) {
	dir := t.TempDir()
	f := &RunFile{Schema: SchemaVersion, ID: "x", Cells: []Cell{{Name: "c", Repeats: []Repeat{{Result: load.Result{Service: histogramOf(1, 2)}}}}}}
	if err := Write(dir, f); err != nil {
		t.Fatal(err)
	}
	back, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(f)
	b, _ := json.Marshal(back)
	if !bytes.Equal(a, b) {
		t.Fatal("run file changed in a round trip")
	}
	for _, c := range []struct {
		schema int
		want   string
	}{{1, "bytes accepted into buffers"}, {6, "newer than this mqbench"}, {0, "schema 0"}} {
		p := filepath.Join(t.TempDir(), "run.json")
		if err := os.WriteFile(p, []byte(`{"schema": `+string(rune('0'+c.schema))+`, "cells": []}`), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Read(filepath.Dir(p))
		if !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("schema %d: %v, want ErrSchema saying %q", c.schema, err, c.want)
		}
	}
}

// TestOlderSchemas: schema 3 reads as written, with a note saying what
// its durable figure counted, schema 4 with one on its group-commit
// limits; schema 2 is refused (no conversion).
func TestOlderSchemas(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, &RunFile{Schema: 3, ID: "old"}); err != nil {
		t.Fatal(err)
	}
	back, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if back.Schema != 3 || len(back.Notes) != 1 || !strings.Contains(back.Notes[0], "warm-up backlog") {
		t.Fatalf("schema 3: schema %d, notes %v", back.Schema, back.Notes)
	}
	// Schema 4: its two-in-flight group-commit limits wrote N records in
	// each writer; the note says so (and only where it has them).
	for _, limits := range [][]Limit{nil, {{Name: LimitGroupCommit, Producers: 16, InFlight: 1}, {Name: LimitGroupCommit, Producers: 16, InFlight: 2}}} {
		if err := Write(dir, &RunFile{Schema: 4, ID: "four", Limits: limits}); err != nil {
			t.Fatal(err)
		}
		back, err := Read(dir)
		if err != nil {
			t.Fatal(err)
		}
		if noted := slices.ContainsFunc(back.Notes, func(n string) bool { return strings.Contains(n, "2N outstanding") }); back.Schema != 4 || noted != (limits != nil) {
			t.Fatalf("schema 4 with %d limits: schema %d, notes %v", len(limits), back.Schema, back.Notes)
		}
	}
	if err := Write(dir, &RunFile{Schema: 2, ID: "older"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir); !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "schema 2") {
		t.Fatalf("schema 2: %v", err)
	}
}

func TestCellNames(t *testing.T) {
	for _, c := range []struct {
		cell Cell
		want string
	}{
		{Cell{Workload: "throughput", Backend: "mmap", SizeBytes: 1024, Flush: "sync", Producers: 16, Pressure: "none"}, "throughput-mmap-1024-sync-p16"},
		{Cell{Workload: "latency", Backend: "nats", SizeBytes: 128, Flush: "async", RatePerSec: 50000, Pressure: "dirty", Target: "vda"}, "latency-nats-128-async-r50000-dirty@vda"},
		{Cell{Workload: "throughput", Backend: "mmap", SizeBytes: 1024, Flush: "async", Producers: 4, TwinOf: "x", Policy: "async fi=50ms"}, "throughput-mmap-1024-async-p4-async_fi=50ms-aa"},
		{Cell{Workload: "throughput", Backend: "mmap", SizeBytes: 1024, Flush: "async", Producers: 16, Replication: "sync"}, "throughput-mmap-1024-async-p16-hasync"},
		{Cell{Workload: "latency", Backend: "uring-direct", SizeBytes: 1024, Flush: "sync", RatePerSec: 1000, Replication: "async", HADelayNs: 1e6}, "latency-uring-direct-1024-sync-r1000-haasync-d1ms"},
	} {
		if got := CellName(&c.cell, true); got != c.want {
			t.Errorf("CellName = %q, want %q", got, c.want)
		}
	}
}

// TestTailFromTheMergedRepeats: five repeats of 1000 samples at 100 µs,
// one of which stalled 10 times for 20 ms. The median of the per-repeat
// p99.9s is 100 µs (the stall vanishes); the merged p99.9 is 20 ms, with
// 5 samples above it — a bound — while the merged p99 (50 above) is a
// figure, and the per-repeat spread shows the stalled repeat.
func TestTailFromTheMergedRepeats(t *testing.T) {
	var hs []*load.Histogram
	var fs []Figures
	for r := range 5 {
		h := load.NewHistogram()
		for i := range 1000 {
			d := 100 * time.Microsecond
			if r == 2 && i >= 990 {
				d = 20 * time.Millisecond
			}
			h.Record(d)
		}
		hs = append(hs, h)
		res := load.Result{Workload: load.Throughput, Messages: 1000, ElapsedNs: 1e9, Service: h}
		fs = append(fs, FiguresOf(&res, nil))
	}
	if m := Summarize(fs).Median.P999Ns; m > int64(101*time.Microsecond) {
		t.Fatalf("median of the repeats' p99.9 %v: the fixture is wrong", time.Duration(m))
	}
	tail := TailOf(hs)
	if tail.Count != 5000 {
		t.Fatalf("count %d, want 5000", tail.Count)
	}
	p999, p99, mx := tail.Point("p999Ns"), tail.Point("p99Ns"), tail.Point("maxNs")
	if d := time.Duration(p999.ValueNs); d < 19*time.Millisecond || d > 21*time.Millisecond {
		t.Errorf("merged p99.9 %v, want 20 ms", d)
	}
	if p999.Above != 5 || !p999.Bound {
		t.Errorf("p99.9: %d above, bound %v; want 5, a bound", p999.Above, p999.Bound)
	}
	if d := time.Duration(p99.ValueNs); p99.Above != 50 || p99.Bound || d > 101*time.Microsecond {
		t.Errorf("p99: %v with %d above, bound %v; want 100 µs, 50 above, a figure", d, p99.Above, p99.Bound)
	}
	if p999.RepeatMinNs > int64(101*time.Microsecond) || p999.RepeatMaxNs < int64(19*time.Millisecond) {
		t.Errorf("p99.9 spread over the repeats %v–%v, want 100 µs–20 ms", time.Duration(p999.RepeatMinNs), time.Duration(p999.RepeatMaxNs))
	}
	if !mx.Bound || mx.Above != 0 || mx.ValueNs < int64(19*time.Millisecond) {
		t.Errorf("max %+v", mx)
	}
	// The interval holds the value and, for the figure, is finite.
	if iv := p99.Interval(); iv.Lo > iv.Median || iv.Hi < iv.Median || iv.Level != CILevel {
		t.Errorf("p99 interval %+v", iv)
	}
	if TailOf(nil) != nil || TailOf([]*load.Histogram{load.NewHistogram()}) != nil {
		t.Error("a tail of nothing recorded")
	}
}

// TestProbeInFlightBound: a saturated probe that achieved at least 90 %
// of what its requests in flight allow was limited by the generator.
func TestProbeInFlightBound(t *testing.T) {
	// 8 in flight at a mean service time of 1 ms: at most 8000/s.
	p := Probe{RatePerSec: 10000, Status: StatusSaturated, AchievedPerSec: 7900, InFlightCapPerSec: 8000}
	if !p.InFlightBound() {
		t.Error("7900 of 8000/s saturated: not called in-flight bound")
	}
	p.AchievedPerSec = 4000 // the store, not the workers
	if p.InFlightBound() {
		t.Error("4000 of 8000/s called in-flight bound")
	}
	p.Status, p.AchievedPerSec = StatusOK, 7900
	if p.InFlightBound() {
		t.Error("a sustained probe called in-flight bound")
	}
}
