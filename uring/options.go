package uring

import (
	"fmt"
	"log/slog"

	"github.com/mqstore/mqstore/mappedfile"
)

// ErrUnsupported is wrapped by every error that says io_uring (or O_DIRECT)
// cannot run here; it wraps mappedfile.ErrUnsupported.
var ErrUnsupported = fmt.Errorf("uring: %w", mappedfile.ErrUnsupported)

// SyncMethod is how a durable commit (Options.SyncAtCommit) reaches the
// disk.
type SyncMethod int

const (
	// SyncDefault picks the measured best: SyncSyscalls for both backends
	// (see the package doc).
	SyncDefault SyncMethod = iota
	// SyncDSync (uring-direct): the commit's one O_DIRECT write goes
	// through io_uring with RWF_DSYNC: the kernel flushes the device cache
	// once after it (or writes with FUA where the device has it and the
	// write needs no metadata).
	SyncDSync
	// SyncLinkedFsync: the commit's write is linked to an
	// FSYNC(DATASYNC) in the same io_uring submission.
	SyncLinkedFsync
	// SyncSyscalls: system calls on the committing goroutine, no io_uring —
	// pwrite(2) then fdatasync(2) for uring; one pwritev2(2) with
	// RWF_DSYNC for uring-direct.
	SyncSyscalls
)

func (m SyncMethod) String() string {
	switch m {
	case SyncDefault:
		return "default"
	case SyncDSync:
		return "dsync-write"
	case SyncLinkedFsync:
		return "write-linked-fsync"
	case SyncSyscalls:
		return "syscalls"
	}
	return fmt.Sprintf("SyncMethod(%d)", int(m))
}

// Options configures an io_uring backend.
type Options struct {
	// Direct selects the "uring-direct" backend: the file is opened with
	// O_DIRECT and written in whole blocks. The default is the buffered
	// "uring" backend.
	Direct bool
	// SyncAtCommit makes every Commit durable by itself (SyncMethod says
	// how), so Flush only moves the flushed position: one write and one
	// device flush per commit instead of a write, then a sync. For a store
	// whose Puts wait for durability (sync flush). Without it Commit
	// writes and Flush syncs (fdatasync for uring, an io_uring
	// FSYNC(DATASYNC) for uring-direct).
	SyncAtCommit bool
	// SyncMethod: see SyncMethod. uring-direct accepts all three, uring
	// SyncSyscalls and SyncLinkedFsync.
	SyncMethod SyncMethod
	// PreZero writes zeros over every new segment and fdatasyncs it (and
	// its directory) at Open, so its extents are written before use: a
	// durable write into it then needs no journal commit for an extent
	// conversion. Truncate keeps extents written either way.
	PreZero bool
	// StagingBuffers bounds the off-heap staging buffers: one per segment
	// being written (default 4: the active segment, the one still being
	// committed, and the next two preallocated). Open of a new segment
	// waits (with its ctx) for a free buffer.
	StagingBuffers int
	// StagingBytes is the most bytes one segment may have appended and not
	// yet readable from its file (the ring of its staging buffer; default
	// 16 MiB for uring, 64 MiB for uring-direct, and never more than the
	// segment). With O_DIRECT a commit is the device write, and dispatch
	// may only read what is committed: the engine keeps producers within
	// half the ring of dispatch, so a 16 MiB ring holds them while one
	// ~3 MB commit and then its dispatch run; at 64 MiB commits grow and
	// producers rarely wait (+20 % msgs/s async, see docs/backends.md).
	// An append that does not
	// fit commits first. Memory: StagingBuffers × StagingBytes, plus two
	// pages each. It must exceed MaxAppendBytes by a block.
	StagingBytes int64
	// RequireRegistered makes a staging buffer the kernel will not register
	// (over RLIMIT_MEMLOCK without CAP_IPC_LOCK, over 1 GiB, no buffer
	// table) an error; by default it is logged once and written without
	// fixed buffers, and Staging reports it.
	RequireRegistered bool
	// SegmentSizeBytes, when known, makes NewBackend map and register the
	// staging buffers at once (so their limits are reported there, and
	// Open never maps memory).
	SegmentSizeBytes int64
	// MaxAppendBytes, when known, is the largest single append (a record
	// plus a blank); NewBackend checks that the staging ring can take it.
	MaxAppendBytes int64
	// WriteChunkBytes is the largest single write request of a PreZero
	// fill; default 1 MiB.
	WriteChunkBytes int
	// QueueDepth is how many write requests a PreZero fill keeps in
	// flight; default 8, 32 for Direct.
	QueueDepth int
	// RingEntries is the SQ size of the backend's ring; default 64. The CQ
	// is four times larger.
	RingEntries uint32
	// Logger receives the backend's rare warnings (a staging buffer not
	// registered, a broken ring); nil means slog.Default(). Not part of
	// the options a run records.
	Logger *slog.Logger `json:"-"`
}

const (
	defaultStagingBuffers  = 4
	defaultStagingBytes    = 16 << 20
	defaultDirectStaging   = 64 << 20
	defaultWriteChunkBytes = 1 << 20
	defaultQueueDepth      = 8
	defaultDirectDepth     = 32
	defaultRingEntries     = 64
	// maxStagingBytes keeps a staging buffer (ring plus two pages) within
	// the kernel's 1 GiB limit for one registered buffer.
	maxStagingBytes = 1<<30 - 64<<10
)

func (o Options) withDefaults() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return o, fmt.Errorf("uring: "+format+": %w", append(args, mappedfile.ErrInvalidArgument)...)
	}
	if o.StagingBuffers < 0 || o.StagingBytes < 0 || o.WriteChunkBytes < 0 || o.QueueDepth < 0 || o.SegmentSizeBytes < 0 || o.MaxAppendBytes < 0 {
		return bad("negative size in %+v", o)
	}
	if o.StagingBuffers == 0 {
		o.StagingBuffers = defaultStagingBuffers
	}
	if o.StagingBytes == 0 {
		o.StagingBytes = defaultStagingBytes
		if o.Direct {
			o.StagingBytes = defaultDirectStaging
		}
	}
	if o.StagingBytes%4096 != 0 || o.StagingBytes > maxStagingBytes {
		return bad("StagingBytes %d: want a multiple of 4096 of at most %d (a registered buffer is at most 1 GiB)", o.StagingBytes, maxStagingBytes)
	}
	if o.WriteChunkBytes == 0 {
		o.WriteChunkBytes = defaultWriteChunkBytes
	}
	if (o.Direct || o.PreZero) && o.WriteChunkBytes%4096 != 0 {
		return bad("WriteChunkBytes %d is not a multiple of 4096 (O_DIRECT requests, of uring-direct and of PreZero, must be whole blocks)", o.WriteChunkBytes)
	}
	if o.QueueDepth == 0 {
		o.QueueDepth = defaultQueueDepth
		if o.Direct {
			o.QueueDepth = defaultDirectDepth
		}
	}
	if o.RingEntries == 0 {
		o.RingEntries = defaultRingEntries
	}
	if o.MaxAppendBytes > 0 {
		ring := o.StagingBytes
		if o.SegmentSizeBytes > 0 {
			ring = min(ring, (o.SegmentSizeBytes+4095)/4096*4096)
		}
		if o.MaxAppendBytes > ring-4096 {
			return bad("StagingBytes %d cannot take an append of MaxAppendBytes %d (and a block); raise StagingBytes", ring, o.MaxAppendBytes)
		}
	}
	switch {
	case o.SyncMethod == SyncDefault:
		o.SyncMethod = SyncSyscalls
	case !o.Direct && o.SyncMethod == SyncDSync:
		return bad("uring: SyncMethod %v is for uring-direct; use %v or %v", o.SyncMethod, SyncSyscalls, SyncLinkedFsync)
	case o.SyncMethod < SyncDefault || o.SyncMethod > SyncSyscalls:
		return bad("unknown SyncMethod %d", int(o.SyncMethod))
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// Backend names.
const (
	NameBuffered = "uring"
	NameDirect   = "uring-direct"
)

// StagingInfo describes a backend's staging buffers, for logs and run
// records: how many, how large, and whether the kernel registered them
// (fixed-buffer writes without per-request page pinning) or why not.
type StagingInfo struct {
	Buffers       int    // most segments written at once
	RingBytes     int64  // each buffer's ring: the most bytes appended and not yet readable from the file
	Mapped        int    // buffers mapped so far
	Registered    bool   // every mapped buffer is a registered (fixed) buffer
	NotRegistered string // why not, when Registered is false
	MemlockLimit  int64  // RLIMIT_MEMLOCK when the backend started (-1: unlimited, 0: unknown)
	PinnedBytes   int64  // bytes the kernel pinned for registered buffers
	// HugeBytes is how many bytes of the mapped rings are backed by
	// transparent huge pages (0 where the kernel gives none: its THP
	// setting is "never", or it has no THP).
	HugeBytes int64
}

// StagingReporter is implemented by the backends NewBackend returns.
type StagingReporter interface {
	Staging() StagingInfo
}

// Settings is what a backend runs with, for run records.
type Settings struct {
	Name         string
	SyncAtCommit bool
	SyncMethod   SyncMethod
	PreZero      bool
	WritevFixed  bool // uring-direct commits use WRITEV_FIXED (Linux 6.15+)
	Staging      StagingInfo
}

// SettingsReporter is implemented by the backends NewBackend returns.
type SettingsReporter interface {
	Settings() Settings
}
