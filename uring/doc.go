// Package uring is mqstore's own io_uring binding, written against the
// kernel ABI over golang.org/x/sys/unix (no cgo, no liburing), and the two
// backends that write segments through it.
//
// # The backends
//
// Both append into an off-heap staging ring per segment being written
// (Options.StagingBytes, 16 MiB by default for uring and 64 MiB for
// uring-direct, never more than the segment)
// and make records readable at once, at the write position: bytes not yet
// in the file are read from the ring, the rest from the file. (The engine
// dispatches to consumers only what is committed — what a process crash
// keeps — so the ring's uncommitted tail serves the writer's own reads.)
//
//   - "uring" (buffered): Commit is pwrite(2) of the pending bytes and
//     Flush is fdatasync(2) — plain system calls, not io_uring. On ext4 a
//     buffered io_uring write never runs inline (ext4 has no non-blocking
//     buffered write), so every WRITE goes to an io-wq worker and back:
//     measured here 15–130 µs for 1 KiB (median 27 µs) against 1.6 µs for
//     an inline pwrite, 31 µs against 11 µs for 64 KiB. With SyncAtCommit
//     (set by the engine for sync flush) a commit is pwrite+fdatasync on the
//     committing goroutine (SyncSyscalls), or a WRITE linked to an FSYNC in
//     one io_uring submission (SyncLinkedFsync: 30–60 µs slower per 4 KiB
//     durable append here).
//   - "uring-direct" (O_DIRECT): Commit is one vectored io_uring write
//     (WRITEV_FIXED from the registered staging buffer on Linux 6.15+) of
//     the whole blocks covering the pending bytes; a partial last block is
//     copied into a bounce page, padded with zeros and written again by the
//     next commit, so the file never holds a byte past the write position
//     but zeros. The block is the largest of the O_DIRECT alignment (statx
//     DIOALIGN), the file system block and the device's physical block.
//     Flush is an io_uring FSYNC(DATASYNC). With SyncAtCommit a commit is
//     one write of those blocks that is durable when it completes, and
//     Flush does no I/O: on a segment whose extents are written (PreZero,
//     or pre-written by the store) that is one write and one device flush
//     per commit (none with FUA). By default (SyncSyscalls) that write is
//     pwritev2(2) with RWF_DSYNC on the committing goroutine: a 4 KiB durable
//     append measured 100–125 µs at the median that way against 130–175 µs
//     through io_uring (SyncDSync, or SyncLinkedFsync), every method taking
//     turns on the same device (BenchmarkDurableRoundRobin). Through io_uring
//     the kernel runs the write's sync in a workqueue (or the FSYNC in an
//     io-wq worker) and completes the request by task_work: more thread
//     wake-ups than a system call that sleeps and syncs on its own thread.
//     Waiting for the completion on the submitting thread itself
//     (io_uring_enter with GETEVENTS) did not close the gap. Nor did the
//     store's sync load, where a committing goroutine that parks on its
//     completion leaves its P to the producers: 1 KiB RocketMQ-shaped
//     messages, 5 interleaved rounds (BenchmarkPutLoad -load-backends
//     uring-direct -load-producers 16,64,256 -load-backend-options
//     '{"SyncMethod":1}' against the default), SyncDSync 48.5k / 107k /
//     189k msgs/s against 64.0k / 108k / 208k.
//
// A full ring makes an append commit first (the producer waits for the
// disk instead of anything being overwritten). Truncate writes zeros over
// the non-zero blocks past the valid end (never FALLOC_FL_ZERO_RANGE or
// PUNCH_HOLE, which would make written extents unwritten again) and always
// fdatasyncs. Errors are sticky; a cancelled ctx never hides a real I/O
// error.
//
// # Staging memory
//
// A staging buffer is a ring of StagingBytes of anonymous memory, on a
// huge-page boundary and advised MADV_HUGEPAGE so that the kernel backs it
// with transparent huge pages where its THP setting allows ("always" or
// "madvise"; Staging reports HugeBytes), with a bounce page and an iovec
// page before it; every piece is off-heap, so the kernel never sees Go heap
// or stack memory. Appends and commits walk through the whole ring, and in
// 4 KiB pages each new page is a TLB miss — on a virtual machine a
// two-dimensional page walk, in the appender's copy and in the pinning of
// each O_DIRECT write alike. On this project's reference VM
// (BenchmarkPutLoad -load-producers 16 -load-modes async -load-cancel,
// three interleaved rounds of the two builds) uring-direct made 486k–598k
// msgs/s at 2.2–3.1 µs of CPU each with its 64 MiB ring in small pages,
// 803k–887k at 1.6–1.9 µs in huge pages; transient and uring, whose
// buffers are smaller or written back sooner, 5–10 % more. An append that wraps
// round the ring's end is encoded aside and copied in two pieces. The pool holds StagingBuffers of them
// (default 4), mapped once, lent to segments from Open until they are
// committed, and reused without clearing (appends clear what they reserve).
// Each is registered with the ring when the kernel allows it (≤ 1 GiB
// each; RLIMIT_MEMLOCK without CAP_IPC_LOCK); when it does not, the pool
// logs it once and writes without fixed buffers, or refuses with
// Options.RequireRegistered. Staging and Settings report what the backend
// runs with.
//
// # The ring
//
// Ring maps the SQ and CQ rings and the SQE array, reads and writes the
// ring heads and tails with sync/atomic (sequentially consistent, so the
// stores that publish SQEs and free CQEs are releases and the loads that
// observe the kernel's progress are acquires), and carries a slot number in
// user_data. Any goroutine may Submit (the submitting thread issues the
// request: no hand-off). A caller holding tickets never blocks for more
// (TrySubmit). One reaper goroutine waits for completions, hands each to
// the waiter of its slot and yields, so the waiter runs at once (a NOP
// round trip: 22 µs before the yield, 3 µs after). Requests the kernel
// cancels because their submitting thread ended are submitted again from
// the ring's own locked thread. An io_uring_enter errno the ring cannot
// recover from breaks the ring cleanly (ErrRingBroken) instead of crashing.
//
// When io_uring is unavailable (seccomp, kernel.io_uring_disabled, an old
// kernel) NewBackend and NewRing fail with an error that wraps
// ErrUnsupported, says which, and names the mmap and transient backends.
package uring
