// Package device measures the limits beside the store, with no engine in
// the way: the device's sequential O_DIRECT write bandwidth (io_uring at a
// queue depth, fio's --rw=write --direct=1 --ioengine=io_uring), the
// latency of one durable 4 KiB append (pwrite + fdatasync), and the
// group-commit limit (N records written and fdatasynced as one write, or
// split between two writers in flight at once).
//
// The io_uring probe drives the uring package's exported ring (NewRing,
// RegisterBuffers, Submit, Wait); everything else is plain system calls.
//
// SyncWrites (write + fdatasync, of any size, one or more writers) runs on
// a fallocated file (each sync also commits an extent conversion) or a
// pre-written one (data only: the physical cost of a durable append);
// CreateSegment times making a segment, fallocated or pre-written
// (buffered or O_DIRECT zeros), with the engine's own code
// (internal/segfile.OpenOrCreate, which its allocation service uses).
//
// Files: probe_linux.go (SequentialWrite, SyncWrites, CreateSegment),
// probe_other.go, syncprobe.go (SyncProbe), result.go (Result, the
// errors), file_linux.go (probe files).
package device
