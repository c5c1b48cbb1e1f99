package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/mqstore/mqstore/engine/consumequeue"
	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/engine/storefs"
	"github.com/mqstore/mqstore/mappedfile"
)

// recover finds the end of the valid CommitLog data, truncates what follows
// it (in the CommitLog, the ConsumeQueues and the index), rebuilds the queue
// offset table, and dispatches whatever the ConsumeQueues or the index lack.
// It scans with CRC checks from the segment recoveryStart picks. A cut that
// TruncateOnline began and a crash interrupted is finished first; the epoch
// file is read last, against the recovered end.
func (s *Store) recover(ctx context.Context) error {
	if err := s.finishInterruptedCut(ctx); err != nil {
		return err
	}
	q := s.log.queue
	logStart := max(q.MinOffset(), 0)
	from := s.recoveryStart(logStart)
	s.recoveredFrom = from
	// After a crash, ConsumeQueue and index data newer than the checkpoint
	// may be torn: every record stored since the checkpoint (less 3 s for
	// clock steps, as RocketMQ does) is dispatched again and its units
	// checked and repaired.
	sc := recoveryScan{lastKeyed: -1, redispatchFrom: -1,
		safeMs: min(s.checkpoint.logics.Load(), s.checkpoint.index.Load()) - 3000}
	if q.Len() > 0 {
		end, err := s.scanCommitLog(ctx, from, &sc)
		if err != nil {
			return err
		}
		if err := s.cutTornTail(ctx, logStart, end); err != nil {
			return err
		}
	}
	validEnd := q.ReadableOffset()
	s.log.committedOffset.Store(validEnd)
	s.log.flushedOffset.Store(validEnd)
	redispatchFrom := s.redispatchStart(from, validEnd, sc.redispatchFrom)
	if err := s.recoverLogics(ctx, logStart, validEnd, sc.lastKeyed, redispatchFrom); err != nil {
		return err
	}
	return s.loadEpochs(logStart, validEnd)
}

// recoveryScan is what the recovery scan of the CommitLog learns besides
// its end.
type recoveryScan struct {
	safeMs         int64 // records stored at or after it are dispatched again after a crash
	redispatchFrom int64 // the first such record; -1: none
	lastKeyed      int64 // the newest record with keys or a UNIQ_KEY; -1: none
}

// scanCommitLog is recovery's scan: from from (a unit start) to the end of
// the valid data, it raises the queue offset table to follow every record
// and notes what sc holds.
func (s *Store) scanCommitLog(ctx context.Context, from int64, sc *recoveryScan) (scanEnd, error) {
	return s.log.scan(ctx, from, func(offset int64, rec []byte, r *record.Record) error {
		if r == nil { // a blank
			return nil
		}
		if sc.redispatchFrom < 0 && r.StoreTimestamp >= sc.safeMs {
			sc.redispatchFrom = offset
		}
		if takesQueueOffset(r.SysFlag) {
			key := queueKey{topic: r.Topic, queueID: r.QueueID}
			if next := r.QueueOffset + 1; next > s.log.nextQueueOffsetOf(key) {
				s.log.setNextQueueOffset(key, next)
			}
		}
		if _, ok := record.LookupProperty(r.Properties, record.PropKeys); ok {
			sc.lastKeyed = offset
		} else if _, ok := r.UniqKey(); ok {
			sc.lastKeyed = offset
		}
		s.log.lastStoreTimestamp.Store(r.StoreTimestamp)
		return nil
	})
}

// cutTornTail judges the end the scan found (judgeEnd), cuts the CommitLog
// there and, after a crash, syncs what recovery is about to claim durable.
func (s *Store) cutTornTail(ctx context.Context, logStart int64, end scanEnd) error {
	closeEnd, err := s.judgeEnd(end)
	if err != nil {
		return err
	}
	q := s.log.queue
	// The tail past the valid end is zeroed, durably, so that no later scan
	// can take anything there for a record — unless the last run closed
	// cleanly and the log ends exactly where its close flushed to. Then
	// nothing of this log lies past the end: a clean close flushes
	// everything appended and records that offset, O_DIRECT commits
	// zero-pad their tail block, and what follows is zeros or, in a reused
	// segment, a pooled file's old records, whose PHYSICALOFFSET names
	// another segment (a file is never reused for the offset it held), so
	// scans stop there. Zeroing it would read, and for a reused segment
	// write, up to a whole segment at every restart. After a crash, or
	// where a corrupt record cut the log short of its close, records of
	// this log may follow (a complete one behind a torn one): those are
	// zeroed, or a later append of the same length could bring them back.
	truncate := q.TruncateTo
	if closeEnd {
		truncate = q.EndAt
	}
	if err := truncate(ctx, end.validEnd); err != nil {
		return err
	}
	if !s.abnormalOpen {
		return nil
	}
	// The dead process may have left bytes in the page cache that no flush
	// made durable — the tail of the segment before a roll, not only the
	// one truncated — and the flushed offset is about to claim everything
	// up to the valid end: sync it all from what the checkpoint knew
	// durable.
	from := max(min(s.checkpoint.flushedOffset.Load(), end.validEnd), logStart)
	if err := q.SyncRange(ctx, from, end.validEnd); err != nil {
		return fmt.Errorf("sync the recovered CommitLog [%d, %d): %w", from, end.validEnd, err)
	}
	return nil
}

// redispatchStart is where recovery dispatches again from (-1: nowhere),
// given the first record the scan found stored since the checkpoint: never
// after what the checkpoint knew dispatched, whatever the clock did; after
// a clean close nowhere (every ConsumeQueue and the index were flushed).
func (s *Store) redispatchStart(from, validEnd, sinceCheckpoint int64) int64 {
	redispatchFrom := sinceCheckpoint
	if off := s.checkpoint.logicsOffset.Load(); off > 0 && (redispatchFrom < 0 || off < redispatchFrom) {
		redispatchFrom = max(off, from)
	}
	if !s.abnormalOpen {
		redispatchFrom = -1
	} else if redispatchFrom < 0 || redispatchFrom > validEnd {
		redispatchFrom = validEnd
	}
	if s.checkpoint.logicsOffset.Load() > validEnd {
		s.checkpoint.logicsOffset.Store(validEnd) // the log was cut below it
	}
	return redispatchFrom
}

// logicsMissing reports whether the consumequeue or the index directory is
// missing: deleted to be rebuilt.
func (s *Store) logicsMissing() (bool, error) {
	for _, d := range []string{filepath.Join(s.dir, consumeQueueDirName), filepath.Join(s.dir, indexDirName)} {
		exists, err := s.fs.Exists(d)
		if err != nil {
			return false, err
		}
		if !exists {
			return true, nil
		}
	}
	return false, nil
}

// recoveryStart picks the offset recovery scans from (a segment's first
// offset), as RocketMQ does: after a clean close, the third-newest segment
// holding data;
// after a crash, the newest segment whose first record is older than
// min(physic, logics, index) − 3 s in the checkpoint, and no later than the
// segment holding the offsets the checkpoint knew flushed and dispatched
// (mqstore's extension: right even when the clock stepped back). Everything
// before it was durable and dispatched. With no ConsumeQueues or no index
// directory on disk (deleted to be rebuilt) it is the log's start.
func (s *Store) recoveryStart(logStart int64) int64 {
	files := s.log.queue.Files()
	if len(files) == 0 || s.rebuildLogics || s.opts.FullRecoveryScan {
		return logStart
	}
	segStart := func(i int) int64 { return max(files[i].FromOffset(), logStart) }
	if !s.abnormalOpen {
		// The third-newest segment holding data: preallocated empty ones
		// after the last do not count.
		n := len(files)
		for n > 1 {
			if _, ok := firstStoreTimestamp(files[n-1]); ok {
				break
			}
			n--
		}
		return segStart(max(n-3, 0))
	}
	cp := s.checkpoint
	known := min(cp.logicsOffset.Load(), cp.flushedOffset.Load())
	if known <= 0 {
		// No offset known (no checkpoint yet, or one RocketMQ wrote): do
		// not trust the clock alone.
		return logStart
	}
	safeMs := min(cp.physic.Load(), cp.logics.Load(), cp.index.Load()) - 3000
	i := len(files) - 1
	for ; i > 0; i-- {
		if ts, ok := firstStoreTimestamp(files[i]); ok && ts <= safeMs {
			break
		}
	}
	for i > 0 && files[i].FromOffset() > known {
		i-- // no later than the segment holding what the checkpoint knew
	}
	return segStart(i)
}

// firstStoreTimestamp reads the STORETIMESTAMP of a segment's first record
// (false when it does not start with a record).
func firstStoreTimestamp(mf mappedfile.MappedFile) (int64, bool) {
	head := make([]byte, 128)
	n, _ := mf.ReadAt(head, 0)
	if n < record.MinRecordSize {
		return 0, false
	}
	magic := int32(binary.BigEndian.Uint32(head[record.OffMagic:]))
	if magic != record.MagicV1 && magic != record.MagicV2 {
		return 0, false
	}
	if int64(binary.BigEndian.Uint64(head[record.OffPhysicalOffset:])) != mf.FromOffset() {
		return 0, false // an older segment's record: a reused file not written yet
	}
	off := record.StoreTimestampOffset(int32(binary.BigEndian.Uint32(head[record.OffSysFlag:])))
	if off+8 > n {
		return 0, false
	}
	ts := int64(binary.BigEndian.Uint64(head[off:]))
	return ts, ts > 0
}

// recoverLogics truncates the ConsumeQueues and the index to the valid
// CommitLog end and re-dispatches from the earliest point one of them lacks.
func (s *Store) recoverLogics(ctx context.Context, logStart, validEnd, lastKeyed, redispatchFrom int64) error {
	reputFrom, err := s.truncateIndex(ctx, logStart, validEnd, lastKeyed, redispatchFrom)
	if err != nil {
		return err
	}
	if reputFrom, err = s.truncateQueues(ctx, logStart, validEnd, reputFrom); err != nil {
		return err
	}
	if s.abnormalOpen && reputFrom < validEnd {
		if err := s.distrustLogicsFrom(reputFrom); err != nil {
			return err
		}
	}
	if err := s.redispatch(ctx, reputFrom, validEnd); err != nil {
		return err
	}
	if s.abnormalOpen {
		// Units and entries the dead process wrote may be in the page cache
		// only, and so may everything the redispatch wrote: make them
		// durable before the checkpoint's dispatched offset can claim them.
		known := s.checkpoint.logicsOffset.Load()
		for _, q := range s.logics.queues() {
			if err := q.SyncFrom(ctx, known); err != nil {
				return err
			}
		}
		if err := s.logics.index.SyncFrom(ctx, known); err != nil {
			return err
		}
	}
	return s.settleLogics(ctx, logStart, validEnd)
}

// distrustLogicsFrom lowers the checkpoint's dispatched offset to from,
// durably, before recovery writes ConsumeQueue units and index entries for
// the records from there on. Those writes sit in the page cache until
// recoverLogics syncs them; a power loss in between can leave a rebuilt
// index file with its header written back and its entries not. An open
// after it must not trust that file because the checkpoint still claims
// the records it indexes (truncateIndex keeps every file that ends below
// the checkpoint's offset): with the offset lowered it drops every file
// that indexes a record at or past from and rebuilds it again. Lowered to
// the log's start (0), no offset is known, and the index's timestamp goes
// to 0 as well, so the timestamp rule distrusts every file.
func (s *Store) distrustLogicsFrom(from int64) error {
	cp := s.checkpoint
	if known := cp.logicsOffset.Load(); known > 0 && known <= from {
		return nil
	}
	cp.logicsOffset.Store(max(from, 0))
	if from <= 0 {
		cp.index.Store(0)
	}
	if err := cp.write(); err != nil {
		return fmt.Errorf("lower the checkpoint's dispatched offset to %d before re-dispatching: %w", from, err)
	}
	return nil
}

// truncateIndex cuts the index at the valid end — or, when recovery
// dispatches again from redispatchFrom (≥ 0), at the first index file the
// checkpoint did not know durable — and returns where dispatch must start
// again for the index (validEnd: nowhere).
func (s *Store) truncateIndex(ctx context.Context, logStart, validEnd, lastKeyed, redispatchFrom int64) (int64, error) {
	l := s.logics
	indexCut := validEnd
	reputFrom := validEnd
	if redispatchFrom >= 0 {
		reputFrom = redispatchFrom
		// Index files not known durable by the checkpoint are dropped
		// whole and rebuilt: a torn entry cannot be undone. RocketMQ's
		// rule compares the file's EndTimestamp with the checkpoint's, but
		// a record dispatched after the checkpoint in the same millisecond
		// leaves them equal; so a file that indexes a record at or past the
		// checkpoint's dispatched offset goes too (and, without that
		// offset, one whose EndTimestamp equals the checkpoint's).
		known, indexTs := s.checkpoint.logicsOffset.Load(), s.checkpoint.index.Load()
		for _, f := range l.index.Files() {
			if f.IndexCount <= 1 {
				continue // no entry
			}
			if f.EndTimestamp > indexTs || (known > 0 && f.EndPhyOffset >= known) || (known <= 0 && f.EndTimestamp >= indexTs) {
				indexCut = min(indexCut, f.BeginPhyOffset)
				break
			}
		}
		reputFrom = min(reputFrom, max(indexCut, logStart))
	}
	if err := l.index.TruncateByPhysical(ctx, indexCut); err != nil {
		return 0, fmt.Errorf("truncate index: %w", err)
	}
	if lastKeyed >= 0 && !l.index.Covers(lastKeyed) {
		reputFrom = min(reputFrom, max(l.index.MaxPhysicalOffset(), logStart))
	}
	return reputFrom, nil
}

// truncateQueues cuts every ConsumeQueue at the valid end, drops a damaged
// last unit, and lowers reputFrom to where a queue lacks units the
// CommitLog holds.
func (s *Store) truncateQueues(ctx context.Context, logStart, validEnd, reputFrom int64) (int64, error) {
	keys, err := s.knownQueues()
	if err != nil {
		return 0, err
	}
	for _, key := range keys {
		cq, err := s.logics.queue(ctx, key, true)
		if err != nil {
			return 0, err
		}
		if err := cq.TruncateByPhysical(ctx, validEnd); err != nil {
			return 0, fmt.Errorf("truncate consume queue %s/%d: %w", key.topic, key.queueID, err)
		}
		// A torn page can leave a last unit that points at the right record
		// with a wrong size or tags code: check it against the record. A
		// unit whose record retention deleted cannot be checked and is
		// kept: dropped, it would leave a gap no re-dispatch fills (the
		// queue's next record is in the log, its own is not). A torn one
		// that points there while its record is in the log is replaced
		// by the re-dispatch, which starts at the log's start for it.
		if n := cq.MaxOffset(); n > cq.MinOffset() {
			if u, err := cq.Get(n - 1); err != nil || (u.PhysicalOffset >= logStart && !s.unitMatches(ctx, key, n-1, u)) {
				if err := cq.TruncateAt(ctx, n-1); err != nil {
					return 0, fmt.Errorf("drop the damaged last unit of %s/%d: %w", key.topic, key.queueID, err)
				}
			}
		}
		if cq.MaxOffset() < s.log.nextQueueOffsetOf(key) { // units missing: dispatch from the last one it has
			start := logStart
			if n := cq.MaxOffset(); n > cq.MinOffset() {
				if u, err := cq.Get(n - 1); err == nil {
					start = max(u.PhysicalOffset, logStart)
				}
			}
			reputFrom = min(reputFrom, start)
		}
	}
	return reputFrom, nil
}

// redispatch dispatches the records of [from, validEnd) again, replacing a
// torn ConsumeQueue unit it meets.
func (s *Store) redispatch(ctx context.Context, from, validEnd int64) error {
	if from >= validEnd {
		return nil
	}
	l := s.logics
	s.opts.Logger.Info("rebuilding consume queues and index", slog.Int64("from", from), slog.Int64("to", validEnd))
	var keyBuf []int32
	end, err := s.log.scan(ctx, from, func(offset int64, _ []byte, r *record.Record) error {
		if r == nil {
			return nil
		}
		err := s.dispatchRecord(ctx, offset, r, nil, &keyBuf)
		if errors.Is(err, consumequeue.ErrConflict) {
			// A torn unit: replace it and everything after it.
			cq, qerr := l.queue(ctx, queueKey{topic: r.Topic, queueID: r.QueueID}, false)
			if qerr != nil || cq == nil {
				return err
			}
			if terr := cq.TruncateAt(ctx, r.QueueOffset); terr != nil {
				return fmt.Errorf("repair %s/%d at %d: %w", r.Topic, r.QueueID, r.QueueOffset, terr)
			}
			s.opts.Logger.Warn("repaired a torn consume queue unit", slog.String("topic", r.Topic),
				slog.Int("queueId", int(r.QueueID)), slog.Int64("queueOffset", r.QueueOffset))
			err = s.dispatchRecord(ctx, offset, r, nil, &keyBuf)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("re-dispatch from %d: %w", from, err)
	}
	if end.validEnd != validEnd {
		return fmt.Errorf("re-dispatch stopped at %d before the valid end %d: %v: %w", end.validEnd, validEnd, end.corrupt, ErrCorrupt)
	}
	return nil
}

// settleLogics ends the rebuild of the logics: everything below validEnd
// is dispatched; a queue whose newest record precedes the scan continues
// after its ConsumeQueue's last unit (RocketMQ's recoverTopicQueueTable);
// the queues' minimum moves past what retention deleted from the CommitLog.
func (s *Store) settleLogics(ctx context.Context, logStart, validEnd int64) error {
	l := s.logics
	l.dispatchedOffset.Store(validEnd)
	for _, q := range l.queues() {
		key := queueKey{topic: q.Topic(), queueID: q.QueueID()}
		if n := q.MaxOffset(); n > s.log.nextQueueOffsetOf(key) {
			s.log.setNextQueueOffset(key, n)
		}
	}
	for _, q := range l.queues() {
		if _, err := q.DeleteBefore(ctx, max(logStart, 0)); err != nil {
			return fmt.Errorf("consume queue %s/%d: %w", q.Topic(), q.QueueID(), err)
		}
	}
	l.recovering = false
	return nil
}

// unitMatches reports whether u is the right unit for queue offset n of key.
func (s *Store) unitMatches(ctx context.Context, key queueKey, n int64, u consumequeue.Unit) bool {
	r, err := s.ReadMessage(ctx, u.PhysicalOffset)
	if err != nil {
		return false
	}
	tags, _ := r.Tags()
	return r.Topic == key.topic && r.QueueID == key.queueID && r.QueueOffset == n &&
		r.TotalSize == u.Size && record.TagsCode(tags) == u.TagsCode
}

// knownQueues lists the queues of the CommitLog and those with ConsumeQueue
// files on disk.
func (s *Store) knownQueues() ([]queueKey, error) {
	seen := make(map[queueKey]struct{}, len(s.log.queueOffsets))
	for k := range s.log.queueOffsets {
		seen[k] = struct{}{}
	}
	onDisk, err := consumequeue.List(s.logics.cqConfig.Dir, s.aux)
	if err != nil {
		return nil, fmt.Errorf("list consume queues: %w", err)
	}
	for topic, ids := range onDisk {
		for _, id := range ids {
			seen[queueKey{topic: topic, queueID: id}] = struct{}{}
		}
	}
	keys := make([]queueKey, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	return keys, nil
}

// judgeEnd decides what the end of the valid data means. Past the offset
// the checkpoint knew durable, an invalid record or a zero is a torn tail
// after a crash: it is cut (RocketMQ's rule). Before it, durable data was
// lost or damaged: Open stops (CorruptionStop) or cuts and keeps the cut
// bytes in .broken files (CorruptionTruncate). closeEnd reports that the
// end is the one the last run's clean close flushed to and recorded.
func (s *Store) judgeEnd(end scanEnd) (closeEnd bool, err error) {
	durable := s.checkpoint.flushedOffset.Load()
	if !s.abnormalOpen && end.corrupt == nil && end.validEnd == durable {
		return true, nil // zeros at the end a clean close recorded
	}
	if from := s.log.crcFrom.Load(); !s.abnormalOpen && end.corrupt != nil && from >= 0 && end.validEnd >= from && end.validEnd == durable {
		// A log that recycles segments: after a clean close the bytes
		// past its end are a pooled file's old ones, not zeros, and the
		// close flushed exactly to the end and recorded it.
		return true, nil
	}
	if !s.abnormalOpen && end.corrupt != nil {
		// After a clean close nothing is torn: a bad record is corruption
		// wherever it is (the checkpoint of a store closed by an older
		// version may not know the last flush).
		durable = max(durable, end.validEnd+1)
	}
	// Where valid records follow the end (-1: none), for a tail cut before
	// them and for the error below; zeros past the durable offset need it
	// for neither.
	later := int64(-1)
	if end.corrupt != nil || end.validEnd < durable {
		later = s.validDataAfter(end.validEnd)
	}
	if end.validEnd >= durable {
		if end.corrupt != nil {
			if later >= 0 {
				// A tail torn before records that did reach the disk (or,
				// when the checkpoint records no flushed offset, damage that
				// cannot be told from a tear): they follow a hole and are cut
				// with it, but kept.
				if err := s.saveBroken(end.validEnd); err != nil {
					return false, fmt.Errorf("truncating a torn CommitLog tail at offset %d: keeping the cut bytes: %w", end.validEnd, err)
				}
			}
			s.opts.Logger.Warn("truncating a torn CommitLog tail", slog.Int64("offset", end.validEnd), slog.Any("reason", end.corrupt),
				slog.Bool("cutBytesKeptInBrokenFiles", later >= 0))
		}
		return false, nil
	}
	reason := "the data ends there (zeros or a missing segment)"
	if end.corrupt != nil {
		reason = end.corrupt.Error()
	}
	msg := fmt.Sprintf("CommitLog invalid at offset %d although the checkpoint says it was durable up to %d: %s", end.validEnd, durable, reason)
	if later >= 0 {
		msg += fmt.Sprintf(" (valid records follow at %d)", later)
	}
	if s.opts.OnCorruption != CorruptionTruncate {
		return false, fmt.Errorf("%s; open with OnCorruption: CorruptionTruncate to cut the log there and keep the rest in .broken files: %w", msg, ErrCorrupt)
	}
	if err := s.saveBroken(end.validEnd); err != nil {
		return false, fmt.Errorf("%s: keeping the cut bytes: %w", msg, err)
	}
	s.opts.Logger.Error("cutting the CommitLog at a corrupt record", slog.String("what", msg))
	s.checkpoint.flushedOffset.Store(end.validEnd)
	return false, nil
}

// saveBroken copies the CommitLog bytes from offset on into
// commitlog/<segment>.broken files (trailing zeros dropped).
func (s *Store) saveBroken(offset int64) error {
	for _, mf := range s.log.queue.Files() {
		if mf.FromOffset()+mf.SizeBytes() <= offset {
			continue
		}
		start := max(offset-mf.FromOffset(), 0)
		buf := make([]byte, mf.ReadablePosition()-start)
		n, _ := mf.ReadAt(buf, start)
		buf = buf[:n]
		for len(buf) > 0 && buf[len(buf)-1] == 0 {
			buf = buf[:len(buf)-1]
		}
		if len(buf) == 0 {
			continue
		}
		if err := storefs.WriteFileAtomic(s.fs, mf.Path()+".broken", buf); err != nil {
			return err
		}
	}
	return nil
}

// validDataAfter returns the offset of a valid record at the start of a
// segment after offset, or -1: a sign that a corruption is not a torn tail.
func (s *Store) validDataAfter(offset int64) int64 {
	for _, mf := range s.log.queue.Files() {
		if mf.FromOffset() <= offset {
			continue
		}
		head := make([]byte, record.BlankSize)
		if n, _ := mf.ReadAt(head, 0); n != len(head) {
			continue
		}
		kind, total, err := record.Peek(head, mf.FromOffset(), s.log.maxRecordBytes)
		if err != nil || kind != record.KindRecord {
			continue
		}
		rec := make([]byte, total)
		if n, _ := mf.ReadAt(rec, 0); n != len(rec) {
			continue
		}
		if r, err := record.Decode(rec, mf.FromOffset(), true); err == nil && r.PhysicalOffset == mf.FromOffset() {
			return mf.FromOffset()
		}
	}
	return -1
}
