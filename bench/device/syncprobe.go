package device

import (
	"fmt"
	"time"
)

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
// WriterBytes, when set (one entry per writer), gives each writer its own
// write size in place of WriteBytes: a group commit of N producers with two
// syncs in flight has only N records outstanding between them, so its
// bound is two writers of ⌈N/2⌉ and ⌊N/2⌋ records, not two of N.
//
// Direct (one writer only) makes each op what uring-direct's sync commit
// is instead: the file is opened with O_DIRECT (and pre-written with
// O_DIRECT zeros), and each op is one pwritev2 with RWF_DSYNC of the
// aligned blocks covering its bytes, no fdatasync. The ops follow each
// other in the file as records do: the next starts in the block where the
// last one ended, which it writes again (partly written, as a commit's
// tail block is).
//
// One 4 KiB writer is the device's durable-append latency; N records of a
// cell's size per write with one writer, and N split over two, its
// group-commit limit.
type SyncProbe struct {
	WriteBytes, Count, InFlight int
	WriterBytes                 []int
	Prewritten                  bool
	Direct                      bool
}

// check refuses a probe that cannot run: sizes and counts must be positive,
// every writer must have a write, and WriterBytes, when set, must give
// every writer a positive size.
func (p *SyncProbe) check() error {
	bad := p.InFlight <= 0 || p.Count < p.InFlight
	if p.WriterBytes == nil {
		bad = bad || p.WriteBytes <= 0
	} else {
		bad = bad || len(p.WriterBytes) != p.InFlight
		for _, n := range p.WriterBytes {
			bad = bad || n <= 0
		}
	}
	if bad {
		return fmt.Errorf("device: sync probe of %d writes of %d bytes (per writer: %v), %d in flight: want positive sizes, one per writer when given, "+
			"and at least one write per writer: %w", p.Count, p.WriteBytes, p.WriterBytes, p.InFlight, ErrInvalidArgument)
	}
	if p.Direct && p.InFlight != 1 {
		return fmt.Errorf("device: a direct sync probe with %d writers in flight: want one (two O_DIRECT writes of a shared tail block cannot be in flight at once): %w",
			p.InFlight, ErrInvalidArgument)
	}
	return nil
}

// layout places the writers in the probe's file: each writes per times,
// writer w in [starts[w], starts[w+1]); largest is the largest write.
func (p *SyncProbe) layout() (per int, starts []int64, largest int) {
	per = p.Count / p.InFlight
	starts = make([]int64, p.InFlight+1)
	for w := range p.InFlight {
		starts[w+1] = starts[w] + int64(per)*int64(p.writeBytes(w))
		largest = max(largest, p.writeBytes(w))
	}
	return per, starts, largest
}

// writeBytes is writer w's write size.
func (p *SyncProbe) writeBytes(w int) int {
	if p.WriterBytes != nil {
		return p.WriterBytes[w]
	}
	return p.WriteBytes
}

// SyncResult is what a sync probe measured: every write+fdatasync's
// latency, the bytes the writes wrote, and the time from the first write
// to the last sync's return.
type SyncResult struct {
	Latencies []time.Duration
	Bytes     int64
	Elapsed   time.Duration
}
