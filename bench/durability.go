package bench

import "github.com/mqstore/mqstore/bench/runfile"

// storeDurabilitySemantics says what an mqstore acknowledgement means for a
// backend and flush mode (DESIGN.md's backends and flush policies): when a
// Put returns, what a crash of the process loses (the machine stays up: the
// page cache survives), what a power loss loses, and the mechanism that
// makes data durable. The summary's durability table prints it beside the
// peers' own statements.
func storeDurabilitySemantics(backend, flush string) *runfile.Durability {
	sync := flush == "sync"
	d := &runfile.Durability{}
	switch backend {
	case "mmap":
		d.Ack = "after the record is copied into the shared file mapping (page cache)"
		d.ProcessCrash = "nothing: the pages belong to the file and the kernel writes them back"
		d.Mechanism = "msync(MS_SYNC) of the dirty range"
	case "transient":
		d.Ack = "after the record is copied into an mlocked off-heap buffer of the pool"
		d.ProcessCrash = "what the commit service has not yet written to the file (pwrite): up to a commit interval (200 ms), more while commits lag"
		d.Mechanism = "pwrite of committed bytes, then fdatasync"
	case "uring":
		d.Ack = "after the record is copied into a registered staging buffer"
		d.ProcessCrash = "what no completed io_uring WRITE has put in the page cache yet: up to a commit interval, more while commits lag"
		d.Mechanism = "io_uring WRITE(_FIXED) into the page cache, then io_uring FSYNC(DATASYNC)"
	case "uring-direct":
		d.Ack = "after the record is copied into an aligned registered staging buffer"
		d.ProcessCrash = "what no completed O_DIRECT write has reached the device with yet: up to a commit interval, more while commits lag"
		d.Mechanism = "io_uring O_DIRECT writes (RWF_DSYNC with pre-zeroed segments), then io_uring FSYNC(DATASYNC)"
	case "mem":
		d.Ack = "after the record is copied into process memory"
		d.ProcessCrash = "everything (nothing is on disk)"
		d.PowerLoss = "everything"
		d.Mechanism = "none: an in-memory file system for the engine's own cost"
		return d
	default:
		return nil
	}
	if sync {
		d.Ack = "after a group-commit flush covering the record returned (" + d.Mechanism + ")"
		d.ProcessCrash = "nothing acknowledged"
		d.PowerLoss = "nothing acknowledged, if the device honours cache flushes"
		return d
	}
	d.Ack += "; flushed in the background"
	d.PowerLoss = "everything not yet flushed: up to a flush interval (500 ms) plus the flush in progress, the whole backlog when flushes fall behind (see backlog)"
	return d
}
