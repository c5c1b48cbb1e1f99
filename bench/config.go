// Package bench is mqbench, the harness as a library: the backend × size ×
// flush matrix of workloads (bench/load), the limits measured in the same
// run (page-cache copy ceiling, device probes, fio), the peers (NATS
// JetStream, pebble; run through the mqpeer command of the bench/peers
// module), and the outputs: run.json, .hgrm files, bench.txt, summary.md
// with plots, and pprof profiles with their top functions.
package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/engine"
)

// Config is a run's full configuration, recorded in run.json.
type Config struct {
	Backends  []string `json:"backends"`
	Sizes     []int    `json:"sizes"`
	Flushes   []string `json:"flushes"`
	Workloads []string `json:"workloads"`
	// Pressures is always ["none"] for now (issue 9 adds dirty and swap).
	Pressures []string      `json:"pressures"`
	Peers     []string      `json:"peers"`
	Producers int           `json:"producers"`
	InFlight  int           `json:"inFlight"`
	Duration  time.Duration `json:"durationNs"`
	Warmup    time.Duration `json:"warmupNs"`
	Repeat    int           `json:"repeat"`
	// RateFraction sets a latency cell's target rate to this fraction of the
	// median msgs/s of its throughput cell; Rate, when > 0, fixes it.
	RateFraction float64 `json:"rateFraction"`
	Rate         float64 `json:"rate,omitempty"`
	Arrival      string  `json:"arrival"`
	Seed         uint64  `json:"seed"`

	// Dir is where stores and probe files are created (a fresh temporary
	// directory inside it, removed at the end).
	Dir string `json:"dir"`
	// Out is the results root; the run writes Out/<id>/.
	Out string `json:"out"`
	// ProfilesRoot is the profiles root; the run writes ProfilesRoot/<id>/.
	ProfilesRoot string `json:"profilesRoot"`
	// Profile takes CPU, heap, block and mutex profiles of each throughput
	// cell in an extra, unmeasured run of ProfileDuration.
	Profile         bool          `json:"profile"`
	ProfileDuration time.Duration `json:"profileDurationNs"`

	NoLimits bool `json:"noLimits"`
	// CopyCeilingBytes is the mapped file size of the copy ceiling;
	// DeviceProbeBytes what the O_DIRECT probe writes; SyncProbeCount the
	// number of 4 KiB write+fdatasync samples.
	CopyCeilingBytes int64 `json:"copyCeilingBytes"`
	DeviceProbeBytes int64 `json:"deviceProbeBytes"`
	SyncProbeCount   int   `json:"syncProbeCount"`
	// PeerCommand is a built mqpeer binary; empty builds it from the
	// bench/peers module found above the working directory.
	PeerCommand string `json:"peerCommand,omitempty"`

	Store StoreConfig `json:"store"`
}

// StoreConfig are the engine options every store cell uses (zero: the
// engine's RocketMQ defaults).
type StoreConfig struct {
	SegmentSizeBytes      int64         `json:"segmentSizeBytes"`
	FlushInterval         time.Duration `json:"flushIntervalNs,omitempty"`
	FlushLeastPages       int           `json:"flushLeastPages,omitempty"`
	FlushThoroughInterval time.Duration `json:"flushThoroughIntervalNs,omitempty"`
	SyncFlushTimeout      time.Duration `json:"syncFlushTimeoutNs,omitempty"`
	CommitInterval        time.Duration `json:"commitIntervalNs,omitempty"`
	CommitLeastPages      int           `json:"commitLeastPages,omitempty"`
}

// DefaultBackends is every backend the engine offers except "mem" (it
// writes nothing to disk; name it explicitly to see the engine's own cost).
func DefaultBackends() []string {
	var out []string
	for _, b := range engine.BackendNames() {
		if b != "mem" {
			out = append(out, b)
		}
	}
	return out
}

// DefaultConfig is the full default run.
func DefaultConfig() Config {
	return Config{
		Backends: DefaultBackends(), Sizes: []int{128, 1024, 4096}, Flushes: []string{"async", "sync"},
		Workloads: []string{string(load.Throughput), string(load.Latency)}, Pressures: []string{"none"},
		Peers: []string{"nats", "pebble"}, Producers: 4, InFlight: 8, Duration: 5 * time.Second,
		Warmup: time.Second, Repeat: 3, RateFraction: 0.5, Arrival: string(load.Poisson), Seed: 1,
		Dir: ".", Out: "results", ProfilesRoot: "profiles", Profile: true, ProfileDuration: time.Second,
		CopyCeilingBytes: 256 << 20, DeviceProbeBytes: 1 << 30, SyncProbeCount: 1000,
		Store: StoreConfig{SegmentSizeBytes: 256 << 20},
	}
}

// Validate checks a configuration.
func (c *Config) Validate() error {
	known := engine.BackendNames()
	for _, b := range c.Backends {
		if !slices.Contains(known, b) {
			return fmt.Errorf("backend %q: want one of %s", b, strings.Join(known, ", "))
		}
	}
	for _, s := range c.Sizes {
		if s <= 0 || s > 4<<20 {
			return fmt.Errorf("size %d: want 1 byte to 4 MiB", s)
		}
	}
	for _, f := range c.Flushes {
		if _, err := engine.ParseFlushMode(f); err != nil || f == "" {
			return fmt.Errorf("flush %q: want async or sync", f)
		}
	}
	for _, w := range c.Workloads {
		if w != string(load.Throughput) && w != string(load.Latency) {
			return fmt.Errorf("workload %q: want throughput or latency (consume, e2e and recovery are not built yet)", w)
		}
	}
	for _, p := range c.Pressures {
		if p != "none" {
			return fmt.Errorf("pressure %q: only none is built yet", p)
		}
	}
	for _, p := range c.Peers {
		if p != "nats" && p != "pebble" {
			return fmt.Errorf("peer %q: want nats or pebble", p)
		}
	}
	if _, err := load.ParseArrival(c.Arrival); err != nil {
		return err
	}
	switch {
	case len(c.Backends)+len(c.Peers) == 0:
		return fmt.Errorf("no backend and no peer to run")
	case len(c.Sizes) == 0 || len(c.Flushes) == 0 || len(c.Workloads) == 0:
		return fmt.Errorf("sizes, flushes and workloads must not be empty")
	case c.Producers <= 0 || c.InFlight <= 0:
		return fmt.Errorf("producers %d, in flight %d: want > 0", c.Producers, c.InFlight)
	case c.Duration <= 0 || c.Warmup < 0:
		return fmt.Errorf("duration %v, warmup %v: want duration > 0, warmup ≥ 0", c.Duration, c.Warmup)
	case c.Repeat <= 0:
		return fmt.Errorf("repeat %d: want ≥ 1", c.Repeat)
	case c.Rate < 0 || c.RateFraction <= 0 || c.RateFraction > 1:
		return fmt.Errorf("rate %v, rate fraction %v: want rate ≥ 0 and 0 < fraction ≤ 1", c.Rate, c.RateFraction)
	case c.Store.SegmentSizeBytes < 1<<20:
		return fmt.Errorf("segment size %d: want ≥ 1 MiB", c.Store.SegmentSizeBytes)
	}
	return nil
}

// spec returns the load spec of one cell.
func (c *Config) spec(workload string, sizeBytes int, rate float64) load.Spec {
	return load.Spec{Workload: load.Workload(workload), SizeBytes: sizeBytes, Producers: c.Producers, InFlight: c.InFlight,
		Duration: c.Duration, Warmup: c.Warmup, RatePerSec: rate, Arrival: load.Arrival(c.Arrival), Seed: c.Seed}
}
