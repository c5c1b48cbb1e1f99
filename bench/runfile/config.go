package runfile

import "time"

// Config is a run's full configuration, recorded in run.json.
type Config struct {
	Backends  []string `json:"backends"`
	Sizes     []int    `json:"sizes"`
	Flushes   []string `json:"flushes"`
	Workloads []string `json:"workloads"`
	// Pressures: none, dirty, swap, both (dirty and swap at once); every
	// but none needs root.
	Pressures []string `json:"pressures"`
	// PressureWorkloads are the workloads run under a pressure other than
	// none (empty: Workloads).
	PressureWorkloads []string `json:"pressureWorkloads,omitempty"`
	// Peers are passed to mqpeer --peer as they are.
	Peers []string `json:"peers"`
	// Producers are the closed-loop producer counts: one throughput cell
	// each.
	Producers []int `json:"producers"`
	// InFlight is the open loop's worker count.
	InFlight int `json:"inFlight"`
	// Duration is each repeat's measured window; 0 chooses it per flush
	// mode (RunFile.Plan.Windows says how).
	Duration time.Duration `json:"durationNs"`
	Warmup   time.Duration `json:"warmupNs"`
	// Repeat is the measured repeats of each cell; one more, unmeasured,
	// runs first (Repeat index 0).
	Repeat int `json:"repeat"`
	// Rates is the open-loop ladder of absolute rates shared by every
	// backend and peer (msgs/s); rungs above a system's sustained rate and
	// rates the load generator cannot offer are skipped (RunFile.Notes).
	Rates   []float64 `json:"rates"`
	Arrival string    `json:"arrival"`
	// Seed, with the repeat index, seeds the arrivals: every system gets the
	// same arrivals in the same repeat.
	Seed uint64 `json:"seed"`
	// SearchProbes bounds the runs of each sustainable-rate search (0: no
	// search); SearchDuration is their window.
	SearchProbes   int           `json:"searchProbes"`
	SearchDuration time.Duration `json:"searchDurationNs"`
	// AA measures one cell twice, as if it were two systems (the A/A check).
	AA bool `json:"aa"`
	// Replication is the replication axis: none (no slave), async
	// (ASYNC_MASTER) and sync (SYNC_MASTER) with a slave in its own process
	// and directory (inside SlaveDir when set: another device), crossed with
	// the flush policies. HADelay, when > 0, puts a TCP proxy adding that
	// one-way delay between master and slave (EMULATED network).
	Replication []string      `json:"replication,omitempty"`
	SlaveDir    string        `json:"slaveDir,omitempty"`
	HADelay     time.Duration `json:"haDelayNs,omitempty"`

	// Dir is where stores and probe files are created (a fresh temporary
	// directory inside it, removed at the end). Dirs lists every target
	// directory (--dir repeated); Dir is the first.
	Dir  string   `json:"dir"`
	Dirs []string `json:"dirs,omitempty"`
	// Emulate adds emulated devices: "hdd" is ext4 on a loop device on a
	// FUSE file whose daemon charges every request a 7200 rpm drive's seek,
	// rotation and transfer time (internal/hddfs), a disk of
	// EmulateImageBytes, calibrated with fio at the start. Root only.
	Emulate           []string `json:"emulate,omitempty"`
	EmulateImageBytes int64    `json:"emulateImageBytes,omitempty"`

	ConsumeBytes  int64 `json:"consumeBytes,omitempty"`
	RecoveryBytes int64 `json:"recoveryBytes,omitempty"`
	// ColdReads adds the cold consume and recovery variants (root: they drop
	// the page cache).
	ColdReads bool `json:"coldReads"`

	DirtyBytes           int64  `json:"dirtyBytes,omitempty"`
	DirtyBackgroundBytes int64  `json:"dirtyBackgroundBytes,omitempty"`
	DirtyFileBytes       int64  `json:"dirtyFileBytes,omitempty"`
	SwapFileBytes        int64  `json:"swapFileBytes,omitempty"`
	SwapLimitBytes       int64  `json:"swapLimitBytes,omitempty"`
	SwapNeighbourBytes   int64  `json:"swapNeighbourBytes,omitempty"`
	StateDir             string `json:"stateDir,omitempty"`

	// Policies, when set, replaces Flushes × Store by a sweep's flush
	// policies (each for one backend, or every backend when Backend is "").
	Policies []Policy `json:"policies,omitempty"`
	Out      string   `json:"out"`
	// ProfilesRoot: the run writes ProfilesRoot/<id>/.
	ProfilesRoot    string        `json:"profilesRoot"`
	Profile         bool          `json:"profile"`
	ProfileDuration time.Duration `json:"profileDurationNs"`
	// ProfileProducers is the producer count whose throughput cells get
	// the profiled run (0: the first of Producers).
	ProfileProducers int `json:"profileProducers,omitempty"`

	NoLimits bool `json:"noLimits"`
	// DeviceProbeBytes is what the O_DIRECT probe writes; SyncProbeCount
	// the 4 KiB write+fdatasync samples.
	DeviceProbeBytes int64  `json:"deviceProbeBytes"`
	SyncProbeCount   int    `json:"syncProbeCount"`
	PeerCommand      string `json:"peerCommand,omitempty"`

	Store StoreConfig `json:"store"`
}

// ProfiledProducers is the producer count whose throughput cells get the
// profiled run: ProfileProducers (--profile-producers), or — by default,
// and in runs from before that option — the first of Producers.
func (c *Config) ProfiledProducers() int {
	if c.ProfileProducers > 0 || len(c.Producers) == 0 {
		return c.ProfileProducers
	}
	return c.Producers[0]
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
	// GroupCommitBatching is engine.Options.GroupCommitBatching by name:
	// auto (also what "" means), merge or convoys.
	GroupCommitBatching string `json:"groupCommitBatching,omitempty"`
	WarmSegments        bool   `json:"warmSegments,omitempty"`
	LockSegments        bool   `json:"lockSegments,omitempty"`
	// PacePrewrite is engine.Options.PacePrewrite.
	PacePrewrite bool `json:"pacePrewrite,omitempty"`
	// RecycleSegments is engine.Options.RecycleSegments (every mqstore
	// cell). When > 0, each store of a throughput, latency or e2e cell
	// (the master's, with a slave) is aged before its window: that many
	// full segments written and retired by retention into the pool, so the
	// window's new segments are reused files. The pebble-wal peer then
	// runs on a recycled WAL file of that many segments' bytes (its
	// options' recycledLog says so), the other peers on new files.
	RecycleSegments int `json:"recycleSegments,omitempty"`
	// BackendOptions are backends' own options as JSON, by backend name
	// (--backend-options); a backend not named runs with its defaults.
	BackendOptions map[string]string `json:"backendOptions,omitempty"`
	// ProfileLabels is engine.Options.ProfileLabels: the engine labels its
	// goroutines by stage (the profiled runs set it; measured cells never).
	ProfileLabels bool `json:"profileLabels,omitempty"`
	// Message is not an engine option but what the store cells' producers
	// put (--message): "bare", the body alone (what the peers write; also
	// what "" means, in files written before it was recorded), or
	// "rocketmq", a RocketMQ producer's message (TAGS, KEYS, UNIQ_KEY, …).
	Message string `json:"message,omitempty"`
}

// Policy is one flush policy of a sweep.
type Policy struct {
	Name string `json:"name"`
	// Backend is the backend the policy is for ("" for every backend).
	Backend string      `json:"backend,omitempty"`
	Flush   string      `json:"flush"`
	Store   StoreConfig `json:"store"`
}

// TargetDirs is every target directory.
func (c *Config) TargetDirs() []string {
	if len(c.Dirs) > 0 {
		return c.Dirs
	}
	return []string{c.Dir}
}
