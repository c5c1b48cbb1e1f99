package uring

import (
	"fmt"

	"github.com/mqstore/mqstore/mappedfile"
)

// RegistrationBuffered and RegistrationDirect register the two backends;
// their options are Options (Direct follows the name). The store's settings
// fill what the options leave unset: the segment size (staging buffers are
// mapped and registered at once, so their limits show at Open of the store)
// and sync flush, which makes every commit durable by itself
// (Options.SyncAtCommit).
var (
	RegistrationBuffered = registration(NameBuffered)
	RegistrationDirect   = registration(NameDirect)
)

func init() {
	mappedfile.Register(RegistrationBuffered)
	mappedfile.Register(RegistrationDirect)
}

func registration(name string) mappedfile.Registration {
	direct := name == NameDirect
	reg := mappedfile.Registration{
		Name: name,
		Description: "appends into an off-heap staging ring (served to reads at once; the engine shows consumers only committed records); commit is pwrite (ext4 sends buffered io_uring writes to a worker thread), " +
			"flush fdatasync; with sync flush each commit is pwrite+fdatasync",
		Requires: "Linux 5.6+ with io_uring allowed (not disabled by kernel.io_uring_disabled or seccomp)",
		Rank:     20,
		Buffered: true,
		DirectIO: direct,
		Knobs: []mappedfile.Knob{
			{Name: "StagingBytes", Doc: "each segment's staging ring: the most bytes appended and not yet in the file"},
			{Name: "StagingBuffers", Doc: "staging buffers, one per segment being written"},
			{Name: "SyncMethod", Doc: "how a durable commit is made under sync flush (dsync-write, write-linked-fsync, syscalls)"},
			{Name: "PreZero", Doc: "write zeros over each new segment at Open, so a durable write needs no extent conversion"},
		},
		Unflushed: func(cfg mappedfile.Config, options any) (int64, string, error) {
			bufs, ring, err := StagingCapacity(options, cfg.SegmentSizeBytes)
			if err != nil {
				return 0, "", err
			}
			return int64(bufs) * ring, fmt.Sprintf("%s's %d staging rings of %d bytes", name, bufs, ring), nil
		},
		NewOptions: func() any { return &Options{Direct: direct} },
		New: func(cfg mappedfile.Config, options any) (mappedfile.Backend, error) {
			opts, err := mappedfile.OptionsAs[Options](name, options)
			if err != nil {
				return nil, err
			}
			opts.Direct = direct
			if opts.SegmentSizeBytes == 0 {
				opts.SegmentSizeBytes = cfg.SegmentSizeBytes
			}
			if cfg.SyncFlush {
				opts.SyncAtCommit = true
			}
			if opts.Logger == nil {
				opts.Logger = cfg.Logger
			}
			return NewBackend(opts)
		},
		Durability: func(cfg mappedfile.Config, options any) (mappedfile.Durability, error) {
			opts, err := mappedfile.OptionsAs[Options](name, options)
			if err != nil {
				return mappedfile.Durability{}, err
			}
			opts.Direct = direct
			return durability(opts, cfg.SyncFlush)
		},
	}
	if direct {
		reg.Description = "O_DIRECT: appends into an off-heap staging ring (served to reads at once; the engine shows consumers only committed records); commit is one vectored io_uring write of whole blocks " +
			"(the partial last block padded with zeros, rewritten by the next commit); flush is an io_uring FSYNC(DATASYNC); " +
			"with sync flush each commit is one pwritev2(RWF_DSYNC) of those blocks (one write and one device flush on a pre-written segment)"
		reg.Requires += ", and a file system with O_DIRECT (not tmpfs)"
		reg.Rank = 21
		reg.Tuned = func(cfg mappedfile.Config) (any, string) {
			if !cfg.SyncFlush {
				return nil, ""
			}
			return nil, "the backend's defaults — each durable commit one pwritev2 with RWF_DSYNC (SyncMethod syscalls) — " +
				"on segments the engine pre-writes for sync flush while syncs are small (PrewriteSegments auto), so such a commit commits data only, no extent conversion"
		}
	}
	return reg
}

// durability says what an acknowledgement means with opts (file_linux.go:
// commitBuffered, commitDirect, pwriteDSync, ringWriteSync, sync). Records
// are readable at once from the staging ring, but only committed bytes are
// in the file: a process crash loses what no commit has written.
func durability(opts Options, syncFlush bool) (mappedfile.Durability, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return mappedfile.Durability{}, err
	}
	if syncFlush || o.SyncAtCommit {
		var mechanism string
		switch {
		case !o.Direct && o.SyncMethod == SyncLinkedFsync:
			mechanism = "each commit is an io_uring WRITE from the staging ring linked to an FSYNC(DATASYNC) in one submission (SyncMethod write-linked-fsync)"
		case !o.Direct:
			mechanism = "each commit is pwrite(2) from the staging ring then fdatasync(2), on the committing goroutine (SyncMethod syscalls; no io_uring)"
		case o.SyncMethod == SyncDSync:
			mechanism = "each commit is one vectored io_uring O_DIRECT write of the whole blocks covering it with RWF_DSYNC (SyncMethod dsync-write)"
		case o.SyncMethod == SyncLinkedFsync:
			mechanism = "each commit is one vectored io_uring O_DIRECT write of its whole blocks linked to an FSYNC(DATASYNC) (SyncMethod write-linked-fsync)"
		default:
			mechanism = "each commit is one pwritev2(2) with RWF_DSYNC of the whole blocks covering it, O_DIRECT, on the committing goroutine (SyncMethod syscalls; no io_uring)"
		}
		if o.Direct {
			mechanism += extentsNote(o)
		}
		if syncFlush {
			return mappedfile.SyncFlushDurability(mechanism), nil
		}
		// Async flush with every commit durable by itself: the commit
		// service's interval, not the flush's, bounds what a power loss
		// loses.
		ring := "staging ring"
		if o.Direct {
			ring = "aligned off-heap staging ring"
		}
		return mappedfile.Durability{
			Ack:          "after the record is copied into the segment's " + ring + "; committed durably (then visible to consumers) in the background",
			ProcessCrash: "what the commit service has not yet written from the staging ring: up to the commit interval, more while commits fall behind",
			PowerLoss:    "what the commit service has not yet written durably: up to the commit interval (each commit is durable by itself: SyncAtCommit), more while commits fall behind",
			Mechanism:    mechanism + ", by the commit service",
		}, nil
	}
	if !o.Direct {
		return mappedfile.Durability{
			Ack:          "after the record is copied into the segment's off-heap staging ring; committed (then visible to consumers) and flushed in the background",
			ProcessCrash: "what the commit service has not yet written from the staging ring to the file (pwrite): up to the commit interval, more while commits fall behind",
			PowerLoss:    "everything not yet fdatasynced: up to the commit interval plus the flush interval, the whole backlog when they fall behind" + mappedfile.AsyncFlushTail,
			Mechanism: "commit: pwrite(2) from the staging ring into the page cache (a system call: ext4 would send a buffered io_uring write to a worker thread); " +
				"flush: fdatasync(2)",
		}, nil
	}
	return mappedfile.Durability{
		Ack:          "after the record is copied into the segment's aligned off-heap staging ring; committed (then visible to consumers) and flushed in the background",
		ProcessCrash: "what the commit service has not yet written from the staging ring with O_DIRECT: up to the commit interval, more while commits fall behind",
		PowerLoss: "everything since the last flush: a committed O_DIRECT write may still be in the device's volatile cache, and one into unwritten " +
			"(fallocated) extents needs the journal commit the flush makes — up to the commit interval plus the flush interval, the whole backlog when they fall behind" +
			mappedfile.AsyncFlushTail,
		Mechanism: "commit: one vectored io_uring O_DIRECT write of the whole blocks covering the pending bytes (the partial last block padded with zeros and " +
			"written again by the next commit); flush: io_uring FSYNC(DATASYNC)" + extentsNote(o),
	}, nil
}

// extentsNote says whether uring-direct's segments are pre-zeroed.
func extentsNote(o Options) string {
	if o.PreZero {
		return "; segments pre-zeroed at creation (PreZero): a durable write commits data only, no extent conversion"
	}
	return ""
}

// StagingCapacity is how many bytes a backend with opts (nil: the
// defaults) can hold appended and not yet in its files: its staging
// buffers times each one's ring (at most a segment of segmentSizeBytes).
// A benchmark sizes its window by it (an async cell can accept that much
// faster than the device takes it).
func StagingCapacity(opts any, segmentSizeBytes int64) (buffers int, ringBytes int64, err error) {
	o, err := mappedfile.OptionsAs[Options](NameDirect, opts)
	if err != nil {
		return 0, 0, err
	}
	if o, err = o.withDefaults(); err != nil {
		return 0, 0, err
	}
	ringBytes = o.StagingBytes
	if segmentSizeBytes > 0 {
		ringBytes = min(ringBytes, (segmentSizeBytes+4095)/4096*4096)
	}
	return o.StagingBuffers, ringBytes, nil
}
