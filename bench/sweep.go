package bench

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// DefaultSweepGrid is mqbench sweep's grid when no --vary is given.
func DefaultSweepGrid() []string {
	return []string{"flush=async,sync", "flush-interval=50ms,500ms", "flush-least-pages=0,4,64", "commit-interval=50ms,200ms", "sync-flush-timeout=5s"}
}

// sweepKeys are the options a grid may vary, with whether they matter for
// async (a), sync (s) or both, and how to set them.
var sweepKeys = map[string]struct {
	modes string
	short string
	set   func(*StoreConfig, string) error
}{
	"flush-interval":          {"a", "fi", durSetter(func(s *StoreConfig) *time.Duration { return &s.FlushInterval })},
	"flush-thorough-interval": {"a", "fti", durSetter(func(s *StoreConfig) *time.Duration { return &s.FlushThoroughInterval })},
	"flush-least-pages":       {"a", "flp", intSetter(func(s *StoreConfig) *int { return &s.FlushLeastPages })},
	"sync-flush-timeout":      {"s", "gct", durSetter(func(s *StoreConfig) *time.Duration { return &s.SyncFlushTimeout })},
	"commit-interval":         {"as", "ci", durSetter(func(s *StoreConfig) *time.Duration { return &s.CommitInterval })},
	"commit-least-pages":      {"as", "clp", intSetter(func(s *StoreConfig) *int { return &s.CommitLeastPages })},
}

func durSetter(field func(*StoreConfig) *time.Duration) func(*StoreConfig, string) error {
	return func(s *StoreConfig, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%q: want a positive duration", v)
		}
		*field(s) = d
		return nil
	}
}

func intSetter(field func(*StoreConfig) *int) func(*StoreConfig, string) error {
	return func(s *StoreConfig, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%q: want an integer ≥ 0", v)
		}
		*field(s) = n
		return nil
	}
}

// SweepPolicies expands a grid ("option=v1,v2" each) into policies over
// base. Options that do not apply to a point's flush mode (flush interval
// for sync, group-commit timeout for async) are not varied for it, so no
// two policies are the same.
func SweepPolicies(grid []string, base StoreConfig) ([]Policy, error) {
	type axis struct {
		key    string
		values []string
	}
	flushes := []string{"async", "sync"}
	var axes []axis
	for _, g := range grid {
		k, v, ok := strings.Cut(g, "=")
		if !ok || v == "" {
			return nil, fmt.Errorf("--vary %q: want option=v1,v2", g)
		}
		vals := strings.Split(v, ",")
		if k == "flush" {
			for _, f := range vals {
				if f != "async" && f != "sync" {
					return nil, fmt.Errorf("--vary flush=%s: want async, sync", v)
				}
			}
			flushes = vals
			continue
		}
		if _, ok := sweepKeys[k]; !ok {
			var known []string
			for n := range sweepKeys {
				known = append(known, n)
			}
			sort.Strings(known)
			return nil, fmt.Errorf("--vary %q: unknown option; want flush or one of %s", k, strings.Join(known, ", "))
		}
		axes = append(axes, axis{k, vals})
	}
	var out []Policy
	seen := map[string]bool{}
	for _, flush := range flushes {
		mode := flush[:1]
		var rec func(i int, s StoreConfig, name []string) error
		rec = func(i int, s StoreConfig, name []string) error {
			if i == len(axes) {
				n := strings.Join(append([]string{flush}, name...), " ")
				if !seen[n] {
					seen[n] = true
					out = append(out, Policy{Name: n, Flush: flush, Store: s})
				}
				return nil
			}
			a := axes[i]
			k := sweepKeys[a.key]
			if !strings.Contains(k.modes, mode) {
				return rec(i+1, s, name)
			}
			for _, v := range a.values {
				s2 := s
				if err := k.set(&s2, v); err != nil {
					return fmt.Errorf("--vary %s: %w", a.key, err)
				}
				if err := rec(i+1, s2, append(slices.Clone(name), k.short+"="+v)); err != nil {
					return err
				}
			}
			return nil
		}
		if err := rec(0, base, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ParetoPoint is one policy's throughput and tail latency.
type ParetoPoint struct {
	Label      string
	MsgsPerSec float64 // higher is better
	P999Ns     int64   // lower is better
}

// ParetoFront returns the indices of the points no other point dominates
// (at least as fast and at most as slow in the tail, better in one), by
// increasing throughput.
func ParetoFront(pts []ParetoPoint) []int {
	var front []int
	for i, p := range pts {
		dominated := false
		for j, q := range pts {
			if i != j && q.MsgsPerSec >= p.MsgsPerSec && q.P999Ns <= p.P999Ns && (q.MsgsPerSec > p.MsgsPerSec || q.P999Ns < p.P999Ns) {
				dominated = true
				break
			}
		}
		if !dominated {
			front = append(front, i)
		}
	}
	sort.Slice(front, func(a, b int) bool { return pts[front[a]].MsgsPerSec < pts[front[b]].MsgsPerSec })
	return front
}

// sweepSeries groups a run's policies per backend × size × target ×
// pressure: each point is the throughput cell's msgs/s and the latency
// cell's p99.9 (the throughput cell's service p99.9 when no latency cell).
type sweepSeries struct {
	key    string
	points []ParetoPoint
	front  []int
}

func sweepOf(f *RunFile) []sweepSeries {
	if len(f.Config.Policies) == 0 {
		return nil
	}
	byKey := map[string]*sweepSeries{}
	var order []string
	thr := map[string]*Cell{}
	lat := map[string]*Cell{}
	for i := range f.Cells {
		c := &f.Cells[i]
		if c.Policy == "" || c.Status != StatusOK {
			continue
		}
		k := fmt.Sprintf("%s %s %s pressure=%s", c.Backend, sizeLabel(c.SizeBytes), c.Target, c.Pressure)
		switch c.Workload {
		case "throughput":
			thr[k+"|"+c.Policy] = c
		case "latency":
			lat[k+"|"+c.Policy] = c
		default:
			continue
		}
		if _, ok := byKey[k]; !ok {
			byKey[k] = &sweepSeries{key: k}
			order = append(order, k)
		}
	}
	var out []sweepSeries
	for _, k := range order {
		s := byKey[k]
		for _, p := range f.Config.Policies {
			t := thr[k+"|"+p.Name]
			if t == nil {
				continue
			}
			p999 := t.P999Ns
			if l := lat[k+"|"+p.Name]; l != nil {
				p999 = l.P999Ns
			}
			s.points = append(s.points, ParetoPoint{Label: p.Name, MsgsPerSec: t.MsgsPerSec, P999Ns: p999})
		}
		s.front = ParetoFront(s.points)
		out = append(out, *s)
	}
	return out
}
