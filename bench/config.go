package bench

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench/host"
	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/hostctl"
	"github.com/mqstore/mqstore/internal/rmqmsg"
	"github.com/mqstore/mqstore/mappedfile"
)

// Config is a run's configuration (recorded in run.json).
type Config = runfile.Config

// StoreConfig are the engine options of the store cells.
type StoreConfig = runfile.StoreConfig

// Policy is one flush policy of a sweep.
type Policy = runfile.Policy

// The workloads beyond throughput and latency.
const (
	WorkloadConsume  = "consume"
	WorkloadE2E      = "e2e"
	WorkloadRecovery = "recovery"
)

// Replication axis values: no slave, ASYNC_MASTER, SYNC_MASTER.
const (
	ReplicationNone  = "none"
	ReplicationAsync = "async"
	ReplicationSync  = "sync"
)

// replications is the replication axis (none when not given).
func replications(c *Config) []string {
	if len(c.Replication) == 0 {
		return []string{ReplicationNone}
	}
	return c.Replication
}

// replicationRole is the master's role of a replication value.
func replicationRole(repl string) engine.BrokerRole {
	if repl == ReplicationSync {
		return engine.SyncMaster
	}
	return engine.AsyncMaster
}

// Pressure names.
const (
	PressureNone  = "none"
	PressureDirty = "dirty"
	PressureSwap  = "swap"
	PressureBoth  = "both"
)

// DefaultBackends is every backend the engine offers except the volatile
// ones ("mem" writes nothing to disk; name it explicitly to see the
// engine's own cost).
func DefaultBackends() []string {
	var out []string
	for _, reg := range engine.Backends() {
		if !reg.Volatile {
			out = append(out, reg.Name)
		}
	}
	return out
}

// DefaultConfig is the full default run. Duration 0: the window is chosen
// from the device and the buffers (see chooseWindow). The peers are named
// as mqpeer knows them (bench does not hard-code their labels or
// versions); the rates are the open-loop ladder shared by every backend
// and peer.
func DefaultConfig() Config {
	return Config{
		Backends: DefaultBackends(), Sizes: []int{128, 1024, 4096}, Flushes: []string{"async", "sync"},
		Workloads: []string{string(load.Throughput), string(load.Latency)}, Pressures: []string{PressureNone},
		Peers: []string{"pebble-wal", "pebble", "nats"}, Producers: []int{1, 4, 16, 64, 256}, InFlight: 0, Warmup: 500 * time.Millisecond, Repeat: 5,
		Rates: []float64{1000, 10000, 50000, 100000, 200000}, Arrival: string(load.Poisson), Seed: 1, SearchProbes: 6, SearchDuration: time.Second, AA: true,
		Replication: []string{ReplicationNone},
		Dir:         ".", Out: "results", ProfilesRoot: "profiles", Profile: true, ProfileDuration: time.Second,
		DeviceProbeBytes: 1 << 30, SyncProbeCount: 1000,
		Store:             StoreConfig{SegmentSizeBytes: 256 << 20, Message: MessageBare},
		EmulateImageBytes: 4 << 30,
		ConsumeBytes:      256 << 20, RecoveryBytes: 1 << 30, ColdReads: true,
		DirtyBytes: 32 << 20, DirtyBackgroundBytes: 8 << 20, DirtyFileBytes: 1 << 30,
		SwapFileBytes: 1 << 30, SwapLimitBytes: 512 << 20, SwapNeighbourBytes: 512 << 20,
		StateDir: hostctl.DefaultStateDir,
	}
}

func hasWorkload(c *Config, w string) bool { return slices.Contains(c.Workloads, w) }

// hasFlush reports whether the run has cells of a flush mode (among its
// flushes, or its sweep's policies).
func hasFlush(c *Config, mode string) bool {
	return slices.Contains(c.Flushes, mode) || slices.ContainsFunc(c.Policies, func(p Policy) bool { return p.Flush == mode })
}

func hasOpenLoop(c *Config) bool {
	return hasWorkload(c, string(load.Latency)) || hasWorkload(c, WorkloadE2E)
}

// runsUnder reports whether workload w runs under pressure.
func runsUnder(c *Config, w, pressure string) bool {
	if pressure != PressureNone && len(c.PressureWorkloads) > 0 {
		return slices.Contains(c.PressureWorkloads, w) && hasWorkload(c, w)
	}
	return hasWorkload(c, w)
}

// policiesFor is the sweep's policies for backend, or one policy per flush
// mode with the run's store options (named "" so cell names stay short).
func policiesFor(c *Config, backend string) []Policy {
	if len(c.Policies) > 0 {
		var out []Policy
		for _, p := range c.Policies {
			if p.Backend == "" || p.Backend == backend {
				out = append(out, p)
			}
		}
		return out
	}
	var out []Policy
	for _, f := range c.Flushes {
		out = append(out, Policy{Flush: f, Store: c.Store})
	}
	return out
}

// Validate checks a configuration; the error names the bad value.
func Validate(c *Config) error {
	for _, check := range []func(*Config) error{validateNames, validateReplication, validateNumbers, validateSizes, validateStoreOptions} {
		if err := check(c); err != nil {
			return err
		}
	}
	return nil
}

// validateStoreOptions checks the store options as engine.Open would, for
// every backend and flush mode of the run, before anything is measured (a
// bad one would otherwise fail every cell after the limits ran).
func validateStoreOptions(c *Config) error {
	for _, backend := range c.Backends {
		for _, flush := range c.Flushes {
			o, err := storeOptions(c.Store, backend, flush)
			if err == nil {
				err = o.Validate()
			}
			if err != nil {
				return fmt.Errorf("store options for %s, %s flush: %w", backend, flush, err)
			}
		}
	}
	return nil
}

// oneOf: every value of got is one of want.
func oneOf(what string, got []string, want ...string) error {
	for _, g := range got {
		if !slices.Contains(want, g) {
			return fmt.Errorf("%s %q: want one of %s", what, g, strings.Join(want, ", "))
		}
	}
	return nil
}

// validateNames checks the lists of names: backends, flushes, workloads,
// pressures, emulated devices, policies, the message and backend options.
func validateNames(c *Config) error {
	var flushes []string
	for _, p := range c.Policies {
		flushes = append(flushes, p.Flush)
	}
	var message []string
	if c.Store.Message != "" {
		message = []string{c.Store.Message}
	}
	for _, err := range []error{
		oneOf("backend", c.Backends, engine.BackendNames()...),
		oneOf("message", message, MessageKinds()...),
		oneOf("flush", c.Flushes, "async", "sync"),
		oneOf("workload", c.Workloads, string(load.Throughput), string(load.Latency), WorkloadConsume, WorkloadE2E, WorkloadRecovery),
		oneOf("pressure workload", c.PressureWorkloads, string(load.Throughput), string(load.Latency), WorkloadE2E),
		oneOf("pressure", c.Pressures, PressureNone, PressureDirty, PressureSwap, PressureBoth),
		oneOf("emulate", c.Emulate, "hdd"),
		oneOf("policy flush", flushes, "async", "sync"),
		oneOf("replication", c.Replication, ReplicationNone, ReplicationAsync, ReplicationSync),
	} {
		if err != nil {
			return err
		}
	}
	if _, err := engine.ParseBatchingMode(c.Store.GroupCommitBatching); err != nil {
		return fmt.Errorf("--group-commit-batching: %w", err)
	}
	for name, js := range c.Store.BackendOptions {
		if _, err := engine.DecodeBackendOptions(name, []byte(js)); err != nil {
			return fmt.Errorf("--backend-options %s=%s: %w", name, js, err)
		}
	}
	if _, err := load.ParseArrival(c.Arrival); err != nil {
		return err
	}
	switch {
	case len(c.Pressures) == 0:
		return fmt.Errorf("pressures must not be empty (none is the baseline)")
	case len(c.Backends)+len(c.Peers) == 0:
		return fmt.Errorf("no backend and no peer to run")
	case len(c.Sizes) == 0 || len(c.Flushes) == 0 || len(c.Workloads) == 0:
		return fmt.Errorf("sizes, flushes and workloads must not be empty")
	case hasWorkload(c, string(load.Throughput)) && len(c.Producers) == 0:
		return fmt.Errorf("the throughput workload needs a --producers list")
	case hasOpenLoop(c) && len(c.Rates) == 0:
		return fmt.Errorf("the latency and e2e workloads need a --rates ladder")
	}
	return nil
}

// validateReplication checks the replication axis and what needs it.
func validateReplication(c *Config) error {
	replicated := slices.ContainsFunc(c.Replication, func(r string) bool { return r != ReplicationNone })
	volatile := ""
	for _, b := range c.Backends {
		if reg, err := mappedfile.Registered().Lookup(b); err == nil && reg.Volatile {
			volatile = b
		}
	}
	switch {
	case c.HADelay < 0:
		return fmt.Errorf("ha delay %v: want ≥ 0", c.HADelay)
	case c.HADelay > 0 && !replicated:
		return fmt.Errorf("--ha-delay %v needs a slave: add async or sync to --replication", c.HADelay)
	case c.SlaveDir != "" && !replicated:
		return fmt.Errorf("--slave-dir %s needs a slave: add async or sync to --replication", c.SlaveDir)
	case replicated && volatile != "":
		return fmt.Errorf("replication with the %s backend: a slave in another process cannot share its in-memory files; leave it out of --backends or use --replication none", volatile)
	}
	if c.SlaveDir != "" {
		if st, err := os.Stat(c.SlaveDir); err != nil || !st.IsDir() {
			return fmt.Errorf("--slave-dir %s: not a directory (%v)", c.SlaveDir, err)
		}
	}
	return nil
}

// validateNumbers checks the counts, rates and durations.
func validateNumbers(c *Config) error {
	for _, p := range c.Producers {
		if p <= 0 || p > 4096 {
			return fmt.Errorf("producers %d: want 1 to 4096", p)
		}
	}
	for _, r := range c.Rates {
		if !(r > 0) || r > 1e8 {
			return fmt.Errorf("rate %v msgs/s: want a positive rate up to 10^8", r)
		}
	}
	switch {
	case c.InFlight < 0:
		return fmt.Errorf("in flight %d: want > 0, or 0 to choose it", c.InFlight)
	case c.Duration < 0 || c.Warmup < 0:
		return fmt.Errorf("duration %v, warmup %v: want ≥ 0 (duration 0 chooses it)", c.Duration, c.Warmup)
	case c.Repeat <= 0:
		return fmt.Errorf("repeat %d: want ≥ 1", c.Repeat)
	case c.SearchProbes < 0 || (c.SearchProbes > 0 && c.SearchDuration <= 0):
		return fmt.Errorf("search probes %d of %v: want probes ≥ 0 and a positive duration", c.SearchProbes, c.SearchDuration)
	case c.ProfileProducers < 0 || (c.ProfileProducers > 0 && !slices.Contains(c.Producers, c.ProfileProducers)):
		return fmt.Errorf("--profile-producers %d: want one of --producers %v, or 0 for the first", c.ProfileProducers, c.Producers)
	}
	return validateRecycling(c)
}

// validateRecycling checks --recycle-segments (the run's and a sweep's
// policies'): not negative, and only with backends whose segments are
// files on disk.
func validateRecycling(c *Config) error {
	stores := []StoreConfig{c.Store}
	for _, p := range c.Policies {
		stores = append(stores, p.Store)
	}
	for _, st := range stores {
		n := st.RecycleSegments
		if n < 0 {
			return fmt.Errorf("--recycle-segments %d: want ≥ 0 (0: no recycling)", n)
		}
		for _, b := range c.Backends {
			if err := engine.RecyclingRefusal(b); n > 0 && err != nil {
				return fmt.Errorf("--recycle-segments %d with the %s backend: %v; leave it out of --backends or use --recycle-segments 0", n, b, err)
			}
		}
	}
	return nil
}

// validateSizes checks the byte sizes: bodies, segments, the consume and
// recovery logs, the limits' files.
func validateSizes(c *Config) error {
	for _, s := range c.Sizes {
		if s <= 0 || s > 4<<20 {
			return fmt.Errorf("size %d: want 1 byte to 4 MiB", s)
		}
	}
	switch {
	case (hasWorkload(c, WorkloadConsume) && c.ConsumeBytes < 1<<20) || (hasWorkload(c, WorkloadRecovery) && c.RecoveryBytes < 1<<20):
		return fmt.Errorf("consume bytes %d, recovery bytes %d: want ≥ 1 MiB", c.ConsumeBytes, c.RecoveryBytes)
	case c.Store.SegmentSizeBytes < 1<<20:
		return fmt.Errorf("segment size %d: want ≥ 1 MiB", c.Store.SegmentSizeBytes)
	case !c.NoLimits && (c.DeviceProbeBytes < 1<<20 || c.SyncProbeCount <= 0):
		return fmt.Errorf("limits: probe %d bytes, %d sync probes: want ≥ 1 MiB, > 0", c.DeviceProbeBytes, c.SyncProbeCount)
	}
	return nil
}

// Open-loop workers when --inflight is 0: InFlightPerProducer × the
// largest closed-loop producer count, at least MinAutoInFlight.
const (
	MinAutoInFlight     = 64
	InFlightPerProducer = 2
)

// EffectiveInFlight is the open loop's worker count: the given one, or
// (0) enough that the open loop is not what limits a rate search. An open
// loop with W requests in flight of mean service time S offers at most
// W ÷ S (Little's law); the closed loop with P producers completes P ÷ S,
// so W = 2 × the largest P lets the search go to twice the best closed
// loop before the generator, not the store, is the limit.
func EffectiveInFlight(c *Config) int {
	if c.InFlight > 0 {
		return c.InFlight
	}
	p := 0
	if len(c.Producers) > 0 {
		p = slices.Max(c.Producers)
	}
	return max(MinAutoInFlight, InFlightPerProducer*p)
}

func spec(c *Config, workload string, sizeBytes, producers int, rate float64, window time.Duration, seed uint64) load.Spec {
	if workload == WorkloadE2E {
		workload = string(load.Latency) // e2e's producers are the open loop
	}
	return load.Spec{Workload: load.Workload(workload), SizeBytes: sizeBytes, Producers: producers, InFlight: c.InFlight,
		Duration: window, Warmup: c.Warmup, RatePerSec: rate, Arrival: load.Arrival(c.Arrival), Seed: seed,
		SeriesInterval: host.SampleInterval}
}

// repeatSeed is the arrivals' seed of repeat i: the same for every system
// in that repeat, different between repeats (splitmix64 of seed and i).
func repeatSeed(seed uint64, i int) uint64 {
	return rmqmsg.Mix64(seed + uint64(i+1)*0x9E3779B97F4A7C15)
}
