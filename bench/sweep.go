package bench

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/mappedfile"
)

// DefaultSweepGrid is mqbench sweep's grid when no --vary is given.
func DefaultSweepGrid() []string {
	return []string{"flush=async,sync", "flush-interval=50ms,500ms", "flush-least-pages=0,4,64", "commit-interval=50ms,200ms", "sync-flush-timeout=5s"}
}

// committing: the backend's Commit moves data (a buffered backend: a
// pwrite, an io_uring write), so the commit service's options change
// something (a write-through backend's Commit is a no-op).
func committing(backend string) bool {
	reg, err := mappedfile.Registered().Lookup(backend)
	return err == nil && reg.Buffered
}

// sweepKeys are the options a grid may vary, with whether they matter for
// async (a), sync (s) or both, which backends they apply to (nil: all), and
// how to set them.
var sweepKeys = map[string]struct {
	modes   string
	applies func(backend string) bool // nil: every backend
	short   string
	set     func(*StoreConfig, string) error
}{
	"flush-interval":          {"a", nil, "fi", durSetter(func(s *StoreConfig) *time.Duration { return &s.FlushInterval })},
	"flush-thorough-interval": {"a", nil, "fti", durSetter(func(s *StoreConfig) *time.Duration { return &s.FlushThoroughInterval })},
	"flush-least-pages":       {"a", nil, "flp", leastPagesSetter(func(s *StoreConfig) *int { return &s.FlushLeastPages })},
	"sync-flush-timeout":      {"s", nil, "gct", durSetter(func(s *StoreConfig) *time.Duration { return &s.SyncFlushTimeout })},
	"group-commit-batching": {"s", nil, "gcb", func(s *StoreConfig, v string) error {
		m, err := engine.ParseBatchingMode(v)
		if err != nil {
			return fmt.Errorf("%q: want auto, merge or convoys", v)
		}
		s.GroupCommitBatching = m.String()
		return nil
	}},
	"commit-interval":    {"as", committing, "ci", durSetter(func(s *StoreConfig) *time.Duration { return &s.CommitInterval })},
	"commit-least-pages": {"as", committing, "clp", leastPagesSetter(func(s *StoreConfig) *int { return &s.CommitLeastPages })},
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

// leastPagesSetter sets a least-pages option: n pages, 0 for "any byte"
// (engine.LeastPagesAny — the engine reads a zero field as its default, 4,
// so "0" and "4" would otherwise run one policy under two names).
func leastPagesSetter(field func(*StoreConfig) *int) func(*StoreConfig, string) error {
	return func(s *StoreConfig, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%q: want an integer ≥ 0 (0: flush whatever is pending)", v)
		}
		if n == 0 {
			n = engine.LeastPagesAny
		}
		*field(s) = n
		return nil
	}
}

// SweepPolicies expands a grid ("option=v1,v2" each) into each backend's
// policies over base. An option is varied only where it applies: flush
// interval and least pages for async, the group-commit timeout for sync,
// the commit options for backends whose commit moves data — so no two
// policies of a backend are the same policy under two names.
func SweepPolicies(grid []string, base StoreConfig, backends []string) ([]Policy, error) {
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
			known := slices.Sorted(maps.Keys(sweepKeys))
			return nil, fmt.Errorf("--vary %q: unknown option; want flush or one of %s", k, strings.Join(known, ", "))
		}
		axes = append(axes, axis{k, vals})
	}
	var out []Policy
	for _, backend := range backends {
		seen := map[string]bool{}
		for _, flush := range flushes {
			mode := flush[:1]
			var rec func(i int, s StoreConfig, name []string) error
			rec = func(i int, s StoreConfig, name []string) error {
				if i == len(axes) {
					n := strings.Join(append([]string{flush}, name...), " ")
					if !seen[n] {
						seen[n] = true
						out = append(out, Policy{Name: n, Backend: backend, Flush: flush, Store: s})
					}
					return nil
				}
				a := axes[i]
				k := sweepKeys[a.key]
				if !strings.Contains(k.modes, mode) || (k.applies != nil && !k.applies(backend)) {
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
	}
	return out, nil
}
