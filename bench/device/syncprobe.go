package device

import "time"

// SyncProbe is a durable-append probe: Count writes of WriteBytes, each a
// plain pwrite at the next offset followed by fdatasync, by InFlight
// writers at once — one goroutine each, on its own contiguous part of one
// file (as a pipelined group commit would have two syncs in flight on one
// segment), Count/InFlight writes each.
//
// Prewritten chooses the file, made as the engine's allocation service
// makes a segment (segfile.OpenOrCreate): false, fallocated only (its
// extents are allocated but unwritten, so each fdatasync also commits the
// extent conversion of the block just written — a journal commit on ext4
// and xfs); true, pre-written (zeros written through the page cache and
// synced before the first write, as the engine's PrewriteSegments does for
// the buffered backends), so a sync commits data only: the physical cost
// of a durable append.
//
// One 4 KiB writer is the device's durable-append latency; N records of a
// cell's size per write, one and two writers, its group-commit limit.
type SyncProbe struct {
	WriteBytes, Count, InFlight int
	Prewritten                  bool
}

// SyncResult is what a sync probe measured: every write+fdatasync's
// latency, and the time from the first write to the last sync's return.
type SyncResult struct {
	Latencies []time.Duration
	Elapsed   time.Duration
}
