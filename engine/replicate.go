package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/internal/invariants"
	"github.com/mqstore/mqstore/mappedfile"
)

// What the engine offers replication (package ha speaks the protocol):
//
//   - a master: the CommitLogReader the HA master streams from; for
//     SYNC_MASTER, a Put waits on the "replicated" position (an
//     offsetWaiters, like the sync flush) that ReportSlaves moves, and
//     answers FlushSlaveTimeout or SlaveNotAvailable as RocketMQ does;
//   - a slave: AppendReplicated, which appends the master's raw bytes at
//     exactly their offset through the slave's own backend, checking every
//     record, and never exposes a record a frame split (the split part waits
//     in memory until the rest arrives); dispatch then builds the slave's
//     ConsumeQueues and index as it does a master's. ReplicaAckOffset is
//     what the slave may acknowledge, ReplicaResume where it resumes after
//     a reconnect, TruncateCommitLog the explicit repair of a diverged slave.

// BrokerRole is a store's part in replication (RocketMQ's brokerRole).
type BrokerRole int

const (
	// AsyncMaster acknowledges a Put after the local append (and flush, as
	// the flush mode asks); slaves catch up in the background.
	AsyncMaster BrokerRole = iota
	// SyncMaster acknowledges a Put only after a slave acknowledged the
	// record (FlushSlaveTimeout after SlaveTimeout; SlaveNotAvailable when
	// no slave can take it).
	SyncMaster
	// Slave takes no Puts (ServiceNotAvailable, ErrSlaveReadOnly): its
	// CommitLog is a copy of its master's, appended by package ha.
	Slave
)

func (r BrokerRole) String() string {
	switch r {
	case AsyncMaster:
		return "ASYNC_MASTER"
	case SyncMaster:
		return "SYNC_MASTER"
	case Slave:
		return "SLAVE"
	}
	return fmt.Sprintf("BrokerRole(%d)", int(r))
}

// Flag is the role as the mqstore tool spells it: async-master,
// sync-master or slave.
func (r BrokerRole) Flag() string {
	return strings.ReplaceAll(strings.ToLower(r.String()), "_", "-")
}

// ParseBrokerRole parses async-master, sync-master or slave (RocketMQ's
// ASYNC_MASTER, SYNC_MASTER, SLAVE are accepted too).
func ParseBrokerRole(s string) (BrokerRole, error) {
	switch strings.ReplaceAll(strings.ToLower(s), "_", "-") {
	case "async-master", "":
		return AsyncMaster, nil
	case "sync-master":
		return SyncMaster, nil
	case "slave":
		return Slave, nil
	}
	return 0, fmt.Errorf("role %q: want async-master, sync-master or slave: %w", s, ErrInvalidOption)
}

// replication is a store's replication state.
type replication struct {
	growth  growth        // wakes CommitLogReader.Wait
	closing chan struct{} // closed when the store closes

	// Master side. waiters is nil unless the role is SyncMaster.
	waiters         *offsetWaiters
	ackedOffset     atomic.Int64 // highest offset a verified slave acknowledged; never moves back
	slaves          atomic.Int32 // connected slaves that reported an offset
	bestSlaveOffset atomic.Int64 // highest offset one of them acknowledged

	flushSlaveTimeouts atomic.Uint64
	slaveNotAvailable  atomic.Uint64
	inSyncNotEnough    atomic.Uint64

	// The in-sync set (see Options.MinInSyncReplicas), kept in either
	// mode; a Put waits on it only when MinInSyncReplicas > 0.
	isrMu      sync.Mutex
	isr        map[string]*isrMember // by SlaveReport.Addr
	isrSize    atomic.Int32
	isrOffset  atomic.Int64 // what every member acknowledged, while there were enough; never moves back
	isrMembers atomic.Pointer[[]string]
	// verifiedSlaves are the connected, verified slaves of the last
	// report (retention keeps what they have not received).
	verifiedSlaves []SlaveReport

	// Slave side, guarded by the CommitLog's append lock.
	pending    []byte // the start of a record (or blank) a frame split
	pendingAt  int64  // its offset
	lastRecord int64  // offset of the newest record in the log; -1 unknown
	topics     record.Interner
	enc        replicaEncoder
	replicated atomic.Uint64 // bytes appended from the master
}

// startReplication is part of startServices.
func (s *Store) startReplication() {
	r := &s.repl
	r.closing = make(chan struct{})
	r.lastRecord = -1
	r.bestSlaveOffset.Store(-1)
	r.isr = make(map[string]*isrMember)
	r.isrMembers.Store(&[]string{})
	if s.opts.Role != SyncMaster {
		return
	}
	position := r.ackedOffset.Load
	if s.opts.MinInSyncReplicas > 0 {
		position = r.isrOffset.Load
	}
	r.waiters = &offsetWaiters{
		service:    newService(),
		position:   position,
		nudge:      s.makeReadable,
		moved:      make(chan struct{}, 1),
		timeout:    s.opts.SlaveTimeout,
		timeoutErr: fmt.Errorf("no slave acknowledged within %v: %w", s.opts.SlaveTimeout, ErrFlushSlaveTimeout),
		fullErr:    fmt.Errorf("replication wait queue full (%d waiting): %w", s.opts.GroupCommitQueueSize, ErrFlushSlaveTimeout),
		limit:      s.opts.GroupCommitQueueSize,
	}
	go r.waiters.run()
}

// stopReplication is part of Close: CommitLog readers and SYNC_MASTER
// waiters get ErrClosed.
func (s *Store) stopReplication() {
	close(s.repl.closing)
	if w := s.repl.waiters; w != nil {
		w.shutdown()
	}
}

// SlaveReport is what the HA master knows of one slave connection.
type SlaveReport struct {
	// Addr names the connection (the slave's address), for Stats and logs.
	Addr string
	// Verified: the connection proved it holds the master's bytes — it
	// acknowledged bytes past its first report, bytes the master sent it
	// on this connection after it compared its own newest record with the
	// master's. Only a verified connection's AckedOffset counts: a first
	// report says where a slave wants to start and proves nothing (any
	// client can write 8 bytes).
	Verified bool
	// AckedOffset is what a verified slave acknowledged: what its flush
	// mode makes durable (sync flush: flushed; otherwise committed to its
	// files, what a kill -9 of the slave keeps). Ignored unless Verified.
	AckedOffset int64
	// Position is where the slave is: AckedOffset once verified, before
	// that the offset it asked to start from. It only decides whether a
	// Put waits for the slave or gets SlaveNotAvailable at once
	// (HASlaveFallbehindMax), never that a record is acknowledged.
	Position int64
}

// ReportSlaves is how the HA master keeps the store informed about its
// slaves: one report per connected slave that has said where it starts.
// The replicated position SYNC_MASTER Puts wait for is the highest offset a
// verified slave ever acknowledged: it never moves back (a record a slave
// acknowledged stays acknowledged after that slave disconnects), and an
// unverified connection cannot move it.
func (s *Store) ReportSlaves(slaves []SlaveReport) {
	r := &s.repl
	best, acked := int64(-1), int64(-1)
	for _, sl := range slaves {
		best = max(best, sl.Position)
		if sl.Verified {
			acked = max(acked, sl.AckedOffset)
		}
	}
	r.slaves.Store(int32(len(slaves)))
	r.bestSlaveOffset.Store(best)
	raise(&r.ackedOffset, acked)
	s.updateInSync(slaves)
	if r.waiters != nil {
		r.waiters.signalMoved()
	}
}

// ReplicatedOffset is the highest CommitLog offset a verified slave has
// acknowledged.
func (s *Store) ReplicatedOffset() int64 { return s.repl.ackedOffset.Load() }

// UnitStart reports whether offset is where a unit (a record or an
// end-of-segment blank) of the committed CommitLog starts, or its end: the
// only offsets a slave can hold its log up to. The HA master refuses a
// slave that asks to start anywhere else (inside a record: another
// history, or not a slave). A record is recognised by its magic and its
// PHYSICALOFFSET, which is its own offset; a segment's first byte is
// always a unit start.
func (r *CommitLogReader) UnitStart(offset int64) (bool, error) {
	end := r.End()
	switch {
	case offset == end:
		return true, nil
	case offset > end || offset < r.Start():
		return false, nil
	}
	var head [record.OffPhysicalOffset + 8]byte
	n, err := r.ReadAt(head[:record.BlankSize], offset)
	if n < record.BlankSize {
		return false, fmt.Errorf("read the CommitLog at %d: %w", offset, err)
	}
	switch int32(binary.BigEndian.Uint32(head[record.OffMagic:])) {
	case record.MagicBlank:
		seg := r.SegmentSizeBytes()
		return int64(binary.BigEndian.Uint32(head[:])) == seg-offset%seg, nil
	case record.MagicV1, record.MagicV2:
	default:
		return false, nil
	}
	if n, err := r.ReadAt(head[:], offset); n < len(head) {
		return false, fmt.Errorf("read the CommitLog at %d: %w", offset, err)
	}
	return int64(binary.BigEndian.Uint64(head[record.OffPhysicalOffset:])) == offset, nil
}

// isrMember is a slave in the in-sync set.
type isrMember struct {
	acked      int64
	caughtUpAt time.Time // when it was last within InSyncMaxLagBytes of the master's end
}

// updateInSync moves the in-sync set on from the slaves' reports: a member
// leaves when its connection is gone (or not verified) or it has not been
// within InSyncMaxLagBytes of the master's end for InSyncMaxLagTime; a
// verified slave joins when it is within the bound and has everything the
// set acknowledged. While the set has MinInSyncReplicas members (at least
// one), its offset moves to the least of their acknowledgements.
func (s *Store) updateInSync(slaves []SlaveReport) {
	r := &s.repl
	now := time.Now()
	end := s.CommitLogReader().End()
	caught := func(acked int64) bool { return end-acked <= s.opts.InSyncMaxLagBytes }
	r.isrMu.Lock()
	defer r.isrMu.Unlock()
	reported := make(map[string]SlaveReport, len(slaves))
	r.verifiedSlaves = r.verifiedSlaves[:0]
	for _, sl := range slaves {
		if sl.Verified {
			reported[sl.Addr] = sl
			r.verifiedSlaves = append(r.verifiedSlaves, sl)
		}
	}
	changed := false
	for addr, m := range r.isr {
		sl, ok := reported[addr]
		if ok {
			m.acked = max(m.acked, sl.AckedOffset)
			if caught(m.acked) {
				m.caughtUpAt = now
			}
		}
		var why string
		switch {
		case !ok:
			why = "disconnected"
		case now.Sub(m.caughtUpAt) > s.opts.InSyncMaxLagTime:
			why = fmt.Sprintf("more than %d bytes behind for %v", s.opts.InSyncMaxLagBytes, s.opts.InSyncMaxLagTime)
		default:
			continue
		}
		delete(r.isr, addr)
		changed = true
		s.opts.Logger.Warn("replication: a slave left the in-sync set", slog.String("slave", addr), slog.String("why", why),
			slog.Int64("acked", m.acked), slog.Int64("masterEnd", end), slog.Int("inSync", len(r.isr)))
	}
	for addr, sl := range reported {
		if _, in := r.isr[addr]; in || !caught(sl.AckedOffset) || sl.AckedOffset < r.isrOffset.Load() {
			continue
		}
		r.isr[addr] = &isrMember{acked: sl.AckedOffset, caughtUpAt: now}
		changed = true
		s.opts.Logger.Info("replication: a slave joined the in-sync set", slog.String("slave", addr), slog.Int64("acked", sl.AckedOffset),
			slog.Int64("masterEnd", end), slog.Int("inSync", len(r.isr)))
	}
	if n := len(r.isr); n > 0 && n >= s.opts.MinInSyncReplicas {
		least := int64(-1)
		for _, m := range r.isr {
			if least < 0 || m.acked < least {
				least = m.acked
			}
		}
		raise(&r.isrOffset, least)
	}
	if changed {
		names := make([]string, 0, len(r.isr))
		for addr := range r.isr {
			names = append(names, addr)
		}
		sort.Strings(names)
		r.isrMembers.Store(&names)
		r.isrSize.Store(int32(len(names)))
	}
}

// slowestSlave is the connected, verified slave that acknowledged least,
// and whether there is one.
func (s *Store) slowestSlave() (SlaveReport, bool) {
	r := &s.repl
	r.isrMu.Lock()
	defer r.isrMu.Unlock()
	var slowest SlaveReport
	found := false
	for _, sl := range r.verifiedSlaves {
		if !found || sl.AckedOffset < slowest.AckedOffset {
			slowest, found = sl, true
		}
	}
	return slowest, found
}

// InSyncSlaves names the slaves of the in-sync set (SlaveReport.Addr),
// sorted.
func (s *Store) InSyncSlaves() []string { return append([]string(nil), (*s.repl.isrMembers.Load())...) }

// slaveAvailable is RocketMQ's isSlaveOK: a slave is connected and the best
// one is less than HASlaveFallbehindMax behind end. It returns nil or an
// error wrapping ErrSlaveNotAvailable that says why. With
// MinInSyncReplicas it is instead that the in-sync set has that many
// members (ErrInSyncReplicasNotEnough).
func (s *Store) slaveAvailable(end int64) error {
	r := &s.repl
	if need := s.opts.MinInSyncReplicas; need > 0 {
		if n := int(r.isrSize.Load()); n < need {
			return fmt.Errorf("%d slaves in the in-sync set (%d connected), MinInSyncReplicas %d: %w",
				n, r.slaves.Load(), need, ErrInSyncReplicasNotEnough)
		}
		return nil
	}
	n := r.slaves.Load()
	if n == 0 {
		return fmt.Errorf("no slave connected: %w", ErrSlaveNotAvailable)
	}
	best := r.bestSlaveOffset.Load()
	if behind := end - best; behind >= s.opts.HASlaveFallbehindMax {
		return fmt.Errorf("the best of %d slaves is at %d, %d bytes behind the record's end %d (HASlaveFallbehindMax %d): %w",
			n, best, behind, end, s.opts.HASlaveFallbehindMax, ErrSlaveNotAvailable)
	}
	return nil
}

// makeReadable commits the CommitLog up to target, so the HA master can
// send it (it sends committed bytes only): a SYNC_MASTER Put on a buffered
// backend must not wait for the commit interval.
// The replication waiter calls it once per batch of waiters.
func (s *Store) makeReadable(target int64) {
	if mf := s.log.queue.Find(target - 1); mf == nil || mf.FromOffset()+scanBound(mf) >= target {
		return
	}
	if _, err := s.log.commit(context.Background(), 0); err != nil {
		s.writeFailed("commit", err)
		return
	}
	s.dispatcher.Wakeup()
	s.repl.growth.notify()
}

// ReplicationStats are a store's replication counters.
type ReplicationStats struct {
	Role string
	// Master: the highest offset a slave acknowledged, how many slaves are
	// connected and the best one's offset (-1: none), and the SYNC_MASTER
	// Puts that got FlushSlaveTimeout or SlaveNotAvailable.
	ReplicatedOffset   int64
	Slaves             int
	BestSlaveOffset    int64
	FlushSlaveTimeouts uint64
	SlaveNotAvailable  uint64
	// The in-sync set: its members, what all of them acknowledged while
	// there were MinInSyncReplicas of them, and the Puts that got
	// InSyncReplicasNotEnough.
	InSync                  []string
	InSyncOffset            int64
	MinInSyncReplicas       int
	InSyncReplicasNotEnough uint64
	// Slave: bytes appended from the master.
	ReplicatedBytes uint64
}

// ReplicationStats returns a snapshot of the replication counters.
// InSyncOffset is what every member of the in-sync set acknowledged while
// there were MinInSyncReplicas of them (ReplicationStats.InSyncOffset,
// without building the rest).
func (s *Store) InSyncOffset() int64 { return s.repl.isrOffset.Load() }

func (s *Store) ReplicationStats() ReplicationStats {
	r := &s.repl
	return ReplicationStats{Role: s.opts.Role.String(), ReplicatedOffset: r.ackedOffset.Load(), Slaves: int(r.slaves.Load()),
		BestSlaveOffset: r.bestSlaveOffset.Load(), FlushSlaveTimeouts: r.flushSlaveTimeouts.Load(),
		SlaveNotAvailable: r.slaveNotAvailable.Load(), ReplicatedBytes: r.replicated.Load(),
		InSync: s.InSyncSlaves(), InSyncOffset: r.isrOffset.Load(), MinInSyncReplicas: s.opts.MinInSyncReplicas,
		InSyncReplicasNotEnough: r.inSyncNotEnough.Load()}
}

// AppendReplicated appends bytes the master sent, which start at the
// CommitLog offset offset, to a slave store, and returns the end of the
// complete records the slave holds (WroteOffset; what it may acknowledge
// once ReplicaAckOffset says so).
//
// The offset must be where the slave's CommitLog ends (ErrReplicaOffset
// otherwise); an empty slave starts at any segment boundary. Every record
// is checked before it is appended — BODYCRC, lengths, PHYSICALOFFSET equal
// to where it goes, its queue offset next in its queue, the segment end
// where the slave's own segment ends — and a bad one is refused
// (ErrReplicaData, ErrReplicaMismatch) with the records before it kept:
// nothing invalid is ever appended. The bytes may end inside a record (a
// frame boundary): that part waits in memory, invisible to readers and to
// dispatch, until the rest arrives; an error, or ReplicaResume, drops it.
//
// The bytes go through the slave's own backend; its flush policy and
// commit service run as for a master, and dispatch builds its
// ConsumeQueues and index, so readers only ever see complete, dispatched
// records.
func (s *Store) AppendReplicated(ctx context.Context, offset int64, data []byte) (int64, error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	switch {
	case s.closed:
		return 0, fmt.Errorf("append replicated bytes at %d: %w", offset, ErrClosed)
	case s.opts.Role != Slave:
		return 0, fmt.Errorf("append replicated bytes at %d: the store is a %v: %w", offset, s.opts.Role, ErrNotSlave)
	}
	if p := s.writeErr.Load(); p != nil {
		return 0, fmt.Errorf("append replicated bytes at %d: %w: %w", offset, ErrServiceNotAvailable, *p)
	}
	if p := s.logics.dispatchErr.Load(); p != nil {
		// As Put: a slave whose queues stopped being built must not take
		// more bytes it would never make readable to its consumers.
		return 0, fmt.Errorf("append replicated bytes at %d: %w: dispatch stopped: %w", offset, ErrServiceNotAvailable, *p)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("append replicated bytes at %d: %w", offset, err)
	}
	s.log.appendMu.Lock()
	before := s.repl.replicated.Load()
	end, err := s.appendReplicatedLocked(ctx, offset, data)
	if err != nil {
		s.repl.pending = s.repl.pending[:0]
	}
	s.log.appendMu.Unlock()
	if s.repl.replicated.Load() != before {
		s.committer.Wakeup()
		s.dispatcher.Wakeup()
		s.repl.growth.notify()
		if s.group == nil {
			s.flusher.Wakeup()
		}
	}
	if err != nil {
		return end, fmt.Errorf("append replicated bytes at %d: %w", offset, err)
	}
	return end, nil
}

func (s *Store) appendReplicatedLocked(ctx context.Context, offset int64, data []byte) (int64, error) {
	r := &s.repl
	q := s.log.queue
	if err := s.checkReplicaStartLocked(offset); err != nil {
		return q.WroteOffset(), err
	}
	base := offset // the global offset of data[0]
	if len(r.pending) > 0 {
		var err error
		if data, base, err = s.completePendingLocked(ctx, data, base); err != nil || len(r.pending) > 0 {
			return q.WroteOffset(), err // an error, or the unit is still incomplete
		}
	}
	pos, err := s.appendUnitsLocked(ctx, data, base)
	if err != nil {
		return q.WroteOffset(), err
	}
	if pos < len(data) {
		r.pending = append(r.pending[:0], data[pos:]...)
		r.pendingAt = base + int64(pos)
	}
	return q.WroteOffset(), nil
}

// completePendingLocked completes the unit a previous frame split with the
// head of data (at global offset base) and appends it once whole; it
// returns the rest of data and its offset. r.pending stays non-empty while
// the unit is still incomplete.
func (s *Store) completePendingLocked(ctx context.Context, data []byte, base int64) ([]byte, int64, error) {
	r := &s.repl
	at := r.pendingAt
	if len(r.pending) < record.BlankSize {
		k := min(record.BlankSize-len(r.pending), len(data))
		r.pending = append(r.pending, data[:k]...)
		data, base = data[k:], base+int64(k)
		if len(r.pending) < record.BlankSize {
			return data, base, nil
		}
	}
	total, err := s.replicaUnitSize(r.pending, at)
	if err != nil {
		return data, base, err
	}
	k := min(total-len(r.pending), len(data))
	r.pending = append(r.pending, data[:k]...)
	data, base = data[k:], base+int64(k)
	if len(r.pending) < total {
		return data, base, nil
	}
	if err := s.checkReplicaUnitLocked(r.pending, at); err != nil {
		return data, base, err
	}
	if err := s.appendReplicaRunLocked(ctx, at, r.pending); err != nil {
		return data, base, err
	}
	r.pending = r.pending[:0]
	return data, base, nil
}

// appendUnitsLocked appends the whole units at the head of data (at global
// offset base), checked one by one, in runs that end at a segment end (a
// blank). It returns where the whole units end: the rest is the start of a
// unit the next frame completes. On an error the units before the bad one
// are appended.
func (s *Store) appendUnitsLocked(ctx context.Context, data []byte, base int64) (int, error) {
	runStart, pos := 0, 0
	flushRun := func() error {
		if pos == runStart {
			return nil
		}
		err := s.appendReplicaRunLocked(ctx, base+int64(runStart), data[runStart:pos])
		runStart = pos
		return err
	}
	for len(data)-pos >= record.BlankSize {
		at := base + int64(pos)
		total, err := s.replicaUnitSize(data[pos:], at)
		if err != nil {
			return pos, errors.Join(err, flushRun()) // the units before it are good
		}
		if len(data)-pos < total {
			break
		}
		if err := s.checkReplicaUnitLocked(data[pos:pos+total], at); err != nil {
			return pos, errors.Join(err, flushRun())
		}
		pos += total
		if int32(binary.BigEndian.Uint32(data[pos-total+record.OffMagic:])) == record.MagicBlank {
			if err := flushRun(); err != nil { // the segment is full: the next unit goes to the next one
				return pos, err
			}
		}
	}
	return pos, flushRun()
}

// checkReplicaStartLocked checks that offset is where the slave's
// CommitLog (and the split unit waiting in memory) ends. An empty slave
// starts at any segment boundary; its empty segment files, if any, go.
func (s *Store) checkReplicaStartLocked(offset int64) error {
	r := &s.repl
	q := s.log.queue
	wrote := q.WroteOffset()
	expect := wrote
	if len(r.pending) > 0 {
		expect = r.pendingAt + int64(len(r.pending))
	}
	if wrote == 0 && len(r.pending) == 0 {
		segSize := s.log.segmentSizeBytes
		if offset < 0 || offset%segSize != 0 {
			return fmt.Errorf("the slave is empty and starts at a segment boundary, but the master sent offset %d, "+
				"not a multiple of the slave's segment size %d (does the master use another segment size?): %w", offset, segSize, ErrReplicaMismatch)
		}
		if offset > 0 {
			// The log starts at offset: a segment 0 created but never
			// written goes (under the flush lock: no flush may touch it).
			unlock := s.log.lockSync()
			defer unlock()
			for q.Len() > 0 {
				if f := q.First(); f.WrotePosition() != 0 {
					return fmt.Errorf("segment %s holds data although the CommitLog is empty: %w", f.Path(), ErrCorrupt)
				}
				if err := q.DeleteFirst(); err != nil {
					return fmt.Errorf("drop the empty segment before offset %d: %w", offset, err)
				}
			}
			if invariants.Enabled {
				invariants.Forward("committed offset of an empty slave", s.log.committedOffset.Load(), offset)
				invariants.Forward("flushed offset of an empty slave", s.log.flushedOffset.Load(), offset)
			}
			s.log.committedOffset.Store(offset)
			s.log.flushedOffset.Store(offset)
		}
		return nil
	}
	if offset != expect {
		return fmt.Errorf("the master sent bytes for offset %d, but the slave's CommitLog ends at %d: %w", offset, expect, ErrReplicaOffset)
	}
	return nil
}

// replicaUnitSize reads the header of the unit (record or blank) at at and
// returns its size, checking it against the slave's segment and maximum
// record size before any byte of a long unit is buffered.
func (s *Store) replicaUnitSize(head []byte, at int64) (int, error) {
	kind, total, err := record.Peek(head, at, 0)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrReplicaData, err)
	}
	segSize := s.log.segmentSizeBytes
	remaining := segSize - at%segSize
	switch kind {
	case record.KindEnd:
		return 0, fmt.Errorf("TOTALSIZE 0 at offset %d: a master sends only written records: %w", at, ErrReplicaData)
	case record.KindBlank:
		if int64(total) != remaining {
			return 0, fmt.Errorf("the master's end-of-segment blank at %d says its segment ends at %d, the slave's ends at %d "+
				"(the slave's segment size %d must be the master's): %w", at, at+int64(total), at+remaining, segSize, ErrReplicaMismatch)
		}
		if int(total) >= s.log.maxRecordBytes+record.BlankSize {
			return 0, fmt.Errorf("blank of %d bytes at %d: a record of at most %d bytes would have fit: %w", total, at, s.log.maxRecordBytes, ErrReplicaData)
		}
	case record.KindRecord:
		if int(total) > s.log.maxRecordBytes {
			return 0, fmt.Errorf("the master's record at %d is %d bytes, more than the slave's maximum %d "+
				"(give the slave a MaxMessageSizeBytes at least the master's): %w", at, total, s.log.maxRecordBytes, ErrReplicaMismatch)
		}
		if int64(total)+record.BlankSize > remaining {
			return 0, fmt.Errorf("the master's record at %d (%d bytes) runs past the slave's segment end at %d "+
				"(the slave's segment size %d must be the master's): %w", at, total, at+remaining, segSize, ErrReplicaMismatch)
		}
	}
	return int(total), nil
}

// checkReplicaUnitLocked validates a whole unit at at (its size was
// checked by replicaUnitSize) and, for a record, moves the queue offset
// table and the newest store time on as an append does.
func (s *Store) checkReplicaUnitLocked(unit []byte, at int64) error {
	if int32(binary.BigEndian.Uint32(unit[record.OffMagic:])) == record.MagicBlank {
		return nil
	}
	r := &s.repl
	rec, err := record.DecodeInterned(unit, at, true, &r.topics)
	if err == nil {
		err = checkTail(unit, &rec, at)
	}
	if err == nil {
		err = s.startSlaveRecycling(unit, at)
	}
	if from := s.log.crcFrom.Load(); err == nil && from >= 0 && at >= from {
		// This store's recovery will require it: a master that does not
		// write it must not fill a log that recycles segments.
		if err = record.CheckRecordCRC(unit, at); err != nil {
			err = fmt.Errorf("this store recycles CommitLog segments, so every record from offset %d must carry a whole-record checksum (the master stopped writing it): %w", from, err)
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrReplicaData, err)
	}
	if rec.PhysicalOffset != at {
		return fmt.Errorf("the record at %d says PHYSICALOFFSET %d: %w", at, rec.PhysicalOffset, ErrReplicaData)
	}
	if takesQueueOffset(rec.SysFlag) {
		key := queueKey{topic: rec.Topic, queueID: rec.QueueID}
		if next, ok := s.log.nextQueueOffset(key); ok && rec.QueueOffset != next {
			return fmt.Errorf("the record at %d has queue offset %d in %s/%d, the slave's next is %d: %w",
				at, rec.QueueOffset, rec.Topic, rec.QueueID, next, ErrReplicaData)
		}
		s.log.setNextQueueOffset(key, rec.QueueOffset+1)
	}
	s.log.lastStoreTimestamp.Store(rec.StoreTimestamp)
	r.lastRecord = at
	return nil
}

// appendReplicaRunLocked appends checked units that start at at and end
// no later than the end of at's segment.
func (s *Store) appendReplicaRunLocked(ctx context.Context, at int64, run []byte) error {
	mf, err := s.log.queue.NextForAppend(ctx, at)
	if err != nil {
		return fmt.Errorf("replicated append at %d: %w", at, err)
	}
	if pos := mf.FromOffset() + mf.WrotePosition(); pos != at {
		return fmt.Errorf("replicated append at %d, but segment %s continues at %d: %w", at, mf.Path(), pos, ErrReplicaOffset)
	}
	s.repl.enc.data = run
	_, err = mf.Append(len(run), &s.repl.enc)
	s.repl.enc.data = nil
	if err != nil {
		s.writeFailed("replicated append", err)
		return fmt.Errorf("replicated append of %d bytes at %d to %s: %w", len(run), at, mf.Path(), err)
	}
	s.repl.replicated.Add(uint64(len(run)))
	if invariants.Enabled {
		s.checkReplicaRun(mf, at, run)
	}
	return nil
}

// checkReplicaRun asserts what replicaUnitSize and the run's cut promise:
// the run's units tile it exactly, none crosses the segment's end, and a
// blank is the segment's last unit — every record ends at the segment's end
// or before another unit, and a run ending in a blank fills its segment.
func (s *Store) checkReplicaRun(mf mappedfile.MappedFile, at int64, run []byte) {
	segEnd := mf.FromOffset() + mf.SizeBytes()
	off := 0
	for off < len(run) {
		total := int(binary.BigEndian.Uint32(run[off:]))
		invariants.True(total >= record.BlankSize && off+total <= len(run), "replicated units tile their run",
			fmt.Sprintf("unit of %d bytes at %d, run of %d bytes at %d", total, at+int64(off), len(run), at))
		if int32(binary.BigEndian.Uint32(run[off+record.OffMagic:])) == record.MagicBlank {
			invariants.Equal("an end-of-segment blank ends at its segment's end", at+int64(off+total), segEnd)
		}
		off += max(total, record.BlankSize)
	}
	invariants.Ordered("a replicated run ends within its segment", at+int64(len(run)), segEnd)
	invariants.Equal("the slave's write position is the run's end", mf.FromOffset()+mf.WrotePosition(), at+int64(len(run)))
}

// replicaEncoder copies checked units into a segment, each unit's
// TOTALSIZE last in one store (as encodeBuffer does): a slave killed in the
// middle of the copy leaves no record that looks whole.
type replicaEncoder struct{ data []byte }

func (e *replicaEncoder) EncodeAt(dst []byte, _ int64) error {
	for off := 0; off < len(e.data); {
		total := int(binary.BigEndian.Uint32(e.data[off:]))
		copy(dst[off+4:off+total], e.data[off+4:off+total])
		*(*uint32)(unsafe.Pointer(&dst[off])) = *(*uint32)(unsafe.Pointer(&e.data[off]))
		off += total
	}
	return nil
}

// ReplicaAckOffset is the offset a slave may acknowledge to its master:
// the end of the complete records it appended that its flush mode makes
// safe. With sync flush they are flushed first: an acknowledgement means
// durable on the slave (it survives a power loss). Otherwise they are
// committed first — handed to the slave's files, out of any process buffer
// (a buffered backend) — and the committed offset is acknowledged: what a
// kill -9 of the slave keeps (a power loss before its flush may not). On
// an error it returns what is safe so far with the error.
func (s *Store) ReplicaAckOffset(ctx context.Context) (int64, error) {
	end := s.log.queue.WroteOffset()
	if s.group == nil {
		if err := ctx.Err(); err != nil {
			return min(s.log.committedOffset.Load(), end), fmt.Errorf("commit replicated bytes to %d: %w", end, err)
		}
		before := s.log.committedOffset.Load()
		// Not ctx: a commit cut short by the end of a connection would
		// count as a write error and stop the store's writes for good.
		committed, err := s.log.commit(context.Background(), 0)
		if committed > before { // as the commit service does: committed bytes are readable
			s.flusher.Wakeup()
			s.dispatcher.Wakeup()
			s.repl.growth.notify()
		}
		if err != nil {
			s.writeFailed("commit", err)
			return min(s.log.committedOffset.Load(), end), fmt.Errorf("commit replicated bytes to %d: %w", end, err)
		}
		return min(committed, end), nil
	}
	w, err := s.group.begin(ctx, end, time.Now())
	if err == nil {
		err = s.group.end(w)
	}
	if err != nil {
		return min(s.FlushedOffset(), end), fmt.Errorf("flush replicated bytes to %d: %w", end, err)
	}
	return end, nil
}

// ReplicaResume prepares a slave for a new connection to its master and
// says where it resumes. end is where its complete records end (a unit a
// frame had split is dropped: the master sends it again). verifyFrom is
// where the newest of those records starts: the slave reports it first,
// so the master sends that record again and the slave compares it with its
// own before it appends anything — a master that lost or rewrote the tail
// the slave holds is caught instead of silently continued. With no record
// in the log verifyFrom is end (and both are 0 for an empty log).
// Buffered bytes are committed first, so the slave can read all of its own
// log.
func (s *Store) ReplicaResume(ctx context.Context) (verifyFrom, end int64, err error) {
	c := s.log
	c.appendMu.Lock()
	defer c.appendMu.Unlock()
	r := &s.repl
	r.pending = r.pending[:0]
	if _, err := c.commit(context.Background(), 0); err != nil { // not ctx: see ReplicaAckOffset
		s.writeFailed("commit", err)
		return 0, 0, fmt.Errorf("resume replication: commit: %w", err)
	}
	s.dispatcher.Wakeup()
	end = c.queue.WroteOffset()
	if end == 0 {
		return 0, 0, nil
	}
	if r.lastRecord >= 0 && r.lastRecord < end {
		return r.lastRecord, end, nil
	}
	last := int64(-1)
	buf := c.scanBuffer()
	for seg := c.queue.Find(end - 1); seg != nil && last < 0; seg = c.queue.Find(seg.FromOffset() - 1) {
		from := max(seg.FromOffset(), s.MinOffset())
		if _, err := c.scanWith(ctx, from, buf, false, nil, nil, func(offset int64, _ []byte, rec *record.Record) error {
			if rec != nil && offset < end {
				last = offset
			}
			return nil
		}); err != nil {
			return 0, 0, fmt.Errorf("resume replication: find the newest record: %w", err)
		}
		if seg.FromOffset() <= s.MinOffset() {
			break
		}
	}
	if last < 0 {
		return end, end, nil
	}
	r.lastRecord = last
	return last, end, nil
}

// truncateRequest asks Open to cut the CommitLog (TruncateCommitLog).
type truncateRequest struct {
	offset int64
	result TruncateResult
}

// TruncateResult says what TruncateCommitLog did.
type TruncateResult struct {
	Offset   int64    // the CommitLog's end now
	OldEnd   int64    // where its valid data ended before
	CutBytes int64    // OldEnd − Offset
	SavedTo  []string // files holding the cut bytes (none for a store in memory)
}

// TruncateCommitLog is the explicit repair of a diverged slave: it opens
// the (closed) store in dir with opts, cuts its CommitLog at offset — which
// must be a record boundary within the valid data — keeping the cut bytes in
// <dir>/diverged/<offset> files, truncates the ConsumeQueues and the index to
// match (recovery's own truncation), and closes the store. Nothing is cut
// when offset is the end already. It never runs by itself: the slave refuses
// a diverged master with an error that names this repair.
func TruncateCommitLog(ctx context.Context, dir string, offset int64, opts Options) (TruncateResult, error) {
	if offset < 0 {
		return TruncateResult{}, fmt.Errorf("truncate the CommitLog of %s at %d: a negative offset: %w", dir, offset, ErrInvalidOption)
	}
	req := &truncateRequest{offset: offset}
	opts.truncateAt = req
	s, err := Open(ctx, dir, opts)
	if err != nil {
		return req.result, err
	}
	if err := s.Close(); err != nil {
		return req.result, fmt.Errorf("truncate the CommitLog of %s: close: %w", dir, err)
	}
	return req.result, nil
}

// cutCommitLog runs in Open before recovery (which then truncates the
// ConsumeQueues and index to the new end).
func (s *Store) cutCommitLog(ctx context.Context, req *truncateRequest) error {
	offset := req.offset
	oldEnd, err := s.checkCutPoint(ctx, offset)
	req.result = TruncateResult{Offset: offset, OldEnd: oldEnd}
	switch {
	case err != nil:
		return fmt.Errorf("truncate at %d: %w", offset, err)
	case offset == oldEnd:
		return nil // nothing to cut
	}
	q := s.log.queue
	saved, err := s.keepDiverged(offset, oldEnd)
	if err != nil {
		return fmt.Errorf("truncate at %d: keep the cut bytes: %w", offset, err)
	}
	req.result.SavedTo = saved
	req.result.CutBytes = oldEnd - offset
	// The checkpoint first: a crash between the two leaves a log longer
	// than the checkpoint says durable (fine), never shorter (corruption).
	cp := s.checkpoint
	cp.flushedOffset.Store(min(cp.flushedOffset.Load(), offset))
	cp.logicsOffset.Store(min(cp.logicsOffset.Load(), offset))
	if err := cp.write(); err != nil {
		return fmt.Errorf("truncate at %d: write the checkpoint: %w", offset, err)
	}
	if err := q.TruncateTo(ctx, offset); err != nil {
		return fmt.Errorf("truncate at %d: %w", offset, err)
	}
	s.opts.Logger.Warn("CommitLog truncated by request", slog.Int64("offset", offset), slog.Int64("oldEnd", oldEnd),
		slog.Any("savedTo", saved))
	return nil
}
