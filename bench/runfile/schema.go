package runfile

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench/load"
)

// SchemaVersion is run.json's "schema". Schema 5: a group-commit limit
// with two syncs in flight splits its N records between the two writers
// (schema 3 and 4 wrote N in each: 2N records outstanding, more than N
// closed-loop producers ever have). Schema 4: durable bytes count only
// what was accepted in the window; floors carry their process; derived
// tails. Read also reads schemas 3 and 4 as written (with notes; their
// two-in-flight group-commit limits are not used as limits) and refuses
// older schemas, whose figures meant other things.
const SchemaVersion = 5

// Status of a cell, floor or limit.
const (
	StatusOK = "ok"
	// StatusSaturated: an open-loop cell that could not keep its offered
	// rate (see load.Result.Saturation); its percentiles are lower bounds.
	StatusSaturated   = "saturated"
	StatusFailed      = "failed"
	StatusSkipped     = "skipped"
	StatusInterrupted = "interrupted"
)

// RunFile is run.json.
type RunFile struct {
	Schema     int       `json:"schema"`
	ID         string    `json:"id"`
	Command    string    `json:"command"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
	// ElapsedNs is how long the run took by the monotonic clock: the wall
	// clock may be stepped during a run (a VM's clock is resynced), so
	// FinishedAt − StartedAt may differ from it (0 in older run files).
	ElapsedNs   int64    `json:"elapsedNs,omitempty"`
	Interrupted bool     `json:"interrupted,omitempty"`
	Machine     Machine  `json:"machine"`
	Devices     []Device `json:"devices"`
	Config      Config   `json:"config"`
	Plan        Plan     `json:"plan"`
	// Cells are mqstore's; Peers the same workloads on other stores.
	Cells []Cell `json:"cells"`
	Peers []Cell `json:"peers"`
	// Floors are the load generator's own latency at each open-loop rate:
	// the same schedule against an operation that does nothing.
	Floors   []Floor          `json:"floors"`
	Limits   []Limit          `json:"limits"`
	Searches []RateSearch     `json:"searches"`
	Profiles []ProfileSummary `json:"profiles"`
	// Derived from the above by report.Analyze (recomputed by `mqbench
	// report`): ratios, the A/A check, the recommendations.
	Ratios          []Ratio          `json:"ratios"`
	AA              []Comparison     `json:"aa"`
	Recommendations []Recommendation `json:"recommendations"`
	// SystemChanges is what the run changed (sysctls, swap, cgroups, loop
	// devices, mounts, neighbour processes) and whether each was undone.
	SystemChanges []SystemChange `json:"systemChanges,omitempty"`
	// Notes are run-level remarks (skipped pressures, devices, rungs).
	Notes []string `json:"notes,omitempty"`
	// SweepReference is another run's flush-policy sweep that this run's
	// first screen quotes for the flush policy (mqbench run --sweep-from).
	SweepReference *SweepReference `json:"sweepReference,omitempty"`
}

// SweepReference is the Pareto front of each series of a committed
// flush-policy sweep, copied into the run that quotes it so that the
// quote re-renders without the other run's files.
type SweepReference struct {
	ID        string        `json:"id"`
	Path      string        `json:"path"`
	Commit    string        `json:"commit"`
	StartedAt time.Time     `json:"startedAt"`
	Host      string        `json:"host"`
	Repeat    int           `json:"repeat"`
	Message   string        `json:"message"`
	Series    []SweepSeries `json:"series"`
}

// SweepSeries is one backend × body size × target × pressure × flush ×
// producer count of a sweep: the policies on its Pareto front, slowest to
// fastest, and how many policies it measured.
type SweepSeries struct {
	Backend   string `json:"backend"`
	SizeBytes int    `json:"sizeBytes"`
	Target    string `json:"target"`
	Pressure  string `json:"pressure"`
	Flush     string `json:"flush"`
	Policies  int    `json:"policies"`
	// Tail names the p99.9 of every point (which loop, rate or producers).
	Tail  string       `json:"tail,omitempty"`
	Front []SweepPoint `json:"front"`
}

// SweepPoint is a policy's durable msgs/s and p99.9 in a sweep, and
// whether its throughput cell sustained. A point that did not sustain is
// never recommended: it pushes no sustained point off a front, is on one
// only when no policy beats it, and is never quoted as a front's end.
type SweepPoint struct {
	Policy string `json:"policy"`
	// Producers is the closed loop's producer count of the throughput cell
	// the point's durable msgs/s comes from, the same for every point of a
	// series (0 in references copied before it was recorded).
	Producers int `json:"producers,omitempty"`
	// DurableMsgs is the median and interval over the measured repeats of
	// each repeat's msgs/s × its durable ÷ written MB/s (in references
	// copied before Sustained was recorded: the msgs/s interval times the
	// ratio of the medians, not an interval of durable msgs/s).
	DurableMsgs Interval `json:"durableMsgs"`
	P999Ns      Interval `json:"p999Ns"`
	// Sustained is the throughput cell's verdict (Cell.Sustained: its median
	// backlog at the window's end at most 10 % of what it wrote); nil in
	// references copied before it was recorded. BacklogStraddles: the
	// interval of its backlog share straddles that bar — the verdict is the
	// median repeat's, and whether it sustains is undetermined.
	Sustained        *bool `json:"sustained,omitempty"`
	BacklogStraddles bool  `json:"backlogStraddles,omitempty"`
}

// Machine describes where a run ran, as it was when the run started.
type Machine struct {
	Host          string `json:"host"`
	OS            string `json:"os"`
	Arch          string `json:"arch"`
	CPUs          int    `json:"cpus"`
	CPUModel      string `json:"cpuModel"`
	MemTotalBytes int64  `json:"memTotalBytes"`
	Kernel        string `json:"kernel"`
	GoVersion     string `json:"goVersion"`
	// Commit is vcs.revision from the build info, or git rev-parse HEAD of
	// the working directory when the binary was built without it
	// (CommitSource says which).
	Commit       string `json:"commit"`
	CommitDirty  bool   `json:"commitDirty"`
	CommitSource string `json:"commitSource"`
	GOMAXPROCS   int    `json:"gomaxprocs"`
	// GOGC is the GOGC environment variable ("" is the default, 100).
	GOGC        string `json:"gogc"`
	Clocksource string `json:"clocksource"`
	// THP is the kernel's transparent huge page setting (always, madvise
	// or never; "" where it has none, and in run files from before it was
	// recorded): the store backs its staging rings, pool buffers and async
	// mmap segments with huge pages only where it is not never.
	THP string `json:"thp,omitempty"`
	// FreePageReporting says the machine is a virtual machine whose
	// balloon device reports free memory to its host
	// (VIRTIO_BALLOON_F_REPORTING): memory the guest leaves free for a
	// few seconds goes back to the host, and the next first touch of it
	// is faulted in by the host — new page cache of a fresh store, after
	// an idle spell above all, costs more than a running broker's, whose
	// page cache reuses the pages it reclaims (docs/harness.md).
	FreePageReporting bool `json:"freePageReporting,omitempty"`
	// CPUIdleDriver is the kernel's cpuidle driver (haltpoll in a KVM
	// guest that has it; "" where the machine has none, and in run files
	// from before it was recorded), and GuestHaltPollNs, with haltpoll,
	// how long an idle vCPU polls for work before it halts
	// (haltpoll.guest_halt_poll_ns). At "0" an idle vCPU halts at once,
	// and each wake-up of one — the producer a flush released, the
	// group commit's owner back from the device — waits for the host to
	// run it again: sync cells at 4 to 256 producers ran 1.15–1.4× as fast
	// here with 200 µs of polling, the peers' too (docs/harness.md).
	CPUIdleDriver   string `json:"cpuIdleDriver,omitempty"`
	GuestHaltPollNs string `json:"guestHaltPollNs,omitempty"`
	// VM holds vm.dirty_*, dirty_expire/writeback_centisecs and swappiness
	// at the start of the run (sysctl name → value).
	VM map[string]string `json:"vm"`
	// LoadAvgStart and LoadAvgEnd are /proc/loadavg's first three fields.
	LoadAvgStart string `json:"loadAvgStart"`
	LoadAvgEnd   string `json:"loadAvgEnd"`
}

// Device describes the block device under a target directory.
type Device struct {
	Dir          string `json:"dir"`
	Device       string `json:"device"`
	FSType       string `json:"fsType"`
	MountSource  string `json:"mountSource"`
	MountOptions string `json:"mountOptions"`
	// Kind says what the device is: "virtual disk (virtio-blk)", "NVMe SSD",
	// "SSD", "rotational disk", "loop device", "EMULATED …".
	Kind  string `json:"kind"`
	Model string `json:"model,omitempty"`
	// Rotational is the kernel's queue/rotational flag. On a virtual disk it
	// says nothing about the host's storage (Kind says so).
	Rotational         *bool  `json:"rotational,omitempty"`
	Scheduler          string `json:"scheduler,omitempty"`
	LogicalBlockBytes  int    `json:"logicalBlockBytes,omitempty"`
	PhysicalBlockBytes int    `json:"physicalBlockBytes,omitempty"`
	WriteCache         string `json:"writeCache,omitempty"`
	FUA                *bool  `json:"fua,omitempty"`
	Emulated           bool   `json:"emulated"`
	// BufferedWritebackThrottled is false on an emulated device whose
	// throttle does not reach the kernel's writeback (cgroup v1 blkio): its
	// async cells of buffered backends are not limited by the emulation.
	BufferedWritebackThrottled bool `json:"bufferedWritebackThrottled"`
	// ModelsSeeks is true on an emulated device whose emulation charges a
	// seek and rotation when the head moves; without it an emulated
	// rotating disk is a bandwidth and IOPS limit, and nothing is
	// recommended from its cells.
	ModelsSeeks bool   `json:"modelsSeeks,omitempty"`
	Label       string `json:"label,omitempty"`
	Note        string `json:"note,omitempty"`
}

// Plan is what the run set out to do, and its time estimate.
type Plan struct {
	// Cells and Runs (repeats, warm ones included, of cells and floors) as
	// planned before the run; open-loop rungs above a system's sustained
	// rate are counted although they may be skipped.
	Cells            int     `json:"cells"`
	Runs             int     `json:"runs"`
	EstimatedSeconds float64 `json:"estimatedSeconds"`
	// WindowNs is every cell's and floor's measured window; WindowWhy says
	// how it was chosen (given, or derived from the buffers and the device).
	WindowNs  int64  `json:"windowNs"`
	WindowWhy string `json:"windowWhy"`
}

// Cell is one point of the matrix: a workload on a backend (or peer) at a
// message size, flush policy, producer count or offered rate, repeated.
type Cell struct {
	Name     string `json:"name"`
	Workload string `json:"workload"`
	Backend  string `json:"backend"`
	Peer     bool   `json:"peer,omitempty"`
	// TwinOf names the cell this one measures again (the A/A check).
	TwinOf    string `json:"twinOf,omitempty"`
	SizeBytes int    `json:"sizeBytes"`
	// Message is the message an mqstore cell put (StoreConfig.Message:
	// bare or rocketmq) and RecordBytes its CommitLog record's size; a
	// peer writes the body alone, in its own format (both empty).
	Message     string `json:"message,omitempty"`
	RecordBytes int    `json:"recordBytes,omitempty"`
	Flush       string `json:"flush"`
	// Options are the effective engine options (mqstore) or the peer's
	// options, as it reported them.
	Options map[string]string `json:"options,omitempty"`
	// Label and Version say exactly what runs (peers); Durability what its
	// acknowledgement means.
	Label      string      `json:"label,omitempty"`
	Version    string      `json:"version,omitempty"`
	Durability *Durability `json:"durability,omitempty"`
	Policy     string      `json:"policy,omitempty"`
	Variant    string      `json:"variant,omitempty"`
	// SenderCPU says what a consume cell's CPU (cpuSecPerGiB) covers:
	// SenderCPUSends, the sending thread from its first Get until its
	// last send returned. Empty in older run files, whose sender CPU ran
	// until the reader had read everything (the wait for it included).
	SenderCPU string `json:"senderCpu,omitempty"`
	Pressure  string `json:"pressure"`
	// Replication is the master's role when a slave replicates the store
	// under test (async: ASYNC_MASTER, sync: SYNC_MASTER; "": no slave);
	// HADelayNs the one-way delay a proxy adds between the two (EMULATED:
	// both run on this machine), 0 for none.
	Replication string `json:"replication,omitempty"`
	HADelayNs   int64  `json:"haDelayNs,omitempty"`
	// Tuning says why the backend ran with its options: mqbench's choice
	// and its reason, or --backend-options. Options["BackendOptions"]
	// holds them.
	Tuning    string `json:"tuning,omitempty"`
	Target    string `json:"target,omitempty"`
	Emulated  bool   `json:"emulated,omitempty"`
	Producers int    `json:"producers,omitempty"`
	InFlight  int    `json:"inFlight,omitempty"`
	Dir       string `json:"dir"`
	// Open loop: the offered rate (a rung of Config.Rates) and arrivals.
	RatePerSec float64 `json:"ratePerSec,omitempty"`
	Arrival    string  `json:"arrival,omitempty"`
	// WindowNs is the measured window of each repeat.
	WindowNs int64  `json:"windowNs"`
	Status   string `json:"status"`
	Reason   string `json:"reason,omitempty"`
	// Saturation says why a saturated cell is (per repeat that was).
	Saturation []string `json:"saturation,omitempty"`
	// Sustained: the median backlog at the window's end is at most 10 % of
	// what was written in it (nil: the system does not report durability,
	// or only at Drain).
	Sustained *bool `json:"sustained,omitempty"`
	// DurableAtDrainOnly: a peer whose durable position never moved during
	// a window although it wrote, and whose Drain made everything durable —
	// it reports durability only when drained (NATS cannot be asked when
	// its periodic sync ran). Its durable rate is not observable, so it has
	// no sustained verdict: an accounting limit of the peer, not a failure
	// to keep up.
	DurableAtDrainOnly bool `json:"durableAtDrainOnly,omitempty"`
	// GeneratorBound: the cell's p99.9 (merged tail) is below
	// GeneratorBoundFactor × the floor's at its rate and its service-time
	// p99.9 is within the floor's p99.9 — the tail is the load generator's;
	// a cell whose service time alone exceeds the floor's tail is the
	// store's, whatever its latency.
	GeneratorBound bool  `json:"generatorBound,omitempty"`
	FloorP999Ns    int64 `json:"floorP999Ns,omitempty"`
	// Tail is the latency percentiles of the merged histogram of every
	// measured repeat (see Tail) and ServiceTail the open loop's service
	// time likewise; derived by report.Analyze.
	Tail        *Tail `json:"tail,omitempty"`
	ServiceTail *Tail `json:"serviceTail,omitempty"`
	// SustainableRatePerSec is the highest rate the search found unsaturated
	// (open-loop cells of a searched group).
	SustainableRatePerSec float64 `json:"sustainableRatePerSec,omitempty"`
	// Repeats: index 0 is the unmeasured warm repeat.
	Repeats []Repeat `json:"repeats"`
	// Medians over the measured repeats, their confidence intervals
	// (CILevel is their coverage), and min and max.
	Figures
	CILow   Figures `json:"ciLow"`
	CIHigh  Figures `json:"ciHigh"`
	CILevel float64 `json:"ciLevel"`
	Min     Figures `json:"min"`
	Max     Figures `json:"max"`
}

// GeneratorBoundFactor: a cell whose p99.9 is below this multiple of the
// floor's p99.9 at the same rate is generator-bound.
const GeneratorBoundFactor = 3

// Durability is what an acknowledgement means for a system and flush mode:
// when the ack is sent, what a process crash and a power loss lose, and by
// what mechanism data becomes durable.
type Durability struct {
	Ack          string `json:"ack"`
	ProcessCrash string `json:"processCrash"`
	PowerLoss    string `json:"powerLoss"`
	Mechanism    string `json:"mechanism"`
	// MachineLoss is what losing the (master's) machine for good loses —
	// everything without a slave (mqstore cells only).
	MachineLoss string `json:"machineLoss,omitempty"`
}

// SenderCPUSends is Cell.SenderCPU for a sender CPU that counts the
// sends alone.
const SenderCPUSends = "sends"

// Measured reports whether a cell has figures (ok or saturated).
func (c *Cell) Measured() bool { return c.Status == StatusOK || c.Status == StatusSaturated }

// Interval returns a figure's median and confidence interval.
func (c *Cell) Interval(figure string) Interval {
	return Interval{Median: c.Figures.Figure(figure), Lo: c.CILow.Figure(figure), Hi: c.CIHigh.Figure(figure), Level: c.CILevel}
}

// Comparable reports whether the cell's figures may enter ratios, verdicts
// and recommendations: measured, not saturated, not generator-bound.
func (c *Cell) Comparable() bool { return c.Status == StatusOK && !c.GeneratorBound }

// Repeat is one run of a cell.
type Repeat struct {
	Index int `json:"index"`
	// Warm marks the unmeasured first repeat.
	Warm   bool   `json:"warm,omitempty"`
	Seed   uint64 `json:"seed"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// Saturation lists why the repeat was saturated (open loop).
	Saturation []string `json:"saturation,omitempty"`
	Figures    Figures  `json:"figures"`
	// Result keeps the raw counts and the histograms (HdrHistogram V2
	// compressed, base64).
	Result load.Result `json:"result"`
	// Store is the engine's counters over the window (mqstore cells).
	Store *StoreCounters `json:"store,omitempty"`
	// Replication is what the slave and the acknowledgements did (cells
	// with a slave).
	Replication *ReplicationResult `json:"replication,omitempty"`
	// Samples: the system every 100 ms during the repeat.
	Samples []Sample `json:"samples,omitempty"`
}

// StoreCounters are the engine's Stats differences over the window.
type StoreCounters struct {
	Puts    uint64 `json:"puts"`
	Flushes uint64 `json:"flushes"`
	Commits uint64 `json:"commits"`
	Rolls   uint64 `json:"rolls"`
	// FlushDiskTimeouts counts sync Puts whose group commit timed out.
	FlushDiskTimeouts uint64 `json:"flushDiskTimeouts"`
	// SegmentsPrewritten and SegmentsFallocated count the CommitLog
	// segments the allocation service made in the window, written with
	// zeros before use or only fallocated (PrewriteSegments auto decides
	// per segment).
	SegmentsPrewritten uint64 `json:"segmentsPrewritten,omitempty"`
	SegmentsFallocated uint64 `json:"segmentsFallocated,omitempty"`
	// ZerosByDevice, ZerosDirect and ZerosCached say how the zeros of the
	// pre-written segments made in the window were written: by the device,
	// fallocate(FALLOC_FL_WRITE_ZEROES), where the kernel, the file system
	// and the device have it (an O_DIRECT backend's segments only); with
	// O_DIRECT writes where they lack it; through the page cache (the
	// buffered backends): engine.Stats' ZerosByDevice, ZerosDirect and
	// ZerosCached over the window.
	ZerosByDevice uint64 `json:"zerosByDevice,omitempty"`
	ZerosDirect   uint64 `json:"zerosDirect,omitempty"`
	ZerosCached   uint64 `json:"zerosCached,omitempty"`
	// SegmentsRecycled counts the CommitLog segments the allocation service
	// took from the pool of retired ones in the window
	// (StoreConfig.RecycleSegments) instead of making them.
	SegmentsRecycled uint64 `json:"segmentsRecycled,omitempty"`
	// FlushNs is the time the store spent in its durable flushes in the
	// window, those that moved the flushed offset (engine.Stats'
	// FlushLatency.Total at the window's end less at its start): in sync
	// mode the group commit's commit-and-sync, in async mode the flush
	// service's. 0 in run files from before it was recorded.
	FlushNs int64 `json:"flushNs,omitempty"`
}

// Sample is the system at one instant of a repeat: dirty and writeback
// pages (gauges), swap and major-fault counts since the previous sample,
// PSI avg10 (%) and stall growth (µs), the 1-minute load average and the
// share of CPU time stolen by the hypervisor since the previous sample.
type Sample struct {
	UnixNs int64 `json:"unixNs"`
	// IntervalNs is the wall time since the previous sample (or the
	// sampler's start), over which the counts and stalls grew (0 in run
	// files from before it was recorded).
	IntervalNs       int64   `json:"intervalNs,omitempty"`
	NrDirtyPages     int64   `json:"nrDirty"`
	NrWritebackPages int64   `json:"nrWriteback"`
	PswpIn           int64   `json:"pswpin"`
	PswpOut          int64   `json:"pswpout"`
	PgMajFault       int64   `json:"pgmajfault"`
	IOSomeAvg10      float64 `json:"ioSomeAvg10"`
	IOFullAvg10      float64 `json:"ioFullAvg10"`
	MemSomeAvg10     float64 `json:"memSomeAvg10"`
	MemFullAvg10     float64 `json:"memFullAvg10"`
	IOSomeStallUs    int64   `json:"ioSomeStallUs"`
	IOFullStallUs    int64   `json:"ioFullStallUs"`
	MemSomeStallUs   int64   `json:"memSomeStallUs"`
	MemFullStallUs   int64   `json:"memFullStallUs"`
	Load1            float64 `json:"load1"`
	StealPct         float64 `json:"stealPct"`
}

// Floor is the load generator's latency at one open-loop rate: the run's
// schedule (same rate, arrivals, workers, window, seeds) against an
// operation that does nothing.
type Floor struct {
	// Process is where the schedule ran: FloorMQBench (the process that
	// drives mqstore's cells: mqbench's own, or, with swap pressure in the
	// run, an mqbench worker in the store repeats' cgroups) or FloorPeers
	// (the peers' mqpeer process).
	Process    string  `json:"process,omitempty"`
	RatePerSec float64 `json:"ratePerSec"`
	Pressure   string  `json:"pressure"`
	Target     string  `json:"target,omitempty"`
	Arrival    string  `json:"arrival"`
	InFlight   int     `json:"inFlight"`
	WindowNs   int64   `json:"windowNs"`
	Status     string  `json:"status"`
	Reason     string  `json:"reason,omitempty"`
	// Medians over the measured repeats, and their intervals.
	P50Ns   int64    `json:"p50Ns"`
	P99Ns   int64    `json:"p99Ns"`
	P999Ns  int64    `json:"p999Ns"`
	CILow   Figures  `json:"ciLow"`
	CIHigh  Figures  `json:"ciHigh"`
	Repeats []Repeat `json:"repeats"`
	// Tail is the merged latency of the measured repeats (report.Analyze).
	Tail *Tail `json:"tail,omitempty"`
}

// Floor processes.
const (
	FloorMQBench = "mqbench"
	FloorPeers   = "mqpeer"
)

// FloorProcess is the process whose floor applies to a cell.
func FloorProcess(c *Cell) string {
	if c.Peer {
		return FloorPeers
	}
	return FloorMQBench
}

// Limit is a reference figure measured without the store.
type Limit struct {
	Name      string `json:"name"`
	Target    string `json:"target,omitempty"`
	Tool      string `json:"tool"`
	SizeBytes int    `json:"sizeBytes,omitempty"`
	// RecordBytes, Producers and InFlight place a group-commit limit: the
	// record size of the run's message at body SizeBytes, the records
	// outstanding (a producer count of the run: all of them in one write,
	// or split over two when two syncs are in flight) and the syncs in
	// flight.
	RecordBytes int               `json:"recordBytes,omitempty"`
	Producers   int               `json:"producers,omitempty"`
	InFlight    int               `json:"inFlight,omitempty"`
	Dir         string            `json:"dir"`
	Params      map[string]string `json:"params,omitempty"`
	Status      string            `json:"status"`
	Reason      string            `json:"reason,omitempty"`
	// Repeats: every repeat of a limit is measured; none is discarded as
	// a warm-up, so the first one runs cold.
	Repeats []LimitRepeat `json:"repeats"`
	Figures
	CILow   Figures `json:"ciLow"`
	CIHigh  Figures `json:"ciHigh"`
	CILevel float64 `json:"ciLevel"`
	Min     Figures `json:"min"`
	Max     Figures `json:"max"`
}

// Limit names.
const (
	LimitDeviceSeq = "device-seq-write"
	// LimitDeviceSeqDurable: the same writes and an fdatasync after them,
	// timed to its return — the device's durable sequential bandwidth,
	// below LimitDeviceSeq where the device has a volatile write cache.
	LimitDeviceSeqDurable = "device-seq-write-durable"
	LimitDeviceSync       = "device-fdatasync-4k"
	LimitFioSeq           = "fio-seq-write"
	LimitFioSync          = "fio-fdatasync-4k"
	// LimitDeviceSyncPrewritten: 4 KiB write + fdatasync on a pre-written
	// file (data only, no extent conversion): the physical cost of one
	// durable append.
	LimitDeviceSyncPrewritten = "device-fdatasync-4k-prewritten"
	// LimitSegmentFallocated, LimitSegmentPrewritten (zeros through the page
	// cache: the buffered backends) and LimitSegmentPrewrittenDirect
	// (O_DIRECT zeros: uring-direct): the time to create one segment as
	// the allocation service does (p50; one per repeat) and, pre-written,
	// its bytes over that time (MB/s).
	LimitSegmentFallocated       = "segment-create-fallocated"
	LimitSegmentPrewritten       = "segment-create-prewritten"
	LimitSegmentPrewrittenDirect = "segment-create-prewritten-direct"
	// LimitGroupCommit: Producers records of RecordBytes written as one
	// pwrite and fdatasynced, one op after another (InFlight 1), or split
	// between two writers at once (⌈N/2⌉ and ⌊N/2⌋ records per op), each on
	// its own part of one pre-written file (InFlight 2, from two producers
	// on) — msgs/s is the records written per second.
	LimitGroupCommit = "device-group-commit"
	// LimitGroupCommitDirect: the same N records per op as uring-direct
	// commits them — one pwritev2 with RWF_DSYNC of the aligned blocks that
	// cover them, O_DIRECT, the next op starting in the block where the
	// last one ended — on a file pre-written with O_DIRECT zeros (InFlight
	// 1). On a device with FUA writes it can beat LimitGroupCommit.
	LimitGroupCommitDirect = "device-group-commit-direct"
	// LimitGroupCommitFallocated and LimitGroupCommitDirectFallocated:
	// LimitGroupCommit (InFlight 1) and LimitGroupCommitDirect on a file
	// that is only fallocated, as a new segment the engine does not
	// pre-write: each sync also commits the extent conversion of the
	// blocks it wrote.
	LimitGroupCommitFallocated       = "device-group-commit-fallocated"
	LimitGroupCommitDirectFallocated = "device-group-commit-direct-fallocated"
)

// GroupCommitWay is how a group-commit limit wrote: on written extents (a
// pre-written file) or a fallocated file, and with O_DIRECT (pwritev2
// RWF_DSYNC, uring-direct's commit) or through the page cache (pwrite +
// fdatasync).
type GroupCommitWay struct{ Written, Direct bool }

// GroupCommitLimit reports whether a limit is a group-commit limit, and
// how it wrote.
func GroupCommitLimit(name string) (way GroupCommitWay, ok bool) {
	switch name {
	case LimitGroupCommit:
		return GroupCommitWay{Written: true}, true
	case LimitGroupCommitDirect:
		return GroupCommitWay{Written: true, Direct: true}, true
	case LimitGroupCommitFallocated:
		return GroupCommitWay{}, true
	case LimitGroupCommitDirectFallocated:
		return GroupCommitWay{Direct: true}, true
	}
	return GroupCommitWay{}, false
}

// LimitRepeat is one measurement of a limit.
type LimitRepeat struct {
	// Warm is never set: no limit discards a repeat.
	Warm    bool    `json:"warm,omitempty"`
	Figures Figures `json:"figures"`
}

// Interval returns a limit figure's median and confidence interval.
func (l *Limit) Interval(figure string) Interval {
	return Interval{Median: l.Figures.Figure(figure), Lo: l.CILow.Figure(figure), Hi: l.CIHigh.Figure(figure), Level: l.CILevel}
}

// SearchResolution: a rate search stops when the sustained and the
// saturated rate are within this factor of each other.
const SearchResolution = 1.1

// Narrowed reports whether the search got its sustained and saturated
// rates within SearchResolution. When it did not — the probes ran out, or
// none saturated — its sustainable rate is only a lower bound.
func (s *RateSearch) Narrowed() bool {
	return s.SaturatedAtPerSec > 0 && s.SaturatedAtPerSec <= s.SustainableRatePerSec*SearchResolution
}

// InFlightBound reports whether a saturated probe of the search was
// limited by the generator's requests in flight (Probe.InFlightBound):
// then the system's sustainable rate may be above the search's, which is
// only a lower bound of it.
func (s *RateSearch) InFlightBound() bool {
	for i := range s.Probes {
		if s.Probes[i].InFlightBound() {
			return true
		}
	}
	return false
}

// LowerBound says why the search's sustainable rate is only a lower bound
// of the system's — no probe saturated, the probes ran out before
// SearchResolution, the generator's requests in flight limited a probe, or
// the generator's floor did not keep a rate the search needed — or "" when
// it is the system's to within SearchResolution.
func (s *RateSearch) LowerBound() string {
	var why []string
	switch {
	case s.SaturatedAtPerSec <= 0:
		why = append(why, "no probe saturated")
	case !s.Narrowed():
		why = append(why, fmt.Sprintf("the probes ran out before narrowing it to %.0f %%", 100*(SearchResolution-1)))
	}
	if s.InFlightBound() {
		why = append(why, "the generator's requests in flight limited a probe")
	}
	if s.GeneratorLimitPerSec > 0 {
		why = append(why, fmt.Sprintf("the load generator's floor did not keep %.0f msgs/s", s.GeneratorLimitPerSec))
	}
	return strings.Join(why, "; ")
}

// SearchGroup names the rate search of one system: backend, body size,
// flush mode and, for a sweep's policy, its name. The harness names each
// search so and the report finds a latency cell's search by it.
func SearchGroup(backend string, size int, flush, policy string) string {
	g := fmt.Sprintf("%s-%d-%s", backend, size, flush)
	if policy != "" {
		g += "-" + SafeName(policy)
	}
	return g
}

// SearchOf returns the rate search that covers latency cell c (nil: none).
func (f *RunFile) SearchOf(c *Cell) *RateSearch {
	g := SearchGroup(c.Backend, c.SizeBytes, c.Flush, c.Policy)
	for i := range f.Searches {
		s := &f.Searches[i]
		if s.Group == g && s.Peer == c.Peer && s.Target == c.Target && s.Pressure == c.Pressure {
			return s
		}
	}
	return nil
}

// RateSearch is the search for the highest rate a system sustains in the
// open loop: probes of one repeat each, bisecting between a rate that was
// sustained and one that saturated.
type RateSearch struct {
	Group    string `json:"group"`
	Backend  string `json:"backend"`
	Peer     bool   `json:"peer,omitempty"`
	Flush    string `json:"flush"`
	Size     int    `json:"sizeBytes"`
	Target   string `json:"target,omitempty"`
	Pressure string `json:"pressure"`
	// InFlight is the open loop's worker count the probes ran with.
	InFlight int     `json:"inFlight,omitempty"`
	Probes   []Probe `json:"probes"`
	// SustainableRatePerSec is the highest probed rate that did not
	// saturate (0: none did); SaturatedAtPerSec the lowest that did (0: none).
	SustainableRatePerSec float64 `json:"sustainableRatePerSec"`
	SaturatedAtPerSec     float64 `json:"saturatedAtPerSec"`
	// GeneratorLimitPerSec is the lowest rate whose floor, in the process
	// that drove the search, did not keep its schedule, when it limited
	// the search (no probe there counts as the system saturating); 0
	// otherwise.
	GeneratorLimitPerSec float64 `json:"generatorLimitPerSec,omitempty"`
	Reason               string  `json:"reason,omitempty"`
}

// Probe is one run of a rate search.
type Probe struct {
	RatePerSec     float64  `json:"ratePerSec"`
	Status         string   `json:"status"`
	Saturation     []string `json:"saturation,omitempty"`
	AchievedPerSec float64  `json:"achievedPerSec"`
	P999Ns         int64    `json:"p999Ns"`
	// InFlightCapPerSec is the most the open loop could offer with its
	// requests in flight at this probe's mean service time (Little's law:
	// in flight ÷ mean service time); a saturated probe that achieved
	// close to it was limited by the generator's in flight, not the store.
	InFlightCapPerSec float64 `json:"inFlightCapPerSec,omitempty"`
	Reason            string  `json:"reason,omitempty"`
}

// InFlightBoundShare: a saturated probe that achieved at least this share
// of its in-flight cap was limited by the requests in flight.
const InFlightBoundShare = 0.9

// InFlightBound reports whether a saturated probe was limited by the
// open loop's requests in flight rather than by the system.
func (p *Probe) InFlightBound() bool {
	return p.Status != StatusOK && p.InFlightCapPerSec > 0 && p.AchievedPerSec >= InFlightBoundShare*p.InFlightCapPerSec
}

// Ratio is cell ÷ reference for one figure: the ratio of the medians and
// the widest ratio their confidence intervals allow.
type Ratio struct {
	Kind    string  `json:"kind"` // device, group-commit, peer, pressure, sendfile
	Cell    string  `json:"cell"`
	Against string  `json:"against"`
	Figure  string  `json:"figure"`
	Median  float64 `json:"median"`
	Low     float64 `json:"low"`
	High    float64 `json:"high"`
	Note    string  `json:"note,omitempty"`
	// Missing says why there is no ratio (a denominator that is zero or
	// missing); Median, Low and High are then 0 and mean nothing.
	Missing string `json:"missing,omitempty"`
}

// Comparison is one figure of two cells with the verdict a rank test over
// their repeats gives (the A/A check).
type Comparison struct {
	A         string   `json:"a"`
	B         string   `json:"b"`
	Figure    string   `json:"figure"`
	AInterval Interval `json:"aInterval"`
	BInterval Interval `json:"bInterval"`
	// P is the Mann-Whitney U test's p over the two cells' measured
	// repeats (N: the fewer repeats of the two); Different is p < 0.05.
	P         float64 `json:"p"`
	N         int     `json:"n"`
	Different bool    `json:"different"`
}

// Recommendation is the pick for one device, size and durability class.
type Recommendation struct {
	Target     string `json:"target"`
	SizeBytes  int    `json:"sizeBytes"`
	Durability string `json:"durability"` // async, sync, any
	// Pick is the best cell's backend and policy; Tied lists those whose
	// interval overlaps the pick's (no significant difference); empty Pick
	// when nothing qualified.
	Pick     string   `json:"pick"`
	Cell     string   `json:"cell,omitempty"`
	Figure   string   `json:"figure"`
	Interval Interval `json:"interval"`
	Tied     []string `json:"tied,omitempty"`
	Text     string   `json:"text"`
	Excluded []string `json:"excluded,omitempty"`
}

// ProfileSummary is one profile's top functions and, for a CPU profile
// whose samples carry the engine's stage labels, the CPU by stage.
type ProfileSummary struct {
	Cell       string         `json:"cell"`
	Kind       string         `json:"kind"`
	File       string         `json:"file"`
	SampleType string         `json:"sampleType"`
	Unit       string         `json:"unit"`
	Total      int64          `json:"total"`
	Top        []FunctionCost `json:"top"`
	// Samples is how many samples a CPU profile holds (0 in run files
	// from before it was recorded).
	Samples int64 `json:"samples,omitempty"`
	// Stages split a CPU profile by the engine's pprof label mqstore.stage
	// (engine.Options.ProfileLabels; "other": samples without it — the
	// harness and the runtime), in StageOrder; empty when no sample carries
	// the label. CPUPerMsgNs is the profiled run's CPU per message that the
	// stages' µs/msg share out, and CPUSource where it comes from: the
	// run's getrusage, or the profile's samples when the run has none.
	Stages      []StageCost `json:"stages,omitempty"`
	Messages    int64       `json:"messages,omitempty"`
	CPUPerMsgNs float64     `json:"cpuPerMsgNs,omitempty"`
	CPUSource   string      `json:"cpuSource,omitempty"`
	// WindowOnly: the profile covers the measured window alone, what
	// CPUPerMsgNs counts, and its stages hold the block and mutex
	// profilers' recording apart (StageProfiler). False in run files from
	// before: the profile also spanned the GC before the window and the
	// merge of the workers' histograms after it (in "other"), and the
	// profilers' recording counted in the stage it ran in.
	WindowOnly bool   `json:"windowOnly,omitempty"`
	Error      string `json:"error,omitempty"`
}

// StageCost is one stage's share of a CPU profile: its samples' value,
// its percentage of the profile's, and that share of the CPU per message;
// Samples is how many samples it had (a share of k samples is known to
// about ±1/√k of itself: MinStageSamples).
type StageCost struct {
	Stage    string  `json:"stage"`
	Value    int64   `json:"value"`
	Pct      float64 `json:"pct"`
	UsPerMsg float64 `json:"usPerMsg,omitempty"`
	Samples  int64   `json:"samples,omitempty"`
}

// MinStageSamples: a stage's share of a CPU profile resting on fewer
// samples (each one 10 ms of CPU at pprof's default rate) is not shown as a
// figure — with 9 samples it is known to about ±33 %, with 3 to ±58 %.
const MinStageSamples = 10

// StageLabel is the pprof label key the engine's goroutines carry when
// engine.Options.ProfileLabels is set (engine.ProfileLabelKey; runfile
// does not import the engine, a bench test checks they agree);
// StageOrder its values (engine.Stage*) in the order tables show them,
// then StageOther, the samples without the label.
const (
	StageLabel = "mqstore.stage"
	StageOther = "other"
	// StageProfiler is the block and mutex profilers' own recording (their
	// stack captures, and the clock reads that time a wait for them; they
	// run beside the CPU profile), whatever stage it ran in: kept out of
	// that stage, which would otherwise carry the profiler's cost as its
	// own.
	StageProfiler = "profiler"
)

// StageOrder lists the engine's stages: a producer inside Put before it
// waits (append), a producer waiting for durability (wait), then the
// services.
var StageOrder = []string{"append", "wait", "commit", "flush", "dispatch", "prewrite", "replicate"}

// FunctionCost is a function's flat and cumulative share of a profile.
type FunctionCost struct {
	Function string  `json:"function"`
	Flat     int64   `json:"flat"`
	FlatPct  float64 `json:"flatPct"`
	Cum      int64   `json:"cum"`
	CumPct   float64 `json:"cumPct"`
}

// SystemChange is one modification of the system a run made (recorded by
// internal/hostctl before it was made) and whether it was undone.
type SystemChange struct {
	Kind       string `json:"kind"`
	Path       string `json:"path"`
	Original   string `json:"original,omitempty"`
	Value      string `json:"value,omitempty"`
	Backing    string `json:"backing,omitempty"`
	PID        int    `json:"pid,omitempty"`
	StartTicks uint64 `json:"startTicks,omitempty"`
	Undone     bool   `json:"undone"`
	UndoError  string `json:"undoError,omitempty"`
	What       string `json:"what"`
}

// CellName is the cell's file-name-safe key: workload[-variant]-backend-
// size-flush, then -p<producers> (closed loop) or -r<rate> (open loop),
// -<pressure> when not none, -ha<async|sync>[-d<delay>] with a slave,
// -<policy>, -aa for the A/A twin, @<target>.
func CellName(c *Cell, withTarget bool) string {
	w := c.Workload
	if c.Variant != "" {
		w += "-" + c.Variant
	}
	name := fmt.Sprintf("%s-%s-%d-%s", w, c.Backend, c.SizeBytes, c.Flush)
	switch {
	case c.RatePerSec > 0:
		name += fmt.Sprintf("-r%.0f", c.RatePerSec)
	case c.Producers > 0:
		name += fmt.Sprintf("-p%d", c.Producers)
	}
	if c.Pressure != "" && c.Pressure != "none" {
		name += "-" + c.Pressure
	}
	if c.Replication != "" {
		name += "-ha" + c.Replication
		if c.HADelayNs > 0 {
			name += "-d" + SafeName(time.Duration(c.HADelayNs).String())
		}
	}
	if c.Policy != "" {
		name += "-" + SafeName(c.Policy)
	}
	if c.TwinOf != "" {
		name += "-aa"
	}
	if withTarget && c.Target != "" {
		name += "@" + SafeName(c.Target)
	}
	return name
}

// SafeName replaces what a file name should not hold.
func SafeName(s string) string {
	out := []rune{}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '=', r == '-':
			out = append(out, r)
		default:
			if len(out) == 0 || out[len(out)-1] != '_' {
				out = append(out, '_')
			}
		}
	}
	if len(out) == 0 {
		return "host"
	}
	return string(out)
}

// ReplicationResult is one repeat's replication: the lag of every record
// acknowledged to a producer in the window (sampled evenly when there were
// very many), in time — from the start of the record's Put (its append,
// not its acknowledgement) to the first slave report covering the record's
// end — and in bytes — how far the slave's acknowledged offset was behind
// the record's end when its Put returned; records no slave acknowledged
// before the deadline after the window count as unacknowledged and enter
// the lag at (deadline − the Put's start), a lower bound. The slave's own durable progress is read from its process
// at the window's edges.
type ReplicationResult struct {
	Role string `json:"role"`
	// Records is how many acknowledged records the lag covers (of Sampled
	// kept marks); Unacked those no slave acknowledged by the deadline.
	Records int64 `json:"records"`
	Unacked int64 `json:"unacked"`
	Sampled int64 `json:"sampled"`
	// LagNs is the lag in time (ns); LagBytes in bytes, each recorded + 1
	// (the histogram's least value is 1).
	LagNs    *load.Histogram `json:"lagNs,omitempty"`
	LagBytes *load.Histogram `json:"lagBytes,omitempty"`
	// Acks is how many times the acknowledged offset moved from the
	// window's start to the deadline; DeadlineNs is how long after the
	// window's end acknowledgements were still watched (until the slave had
	// everything, or the catch-up time ran out).
	Acks       int64 `json:"acks"`
	DeadlineNs int64 `json:"deadlineNs"`
	// The slave's CommitLog end and flushed offset at the window's start
	// and end (its own process), and the elapsed time between the reads.
	SlaveWroteStart   int64  `json:"slaveWroteStart"`
	SlaveFlushedStart int64  `json:"slaveFlushedStart"`
	SlaveWroteEnd     int64  `json:"slaveWroteEnd"`
	SlaveFlushedEnd   int64  `json:"slaveFlushedEnd"`
	SlaveElapsedNs    int64  `json:"slaveElapsedNs"`
	SlaveBackend      string `json:"slaveBackend"`
	SlaveFlush        string `json:"slaveFlush"`
	SlaveDir          string `json:"slaveDir"`
	// HADelayNs is the EMULATED one-way delay between master and slave.
	HADelayNs int64 `json:"haDelayNs,omitempty"`
	// FlushSlaveTimeouts and SlaveNotAvailable count the SYNC_MASTER Puts
	// that got those statuses in the window.
	FlushSlaveTimeouts uint64 `json:"flushSlaveTimeouts,omitempty"`
	SlaveNotAvailable  uint64 `json:"slaveNotAvailable,omitempty"`
}

// DurableOnlyAtDrain reports whether a system's durable position never
// moved during any of these measured repeats' windows, though it wrote in
// each, and its Drain made everything durable: it reports durability only
// when drained (NATS cannot be asked when its periodic sync ran; pebble's
// WAL syncs only when asked). For a peer, "not sustained" would then
// condemn an accounting limit, not a failure to keep up.
func DurableOnlyAtDrain(measured []*Repeat) bool {
	return len(measured) > 0 && !slices.ContainsFunc(measured, func(rep *Repeat) bool {
		d := rep.Result.Durability
		return d == nil || d.DrainError != "" || d.DurableEndBytes != d.DurableStartBytes || d.WrittenBytes() <= 0 ||
			d.DurableAfterDrainBytes < d.WrittenEndBytes
	})
}

// MeasuredRepeats are a cell's measured repeats with figures (ok or
// saturated; not the warm one).
func (c *Cell) MeasuredRepeats() []*Repeat { return measuredRepeats(c.Repeats) }

func measuredRepeats(reps []Repeat) []*Repeat {
	var out []*Repeat
	for i := range reps {
		r := &reps[i]
		if !r.Warm && (r.Status == StatusOK || r.Status == StatusSaturated) {
			out = append(out, r)
		}
	}
	return out
}
