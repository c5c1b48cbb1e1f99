package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/engine/storefs"
	"github.com/mqstore/mqstore/internal/invariants"
	"github.com/mqstore/mqstore/mappedfile"
)

// Message is what a producer stores; see record.Message. The store sets
// STOREHOSTADDRESS and, when BornTimestamp is 0, the born time.
type Message = record.Message

// Property is a message property.
type Property = record.Property

// PutResult says where a message went.
type PutResult struct {
	Status         PutStatus
	PhysicalOffset int64 // CommitLog offset of the record
	Size           int   // TOTALSIZE
	QueueOffset    int64 // index in its ConsumeQueue
	StoreTimestamp int64 // ms
}

// Store is an open message store. All methods are safe for concurrent use.
type Store struct {
	dir        string
	opts       Options
	backend    mappedfile.Backend
	gate       *dispatchGate      // nil: Puts never wait for dispatch
	aux        mappedfile.Backend // ConsumeQueue and IndexFile files
	fs         storefs.FS         // the directory: lists, removals, syncs, the root's files
	lock       *dirLock
	checkpoint *checkpoint
	log        *commitLog
	logics     *logics
	alloc      *allocator
	pool       *segmentPool // retired CommitLog segments kept for reuse; nil without the allocation service
	// recordCRC: every record appended carries the whole-record checksum
	// (the log's crcFrom is set). Set before the first append, never
	// cleared; read by every Put, so not beside the append lock's line.
	recordCRC bool

	dispatcher    *dispatcher
	logicsFlusher *logicsFlusher
	cleaner       *cleaner
	deleteHours   map[int]bool

	committer *committer
	flusher   interface{ Wakeup() } // asyncFlusher or the group committer
	async     *asyncFlusher
	group     *groupCommit // the group committer (sync flush)

	labels   stageLabels // pprof labels of a Put's stages (Options.ProfileLabels)
	stats    storeStats
	prewrite prewriteDecision // PrewriteAuto's, owned by the allocation service
	writeErr atomic.Pointer[error]
	repl     replication // replicate.go
	epochs   epochCache  // epoch.go

	// closeMu: Put holds it shared, Close exclusively, so Close waits for
	// Puts in flight and no Put starts on a closed store.
	closeMu sync.RWMutex
	closed  bool
	// cleanMu serializes retention passes.
	cleanMu sync.Mutex

	abnormalOpen bool
	// rebuildLogics: the consumequeue or index directory was missing at
	// Open, so recovery scans (and dispatches) the whole log.
	rebuildLogics bool
	// recoveredFrom is the offset Open's recovery scan started at.
	recoveredFrom int64
}

// Open opens the store in dir, creating it when empty. It takes the lock
// file, recovers the CommitLog (scanning with CRC checks and truncating a
// torn tail) and starts the background services.
func Open(ctx context.Context, dir string, opts Options) (*Store, error) {
	s, err := lockStore(dir, opts)
	if err != nil {
		return nil, err
	}
	ok := false
	var params storeParams
	defer func() {
		if !ok {
			if params.isNew {
				s.forgetParams()
			}
			s.abandon()
		}
	}()
	params, err = s.resolveParams()
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if err := s.openFiles(); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if err := s.openCommitLog(ctx, params); err != nil {
		return nil, err
	}
	if err := s.recoverAll(ctx); err != nil {
		return nil, err
	}
	s.startServices()
	ok = true
	return s, nil
}

// lockStore checks and resolves the options (withDefaults), picks the
// directory's file system — the in-memory backend's own, or the OS's —
// creates the directory and takes its lock. The Store it returns holds
// only that; abandon releases it.
func lockStore(dir string, opts Options) (*Store, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	var reg mappedfile.Registration
	if o.BackendImpl == nil {
		// Before anything is created: an unknown backend must not leave
		// a store's skeleton (its parameters file) behind.
		var err error
		if reg, err = lookupBackend(o.Backend); err != nil {
			return nil, fmt.Errorf("open store: %w", backendError(o.Backend, err))
		}
	}
	if o.BackendImpl == nil && reg.Volatile {
		// An in-memory backend would ignore a store on disk there, and
		// acknowledge Puts that vanish with the process.
		if _, err := os.Stat(filepath.Join(dir, paramsFileName)); err == nil {
			return nil, fmt.Errorf("open store: %s holds a store on disk (%s), and backend %s keeps everything in memory: open it with its own backend: %w",
				dir, paramsFileName, o.Backend, ErrConfigMismatch)
		}
		// An in-memory backend is made here, not with the others: the
		// directory's own files (checkpoint, abort, parameters) live in it.
		b, err := newBackend(o)
		if err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
		o.BackendImpl = b
	}
	fsys := storefs.OS()
	if o.BackendImpl != nil {
		fsys = storefs.Of(o.BackendImpl)
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("open store: create %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil { // the lock file is a real file whatever the backend
		return nil, fmt.Errorf("open store: create %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return &Store{dir: dir, lock: lock, fs: fsys, opts: o}, nil
}

// resolveParams merges the store's recorded parameters into the options
// (reconcileParams), validates the result and records a new store's.
func (s *Store) resolveParams() (storeParams, error) {
	params, err := reconcileParams(s.fs, s.dir, &s.opts)
	if err != nil {
		return params, err
	}
	if err := s.opts.validate(); err != nil {
		return params, err
	}
	if params.isNew {
		params.MaxMessageSizeBytes = s.opts.MaxMessageSizeBytes
		if err := writeParams(s.fs, s.dir, params); err != nil {
			return params, err
		}
	}
	return params, nil
}

// forgetParams removes the parameters file this Open wrote for a new store
// when the Open fails after it (a directory that holds something other than
// a store, say): a retry with other options must not be refused against
// parameters no store was ever made with.
func (s *Store) forgetParams() {
	path := filepath.Join(s.dir, paramsFileName)
	if err := s.fs.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.opts.Logger.Warn("a failed Open could not remove the parameters file it wrote", slog.String("path", path), slog.Any("err", err))
	}
}

// openFiles makes the backends and reads the directory's own files: the
// checkpoint and the abort file (there: the last run did not close).
func (s *Store) openFiles() error {
	o := s.opts
	var err error
	if s.deleteHours, err = parseDeleteWhen(o.DeleteWhen); err != nil {
		return err
	}
	if s.backend, err = newBackend(o); err != nil {
		return err
	}
	if s.aux, err = auxBackend(o, s.backend); err != nil {
		return err
	}
	if s.checkpoint, err = loadCheckpoint(s.fs, s.dir); err != nil {
		return err
	}
	if s.abnormalOpen, err = s.fs.Exists(filepath.Join(s.dir, abortFileName)); err != nil {
		return err
	} else if s.abnormalOpen {
		o.Logger.Warn("store was not closed cleanly; recovering", slog.String("dir", s.dir))
	}
	return nil
}

// openCommitLog starts the allocation service, opens the CommitLog's
// segments and, for TruncateCommitLog, cuts it.
func (s *Store) openCommitLog(ctx context.Context, params storeParams) error {
	o := s.opts
	if o.RecycleSegments > 0 && (o.NoPreallocate || s.fs != storefs.OS()) {
		return fmt.Errorf("open store: RecycleSegments needs the allocation service (not NoPreallocate) and a backend whose files are on disk (not %s): %w",
			s.backend.Name(), ErrInvalidOption)
	}
	if err := RecyclingRefusal(s.backend.Name()); o.RecycleSegments > 0 && err != nil {
		return fmt.Errorf("open store: RecycleSegments with the %s backend: %w", s.backend.Name(), err)
	}
	maxRecord := max(o.MaxMessageSizeBytes, params.MaxMessageSizeBytes)
	if s.fs == storefs.OS() {
		// Opened whatever RecycleSegments is: with 0 it removes the pooled
		// files an earlier run left.
		pool, err := openSegmentPool(s.fs, filepath.Join(s.dir, commitLogDirName), o.SegmentSizeBytes, o.RecycleSegments, maxRecord, o.Logger)
		if err != nil {
			return fmt.Errorf("open store: %w", err)
		}
		if o.RecycleSegments > 0 {
			s.pool = pool
		}
	}
	if !o.NoPreallocate {
		s.alloc = newAllocator(s.backend, s.fs, o, s.prewriteNext, s.pool)
	}
	var alloc segment.Allocator
	if s.alloc != nil {
		alloc = s.alloc
	}
	if s.fs == storefs.OS() {
		// Before anything reads or maps a segment: recovery must see past
		// the flushed offset what the device has (dropUnflushedPages).
		if err := dropUnflushedPages(filepath.Join(s.dir, commitLogDirName), o.SegmentSizeBytes, s.checkpoint.flushedOffset.Load()); err != nil {
			return fmt.Errorf("open store: %w", err)
		}
	}
	// Async segments in huge pages (where the backend maps them): written in
	// bulk and synced at intervals, they fault, miss the TLB and write back
	// 512 times less often; mmap async made 160k → 540k msgs/s of 1 KiB
	// RocketMQ messages at 12.3 → 3.1 CPU s/GiB on the reference VM, with
	// its p99.9 under a dirty neighbour unchanged (≥ 22–23 ms against ≥
	// 18–19). Never with sync flush: there each group commit would sync
	// whole 2 MiB folios — and with sync flush in small folios on purpose
	// (SmallFolios), since the kernel's readahead made the appends' pages
	// large folios all the same: mmap sync at 64 producers on fallocated
	// segments made 68k–78k msgs/s that way, 93k–95k in small ones
	// (docs/backends.md). With sync flush a mapping backend also faults in
	// the pages ahead of the appends after each flush (WriteAhead): the
	// flush's msync write-protects what it writes back, and otherwise each
	// append into such a page faults under the append lock.
	queue, err := segment.Open(ctx, segment.Config{Dir: filepath.Join(s.dir, commitLogDirName), Backend: s.backend,
		SegmentSizeBytes: o.SegmentSizeBytes, Allocator: alloc, HugePages: o.FlushMode == FlushAsync, SmallFolios: o.FlushMode == FlushSync,
		WriteAhead: o.FlushMode == FlushSync})
	if errors.Is(err, segment.ErrCorruptDirectory) {
		return fmt.Errorf("open store: commitlog: %w: %w", ErrCorrupt, err)
	}
	if err != nil {
		return fmt.Errorf("open store: commitlog: %w", err)
	}
	crcFrom, err := loadRecordCRCFrom(s.fs, s.dir)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	s.log = &commitLog{queue: queue, segmentSizeBytes: o.SegmentSizeBytes,
		maxRecordBytes: maxRecord, queueOffsets: make(map[queueKey]*queueCounter)}
	s.log.crcFrom.Store(crcFrom)
	s.log.appendMu.parks = o.FlushMode == FlushSync // appendLock says why
	if !o.dispatchFromLog {
		s.log.feed = newDispatchFeed()
	}
	if o.truncateAt != nil { // TruncateCommitLog
		if err := s.cutCommitLog(ctx, o.truncateAt); err != nil {
			return fmt.Errorf("open store %s: %w", s.dir, err)
		}
	}
	return nil
}

// recoverAll opens the ConsumeQueues and the index (rebuilt when their
// directory is missing), recovers the CommitLog and them, and creates the
// abort file a clean Close removes.
func (s *Store) recoverAll(ctx context.Context) error {
	var err error
	if s.rebuildLogics, err = s.logicsMissing(); err != nil {
		return fmt.Errorf("open store %s: %w", s.dir, err)
	}
	if s.logics, err = openLogics(ctx, s); err != nil {
		return fmt.Errorf("open store %s: %w", s.dir, err)
	}
	if err := s.recover(ctx); err != nil {
		return fmt.Errorf("open store %s: recovery: %w", s.dir, err)
	}
	if err := s.startRecycling(); err != nil {
		return err
	}
	if err := storefs.WriteFileAtomic(s.fs, filepath.Join(s.dir, abortFileName), nil); err != nil {
		return fmt.Errorf("open store: create abort file: %w", err)
	}
	return nil
}

func (s *Store) startServices() {
	s.log.shareQueueOffsets()
	s.labels = newStageLabels(s.opts.ProfileLabels)
	s.dispatcher = newDispatcher(s)
	s.gate = newDispatchGate(dispatchLagLimit(s.opts, s.backend), &s.logics.dispatchedOffset)
	s.logicsFlusher = &logicsFlusher{service: newService(), store: s}
	s.committer = &committer{service: newService(), store: s}
	s.cleaner = &cleaner{service: newService(), store: s}
	if s.opts.FlushMode == FlushSync {
		s.group = newGroupCommit(s)
		s.flusher = s.group
		go func() {
			labelService(s.opts.ProfileLabels, StageFlush)
			s.group.run()
		}()
	} else {
		s.async = &asyncFlusher{service: newService(), store: s}
		s.flusher = s.async
		go s.async.run()
	}
	s.startReplication()
	go s.dispatcher.run()
	go s.logicsFlusher.run()
	go s.committer.run()
	go s.cleaner.run()
}

// abandon releases what a failed Open took.
func (s *Store) abandon() {
	if s.logics != nil {
		s.logics.close()
	}
	if s.log != nil {
		s.log.queue.Close()
	}
	if s.alloc != nil {
		s.alloc.Close()
	}
	if c, ok := s.backend.(io.Closer); ok {
		c.Close()
	}
	s.lock.unlock()
}

// ReadMessage reads and validates the record at a CommitLog offset.
func (s *Store) ReadMessage(ctx context.Context, physicalOffset int64) (record.Record, error) {
	if err := ctx.Err(); err != nil {
		return record.Record{}, err
	}
	head := make([]byte, record.BlankSize)
	if err := s.log.readAt(head, physicalOffset); err != nil {
		return record.Record{}, err
	}
	kind, total, err := record.Peek(head, physicalOffset, s.log.maxRecordBytes)
	if err != nil {
		return record.Record{}, fmt.Errorf("read message at %d: %w", physicalOffset, err)
	}
	if kind != record.KindRecord {
		return record.Record{}, fmt.Errorf("read message at %d: a %v, not a record: %w", physicalOffset, kind, ErrNotFound)
	}
	buf := make([]byte, total)
	if err := s.log.readAt(buf, physicalOffset); err != nil {
		return record.Record{}, err
	}
	r, err := record.Decode(buf, physicalOffset, true)
	if err == nil {
		err = checkStoredOffset(&r, physicalOffset)
	}
	if err != nil {
		return record.Record{}, fmt.Errorf("read message at %d: %w", physicalOffset, err)
	}
	return r, nil
}

// checkStoredOffset refuses a record whose PHYSICALOFFSET is not where it
// was read: an older segment's record in a reused file (RecycleSegments),
// or a pointer that missed.
func checkStoredOffset(r *record.Record, at int64) error {
	if r.PhysicalOffset != at {
		return &record.DecodeError{Offset: at, Field: "PHYSICALOFFSET",
			Reason: fmt.Sprintf("says %d, the record is at %d", r.PhysicalOffset, at), Err: record.ErrCorrupt}
	}
	return nil
}

// Scan calls fn for every valid record from the CommitLog offset from (a
// record boundary; MinOffset for all) to the readable end, in order, and for
// every end-of-segment blank with r == nil. rec is the raw record (or the
// 8-byte blank), valid for the call. It returns the offset where it
// stopped, and an error wrapping ErrCorrupt when it stopped at a bad record.
func (s *Store) Scan(ctx context.Context, from int64, fn func(offset int64, rec []byte, r *record.Record) error) (int64, error) {
	end, err := s.log.scan(ctx, from, fn)
	if err != nil {
		return end.validEnd, err
	}
	if end.corrupt != nil {
		return end.validEnd, fmt.Errorf("%w: %w", ErrCorrupt, end.corrupt)
	}
	return end.validEnd, nil
}

// MinOffset is the first CommitLog offset still stored.
func (s *Store) MinOffset() int64 { return max(s.log.queue.MinOffset(), 0) }

// MaxOffset is the CommitLog offset readers can read up to.
func (s *Store) MaxOffset() int64 { return s.log.queue.ReadableOffset() }

// FlushedOffset is the CommitLog offset known durable.
func (s *Store) FlushedOffset() int64 { return s.log.flushedOffset.Load() }

// Dir returns the store directory.
func (s *Store) Dir() string { return s.dir }

// Options returns the effective options.
func (s *Store) Options() Options { return s.opts }

// RecoveredFrom is the CommitLog offset Open's recovery scan started at:
// MaxOffset − RecoveredFrom bytes were read and CRC-checked.
func (s *Store) RecoveredFrom() int64 { return s.recoveredFrom }

// RecoveredAfterCrash reports whether Open found the abort file.
func (s *Store) RecoveredAfterCrash() bool { return s.abnormalOpen }

// Stats returns a snapshot of the store's counters.
func (s *Store) Stats() Stats {
	putLatency := s.stats.putLatency.summary()
	st := Stats{
		Backend: s.backend.Name(), FlushMode: s.opts.FlushMode.String(),
		Puts: putLatency.Count, PutBytes: s.stats.putBytes.Load(), PutFailures: s.stats.putFailures.Load(),
		PutLatency: putLatency, FlushDiskTimeouts: s.stats.flushDiskTimeouts.Load(),
		OSPageCacheBusy: s.stats.osPageCacheBusy.Load(), Rolls: s.stats.rolls.Load(),
		Flushes: s.stats.flushes.Load(), FlushLatency: s.stats.flushLatency.summary(),
		Commits: s.stats.commits.Load(), CommitLatency: s.stats.commitLatency.summary(),
		MinOffset: s.MinOffset(), WroteOffset: s.log.queue.WroteOffset(),
		CommittedOffset: s.log.committedOffset.Load(), FlushedOffset: s.log.flushedOffset.Load(),
		Segments: s.log.queue.Len(), Gets: s.stats.gets.Load(), GotMessages: s.stats.gotMessages.Load(),
		DispatchedOffset: s.logics.dispatchedOffset.Load(),
		DispatchFed:      s.stats.dispatchFed.Load(), DispatchRead: s.stats.dispatchRead.Load(),
	}
	st.BytesBehindFlush = st.WroteOffset - st.FlushedOffset
	if a := s.alloc; a != nil {
		st.SegmentsPrewritten, st.SegmentsFallocated = a.prewritten.Load(), a.fallocated.Load()
		st.ZerosByDevice, st.ZerosDirect, st.ZerosCached = a.zeros[0].Load(), a.zeros[1].Load(), a.zeros[2].Load()
	}
	if p := s.pool; p != nil {
		st.SegmentsRecycled, st.SegmentsRetired, st.SegmentsPooled = p.recycled.Load(), p.retired.Load(), p.len()
	}
	if g := s.gate; g != nil {
		st.DispatchLagLimit, st.DispatchWaits, st.DispatchWaitNs = g.limit, g.waits.Load(), g.waitedNs.Load()
	}
	if r, ok := s.backend.(mappedfile.LockReporter); ok {
		st.LockedBytes = r.LockedBytes()
	}
	if r, ok := s.aux.(mappedfile.LockReporter); ok && s.aux != s.backend {
		st.LockedBytes += r.LockedBytes()
	}
	st.PagesLocked = st.LockedBytes / mappedfile.PageSize
	if p := s.writeErr.Load(); p != nil {
		st.WriteError = (*p).Error()
	}
	if p := s.logics.dispatchErr.Load(); p != nil {
		st.DispatchError = (*p).Error()
	}
	return st
}

// Close stops the services, flushes everything, writes the checkpoint,
// removes the abort file and releases the lock. When anything failed — the
// final flush or dispatch, a write or dispatch error earlier — it returns
// that error and leaves the abort file, so the next Open recovers.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return ErrClosed
	}
	s.closed = true
	s.closeMu.Unlock()
	s.stopWriters()
	ctx := context.Background()
	flushErr := s.finalFlush(ctx)
	errs := []error{flushErr}
	errs = append(errs, s.finalDispatch(ctx)...)
	errs = append(errs, s.closeFiles()...)
	if p := s.writeErr.Load(); p != nil && flushErr == nil {
		errs = append(errs, fmt.Errorf("writes stopped earlier: %w", *p))
	}
	if p := s.logics.dispatchErr.Load(); p != nil {
		errs = append(errs, fmt.Errorf("dispatch stopped earlier: %w", *p))
	}
	if errors.Join(errs...) == nil {
		// Only a clean close — everything flushed, dispatched and its
		// checkpoint written — removes the abort file. Otherwise the next
		// Open recovers: it re-dispatches what the queues and index lack.
		if err := storefs.RemoveDurably(s.fs, filepath.Join(s.dir, abortFileName)); err != nil {
			errs = append(errs, fmt.Errorf("remove the abort file: %w", err))
		}
	}
	if err := s.lock.unlock(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// stopWriters stops what moves the CommitLog: replication, retention, the
// commit service and the flusher (async or group commit). Dispatch and
// the logics flusher go on until the final flush is dispatched.
func (s *Store) stopWriters() {
	s.logics.wakeAll()
	s.stopReplication()
	s.cleaner.shutdown()
	s.committer.shutdown()
	if s.group != nil {
		s.group.shutdown()
	} else {
		s.async.shutdown()
	}
}

// finalFlush commits and flushes everything and records it in the
// checkpoint (written by finalDispatch's logics flush).
func (s *Store) finalFlush(ctx context.Context) error {
	flushed, err := s.log.flush(ctx, 0, true)
	if err != nil {
		return fmt.Errorf("final flush: %w", err)
	}
	s.checkpoint.setPhysic(s.log.lastStoreTimestamp.Load())
	// The checkpoint written below must know all of it durable: a bad
	// record before this offset is then corruption, never a torn tail.
	raise(&s.checkpoint.flushedOffset, flushed)
	// The services are stopped: nothing moves. A store whose writes stopped
	// after an I/O error (a cut cut short by a crash, say) may hold offsets
	// its files no longer back; the next Open repairs them.
	if invariants.Enabled && s.writeErr.Load() == nil {
		invariants.Ordered3("flushed ≤ committed ≤ written at close", s.log.flushedOffset.Load(),
			s.log.committedOffset.Load(), s.log.queue.WroteOffset())
		invariants.Equal("the final flush reaches the flushed offset", flushed, s.log.flushedOffset.Load())
	}
	return nil
}

// finalDispatch dispatches what the final commit made readable, then
// flushes the logics (which writes the checkpoint) and closes them.
func (s *Store) finalDispatch(ctx context.Context) []error {
	var errs []error
	s.dispatcher.shutdown()
	if err := s.dispatcher.dispatchAvailable(ctx); err != nil {
		errs = append(errs, fmt.Errorf("final dispatch: %w", err))
	}
	s.logicsFlusher.shutdown()
	if err := s.flushLogics(ctx, 0); err != nil {
		errs = append(errs, fmt.Errorf("final consume queue flush: %w", err))
	}
	if err := s.logics.close(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// closeFiles closes the allocation service, the CommitLog's segments and
// the backend.
func (s *Store) closeFiles() []error {
	var errs []error
	if s.alloc != nil {
		if err := s.alloc.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.log.queue.Close(); err != nil {
		errs = append(errs, err)
	}
	if c, ok := s.backend.(io.Closer); ok {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
