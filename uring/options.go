package uring

import (
	"fmt"

	"github.com/mqstore/mqstore/mappedfile"
)

// ErrUnsupported is wrapped by every error that says io_uring (or O_DIRECT)
// cannot run here; it wraps mappedfile.ErrUnsupported.
var ErrUnsupported = fmt.Errorf("uring: %w", mappedfile.ErrUnsupported)

// Options configures an io_uring backend.
type Options struct {
	// Direct selects the "uring-direct" backend: the file is opened with
	// O_DIRECT and written in whole aligned blocks. The default is the
	// buffered "uring" backend.
	Direct bool
	// PreZero (Direct only) writes zeros over a new segment and fdatasyncs
	// it at Open, so later writes overwrite allocated blocks; commits then
	// use RWF_DSYNC writes (a FUA write where the device has it), so every
	// committed byte is durable and Flush only moves the flushed position up
	// to the committed one, with no I/O. Without it Flush is an io_uring
	// FSYNC(DATASYNC).
	PreZero bool
	// StagingBuffers bounds the off-heap staging buffers (one per segment
	// being written, each the segment's size); default 4: the active
	// segment, the one still being committed or flushed, and the next two
	// preallocated. Open of a new segment waits (with its ctx) for a free
	// buffer. Memory: up to StagingBuffers × segment size.
	StagingBuffers int
	// WriteChunkBytes is the largest single write request; default 1 MiB.
	WriteChunkBytes int
	// QueueDepth is how many write requests one Commit keeps in flight;
	// default 8 (buffered writes to one file are serialized by the kernel's
	// io-wq, so depth matters less than batching) and 32 for Direct.
	QueueDepth int
	// RingEntries is the SQ size of the backend's ring; default 64. The CQ
	// is four times larger.
	RingEntries uint32
}

const (
	defaultStagingBuffers  = 4
	defaultWriteChunkBytes = 1 << 20
	defaultQueueDepth      = 8
	defaultDirectDepth     = 32
	defaultRingEntries     = 64
)

func (o Options) withDefaults() Options {
	if o.StagingBuffers <= 0 {
		o.StagingBuffers = defaultStagingBuffers
	}
	if o.WriteChunkBytes <= 0 {
		o.WriteChunkBytes = defaultWriteChunkBytes
	}
	if o.QueueDepth <= 0 {
		o.QueueDepth = defaultQueueDepth
		if o.Direct {
			o.QueueDepth = defaultDirectDepth
		}
	}
	if o.RingEntries == 0 {
		o.RingEntries = defaultRingEntries
	}
	return o
}

// Backend names.
const (
	NameBuffered = "uring"
	NameDirect   = "uring-direct"
)
