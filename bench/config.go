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
	// Pressures: none, dirty, swap, both (dirty and swap at once); every
	// but none needs root.
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
	// directory inside it, removed at the end). Dirs lists every target
	// directory (--dir repeated); Dir is the first.
	Dir  string   `json:"dir"`
	Dirs []string `json:"dirs,omitempty"`
	// Emulate adds emulated devices: "hdd" is a loop-device ext4 file system
	// whose I/O is throttled with cgroup v1 blkio limits to HDDBandwidthBytes
	// per second and HDDIOPS (a 7200 rpm disk), in an image of
	// EmulateImageBytes on the first target's file system. Root only.
	Emulate           []string `json:"emulate,omitempty"`
	EmulateImageBytes int64    `json:"emulateImageBytes,omitempty"`
	HDDBandwidthBytes int64    `json:"hddBandwidthBytes,omitempty"`
	HDDIOPS           int      `json:"hddIops,omitempty"`

	// ConsumeBytes is the CommitLog the consume workload reads back;
	// RecoveryBytes the CommitLog a recovery cell's killed producer leaves.
	ConsumeBytes  int64 `json:"consumeBytes,omitempty"`
	RecoveryBytes int64 `json:"recoveryBytes,omitempty"`

	// Dirty pressure: vm.dirty_bytes and vm.dirty_background_bytes during
	// the cells, and the size of the file the neighbour overwrites.
	DirtyBytes           int64 `json:"dirtyBytes,omitempty"`
	DirtyBackgroundBytes int64 `json:"dirtyBackgroundBytes,omitempty"`
	DirtyFileBytes       int64 `json:"dirtyFileBytes,omitempty"`
	// Swap pressure: the swapfile made when no swap is on, the memory
	// cgroup limit of the store (and the neighbour, in the same cgroup), and
	// the anonymous memory the neighbour keeps touching.
	SwapFileBytes      int64 `json:"swapFileBytes,omitempty"`
	SwapLimitBytes     int64 `json:"swapLimitBytes,omitempty"`
	SwapNeighbourBytes int64 `json:"swapNeighbourBytes,omitempty"`
	// StateDir holds the state file recording every system change.
	StateDir string `json:"stateDir,omitempty"`

	// Policies, when set, replaces Flushes × Store by a sweep's grid of
	// flush policies.
	Policies []Policy `json:"policies,omitempty"`
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
		Store:             StoreConfig{SegmentSizeBytes: 256 << 20},
		EmulateImageBytes: 4 << 30, HDDBandwidthBytes: 150e6, HDDIOPS: 150,
		ConsumeBytes: 256 << 20, RecoveryBytes: 1 << 30,
		DirtyBytes: 32 << 20, DirtyBackgroundBytes: 8 << 20, DirtyFileBytes: 1 << 30,
		SwapFileBytes: 1 << 30, SwapLimitBytes: 512 << 20, SwapNeighbourBytes: 512 << 20,
		StateDir: DefaultStateDir,
	}
}

// Policy is one flush policy of a sweep: a flush mode and the engine
// options that go with it.
type Policy struct {
	Name  string      `json:"name"`
	Flush string      `json:"flush"`
	Store StoreConfig `json:"store"`
}

// targetDirs is every target directory.
func (c *Config) targetDirs() []string {
	if len(c.Dirs) > 0 {
		return c.Dirs
	}
	return []string{c.Dir}
}

// policies is the sweep grid, or one policy per flush mode with the run's
// store options (named "" so cell names stay as they were).
func (c *Config) policies() []Policy {
	if len(c.Policies) > 0 {
		return c.Policies
	}
	var out []Policy
	for _, f := range c.Flushes {
		out = append(out, Policy{Flush: f, Store: c.Store})
	}
	return out
}

func (c *Config) hasWorkload(w string) bool { return slices.Contains(c.Workloads, w) }

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
		if !slices.Contains([]string{string(load.Throughput), string(load.Latency), WorkloadConsume, WorkloadE2E, WorkloadRecovery}, w) {
			return fmt.Errorf("workload %q: want throughput, latency, consume, e2e or recovery", w)
		}
	}
	for _, p := range c.Pressures {
		if !slices.Contains([]string{PressureNone, PressureDirty, PressureSwap, PressureBoth}, p) {
			return fmt.Errorf("pressure %q: want none, dirty, swap or both", p)
		}
	}
	for _, e := range c.Emulate {
		if e != "hdd" {
			return fmt.Errorf("emulate %q: want hdd", e)
		}
	}
	for _, p := range c.Policies {
		if _, err := engine.ParseFlushMode(p.Flush); err != nil || p.Flush == "" {
			return fmt.Errorf("policy %q: flush %q: want async or sync", p.Name, p.Flush)
		}
	}
	if len(c.Pressures) == 0 {
		return fmt.Errorf("pressures must not be empty (none is the baseline)")
	}
	if (c.hasWorkload(WorkloadConsume) && c.ConsumeBytes < 1<<20) || (c.hasWorkload(WorkloadRecovery) && c.RecoveryBytes < 1<<20) {
		return fmt.Errorf("consume bytes %d, recovery bytes %d: want ≥ 1 MiB", c.ConsumeBytes, c.RecoveryBytes)
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
	if workload == WorkloadE2E {
		workload = string(load.Latency) // e2e's producers are the open loop
	}
	return load.Spec{Workload: load.Workload(workload), SizeBytes: sizeBytes, Producers: c.Producers, InFlight: c.InFlight,
		Duration: c.Duration, Warmup: c.Warmup, RatePerSec: rate, Arrival: load.Arrival(c.Arrival), Seed: c.Seed,
		SeriesInterval: SampleInterval}
}
