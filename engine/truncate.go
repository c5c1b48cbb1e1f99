package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/engine/storefs"
	"github.com/mqstore/mqstore/mappedfile"
)

// cutIntentFileName names the file that says a cut of the CommitLog is
// under way and where it goes: written (durably) before the first byte is
// cut, removed once the cut and the rebuilt queues are durable. Open finds
// it only after a crash in between, and finishes the cut first.
const cutIntentFileName = "truncating"

// divergedDirName holds the bytes a truncation cut, one file per segment.
const divergedDirName = "diverged"

// TruncateOnline cuts the CommitLog of a running slave store at offset —
// a record boundary at or below its end — as a replica does when it
// returns to a new master whose history parted from its own there
// (FindConsistentPoint). The cut is crash-safe and durable before it
// returns: a crash at any step leaves, after the next Open, either the old
// log or the cut one, with ConsumeQueues, index and queue offsets that
// match it. The steps:
//
//   - quiesce: Puts, replicated appends, reads and retention wait (the
//     store's close lock); dispatch and the ConsumeQueue flush stop; the
//     CommitLog is flushed and dispatched to its end;
//   - the cut bytes go to diverged/ (one durable file per segment, named
//     by its first offset);
//   - the checkpoint is lowered to the cut and written, then the intent
//     file (the commit point: from here on Open finishes the cut);
//   - epoch entries that start past the cut go; segments the allocator
//     made ahead go; the segments past the cut are deleted (newest first)
//     and the tail of the cut one is zeroed and synced;
//   - the ConsumeQueues and the index are cut at the offset and rebuilt
//     from the log, and the queue offset table is rebuilt from the log and
//     the queues — so no queue offset is used twice and no unit points past
//     the end — then flushed with the checkpoint; the intent file goes;
//   - dispatch resumes.
//
// A store that is not a slave is refused (ErrNotSlave): a master is
// demoted, reopened as a slave, first. Nothing is cut when offset is the
// end. An offset past the end, before the first offset stored, or inside
// a record is ErrInvalidOption and changes nothing.
func (s *Store) TruncateOnline(ctx context.Context, offset int64) (TruncateResult, error) {
	res := TruncateResult{Offset: offset}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("truncate at %d: %w", offset, err)
	}
	if offset < 0 {
		return res, fmt.Errorf("truncate at %d: a negative offset: %w", offset, ErrInvalidOption)
	}
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	switch {
	case s.closed:
		return res, fmt.Errorf("truncate at %d: %w", offset, ErrClosed)
	case s.opts.Role != Slave:
		return res, fmt.Errorf("truncate at %d: the store is a %v; only a slave's CommitLog is cut while it runs (reopen it as a slave): %w",
			offset, s.opts.Role, ErrNotSlave)
	}
	if p := s.writeErr.Load(); p != nil {
		return res, fmt.Errorf("truncate at %d: %w: %w", offset, ErrServiceNotAvailable, *p)
	}
	if p := s.logics.dispatchErr.Load(); p != nil {
		return res, fmt.Errorf("truncate at %d: %w: dispatch stopped: %w", offset, ErrServiceNotAvailable, *p)
	}
	s.cleanMu.Lock()
	defer s.cleanMu.Unlock()
	s.pauseLogics()
	defer s.resumeLogics()
	res, err := s.truncateQuiesced(ctx, offset)
	if err != nil {
		return res, fmt.Errorf("truncate at %d: %w", offset, err)
	}
	return res, nil
}

// pauseLogics stops the dispatch and ConsumeQueue flush services (their
// objects stay: a caller may wake them meanwhile).
func (s *Store) pauseLogics() {
	s.dispatcher.shutdown()
	s.logicsFlusher.shutdown()
}

// resumeLogics starts them again; the close lock is held, so Close cannot
// stop them in between.
func (s *Store) resumeLogics() {
	for _, svc := range []*service{&s.dispatcher.service, &s.logicsFlusher.service} {
		svc.stop, svc.done = make(chan struct{}), make(chan struct{})
	}
	go s.dispatcher.run()
	go s.logicsFlusher.run()
	s.dispatcher.Wakeup()
}

// truncateQuiesced is TruncateOnline once nothing else writes.
func (s *Store) truncateQuiesced(ctx context.Context, offset int64) (TruncateResult, error) {
	res := TruncateResult{Offset: offset}
	if _, err := s.flushAll(ctx); err != nil {
		return res, err
	}
	if err := s.dispatcher.dispatchAvailable(ctx); err != nil {
		return res, fmt.Errorf("dispatch: %w", err)
	}
	unlock := s.log.lockSync() // no commit or flush runs while it cuts
	defer unlock()
	s.log.appendMu.Lock()
	defer s.log.appendMu.Unlock()
	oldEnd, err := s.checkCutPoint(ctx, offset)
	res.OldEnd = oldEnd
	if err != nil || offset == oldEnd {
		return res, err
	}
	saved, err := s.keepDiverged(offset, oldEnd)
	res.SavedTo = saved
	if err != nil {
		return res, fmt.Errorf("keep the cut bytes: %w", err)
	}
	res.CutBytes = oldEnd - offset
	if err := s.cutAndRebuild(ctx, offset); err != nil {
		// Past the commit point the store is half cut: it takes nothing
		// more until it is reopened, and the next Open finishes the cut.
		err = fmt.Errorf("%w (the store stops; reopen it to finish the truncation)", err)
		s.writeFailed("truncate", err)
		s.dispatchFailed(err)
		return res, err
	}
	s.opts.Logger.Warn("CommitLog truncated online", slog.Int64("offset", offset), slog.Int64("oldEnd", oldEnd),
		slog.Any("savedTo", saved))
	return res, nil
}

// cutAndRebuild is the cut from its commit point on: the log, then the
// queues rebuilt and flushed, then the intent file removed.
func (s *Store) cutAndRebuild(ctx context.Context, offset int64) error {
	if err := s.cutLog(ctx, offset, true); err != nil {
		return err
	}
	d := s.dispatcher
	d.mu.Lock()
	d.fed.drop(s.log.feed) // it may name records past the cut
	d.mu.Unlock()
	r := &s.repl
	r.pending, r.lastRecord = r.pending[:0], -1
	if err := s.rebuildLogicsAt(ctx, offset); err != nil {
		return fmt.Errorf("rebuild the consume queues at the cut: %w", err)
	}
	if err := s.flushLogics(ctx, 0); err != nil {
		return fmt.Errorf("flush the rebuilt consume queues: %w", err)
	}
	if err := storefs.RemoveDurably(s.fs, filepath.Join(s.dir, cutIntentFileName)); err != nil {
		return fmt.Errorf("remove the cut's intent file: %w", err)
	}
	return nil
}

// flushAll makes the whole CommitLog durable (as Flush does); the close
// lock is held.
func (s *Store) flushAll(ctx context.Context) (int64, error) {
	target := s.log.queue.WroteOffset()
	flushed := s.FlushedOffset()
	for pass := 0; pass < 2 && flushed < target; pass++ {
		var err error
		if flushed, err = s.flushOnce(ctx, 0, true); err != nil {
			return flushed, fmt.Errorf("flush the CommitLog to %d: %w", target, err)
		}
	}
	if flushed < target {
		return flushed, fmt.Errorf("flush the CommitLog: flushed to %d of %d: %w", flushed, target, errFlushBehind)
	}
	return flushed, nil
}

// cutLog cuts the CommitLog at offset (checked): the checkpoint first —
// a crash then leaves a log longer than the checkpoint says durable (fine),
// never shorter (corruption) — then, with intent, the intent file, then the
// epochs past it, the allocator's segments made ahead and the segments past
// it.
func (s *Store) cutLog(ctx context.Context, offset int64, intent bool) error {
	cp := s.checkpoint
	cp.flushedOffset.Store(min(cp.flushedOffset.Load(), offset))
	cp.logicsOffset.Store(min(cp.logicsOffset.Load(), offset))
	if err := cp.write(); err != nil {
		return fmt.Errorf("write the checkpoint: %w", err)
	}
	if intent {
		if err := storefs.WriteFileAtomic(s.fs, filepath.Join(s.dir, cutIntentFileName), []byte(strconv.FormatInt(offset, 10)+"\n")); err != nil {
			return fmt.Errorf("write the cut's intent file: %w", err)
		}
		c := &s.epochs
		c.mu.Lock()
		err := s.cutEpochsLocked(offset)
		c.mu.Unlock()
		if err != nil {
			return err
		}
	}
	if s.alloc != nil {
		if err := s.alloc.discardAfter(offset); err != nil {
			return fmt.Errorf("drop the segments made ahead: %w", err)
		}
	}
	if err := s.log.queue.TruncateTo(ctx, offset); err != nil {
		return err
	}
	if err := s.lowerRecordCRCFrom(offset); err != nil {
		return err
	}
	s.log.committedOffset.Store(offset)
	s.log.flushedOffset.Store(offset)
	return nil
}

// checkCutPoint checks that offset is a unit boundary at or below the end
// of the valid CommitLog data, and returns that end.
func (s *Store) checkCutPoint(ctx context.Context, offset int64) (int64, error) {
	q := s.log.queue
	start := max(q.MinOffset(), 0)
	if q.Len() == 0 {
		if offset != 0 {
			return 0, fmt.Errorf("the CommitLog is empty: %w", ErrInvalidOption)
		}
		return 0, nil
	}
	if offset < start {
		return 0, fmt.Errorf("the CommitLog starts at %d: %w", start, ErrInvalidOption)
	}
	from := start
	if mf := q.Find(offset); mf != nil {
		from = max(mf.FromOffset(), start)
	} else if last := q.Last(); last.FromOffset() > start {
		from = last.FromOffset()
	}
	boundary := offset == from
	inside := int64(-1)
	segSize := s.log.segmentSizeBytes
	end, err := s.log.scan(ctx, from, func(at int64, rec []byte, r *record.Record) error {
		unitEnd := at + int64(len(rec))
		if r == nil { // a blank runs to the segment end
			unitEnd = at + segSize - at%segSize
		}
		switch {
		case at == offset:
			boundary = true
		case at < offset && offset < unitEnd:
			inside = at
		}
		return nil
	})
	switch {
	case err != nil:
		return end.validEnd, err
	case offset > end.validEnd:
		return end.validEnd, fmt.Errorf("the valid CommitLog data ends at %d: %w", end.validEnd, ErrInvalidOption)
	case offset == end.validEnd:
		return end.validEnd, nil
	case inside >= 0 || !boundary:
		return end.validEnd, fmt.Errorf("the offset falls inside the record at %d; truncate at a record boundary: %w", inside, ErrInvalidOption)
	}
	return end.validEnd, nil
}

// keepDiverged copies the CommitLog bytes [from, to) into
// diverged/<offset> files, one per segment, each written durably through
// the store's file system (a name already taken gets a .1, .2… suffix).
func (s *Store) keepDiverged(from, to int64) ([]string, error) {
	dir := filepath.Join(s.dir, divergedDirName)
	if err := s.fs.MkdirAll(dir); err != nil {
		return nil, err
	}
	var saved []string
	for _, mf := range s.log.queue.Files() {
		segEnd := mf.FromOffset() + mf.SizeBytes()
		if segEnd <= from || mf.FromOffset() >= to {
			continue
		}
		lo, hi := max(from, mf.FromOffset()), min(to, segEnd)
		buf := make([]byte, hi-lo)
		if n, err := mf.ReadAt(buf, lo-mf.FromOffset()); n != len(buf) {
			return saved, fmt.Errorf("read %s at %d: %w", mf.Path(), lo, err)
		}
		path := filepath.Join(dir, segment.Name(lo))
		for i := 1; ; i++ {
			taken, err := s.fs.Exists(path)
			if err != nil {
				return saved, err
			}
			if !taken {
				break
			}
			path = filepath.Join(dir, fmt.Sprintf("%s.%d", segment.Name(lo), i))
		}
		if err := storefs.WriteFileAtomic(s.fs, path, buf); err != nil {
			return saved, err
		}
		saved = append(saved, path)
	}
	return saved, nil
}

// rebuildLogicsAt rebuilds the ConsumeQueues, the index and the queue
// offset table of a running store whose CommitLog was just cut at cut —
// with recovery's own phases: the table from zero, raised by a scan of the
// last segment and by every queue's last unit once the queues are cut.
func (s *Store) rebuildLogicsAt(ctx context.Context, cut int64) error {
	logStart := s.MinOffset()
	for _, qc := range s.log.queueOffsets {
		qc.next = 0
	}
	from := logStart
	if mf := s.log.queue.Find(cut - 1); mf != nil && cut > logStart {
		from = max(mf.FromOffset(), logStart)
	}
	sc := recoveryScan{lastKeyed: -1, redispatchFrom: -1, safeMs: math.MaxInt64}
	if s.log.queue.Len() > 0 {
		end, err := s.scanCommitLog(ctx, from, &sc)
		if err != nil {
			return err
		}
		if end.validEnd != cut {
			return fmt.Errorf("the cut CommitLog's data ends at %d, not at the cut %d: %v: %w", end.validEnd, cut, end.corrupt, ErrCorrupt)
		}
	}
	reputFrom, err := s.truncateIndex(ctx, logStart, cut, sc.lastKeyed, -1)
	if err != nil {
		return err
	}
	if reputFrom, err = s.truncateQueues(ctx, logStart, cut, reputFrom); err != nil {
		return err
	}
	if err := s.redispatch(ctx, reputFrom, cut); err != nil {
		return err
	}
	if cp := s.checkpoint; cp.logicsOffset.Load() > cut {
		cp.logicsOffset.Store(cut)
	}
	return s.settleLogics(ctx, logStart, cut)
}

// finishInterruptedCut runs first in recovery: when the intent file of a
// TruncateOnline is there, the process died in the middle of the cut; the cut is
// made again (the cut bytes were kept before the intent was written), and
// the rest of recovery rebuilds the queues for it.
func (s *Store) finishInterruptedCut(ctx context.Context) error {
	path := filepath.Join(s.dir, cutIntentFileName)
	data, err := s.fs.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	offset, perr := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if perr != nil || offset < 0 {
		return fmt.Errorf("%s holds %q, not the offset of an interrupted truncation; the cut bytes are in %s: "+
			"cut the log there with mqstore repair-slave, or remove the file to keep the whole log: %w",
			path, data, filepath.Join(s.dir, divergedDirName), ErrCorrupt)
	}
	s.opts.Logger.Warn("finishing a CommitLog truncation a crash interrupted", slog.Int64("offset", offset))
	end, err := s.checkCutPoint(ctx, offset)
	switch {
	case errors.Is(err, ErrInvalidOption) && end < offset:
		// Less than the cut survived (not what a flushed log does): the
		// log is shorter than the cut already.
		s.opts.Logger.Warn("the CommitLog ends before the interrupted cut", slog.Int64("end", end), slog.Int64("cut", offset))
	case err != nil:
		return fmt.Errorf("finish the truncation at %d that %s records: %w", offset, path, err)
	case end > offset:
		if err := s.cutLog(ctx, offset, false); err != nil {
			return fmt.Errorf("finish the truncation at %d: %w", offset, err)
		}
	}
	return storefs.RemoveDurably(s.fs, path)
}

// discardAfter deletes, durably, the segments the allocator made ahead
// that start after offset (the CommitLog is being cut there): left on disk
// they would be a gap in the segment sequence at the next Open. It waits
// for a creation in progress.
func (a *allocator) discardAfter(offset int64) error {
	a.mu.Lock()
	reqs := make(map[string]*allocation, len(a.requests))
	for p, r := range a.requests {
		reqs[p] = r
	}
	a.mu.Unlock()
	var errs []error
	for path, req := range reqs {
		<-req.ready
		from, err := segment.ParseName(filepath.Base(path))
		if err != nil || from <= offset {
			continue
		}
		a.mu.Lock()
		delete(a.requests, path)
		a.mu.Unlock()
		if req.file == nil {
			continue
		}
		if err := a.remove(req.file); err != nil && !errors.Is(err, mappedfile.ErrClosed) {
			errs = append(errs, fmt.Errorf("remove %s: %w", path, err))
		}
	}
	return errors.Join(errs...)
}

// errFound stops a scan once it found what it looked for.
var errFound = errors.New("found")

// UnitBefore returns where the unit (a record, or an end-of-segment blank)
// that ends exactly at offset starts: the record a replica compares with
// its master's copy before it cuts its log at offset. ErrInvalidOption
// when offset is no unit's end (inside a unit, past the valid data, or at
// or before the first offset stored).
func (s *Store) UnitBefore(ctx context.Context, offset int64) (int64, error) {
	q := s.log.queue
	start := s.MinOffset()
	if offset <= start || q.Len() == 0 {
		return 0, fmt.Errorf("no unit ends at %d: the CommitLog starts at %d: %w", offset, start, ErrInvalidOption)
	}
	mf := q.Find(offset - 1)
	if mf == nil {
		return 0, fmt.Errorf("no unit ends at %d: past the CommitLog's end %d: %w", offset, s.MaxOffset(), ErrInvalidOption)
	}
	segSize := s.log.segmentSizeBytes
	found := int64(-1)
	end, err := s.log.scan(ctx, max(mf.FromOffset(), start), func(at int64, rec []byte, r *record.Record) error {
		unitEnd := at + int64(len(rec))
		if r == nil {
			unitEnd = at + segSize - at%segSize
		}
		if unitEnd == offset {
			found = at
		}
		if unitEnd >= offset {
			return errFound
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFound) {
		return 0, fmt.Errorf("find the unit that ends at %d: %w", offset, err)
	}
	if found < 0 {
		return 0, fmt.Errorf("no unit ends at %d (the valid data ends at %d, or the offset is inside a unit): %w", offset, end.validEnd, ErrInvalidOption)
	}
	return found, nil
}
