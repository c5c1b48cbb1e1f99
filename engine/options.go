package engine

import (
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/mqstore/mqstore/engine/consumequeue"
	"github.com/mqstore/mqstore/engine/indexfile"
	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/mappedfile"
)

// FlushMode is how Put waits for durability.
type FlushMode int

const (
	// FlushAsync acknowledges a Put once the record is in the CommitLog's
	// memory; a flusher makes it durable every FlushInterval (RocketMQ's
	// ASYNC_FLUSH).
	FlushAsync FlushMode = iota
	// FlushSync acknowledges a Put once the record is durable, with group
	// commit (RocketMQ's SYNC_FLUSH).
	FlushSync
)

func (m FlushMode) String() string {
	switch m {
	case FlushAsync:
		return "async"
	case FlushSync:
		return "sync"
	}
	return fmt.Sprintf("FlushMode(%d)", int(m))
}

// ParseFlushMode parses "async" or "sync".
func ParseFlushMode(s string) (FlushMode, error) {
	switch s {
	case "async", "":
		return FlushAsync, nil
	case "sync":
		return FlushSync, nil
	}
	return 0, fmt.Errorf("flush mode %q: want async or sync: %w", s, ErrInvalidOption)
}

// PrewriteMode says whether the allocation service writes (zeros) and
// syncs every block of a new CommitLog segment before the segment is used.
//
// Why: a segment is preallocated with fallocate, whose blocks are unwritten
// extents; the first write into each needs an extent conversion that the
// next fdatasync must commit to the file system's journal. A durable append
// into a prewritten segment commits only its data: on the reference machine
// (ext4 on virtio) a 4 KiB write + fdatasync runs about twice as fast on a
// prewritten file as on a fallocated one. The cost — writing the whole
// segment once, in the background, before it is needed — is what RocketMQ's
// warm-up (warmMapedFileEnable) pays for the same reason. A segment made
// prewritten stays written across restarts: recovery's Truncate writes
// zeros where needed instead of deallocating.
type PrewriteMode int

const (
	// PrewriteDefault: auto with FlushSync (every Put waits for an
	// fdatasync that would otherwise commit extent conversions), off with
	// FlushAsync and with NoPreallocate. A named backend that keeps its
	// files in memory (mem) is always off, whatever was asked; with
	// BackendImpl the backend decides what Spec.Prewrite means. Resolved at
	// Open: Store.Options reports PrewriteAuto, PrewriteOn or PrewriteOff.
	PrewriteDefault PrewriteMode = iota
	// PrewriteOn: every segment the allocation service creates is
	// prewritten (needs the allocation service: not with NoPreallocate).
	PrewriteOn
	// PrewriteOff: segments are only fallocated.
	PrewriteOff
	// PrewriteAuto: the allocation service prewrites a segment when the
	// store's durable syncs since it made the last one covered fewer than
	// PrewriteBelowSyncBytes each (and when there were none), and only
	// fallocates it otherwise. Pre-writing costs the device one byte of
	// zeros per byte of log; an extent conversion costs one metadata write
	// per sync, whatever it covers. Few bytes per sync (few producers) make
	// the conversions dear and the zeros cheap; many (hundreds of producers
	// in one group commit) the other way round. Needs the allocation
	// service, as PrewriteOn does.
	PrewriteAuto
)

func (m PrewriteMode) String() string {
	switch m {
	case PrewriteDefault:
		return "default"
	case PrewriteOn:
		return "on"
	case PrewriteOff:
		return "off"
	case PrewriteAuto:
		return "auto"
	}
	return fmt.Sprintf("PrewriteMode(%d)", int(m))
}

// BatchingMode is how the sync group commit's owner forms its batches
// (Options.GroupCommitBatching).
type BatchingMode int

const (
	// BatchingAuto: the owner measures, every few hundred flushes (more
	// while one mode keeps winning clearly), the records per second of a
	// merged batch and of two convoys, a few flushes each, and keeps the
	// faster.
	BatchingAuto BatchingMode = iota
	// BatchingMerge: before it takes a batch the owner lingers until every
	// sync Put in progress has queued, for at most the last flush's
	// duration: one batch of every producer, the device idle while they
	// come back.
	BatchingMerge
	// BatchingConvoys: the owner takes whoever has queued as soon as the
	// last flush returns: the producers split into two convoys that flush
	// in turn, one appending while the other's flush runs.
	BatchingConvoys
)

func (m BatchingMode) String() string {
	switch m {
	case BatchingAuto:
		return "auto"
	case BatchingMerge:
		return "merge"
	case BatchingConvoys:
		return "convoys"
	}
	return fmt.Sprintf("BatchingMode(%d)", int(m))
}

// ParseBatchingMode parses "auto" (or ""), "merge" or "convoys".
func ParseBatchingMode(s string) (BatchingMode, error) {
	switch s {
	case "auto", "":
		return BatchingAuto, nil
	case "merge":
		return BatchingMerge, nil
	case "convoys":
		return BatchingConvoys, nil
	}
	return 0, fmt.Errorf("group-commit batching %q: want auto, merge or convoys: %w", s, ErrInvalidOption)
}

// MarshalText implements encoding.TextMarshaler ("auto", "merge",
// "convoys"), so a run record says what ran in words.
func (m BatchingMode) MarshalText() ([]byte, error) {
	if m < BatchingAuto || m > BatchingConvoys {
		return nil, fmt.Errorf("%v: %w", m, ErrInvalidOption)
	}
	return []byte(m.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *BatchingMode) UnmarshalText(text []byte) error {
	v, err := ParseBatchingMode(string(text))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// ParsePrewriteMode parses "default" (or ""), "on", "off" or "auto".
func ParsePrewriteMode(s string) (PrewriteMode, error) {
	switch s {
	case "default", "":
		return PrewriteDefault, nil
	case "on":
		return PrewriteOn, nil
	case "off":
		return PrewriteOff, nil
	case "auto":
		return PrewriteAuto, nil
	}
	return 0, fmt.Errorf("prewrite mode %q: want default, on, off or auto: %w", s, ErrInvalidOption)
}

// MarshalText implements encoding.TextMarshaler ("default", "on", "off",
// "auto"), so a run record says what ran in words.
func (m PrewriteMode) MarshalText() ([]byte, error) {
	if m < PrewriteDefault || m > PrewriteAuto {
		return nil, fmt.Errorf("%v: %w", m, ErrInvalidOption)
	}
	return []byte(m.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *PrewriteMode) UnmarshalText(text []byte) error {
	v, err := ParsePrewriteMode(string(text))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// CorruptionPolicy is what Open does when it finds a corrupt record in data
// that was known durable (not a torn tail after a crash).
type CorruptionPolicy int

const (
	// CorruptionStop: Open fails with an error wrapping ErrCorrupt that
	// names the offset; nothing is changed on disk.
	CorruptionStop CorruptionPolicy = iota
	// CorruptionTruncate: the log is cut at the corrupt record; the cut
	// bytes are kept in commitlog/<segment>.broken files.
	CorruptionTruncate
)

// RocketMQ's defaults.
const (
	DefaultSegmentSizeBytes       = 1 << 30 // mapedFileSizeCommitLog
	DefaultMaxMessageSizeBytes    = 4 << 20 // maxMessageSize
	DefaultFlushInterval          = 500 * time.Millisecond
	DefaultFlushLeastPages        = 4
	DefaultFlushThoroughInterval  = 10 * time.Second
	DefaultSyncFlushTimeout       = 5 * time.Second
	DefaultCommitInterval         = 200 * time.Millisecond
	DefaultCommitLeastPages       = 4
	DefaultCommitThoroughInterval = 200 * time.Millisecond
	DefaultAllocationTimeout      = 5 * time.Second
	DefaultOSPageCacheBusyTimeout = time.Second
	DefaultGroupCommitQueueSize   = 16384
	// DefaultPrewriteBelowSyncBytes: on the reference machine a sync that
	// commits an extent conversion takes ~80 µs more than one on written
	// blocks (mqbench's device-fdatasync-4k against -prewritten, 238 against
	// 158 µs), and pre-writing runs at 450–640 MB/s: 80 µs of it writes
	// 36–51 KB of zeros. Measured on the store (BenchmarkPutLoad, sync),
	// pre-writing won at 4 producers (4 KiB per sync) and 64 (~45 KiB:
	// by a third for transient, even for uring-direct) and lost by a fifth
	// at 256 (~230 KiB); 128 KiB sits between.
	DefaultPrewriteBelowSyncBytes = 128 << 10
	DefaultSlaveTimeout           = 3 * time.Second // slaveTimeout
	DefaultHASlaveFallbehindMax   = 256 << 20       // haSlaveFallbehindMax
	DefaultInSyncMaxLagBytes      = 4 << 20
	DefaultInSyncMaxLagTime       = 10 * time.Second
	DefaultSlaveRetentionMaxBytes = 64 << 30

	DefaultConsumeQueueFlushInterval         = time.Second
	DefaultConsumeQueueFlushThoroughInterval = time.Minute
	DefaultGetMaxBytes                       = 256 << 10 // maxTransferBytesOnMessageInMemory
)

// DefaultStoreHost is the STOREHOSTADDRESS of a store whose StoreHost is
// unset (RocketMQ's default listen port on loopback).
var DefaultStoreHost = netip.MustParseAddrPort("127.0.0.1:10911")

// Options configure a Store. A field left at its zero value is unset and
// takes its default (RocketMQ's, listed with each field) — in one place,
// withDefaults; DefaultOptions shows the result and Store.Options the
// effective options of an open store. Where zero is a value of its own
// the field says so (MinInSyncReplicas, WarmFlushEveryPages), and where an
// explicit "none" is needed it is a named constant (LeastPagesAny,
// SlaveRetentionIgnore).
type Options struct {
	// Backend names a registered I/O backend (mappedfile.Register; the
	// backends package links every one of this module); BackendNames lists
	// them. Empty: the registry's default (mmap). "mem" (in memory, nothing
	// on disk; tests and benchmarks) is always registered. Ignored when
	// BackendImpl is set.
	Backend string
	// BackendOptions are the backend's own options: nil (its defaults), or
	// a value of (or pointer to) its options type (each backend package
	// exports its Options; mem's is mappedfile.MemOptions). Another type is
	// ErrInvalidOption. They marshal to JSON, so a run can record
	// them; DecodeBackendOptions reads them back.
	BackendOptions any
	// BackendImpl, when set, is used for every segment file instead of a
	// named backend (tests pass a MemFS or a Faulty wrapper here).
	BackendImpl mappedfile.Backend

	// SegmentSizeBytes is the CommitLog segment size. A store remembers the
	// size it was created with: 0 reuses it; another value is an error.
	SegmentSizeBytes int64
	// MaxMessageSizeBytes bounds the encoded record (4 MiB).
	MaxMessageSizeBytes int

	FlushMode             FlushMode
	FlushInterval         time.Duration // async: how often the flusher runs (500 ms)
	FlushLeastPages       int           // async: flush only when this many pages are pending (4; LeastPagesAny: any byte)
	FlushThoroughInterval time.Duration // async: a full flush at least this often (10 s)
	SyncFlushTimeout      time.Duration // sync: how long Put waits before FlushDiskTimeout (5 s)
	GroupCommitQueueSize  int           // sync: bound of the waiter queue (16384)
	GroupCommitBatching   BatchingMode  // sync: merged batches, convoys, or measured (auto)

	// Commit service, for buffered backends (Registration.Buffered).
	CommitInterval         time.Duration // 200 ms
	CommitLeastPages       int           // 4; LeastPagesAny: any byte
	CommitThoroughInterval time.Duration // 200 ms

	// NoPreallocate turns off the allocation service: segments are created
	// when the roll needs them.
	NoPreallocate bool
	// WarmSegments pre-touches (and mlocks when LockSegments) new segments in
	// the allocation service (RocketMQ's warmMapedFileEnable).
	WarmSegments        bool
	WarmFlushEveryPages int
	LockSegments        bool
	// AllocationTimeout bounds how long a roll waits for its segment (5 s).
	AllocationTimeout time.Duration
	// PrewriteSegments: whether the allocation service writes every block
	// of a new CommitLog segment (zeros) and syncs it before use; see
	// PrewriteMode. The default follows FlushMode (auto for sync).
	PrewriteSegments PrewriteMode
	// PacePrewrite writes the zeros of a segment made ahead of need in
	// steps of 1 MiB, each fdatasynced before the next, until a roll waits
	// for it (mappedfile.Spec.PrewritePace): the log's syncs then never
	// flush a segment's zeros in bulk. It trades throughput, and the p99
	// of small segments, for the p99.9: measured here with sync flush, the
	// Puts' p99.9 fell from 31–66 ms to 6–16 ms wherever a burst of zeros
	// had set it (64 producers; 16 with 1 GiB segments), the p99 rose up
	// to 3× (fell from 23 to 4 ms at 64 producers with 1 GiB segments),
	// and throughput fell by 0–27 % (docs/backends.md, "Paced zeros"). Off
	// by default.
	PacePrewrite bool
	// PrewriteBelowSyncBytes is PrewriteAuto's threshold: the bytes per
	// durable sync below which a new segment is prewritten (128 KiB).
	PrewriteBelowSyncBytes int64

	// DispatchLagLimitBytes: a Put whose record ends more than this many
	// bytes ahead of dispatch waits (up to a second) for dispatch to catch
	// up before it returns, so consumers see messages within this many bytes
	// and dispatch reads what it reads from the backend's memory. 0: half of
	// what the backend serves reads from memory (mappedfile.MemoryReads:
	// an O_DIRECT staging ring), none for a backend without such a bound;
	// negative: none.
	DispatchLagLimitBytes int64

	// OSPageCacheBusyTimeout: when the append lock has been held longer than
	// this, new Puts fail fast with OSPageCacheBusy (1 s).
	OSPageCacheBusyTimeout time.Duration

	// StoreHost is written into every record's STOREHOSTADDRESS
	// (default 127.0.0.1:10911).
	StoreHost netip.AddrPort

	// ConsumeQueue and IndexFile sizes (RocketMQ's defaults: 300,000 units
	// of 20 bytes; 5,000,000 slots and 20,000,000 entries). Recorded like the
	// segment size.
	ConsumeQueueFileSizeBytes int64
	IndexSlotCount            int
	IndexMaxEntries           int
	// ConsumeQueueFlushInterval: how often ConsumeQueues with ≥ 2 pages
	// pending are flushed (1 s); everything, index and checkpoint included,
	// every ConsumeQueueFlushThoroughInterval (60 s).
	ConsumeQueueFlushInterval         time.Duration
	ConsumeQueueFlushThoroughInterval time.Duration
	// GetMaxBytes bounds the bytes one Get returns (256 KiB, RocketMQ's
	// maxTransferBytesOnMessageInMemory); at least one message is returned.
	GetMaxBytes int

	// Retention: segments older than FileReservedTime (72 h) are deleted at
	// the DeleteWhen hours ("04"; "04;16"; "*" for any), and the oldest are
	// deleted at once while the disk is more than DiskMaxUsedRatio percent
	// full (75). The service runs every CleanInterval (10 s).
	FileReservedTime time.Duration
	DeleteWhen       string
	DiskMaxUsedRatio int
	CleanInterval    time.Duration
	// NoRetention: the retention service does not run, so the store
	// deletes no segment by itself (an admin tool that only reads a store
	// must never shrink it: not at DeleteWhen, not when the disk is full).
	// Store.CleanExpired still deletes when called.
	NoRetention bool
	// RecycleSegments keeps up to this many CommitLog segments that
	// retention deletes, renamed, for the allocation service to take as
	// new segments instead of making files (0, the default: none). A
	// durable write into a reused file commits only its data: its extents
	// are written, where a new file's are allocated and unwritten and a
	// write into them also commits an extent change, or has to be bought
	// by pre-writing zeros (PrewriteSegments). Measured with 64 MiB
	// segments and sync flush: 64 producers, 117k → 139k msgs/s and a flush
	// p99.9 of 22–25 ms → under 2 ms; 256 producers, 199k → 252k
	// (docs/design.md). Pooled files take their disk space until reused; a
	// full disk (DiskMaxUsedRatio) empties the pool. Once a store has
	// recycled, every record it writes carries a whole-record checksum
	// (record.PropRecordCRC, 20 bytes of properties) that recovery checks,
	// even after RecycleSegments is set back to 0 (docs/formats.md). A
	// slave's records are its master's: it starts reusing segments at the
	// first replicated record that carries the checksum. Only for a
	// backend whose writes bypass the page cache (uring-direct): through the
	// page cache a reused file's pages, no longer cached, are read back
	// before they are written, and reuse measured slower (mmap, transient)
	// or no faster (uring) than a fresh segment; Open refuses it there.
	RecycleSegments int

	// Role is the store's part in replication (RocketMQ's brokerRole):
	// AsyncMaster (the default), SyncMaster (a Put waits for a slave) or
	// Slave (no Puts; package ha appends what the master sends).
	Role BrokerRole
	// SlaveTimeout: how long a SYNC_MASTER Put waits for a slave's
	// acknowledgement before FlushSlaveTimeout (3 s; RocketMQ's
	// slaveTimeout, haSlaveTimeout in some of its docs).
	SlaveTimeout time.Duration
	// HASlaveFallbehindMax: a SYNC_MASTER Put answers SlaveNotAvailable
	// without waiting when the best connected slave is this many bytes or
	// more behind the record's end (256 MiB; RocketMQ's
	// haSlaveFallbehindMax).
	HASlaveFallbehindMax int64
	// MinInSyncReplicas, when > 0, makes a SYNC_MASTER wait for every
	// slave of its in-sync set instead of RocketMQ's best one, and answer
	// InSyncReplicasNotEnough when the set has fewer members (0: RocketMQ's
	// classic mode). A verified slave joins the set once it has everything
	// the set acknowledged and is within InSyncMaxLagBytes of the master's
	// end; it leaves it when it disconnects or has not been within
	// InSyncMaxLagBytes for InSyncMaxLagTime (then it is re-admitted when
	// it has caught up again).
	MinInSyncReplicas int
	InSyncMaxLagBytes int64         // 4 MiB
	InSyncMaxLagTime  time.Duration // 10 s
	// SlaveRetentionMaxBytes: retention keeps a CommitLog segment a
	// connected, verified slave (every in-sync one is) has not received
	// yet, while the store holds at most this many CommitLog bytes
	// (64 GiB) and the disk is not fuller than DiskMaxUsedRatio; beyond
	// either it deletes the segment anyway and logs which slave lost it.
	// SlaveRetentionIgnore (-1): retention ignores slaves (RocketMQ's
	// behaviour).
	SlaveRetentionMaxBytes int64

	// OnCorruption: what Open does with a corrupt record in durable data.
	OnCorruption CorruptionPolicy

	// FullRecoveryScan makes every Open scan and CRC-check the whole
	// CommitLog, so corruption anywhere stops it (or is cut, per
	// OnCorruption). By default Open scans as RocketMQ does, from the
	// third-newest segment after a clean close and from the segment the
	// checkpoint points at after a crash: its time does not grow with the
	// log. Verify (mqstore verify) always checks every record.
	FullRecoveryScan bool

	// Logger receives the store's logs (default slog.Default()).
	Logger *slog.Logger

	// ProfileLabels labels the store's goroutines for pprof with
	// ProfileLabelKey: its services for good, and a producer inside Put as
	// StageAppend and then StageWait. Put then sets the labels of ctx back
	// on the producer's goroutine when it returns (labels set with pprof.Do
	// travel in ctx; others are replaced by ctx's). Off by default: it
	// costs two label switches per Put.
	ProfileLabels bool

	// now is the clock (tests inject it through withClock); realClock says
	// it is time.Now, so a Put reads the clock once for its latency and its
	// timestamps.
	now       func() time.Time
	realClock bool
	// diskUsed reports how full the store's file system is, in percent
	// (tests inject a full disk).
	diskUsed func(dir string) (float64, error)
	// truncateAt, when set, cuts the CommitLog there before recovery
	// (TruncateCommitLog).
	truncateAt *truncateRequest
	// dispatchFromLog turns the dispatch feed off: dispatch reads every
	// record back from the log (tests of that path; the load benchmark's
	// before/after).
	dispatchFromLog bool
	// maxMessageSizeDefaulted: MaxMessageSizeBytes was unset, so
	// withStoreParams may shrink it to fit the segment.
	maxMessageSizeDefaulted bool
}

// LeastPagesAny, as FlushLeastPages or CommitLeastPages, makes the service
// act on any pending byte (RocketMQ's flushPhysicQueueLeastPages = 0). The
// field's zero value is unset and takes the default, 4 pages; this is the
// explicit "no minimum", kept as is in the effective options.
const LeastPagesAny = -1

// SlaveRetentionIgnore, as SlaveRetentionMaxBytes, makes retention ignore
// slaves (RocketMQ's behaviour).
const SlaveRetentionIgnore = -1

// DefaultOptions returns the effective options of a zero Options: every
// default, as Open applies it (before the store's recorded parameters:
// SegmentSizeBytes, ConsumeQueueFileSizeBytes, IndexSlotCount and
// IndexMaxEntries stay unset until a store is opened; see
// Options.withStoreParams).
func DefaultOptions() Options { return Options{}.withDefaults() }

// EffectiveOptions is o with its defaults applied (withDefaults): what a
// store opened with o runs with, but for the sizes a store records when it
// is created (Store.Options has those too).
func EffectiveOptions(o Options) Options { return o.withDefaults() }

// withDefaults is the one place an unset option takes its default. An
// option is unset when it holds its type's zero value, and only here does a
// zero mean that: every other reader of Options sees the effective value.
// Values with a meaning of their own are named constants (LeastPagesAny,
// SlaveRetentionIgnore); options whose zero is a real setting have no
// default (MinInSyncReplicas 0: the classic mode; WarmFlushEveryPages 0:
// no flush while warming up; the bools: off). The four parameters a store
// records at creation depend on its directory: withStoreParams resolves
// them at Open. The result is idempotent: withDefaults of effective options
// changes nothing.
func (o Options) withDefaults() Options {
	o.backendDefaults()
	o.flushDefaults()
	o.readDefaults()
	o.retentionDefaults()
	o.replicationDefaults()
	o.hookDefaults()
	return o
}

// setDefault stores def in *v when *v is unset (its zero value).
func setDefault[T comparable](v *T, def T) {
	var unset T
	if *v == unset {
		*v = def
	}
}

// backendDefaults: the backend, the record bound and the store host.
func (o *Options) backendDefaults() {
	setDefault(&o.Backend, defaultBackendName())
	if o.MaxMessageSizeBytes == 0 {
		o.MaxMessageSizeBytes = DefaultMaxMessageSizeBytes
		o.maxMessageSizeDefaulted = true // withStoreParams fits it to small segments
	}
	setDefault(&o.AllocationTimeout, DefaultAllocationTimeout)
	if !o.StoreHost.IsValid() {
		o.StoreHost = DefaultStoreHost
	}
}

// flushDefaults: the flush, group commit and commit services. PrewriteDefault
// is resolved here too (effectivePrewrite), since it follows FlushMode.
func (o *Options) flushDefaults() {
	setDefault(&o.FlushInterval, DefaultFlushInterval)
	setDefault(&o.FlushLeastPages, DefaultFlushLeastPages)
	setDefault(&o.FlushThoroughInterval, DefaultFlushThoroughInterval)
	setDefault(&o.SyncFlushTimeout, DefaultSyncFlushTimeout)
	setDefault(&o.GroupCommitQueueSize, DefaultGroupCommitQueueSize)
	setDefault(&o.PrewriteBelowSyncBytes, DefaultPrewriteBelowSyncBytes)
	setDefault(&o.CommitInterval, DefaultCommitInterval)
	setDefault(&o.CommitLeastPages, DefaultCommitLeastPages)
	setDefault(&o.CommitThoroughInterval, DefaultCommitThoroughInterval)
	setDefault(&o.OSPageCacheBusyTimeout, DefaultOSPageCacheBusyTimeout)
	o.PrewriteSegments = o.effectivePrewrite()
}

// readDefaults: the ConsumeQueue flush and the read bound.
func (o *Options) readDefaults() {
	setDefault(&o.ConsumeQueueFlushInterval, DefaultConsumeQueueFlushInterval)
	setDefault(&o.ConsumeQueueFlushThoroughInterval, DefaultConsumeQueueFlushThoroughInterval)
	setDefault(&o.GetMaxBytes, DefaultGetMaxBytes)
}

// retentionDefaults: the clean service.
func (o *Options) retentionDefaults() {
	setDefault(&o.FileReservedTime, DefaultFileReservedTime)
	setDefault(&o.DeleteWhen, DefaultDeleteWhen)
	setDefault(&o.DiskMaxUsedRatio, DefaultDiskMaxUsedRatio)
	setDefault(&o.CleanInterval, DefaultCleanInterval)
}

// replicationDefaults: what a master waits for and keeps for its slaves.
func (o *Options) replicationDefaults() {
	setDefault(&o.SlaveTimeout, DefaultSlaveTimeout)
	setDefault(&o.HASlaveFallbehindMax, DefaultHASlaveFallbehindMax)
	setDefault(&o.InSyncMaxLagBytes, DefaultInSyncMaxLagBytes)
	setDefault(&o.InSyncMaxLagTime, DefaultInSyncMaxLagTime)
	setDefault(&o.SlaveRetentionMaxBytes, DefaultSlaveRetentionMaxBytes)
}

// hookDefaults: the logger and what tests inject (clock, disk usage).
func (o *Options) hookDefaults() {
	setDefault(&o.Logger, slog.Default())
	if o.now == nil {
		o.now = time.Now
		o.realClock = true
	}
	if o.diskUsed == nil {
		o.diskUsed = diskUsedPercent
	}
}

// withStoreParams resolves what depends on the store's directory, once its
// recorded parameters are read (reconcileParams): a new store takes the set
// sizes or their defaults and records them; an existing one takes its
// recorded sizes (a set one that differs is ErrConfigMismatch, found by
// reconcileParams). A defaulted MaxMessageSizeBytes shrinks to fit the
// segment (tests and tools use small segments); a set one is validated
// against it instead.
func (o *Options) withStoreParams(p storeParams) {
	o.SegmentSizeBytes = p.SegmentSizeBytes
	o.ConsumeQueueFileSizeBytes = p.ConsumeQueueFileSize
	o.IndexSlotCount = p.IndexSlotCount
	o.IndexMaxEntries = p.IndexMaxEntries
	if o.maxMessageSizeDefaulted {
		o.MaxMessageSizeBytes = min(o.MaxMessageSizeBytes, int(o.SegmentSizeBytes)-2*record.BlankSize)
	}
}

// newStoreParams are the parameters a new store records: the set sizes, or
// their defaults.
func (o Options) newStoreParams() storeParams {
	p := storeParams{FormatVersion: formatVersion, SegmentSizeBytes: o.SegmentSizeBytes, MaxMessageSizeBytes: o.MaxMessageSizeBytes,
		ConsumeQueueFileSize: o.ConsumeQueueFileSizeBytes, IndexSlotCount: o.IndexSlotCount, IndexMaxEntries: o.IndexMaxEntries, isNew: true}
	setDefault(&p.SegmentSizeBytes, DefaultSegmentSizeBytes)
	setDefault(&p.ConsumeQueueFileSize, consumequeue.DefaultFileSizeBytes)
	setDefault(&p.IndexSlotCount, indexfile.DefaultSlotCount)
	setDefault(&p.IndexMaxEntries, indexfile.DefaultMaxEntries)
	return p
}

// effectivePrewrite resolves PrewriteDefault: auto for sync flush, off for
// async, off with NoPreallocate (a roll would pay for it) and for a backend
// whose files live in memory (nothing to write: the record must not claim
// otherwise). An explicit on or off is kept (validate refuses on with
// NoPreallocate), except that an in-memory backend is always off.
func (o Options) effectivePrewrite() PrewriteMode {
	if o.BackendImpl == nil {
		if reg, err := lookupBackend(o.Backend); err == nil && reg.Volatile {
			return PrewriteOff
		}
	}
	if o.PrewriteSegments != PrewriteDefault {
		return o.PrewriteSegments
	}
	if o.FlushMode == FlushSync && !o.NoPreallocate {
		return PrewriteAuto
	}
	return PrewriteOff
}

// Validate reports what is wrong with o, as Open would refuse it — before
// anything is opened (a tool that will open many stores checks once).
func (o Options) Validate() error { return o.validate() }

func (o Options) validate() error {
	type check struct {
		bad  bool
		what string
	}
	for _, c := range []check{
		{o.SegmentSizeBytes < 0, fmt.Sprintf("SegmentSizeBytes %d is negative", o.SegmentSizeBytes)},
		{o.SegmentSizeBytes > 0 && o.SegmentSizeBytes%mappedfile.PageSize != 0, fmt.Sprintf("SegmentSizeBytes %d is not a multiple of %d", o.SegmentSizeBytes, mappedfile.PageSize)},
		{o.MaxMessageSizeBytes < 0, "MaxMessageSizeBytes is negative"},
		{o.SegmentSizeBytes > 0 && int64(o.MaxMessageSizeBytes)+16 > o.SegmentSizeBytes,
			fmt.Sprintf("MaxMessageSizeBytes %d does not fit in a segment of %d bytes", o.MaxMessageSizeBytes, o.SegmentSizeBytes)},
		{o.FlushMode != FlushAsync && o.FlushMode != FlushSync, fmt.Sprintf("FlushMode %d is unknown", o.FlushMode)},
		{o.PrewriteSegments < PrewriteDefault || o.PrewriteSegments > PrewriteAuto, fmt.Sprintf("PrewriteSegments %d is unknown (want PrewriteDefault, PrewriteOn, PrewriteOff or PrewriteAuto)", o.PrewriteSegments)},
		{(o.PrewriteSegments == PrewriteOn || o.PrewriteSegments == PrewriteAuto) && o.NoPreallocate,
			fmt.Sprintf("PrewriteSegments %v needs the allocation service, which NoPreallocate turns off (a roll would wait for the whole segment to be written)", o.PrewriteSegments)},
		{o.PrewriteBelowSyncBytes < 0, fmt.Sprintf("PrewriteBelowSyncBytes %d is negative", o.PrewriteBelowSyncBytes)},
		{o.FlushInterval < 0 || o.FlushThoroughInterval < 0 || o.SyncFlushTimeout < 0 || o.CommitInterval < 0 ||
			o.CommitThoroughInterval < 0 || o.AllocationTimeout < 0 || o.OSPageCacheBusyTimeout < 0, "a duration is negative"},
		{o.FlushLeastPages < LeastPagesAny || o.CommitLeastPages < LeastPagesAny, "a least-pages count is below LeastPagesAny (-1)"},
		{o.GroupCommitQueueSize < 0, "GroupCommitQueueSize is negative"},
		{o.GroupCommitBatching < BatchingAuto || o.GroupCommitBatching > BatchingConvoys, fmt.Sprintf("GroupCommitBatching %d is unknown (want BatchingAuto, BatchingMerge or BatchingConvoys)", o.GroupCommitBatching)},
		{o.ConsumeQueueFileSizeBytes < 0 || o.ConsumeQueueFileSizeBytes%20 != 0, fmt.Sprintf("ConsumeQueueFileSizeBytes %d is not a positive multiple of 20", o.ConsumeQueueFileSizeBytes)},
		{o.IndexSlotCount < 0 || o.IndexMaxEntries < 0, "an index size is negative"},
		{o.ConsumeQueueFlushInterval < 0 || o.ConsumeQueueFlushThoroughInterval < 0, "a consume queue flush interval is negative"},
		{o.GetMaxBytes < 0, "GetMaxBytes is negative"},
		{o.FileReservedTime < 0 || o.CleanInterval < 0, "a retention duration is negative"},
		{o.DiskMaxUsedRatio < 0 || o.DiskMaxUsedRatio > 100, fmt.Sprintf("DiskMaxUsedRatio %d is not a percentage", o.DiskMaxUsedRatio)},
		{o.RecycleSegments < 0, fmt.Sprintf("RecycleSegments %d is negative", o.RecycleSegments)},
		{o.Role != AsyncMaster && o.Role != SyncMaster && o.Role != Slave, fmt.Sprintf("Role %d is unknown", o.Role)},
		{o.SlaveTimeout < 0, fmt.Sprintf("SlaveTimeout %v is negative", o.SlaveTimeout)},
		{o.HASlaveFallbehindMax < 0, fmt.Sprintf("HASlaveFallbehindMax %d is negative", o.HASlaveFallbehindMax)},
		{o.MinInSyncReplicas < 0, fmt.Sprintf("MinInSyncReplicas %d is negative", o.MinInSyncReplicas)},
		{o.MinInSyncReplicas > 0 && o.Role != SyncMaster, fmt.Sprintf("MinInSyncReplicas %d needs the SyncMaster role", o.MinInSyncReplicas)},
		{o.InSyncMaxLagBytes < 0 || o.InSyncMaxLagTime < 0, "an in-sync lag bound is negative"},
		{o.SlaveRetentionMaxBytes < SlaveRetentionIgnore, fmt.Sprintf("SlaveRetentionMaxBytes %d is below SlaveRetentionIgnore (-1)", o.SlaveRetentionMaxBytes)},
	} {
		if c.bad {
			return fmt.Errorf("options: %s: %w", c.what, ErrInvalidOption)
		}
	}
	return nil
}
