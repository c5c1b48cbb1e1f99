package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"time"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/engine/segment"
)

// Put appends a message to the CommitLog. It returns PutOK, or another
// status with an error wrapping the status's sentinel (ErrMessageIllegal,
// ErrFlushDiskTimeout, …). With FlushDiskTimeout the message was appended but
// not confirmed durable; the result's offsets are valid.
func (s *Store) Put(ctx context.Context, m *Message) (PutResult, error) {
	start := time.Now()
	now := start // the one clock read of a Put: latency, timestamps, deadlines
	if !s.opts.realClock {
		now = s.opts.now()
	}
	if s.labels.on {
		pprof.SetGoroutineLabels(s.labels.append)
		defer pprof.SetGoroutineLabels(ctx)
	}
	if s.group != nil {
		s.group.enter()
	}
	s.closeMu.RLock()
	res, err := s.put(ctx, m, start, now)
	s.closeMu.RUnlock()
	if res.Status == PutOK {
		s.stats.putBytes.Add(uint64(res.Size))
		s.stats.putLatency.record(time.Since(start))
	} else {
		s.stats.putFailures.Add(1)
	}
	if s.group != nil {
		s.group.leave() // last: a producer between Puts is out of the count for as short a time as can be
	}
	return res, err
}

// put is Put's body. Its refusals are built out of line (putFailed and
// the helpers below encode): their formatting's temporaries would otherwise
// widen this frame, and with hundreds of producers a Put's stack lines are
// cold.
func (s *Store) put(ctx context.Context, m *Message, start, now time.Time) (PutResult, error) {
	if st, err := s.refusal(); err != nil {
		return putFailed(m, st, err)
	}
	ar, st, err := s.appendMessage(ctx, m, now)
	switch {
	case err == nil:
	case st != PutOK:
		return putFailed(m, st, err)
	case errors.Is(err, segment.ErrCreate) || errors.Is(err, context.Canceled):
		return putFailed(m, CreateMappedFileFailed, err)
	default:
		s.writeFailed("append", err)
		return putFailed(m, ServiceNotAvailable, err)
	}
	if ar.rolled {
		s.stats.rolls.Add(1)
	}
	res := PutResult{Status: PutOK, PhysicalOffset: ar.physicalOffset, Size: ar.size, QueueOffset: ar.queueOffset, StoreTimestamp: ar.storeTimestamp}
	if s.group == nil {
		// Visibility: a buffered backend's record is readable once
		// committed. With sync flush the group commit commits and wakes
		// dispatch once per batch instead — the only durable writer.
		s.committer.Wakeup()
		s.dispatcher.Wakeup()
	}
	s.repl.growth.notify()
	if g := s.gate; g != nil && g.ahead(res.PhysicalOffset+int64(res.Size)) {
		g.wait(ctx, res.PhysicalOffset+int64(res.Size), s.dispatcher.help, s.dispatcher.Wakeup, s.dispatchStopped)
	}
	if s.group == nil && s.repl.waiters == nil {
		s.flusher.Wakeup()
		return res, nil
	}
	if s.labels.on {
		pprof.SetGoroutineLabels(s.labels.wait)
	}
	if err := s.waitDurable(ctx, &res, start); err != nil {
		return res, putNotDurable(m, res.PhysicalOffset, err)
	}
	return res, nil
}

// appendMessage encodes m and appends it. A refusal before the append
// comes with its status; an error of the append itself with PutOK.
//
// The encode buffer goes back to the pool when it returns, as soon as the
// append has copied it, not after the wait for durability: with hundreds
// of producers waiting, holding it made as many buffers circulate, each
// cold in the cache when its next Put encoded into it; returned at once, a
// handful per P stay warm.
func (s *Store) appendMessage(ctx context.Context, m *Message, now time.Time) (appendResult, PutStatus, error) {
	e := encodeBuffers.Get().(*encodeBuffer)
	defer encodeBuffers.Put(e)
	sysFlag, st, err := s.encode(e, m, now)
	if err != nil {
		return appendResult{}, st, err
	}
	if since := s.log.lockedSince.Load(); since != 0 && now.UnixNano()-since > int64(s.opts.OSPageCacheBusyTimeout) {
		s.stats.osPageCacheBusy.Add(1)
		return appendResult{}, OSPageCacheBusy, lockHeld(time.Duration(now.UnixNano() - since))
	}
	ar, err := s.log.appendRecord(ctx, e, queueKey{topic: m.Topic, queueID: m.QueueID}, sysFlag, now, s.opts.now)
	return ar, PutOK, err
}

// maxTopicNameBytes: a topic names its ConsumeQueue's directory, and a
// file name holds at most 255 bytes (NAME_MAX): a longer topic would be
// appended and then fail every dispatch of it, and every Open after.
const maxTopicNameBytes = 255

//go:noinline
func topicTooLongForAName(n int) error {
	return fmt.Errorf("%w: topic is %d bytes, longer than %d: it names a directory of the store", record.ErrInvalid, n, maxTopicNameBytes)
}

// putFailed is a refused Put's result and error.
//
//go:noinline
func putFailed(m *Message, st PutStatus, err error) (PutResult, error) {
	return PutResult{Status: st}, fmt.Errorf("put to %s/%d: %w: %w", m.Topic, m.QueueID, statusError(st), err)
}

// lockHeld is OSPageCacheBusy's reason: the append lock has been held for
// held.
//
//go:noinline
func lockHeld(held time.Duration) error { return fmt.Errorf("append lock held for %v", held) }

// putNotDurable wraps the error of a Put appended at offset but not
// confirmed durable (or not replicated).
//
//go:noinline
func putNotDurable(m *Message, offset int64, err error) error {
	return fmt.Errorf("put to %s/%d at offset %d: %w", m.Topic, m.QueueID, offset, err)
}

// refusal is why the store takes no Put now (closed, a slave, writes or
// dispatch stopped), with its status; nil when it takes them.
func (s *Store) refusal() (PutStatus, error) {
	switch {
	case s.closed:
		return ServiceNotAvailable, ErrClosed
	case s.opts.Role == Slave:
		return ServiceNotAvailable, ErrSlaveReadOnly // RocketMQ's answer too
	}
	if p := s.writeErr.Load(); p != nil {
		return ServiceNotAvailable, *p
	}
	if p := s.logics.dispatchErr.Load(); p != nil {
		return ServiceNotAvailable, fmt.Errorf("dispatch stopped: %w", *p)
	}
	return PutOK, nil
}

// encode checks m and encodes its record into e (all but the fields the
// append sets: offsets and the store timestamp), returning its SYSFLAG, or
// the status and error that refuse it. now is the Put's clock reading.
func (s *Store) encode(e *encodeBuffer, m *Message, now time.Time) (int32, PutStatus, error) {
	if err := record.ValidateTopic(m.Topic, true); err != nil {
		return 0, MessageIllegal, err
	}
	if len(m.Topic) > maxTopicNameBytes {
		return 0, MessageIllegal, topicTooLongForAName(len(m.Topic))
	}
	if m.QueueID < 0 {
		return 0, MessageIllegal, negativeQueueID(m.QueueID)
	}
	if len(m.Body) > s.opts.MaxMessageSizeBytes {
		return 0, MessageIllegal, tooLarge("body", len(m.Body), s.opts.MaxMessageSizeBytes)
	}
	props, err := record.EncodeProperties(e.props[:0], m.Properties)
	e.recordCRC = s.recordCRC
	if err == nil && e.recordCRC {
		props = record.AppendRecordCRC(props)
	}
	e.props = props
	if err != nil {
		return 0, MessageIllegal, err
	}
	if len(props) > record.MaxPropertiesBytes {
		return 0, PropertiesSizeExceeded, propertiesTooLarge(len(props))
	}
	stored := *m
	stored.StoreHost = s.opts.StoreHost
	if stored.BornTimestamp == 0 {
		stored.BornTimestamp = now.UnixMilli()
	}
	size := record.Size(&stored, len(props))
	if size > s.opts.MaxMessageSizeBytes {
		return 0, MessageIllegal, tooLarge("record", size, s.opts.MaxMessageSizeBytes)
	}
	if cap(e.buf) < size {
		e.buf = make([]byte, size+size/4)
	}
	e.size = size
	if err := record.Encode(e.buf[:size], &stored, props); err != nil {
		return 0, MessageIllegal, err
	}
	if e.feed = s.log.feed; e.feed != nil {
		var tagsCode int64
		e.hashes, tagsCode = feedKeys(e.hashes, m)
		e.fed = fedRecord{queueID: m.QueueID, sysFlag: stored.SysFlag, tagsCode: tagsCode} // its topic: the append's
	}
	return stored.SysFlag, PutOK, nil
}

// encode's refusals, out of line (see put).

//go:noinline
func negativeQueueID(id int32) error { return fmt.Errorf("queue id %d is negative", id) }

//go:noinline
func tooLarge(what string, n, maxBytes int) error {
	return fmt.Errorf("%s of %d bytes exceeds the maximum message size %d", what, n, maxBytes)
}

//go:noinline
func propertiesTooLarge(n int) error {
	return fmt.Errorf("properties are %d bytes, at most %d", n, record.MaxPropertiesBytes)
}

// waitDurable waits until the record is flushed (sync flush) and
// acknowledged by a slave (SYNC_MASTER), both at once, and sets the
// status as RocketMQ does: a replication failure wins over a flush one.
// The record stays in the CommitLog whatever the outcome.
func (s *Store) waitDurable(ctx context.Context, res *PutResult, start time.Time) error {
	end := res.PhysicalOffset + int64(res.Size)
	var flushW *groupWaiter
	var replW *offsetWaiter
	var flushErr, replErr error
	if s.group != nil {
		flushW, flushErr = s.group.begin(ctx, end, start) // the deadline runs on the real clock, as the watchdog does
	} else {
		s.flusher.Wakeup()
	}
	if r := s.repl.waiters; r != nil {
		if replErr = s.slaveAvailable(end); replErr == nil {
			replW, replErr = r.begin(end)
		}
	}
	if flushErr == nil && s.group != nil {
		flushErr = s.group.end(flushW)
	}
	if replErr == nil && s.repl.waiters != nil {
		replErr = s.repl.waiters.end(ctx, replW)
	}
	if flushErr == nil && replErr == nil {
		return nil
	}
	return s.notDurable(res, flushErr, replErr)
}

// notDurable sets the status of a Put whose flush or replication failed
// (either error may be nil) and returns its error. Out of line (see put).
//
//go:noinline
func (s *Store) notDurable(res *PutResult, flushErr, replErr error) error {
	var errs []error
	if replErr != nil {
		switch {
		case errors.Is(replErr, ErrSlaveNotAvailable):
			res.Status = SlaveNotAvailable
			s.repl.slaveNotAvailable.Add(1)
		case errors.Is(replErr, ErrInSyncReplicasNotEnough):
			res.Status = InSyncReplicasNotEnough
			s.repl.inSyncNotEnough.Add(1)
		default:
			res.Status = FlushSlaveTimeout
			s.repl.flushSlaveTimeouts.Add(1)
			if !errors.Is(replErr, ErrFlushSlaveTimeout) { // ctx ended
				replErr = fmt.Errorf("%w: %w", ErrFlushSlaveTimeout, replErr)
			}
		}
		errs = append(errs, replErr)
	}
	if flushErr != nil {
		if res.Status == PutOK {
			res.Status = FlushDiskTimeout
		}
		s.stats.flushDiskTimeouts.Add(1)
		if !errors.Is(flushErr, ErrFlushDiskTimeout) {
			flushErr = fmt.Errorf("%w: %w", ErrFlushDiskTimeout, flushErr)
		}
		errs = append(errs, flushErr)
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return fmt.Errorf("%w; and %w", errs[0], errs[1])
}
