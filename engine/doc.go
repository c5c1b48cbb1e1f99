// Package engine is mqstore's store: one CommitLog shared by every topic, in
// RocketMQ's on-disk format, written through a pluggable MappedFile backend,
// with RocketMQ's flush policies (async, and sync with group commit).
//
// # Concept map
//
// A Store owns one directory (FORMAT.md has the layout) and these parts, each
// in its own file:
//
//	store.go      lifecycle: Open (lock, abort file, stored parameters,
//	              services), Close, accessors, Stats
//	recover.go    recovery: where the scan starts, the CRC-checked scan, torn
//	              tails, truncation of the log, ConsumeQueues and index,
//	              re-dispatch after a crash
//	put.go        the write path: Put, validation, encode outside the lock,
//	              append under it, and the wait for the flush policy
//	commitlog.go  the CommitLog: a segment queue, the append lock, rolls with
//	              the 8-byte BLANK, reads by physical offset
//	allocate.go   the allocation service: next and next-next segment
//	flush.go      flush policies: the async flusher, the commit service for
//	              buffered backends, and offsetWaiters, the one "wait until
//	              a position reaches an offset" primitive behind the sync
//	              group committer and the SYNC_MASTER wait
//	logreader.go  the CommitLogReader the HA master streams from (ranges
//	              within a segment, sendfile, a wait for the log to grow)
//	replicate.go  roles (ASYNC_MASTER, SYNC_MASTER, SLAVE), the replicated
//	              position SYNC_MASTER Puts wait on, AppendReplicated (a
//	              slave appends the master's bytes), TruncateCommitLog
//	dispatch.go   dispatch (reput): ConsumeQueue units and index entries built
//	              from the readable CommitLog, and the logics flusher
//	consume.go    reads by queue (Get, long polling, sendfile)
//	query.go      reads by key and time through the IndexFile
//	retention.go  deletion of expired segments and of segments when the disk
//	              is full
//	verify.go     a full consistency check of a store
//	dirfiles.go   the lock, abort, checkpoint and stored-parameter files
//	backends.go   the MappedFile backends offered by name
//	options.go    Options and their defaults (RocketMQ's names and values)
//	stats.go      counters and histograms readable in process
//
// Sub-packages hold one concept each: record (the record codec), segment (a
// directory of fixed-size segments), consumequeue and indexfile (the derived
// files). The MappedFile seam the backends implement is the top-level
// package mappedfile; the engine imports the backends, never the reverse.
//
// # Positions
//
// Every segment has three positions that only move forward, wrote ≥
// committed ≥ flushed (see mappedfile). The CommitLog's global offsets are a
// segment's FromOffset plus a position; the store publishes the flushed
// offset (what a sync Put waits for) and the dispatched offset (what
// consumers see).
package engine
