// Package controller is mqstore's failover controller, modelled on RocketMQ
// 5's controller mode: a small Raft group that holds, per broker set, the
// replicas and their addresses, the master, the master epoch, the in-sync
// set and its epoch, and that elects a new master from the in-sync set when
// the master's heartbeats stop.
//
// # Consensus: hashicorp/raft v1.8.0 with a log store of ours
//
// Raft is github.com/hashicorp/raft v1.8.0: it brings the transport, the
// leadership signals, Barrier and pre-vote, and a leader that cannot reach
// a quorum within its lease steps down. Its usual store, raft-boltdb/v2
// (v2.3.1), does not build against v1.8.0: it imports
// github.com/hashicorp/go-metrics/compat, which the go-metrics v0.7.0 that
// raft v1.8.0 requires no longer has. Rather than pin raft to v1.7.3 for
// it, the package has its own stores, which also run through mqstore's I/O
// seam (a mappedfile.Backend for the log's segment files, storefs for the
// directory and small files), so the MemFS crash model tests them as it
// tests the CommitLog — bbolt's own mmap and fsync would escape it:
//
//   - LogStore: append-only CRC-framed entries in segment files, one flush
//     (fdatasync / msync) per StoreLogs, an index rebuilt by a scan at open
//     that cuts a torn tail (a frame whose CRC or index does not check) in
//     the last segment; a suffix is deleted by removing later segments and
//     truncating (zeroing and syncing) the one it starts in, a prefix by
//     removing whole segments and recording the new first index atomically.
//     The log stays contiguous (a raft.MonotonicLogStore): raft empties it
//     itself after installing a snapshot, and a write past its end drops
//     the older entries first.
//   - StableStore: one small JSON file replaced atomically on each change.
//   - SnapshotStore: one checksummed file per snapshot, written atomically.
//
// The controller's log is tiny (a few entries per failover), so none of
// this needs to be fast.
//
// # The state machine
//
// FSM.Apply is deterministic and validates every command against the state;
// each change is a compare-and-set on the epochs it names, so a stale
// proposal — a scan that raced an operator, a deposed master's alter — is
// refused and changes nothing:
//
//   - RegisterBroker: gives a new broker the next id, or a known one (same
//     register code) its id back with new addresses; an id held by another
//     code is refused.
//   - ElectMaster{expectEpoch}: the set must be at expectEpoch; the new
//     master must be registered and, once a master has ever existed, a
//     member of the in-sync set. Outside it only when the command asks for
//     an unclean election and the set's config allows one — then it is
//     logged at error level, and the in-sync set becomes {new master}.
//     The master epoch and the in-sync set epoch each go up by one.
//   - AlterSyncStateSet{master, masterEpoch, syncStateSetEpoch}: only the
//     current master, at both current epochs; the new set must hold the
//     master, be registered replicas, and differ. Its epoch goes up by one.
//   - RemoveBroker: not the master; leaving the in-sync set bumps its epoch.
//
// A clean election inherits the in-sync set minus the old master (RocketMQ
// resets it to {new master}). It is as safe: a master acknowledges a record
// only when every member of its in-sync set has it, so every remaining
// member holds every acknowledged record, and stays electable. And it is
// better when the new master dies at once: the inherited members are still
// electable, where after a reset nobody but the dead master would be (a
// point RocketMQ's own reviewers raised). The price is that the new master's
// puts wait until the inherited members have rejoined (or until it shrinks
// the set), which is the all-in-sync-ack rule doing its job.
//
// An election never makes a set master-less: when no in-sync member is
// alive the leader proposes nothing and logs it; the set keeps its dead
// master until one comes back (or an operator runs an unclean election).
//
// # The leader
//
// Liveness is never replicated (RocketMQ's replicated heartbeats were
// where its JRaft controller's bugs gathered). Brokers heartbeat the leader
// (Client follows "not leader" answers, which name the leader's RPC
// address: each leader records its address in the replicated state before
// it serves). On gaining leadership a controller runs a Barrier (every
// entry of earlier terms is applied), forgets its liveness table and waits
// one broker expiry before it declares anyone dead. Then every scan
// interval, for each set whose master's last heartbeat is older than the
// expiry it proposes ElectMaster at the set's current epoch for the best
// alive in-sync member, by last epoch (descending), max offset
// (descending), priority (ascending), id. The first election of a set
// (epoch 0) waits until every registered replica has heartbeated, and
// picks by the same order.
//
// # RPC
//
// Brokers and tools reach the controllers over the project's remoting codec
// (RocketMQ's framing) with RocketMQ's controller request codes (904,
// 1001-1006, 1009, 1011) and response codes (2000-2014); the bodies are
// this package's JSON. Client is the broker side.
package controller
