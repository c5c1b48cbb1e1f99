// Package engine is mqstore's store: one CommitLog shared by every topic, in
// RocketMQ's on-disk format, written through a pluggable MappedFile backend,
// with RocketMQ's flush policies (async, and sync with group commit).
//
// # Concept map
//
// A Store owns one directory (docs/formats.md has the layout) and these parts, each
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
//	epoch.go      the epoch file (epochFileCheckpoint): the master-epoch
//	              history, StartEpoch, AppendEpoch, FindConsistentPoint
//	truncate.go   TruncateOnline: a running slave's CommitLog cut at a
//	              record boundary, crash-safe, its queues rebuilt with
//	              recovery's phases
//	dispatch.go   dispatch (reput): ConsumeQueue units and index entries built
//	              from the readable CommitLog, and the logics flusher
//	dispatchfeed.go what each append hands dispatch, so dispatch reads the
//	              log only where the feed has a gap
//	consume.go    reads by queue (Get, long polling, sendfile)
//	query.go      reads by key and time through the IndexFile
//	retention.go  deletion of expired segments and of segments when the disk
//	              is full
//	verify.go     a full consistency check of a store
//	dirfiles.go   the lock, abort, checkpoint and stored-parameter files
//	              (all but the lock through storefs)
//	backends.go   backends by name from mappedfile's registry (none named here)
//	options.go    Options and their defaults (RocketMQ's names and values)
//	stats.go      counters and histograms readable in process
//
// Sub-packages hold one concept each: record (the record codec), segment (a
// directory of fixed-size segments), consumequeue and indexfile (the derived
// files), storefs (the directory operations and their syncs, on the OS or
// on an in-memory file system). The MappedFile seam the backends implement
// is the top-level package mappedfile; the engine imports the backends,
// never the reverse.
//
// # Durability
//
// A byte is durable once synced: a segment's by its Flush, a small file by
// storefs.WriteFileAtomic, a directory entry (creation, rename, removal) by
// a sync of its directory — every one the engine makes is synced before
// anything relies on it. After a crash, recovery syncs what the dead
// process left unsynced in the page cache (the CommitLog from the
// checkpoint's flushed offset, the ConsumeQueue and index files past its
// dispatched offset) before the store claims any of it durable. The tests
// hold the engine to this with mappedfile.MemFS, whose power loss keeps
// only what was synced (crash_test.go: power loss, kill, kill then restart
// then power loss, power loss in recovery).
//
// # Positions
//
// Every segment has three positions that only move forward, wrote ≥
// committed ≥ flushed (see mappedfile). The CommitLog's global offsets are a
// segment's FromOffset plus a position; the store publishes the flushed
// offset (what a sync Put waits for) and the dispatched offset (what
// consumers see).
package engine
