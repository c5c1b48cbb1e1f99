// Package ha is mqstore's master/slave replication, RocketMQ 4.x's classic
// HA: a master streams its raw CommitLog to each slave over TCP, and a
// slave appends the bytes at exactly their offsets and builds its own
// ConsumeQueues and index from them.
//
// # Protocol (the byte layouts are RocketMQ's; big-endian)
//
//	slave → master   8 bytes: an offset in the slave's CommitLog. The first
//	                 one says where the master starts and acknowledges
//	                 nothing; every later one acknowledges what the slave
//	                 holds (flushed for a sync-flush slave, committed to its
//	                 files otherwise). Sent when it advances and every
//	                 SendHeartbeatInterval (5 s).
//	master → slave   12-byte header: physical offset int64, body size int32;
//	                 then that many raw CommitLog bytes, at most
//	                 TransferBatchSize (32 KiB) and never across a segment
//	                 end. Size 0 is a heartbeat, sent when the connection
//	                 has been idle SendHeartbeatInterval.
//
// Either side drops a connection the other left silent for
// HousekeepingInterval (20 s). The slave connects again with a backoff and
// resumes from its own CommitLog, whichever side restarted.
//
// # Options, with RocketMQ's names and defaults
//
//	MasterOptions.ListenAddr            haListenPort          127.0.0.1:10912 (RocketMQ: all interfaces)
//	*.SendHeartbeatInterval             haSendHeartbeatInterval 5 s
//	*.HousekeepingInterval              haHousekeepingInterval 20 s
//	MasterOptions.TransferBatchSize     haTransferBatchSize   32 KiB
//	SlaveOptions.MasterAddress          haMasterAddress       (required)
//	SlaveOptions.MaxFrameBytes          HAClient's 4 MiB read buffer
//	engine.Options.Role                 brokerRole            ASYNC_MASTER
//	engine.Options.SlaveTimeout         slaveTimeout          3 s
//	engine.Options.HASlaveFallbehindMax haSlaveFallbehindMax  256 MiB
//	MasterOptions.EmptySlaveStart       (mqstore)             min-offset
//	SlaveOptions.Reconnect*Backoff      (RocketMQ: 5 s fixed) 100 ms … 5 s
//
// # SYNC_MASTER
//
// The engine does the waiting (see engine.Options.Role): a Put on a
// SYNC_MASTER store waits until a verified slave acknowledged the record's
// end (or, with engine.Options.MinInSyncReplicas, every slave of the
// in-sync set) —
// FLUSH_SLAVE_TIMEOUT after SlaveTimeout; SLAVE_NOT_AVAILABLE at once when no
// slave is connected or the best connected one is HASlaveFallbehindMax or
// more behind. The record stays on the master either way. A Master keeps the
// store informed (Store.ReportSlaves) of its connected slaves and their
// offsets. A connection is verified once it acknowledges bytes past its
// first report — bytes sent to it on this connection, after it compared
// its newest record with the master's; before that its reports count for
// nothing (a TCP client writing 8 bytes releases no Put).
//
// # A closed port
//
// The master listens on loopback by default and refuses an address beyond
// it without mutual TLS 1.3 (MasterOptions.TLS, SlaveOptions.TLS, LoadTLS,
// GenerateCertificates) or a shared secret's HMAC challenge–response
// (Secret, LoadSecret), either of which runs before the first report; it
// caps its connections, drops a peer silent for a heartbeat interval after
// connecting, retries failed Accepts and rate-limits the lines about
// refused peers. docs/replication.md says what is exposed and promised.
//
// # An empty slave
//
// A slave that reports 0 has an empty CommitLog. RocketMQ starts it at the
// beginning of the master's newest segment; mqstore's default
// (StartAtMinOffset) copies the master's whole CommitLog from the first
// offset it still stores, because a slave is there so that losing the
// master loses nothing, and a slave holding only the newest segment lacks
// every older message: after a failover, consumers of older offsets get
// OFFSET_TOO_SMALL and those messages exist nowhere else. StartAtLastSegment
// is RocketMQ's behaviour, for a master whose retained log is too large to
// copy (72 h of a busy broker can be terabytes) and whose older messages
// need no second copy.
//
// # Divergence is never silent
//
// After a crash a master may come back with less than it sent (an async
// flush loses its unflushed tail) and then write different records at the
// same offsets. RocketMQ's slave would go on appending at its own end, its
// log now a splice of two histories. Here:
//
//   - the slave's first report on every connection is the start of its
//     newest record, not its end, so the master sends that record again and
//     the slave compares it byte for byte with its own before appending
//     anything (a RocketMQ master serves this request as any other);
//   - a master asked for an offset past its end (or before its first)
//     answers with one heartbeat carrying its end (or first offset) and
//     closes the connection (RocketMQ's waits without a word), and, the
//     first time a connection catches up, it sends a heartbeat at once, so a
//     slave holding more than the master learns it immediately;
//   - a slave that finds its CommitLog ahead of the master's or different
//     from it stops with ErrDiverged, an error naming both offsets and the
//     repair, and changes nothing. The repair is explicit: mqstore
//     repair-slave finds where the logs part (FindDivergence) and cuts the
//     slave there (engine.TruncateCommitLog), keeping the cut bytes.
//
// # The fork-point handshake (SlaveOptions.EpochHandshake)
//
// For brokers that follow an election (a controller): before its first
// report the slave sends its epoch history (engine.Store.Epochs, the
// epochFileCheckpoint) and its end; the master answers the last (epoch,
// offset) both histories share (engine.FindConsistentPoint) and its own
// history (layouts in epoch.go; the hello's marker is a negative offset,
// which a master without the handshake refuses as any other). A slave whose
// log runs past the point reports where the record before the point starts,
// compares the master's copy of it byte for byte, and only then cuts its
// log at the point, durably (engine.Store.TruncateOnline, the cut bytes
// kept in diverged/), and replicates from it; it drops its own epochs
// after the common one (engine.Store.DropEpochsAfter) and records each later
// epoch of the master's (engine.Store.AppendEpoch) before it appends that
// epoch's first bytes. The cut is automatic only when the master has moved on to a
// later epoch than the common one — the bytes past the point were written
// by a master no election kept, and the all-in-sync acknowledgement says
// none of them was acknowledged. Refused, with nothing changed: a slave
// history that shares no epoch with the master's (ErrNoCommonEpoch), a
// master shorter than the slave in its own current epoch (ErrDiverged: it
// lost records of its epoch, perhaps acknowledged ones), and a master of an
// older epoch than the slave has seen (ErrStaleMaster). A slave with no
// epoch history of its own (new, or one that replicated classically)
// compares its newest record as in classic mode and records the master's
// epochs from there.
//
// # Reads from a slave
//
// A slave store serves Get, GetLongPoll and the queries while it
// replicates. A frame may end inside a record; the slave keeps that part in
// memory until the rest arrives (engine.Store.AppendReplicated), so its
// CommitLog, and what dispatch makes visible, only ever holds complete
// records, each checked (CRC, lengths, offsets, queue sequence) before it is
// appended.
//
// # Other differences from RocketMQ 4.x, all on the safe side
//
//   - The slave reports as soon as it connects (RocketMQ's first report can
//     wait up to a heartbeat interval) and its housekeeping counts from the
//     master's last frame (RocketMQ's from its own last report).
//   - SLAVE_NOT_AVAILABLE looks at the best connected slave (RocketMQ: the
//     best acknowledgement ever, even from a slave gone since).
//   - A slave acknowledges only bytes out of its process buffers (RocketMQ's
//     its write position), and a slave whose only record starts at 0
//     reports 0 and compares it.
//   - A SYNC_MASTER Put on a buffered backend commits its record at once so
//     the master can send it, instead of waiting for the commit interval.
package ha
