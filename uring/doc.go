// Package uring is mqstore's own io_uring binding, written against the
// kernel ABI over golang.org/x/sys/unix (no cgo, no liburing), and the two
// backends that write segments through it:
//
//   - "uring": appends go to an off-heap staging buffer; Commit writes
//     [committed, wrote) with WRITE_FIXED requests (at most WriteChunkBytes
//     each, QueueDepth in flight) into the page cache; Flush is an io_uring
//     FSYNC(DATASYNC). Readable up to committed, read from the file
//     (pread, sendfile).
//   - "uring-direct": the same with O_DIRECT: only whole aligned blocks are
//     written, the partial tail block padded with zeros and rewritten by the
//     next Commit. Readable up to wrote: an unsealed segment is served from
//     its staging buffer, a sealed one (full and flushed) from the file.
//     With PreZero a new segment is written with zeros and fdatasynced at
//     Open, and commits are RWF_DSYNC writes, so Flush needs no fsync.
//
// # The ring
//
// Ring maps the SQ and CQ rings and the SQE array, reads and writes the
// ring heads and tails with sync/atomic (sequentially consistent, so the
// stores that publish SQEs and free CQEs are releases and the loads that
// observe the kernel's progress are acquires), and carries a slot number in
// user_data. Any goroutine may Submit; one reaper goroutine waits for
// completions and hands each to the waiter of its slot. The slot table has
// as many slots as the CQ has entries, so the CQ cannot overflow.
//
// # Memory
//
// The kernel reads write buffers after the submitting call returns, so
// every buffer handed to it is anonymous mmap'd memory (segfile.MapAnonymous),
// never Go heap or stack, and stays mapped until its completion is reaped.
// A backend owns a bounded pool of staging buffers (Options.StagingBuffers,
// default 4, each as large as the segment: up to 4 GiB with 1 GiB
// segments), mapped on first use, registered with the ring, and reused. A
// new segment borrows one at Open (waiting with its ctx when all are lent);
// uring gives it back when the full segment is committed, uring-direct when
// it is also flushed (or at Close).
//
// When io_uring is unavailable (seccomp, kernel.io_uring_disabled, an old
// kernel) NewBackend and NewRing fail with an error that wraps
// ErrUnsupported, says which, and names the mmap and transient backends.
package uring
