// Package failover is the broker side of automatic failover (RocketMQ 5's
// ReplicasManager): a store that follows the controller (package
// controller) — master when the controller elects it, slave of the
// elected master otherwise — so that a dead master is replaced by an
// in-sync slave with no acknowledged record lost.
//
// # Life of a broker
//
//   - Start loads broker.meta from the store directory (set, id, register
//     code; written atomically) or registers with the controller to get an
//     id, and opens the store as a slave store, fenced: Put answers
//     ServiceNotAvailable with a *NotMasterError, Get is refused, until the
//     controller confirms a role.
//   - Every HeartbeatInterval the broker heartbeats the controller leader
//     with its set, id, last epoch (its epoch file), max offset and
//     confirmed offset; the answer is the set's state (master, epochs,
//     in-sync set), which a second goroutine acts on, so a role change
//     never delays a heartbeat. It acts only on a master epoch above the
//     one it holds (a fenced broker also on its own epoch: a restart).
//   - Becoming master at epoch e: the HA client stops, the store is
//     flushed and dispatched to its end, closed and opened again as a
//     SyncMaster whose engine in-sync set needs MinInSyncReplicas−1
//     slaves (a close and reopen: role changes are rare and the reopen is
//     the well-tested path), engine.Store.StartEpoch flushes, appends
//     (e, end) durably to the epoch file and waits for dispatch, the HA
//     master starts on the broker's HA socket, and writes are accepted.
//   - Becoming slave at epoch e of master M: writes are fenced at once (a
//     Put waiting for its acknowledgement fails with a *NotMasterError
//     naming M and e: it was not acknowledged, so a later cut of it loses
//     nothing acknowledged), the HA master stops, the store is reopened as
//     a slave and follows M with the fork-point handshake
//     (ha.SlaveOptions.EpochHandshake), which cuts an unacknowledged tail
//     of this log, keeping the cut bytes in diverged/.
//
// # The in-sync set
//
// The HA protocol names a slave by its connection's address and the
// engine keeps its in-sync set by that name; the controller keeps its set
// by broker id. A slave's HA connection therefore goes through a loopback
// forwarder of its own broker that first sends a 12-byte identity (magic
// and broker id), and the master's HA socket names the connection
// "broker-ID/host:port" (the identity is not authenticated: the HA port's
// TLS or secret, when configured, protect the stream after it).
//
// As master the broker keeps the controller's set in step with the
// engine's: a slave that joined the engine's set is added at once
// (AlterSyncStateSet; the engine already waits for it), one that left it
// is removed after ShrinkAfter (a new master counts from its election, so
// the members it inherited can reconnect first). An acknowledgement
// needs both: the engine waits for every member of its own set (and
// refuses with InSyncReplicasNotEnough below MinInSyncReplicas), then the
// broker waits until every slave of the controller's set, as last
// confirmed, acknowledged the record — the engine drops a slave at once,
// while the controller, until it applies the shrink, may still elect it.
// So every member of the controller's set holds every acknowledged record,
// which is what makes an election from that set lose nothing.
//
// # Not yet
//
// There is no lease: a master cut off from the controllers keeps
// acknowledging with its slaves until they follow a new master. Consumers
// read only from the writable master, whose dispatch is not held at the
// confirmed offset, so a consumer may see a record that a later failover
// cuts. A master restarted at its own epoch (the controller still names
// it) takes its role back with whatever its log kept; with asynchronous
// flush that may be less than its slaves hold.
package failover
