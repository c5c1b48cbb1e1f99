package peers

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/mqstore/mqstore/bench/load"
)

// pebbleWALFileNum is the log's file number: the LogWriter stamps its low 32
// bits into every chunk, and a reader must be given the same number.
const pebbleWALFileNum = 1

// pebbleWALRecycledFileNum is the log number of the window's log on a
// recycled file (WithRecycledWAL): the log pebbleWALFileNum, filled and
// closed before the window, is reused as the next log, as pebble's WAL
// manager gives a new WAL a higher file number and, when its recycler holds
// an obsolete WAL, that WAL's file.
const pebbleWALRecycledFileNum = pebbleWALFileNum + 1

// PebbleWALFile is the name of pebble-wal's log in its directory (pebble's
// WAL naming: the file number, six digits, ".log"); on a recycled file, the
// obsolete log's name before it is reused.
var PebbleWALFile = pebbleWALName(pebbleWALFileNum)

// PebbleWALRecycledFile is the name of the window's log on a recycled file:
// PebbleWALFile renamed.
var PebbleWALRecycledFile = pebbleWALName(pebbleWALRecycledFileNum)

func pebbleWALName(logNum uint64) string { return fmt.Sprintf("%06d.log", logNum) }

// The obsolete log a recycled WAL reuses is filled with records of
// pebbleWALAgingRecordBytes, one synced (SyncRecord, waited for) every
// pebbleWALAgingSyncBytes — what it holds does not matter to the window
// that writes over it, only that its extents are written and on the device
// — and closed, which syncs it.
const (
	pebbleWALAgingRecordBytes = 64 << 10
	pebbleWALAgingSyncBytes   = 16 << 20
)

// pebbleWALPreallocateBytes is how far ahead the log file is fallocated:
// pebble's DB preallocates each WAL by 110 % of its memtable size
// (DB.walPreallocateSize); the tuned pebble peer's memtable is
// pebbleMemTableBytes.
const pebbleWALPreallocateBytes = pebbleMemTableBytes + pebbleMemTableBytes/10

// pebbleWALPeer is pebble's WAL alone: a record.LogWriter on a preallocated
// file, as pebble's commit pipeline drives it.
//
// Sync: a producer reserves a slot of the LogWriter's sync queue
// (syncSlots, pebble's commitPipeline.logSyncQSem), takes mu (pebble's
// commitPipeline.mu: the LogWriter needs its callers serialised), calls
// SyncRecord with its own WaitGroup, releases mu and only then waits. The
// LogWriter's flush loop takes every waiter queued so far before it reads
// the block's write position, writes, syncs once and releases them all: the
// group commit. The slot is given back by the flush loop.
//
// Async: WriteRecord (SyncRecord without a WaitGroup) under mu; nothing
// syncs until Drain or Close.
type pebbleWALPeer struct {
	positions
	info      Info
	sync      bool
	path      string
	writer    *record.LogWriter
	syncSlots chan struct{}
	failed    stickyError
	// syncs counts the log's fdatasyncs (records per sync shows the group
	// commit).
	syncs atomic.Int64
	// logNum is the log's number in its chunk headers (a reader's).
	logNum uint64

	mu     sync.Mutex // serialises the LogWriter's record calls and Close
	closed bool
}

func describePebbleWAL(sync bool, recycledBytes int64) (Info, error) {
	version, versionErr := moduleVersion(pebbleModule)
	info := Info{Name: PebbleWAL, Flush: flushName(sync), Version: version, Options: map[string]string{
		"writer":           "record.LogWriter (pebble's WAL writer), one record per message: the message body",
		"file":             PebbleWALFile + ", a new file (no WAL recycling), directory synced after create, vfs.NewSyncingFile",
		"preallocateBytes": strconv.Itoa(pebbleWALPreallocateBytes) + " (fallocate KEEP_SIZE ahead of the write offset, 110% of the pebble peer's memtable, as pebble's DB does)",
		"bytesPerSync":     "0 (pebble's WALBytesPerSync default: no background sync_file_range)",
		"walSyncChunks":    "true (the chunk format pebble writes from FormatWALSyncChunks, which FormatNewest includes)",
		"minSyncInterval":  "0 (none)",
		"syncCall":         "fdatasync (vfs syncingFile.Sync → File.SyncData)",
	}}
	on := ""
	if recycledBytes > 0 {
		on = fmt.Sprintf(" on a recycled WAL file (log %d)", pebbleWALRecycledFileNum)
		info.Options["file"] = fmt.Sprintf("%s, a recycled WAL file, as pebble's WAL manager reuses an obsolete log: %s filled beforehand "+
			"by this peer's writer to at least %d bytes (log number %d, %d KiB records, one synced every %d MiB; closed: EOF trailer, fdatasync), "+
			"renamed to %s by vfs.ReuseForWrite (no truncation), directory synced, then written over from offset 0 "+
			"in the recyclable chunk format with synced offsets (walSyncChunks: every chunk header carries log number %d, "+
			"so a reader stops at the old log's chunks past the new log's end); vfs.NewSyncingFile",
			PebbleWALRecycledFile, PebbleWALFile, recycledBytes, pebbleWALFileNum, pebbleWALAgingRecordBytes>>10,
			pebbleWALAgingSyncBytes>>20, PebbleWALRecycledFile, pebbleWALRecycledFileNum)
		info.Options[load.RecycledLogOption] = fmt.Sprintf("%d bytes requested: log %d written, synced and closed, "+
			"its file reused as log %d and written over (not timed, not in the positions or the result)",
			recycledBytes, pebbleWALFileNum, pebbleWALRecycledFileNum)
	}
	if sync {
		info.Label = "pebble " + version + " record.LogWriter" + on + ", group-committed SyncRecord"
		info.Options["commit"] = "SyncRecord under a mutex, the wait outside it; a sync-queue slot reserved first " +
			"(" + strconv.Itoa(record.SyncConcurrency) + " slots, pebble's commit pipeline); the flush loop syncs once for every queued waiter"
		info.Durability = DurabilityInfo{
			Ack:          "after the fdatasync that covers the record (one fdatasync for every record queued before the flush loop picked up its waiters)",
			ProcessCrash: "nothing acknowledged",
			PowerLoss:    "nothing acknowledged",
			Mechanism:    "fdatasync of the log by the LogWriter's flush loop, group-committed",
		}
	} else {
		info.Label = "pebble " + version + " record.LogWriter" + on + ", WriteRecord without sync"
		info.Options["commit"] = "WriteRecord under a mutex (no WaitGroup: no sync requested)"
		info.Durability = DurabilityInfo{
			Ack:          "when the record is copied into the LogWriter's in-memory block, before any write(2)",
			ProcessCrash: "the records not yet written to the OS: the current 32 KiB block's tail and any full block the flush loop has not written",
			PowerLoss:    "every record since open: nothing syncs during the run (the kernel's writeback may persist some, without a guarantee)",
			Mechanism:    "none during the run; Drain appends an empty record with SyncRecord and waits for its fdatasync; Close syncs",
		}
	}
	return info, versionErr
}

func flushName(sync bool) string {
	if sync {
		return FlushSync
	}
	return FlushAsync
}

// openPebbleWAL opens pebble-wal in dir: on a new log file, or with
// recycledBytes > 0 on a recycled one (agePebbleWAL makes the obsolete log,
// which is then reused as pebble's WAL manager does it).
func openPebbleWAL(ctx context.Context, dir string, info Info, recycledBytes int64) (*pebbleWALPeer, error) {
	fs := vfs.Default
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pebble-wal: %w", err)
	}
	p := &pebbleWALPeer{info: info, sync: info.Flush == FlushSync, path: filepath.Join(dir, PebbleWALFile),
		logNum: pebbleWALFileNum, syncSlots: make(chan struct{}, record.SyncConcurrency)}
	var f vfs.File
	var err error
	if recycledBytes > 0 {
		obsolete, err := agePebbleWAL(ctx, fs, dir, recycledBytes)
		if err != nil {
			return nil, fmt.Errorf("pebble-wal: recycled WAL: %w", err)
		}
		p.path, p.logNum = filepath.Join(dir, PebbleWALRecycledFile), pebbleWALRecycledFileNum
		if f, err = reusePebbleWAL(fs, obsolete, p.path, recycledBytes); err != nil {
			return nil, fmt.Errorf("pebble-wal: recycled WAL: %w", err)
		}
	} else if f, err = fs.Create(p.path, vfs.WriteCategoryUnspecified); err != nil {
		return nil, fmt.Errorf("pebble-wal: create %s: %w", p.path, err)
	}
	if err := syncDir(fs, dir); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("pebble-wal: %w", err)
	}
	file := countingSyncs{File: vfs.NewSyncingFile(f, vfs.SyncingFileOptions{PreallocateSize: pebbleWALPreallocateBytes}),
		syncs: &p.syncs}
	p.writer = newPebbleWALWriter(file, p.logNum, p.syncSlots)
	return p, nil
}

// newPebbleWALWriter is the peer's LogWriter on file, stamping logNum in
// its chunks: pebble's WAL writer as its WAL manager configures it at
// FormatNewest (WAL sync chunks), with the commit pipeline's sync queue.
func newPebbleWALWriter(file vfs.File, logNum uint64, syncSlots chan struct{}) *record.LogWriter {
	return withLogNum(record.NewLogWriter, file, logNum, record.LogWriterConfig{
		QueueSemChan:        syncSlots,
		WriteWALSyncOffsets: func() bool { return true },
	})
}

// withLogNum calls newLogWriter with logNum as its file-number type (an
// internal pebble type, named here only through the function's signature).
func withLogNum[N ~uint64](newLogWriter func(io.Writer, N, record.LogWriterConfig) *record.LogWriter,
	w io.Writer, logNum uint64, cfg record.LogWriterConfig) *record.LogWriter {
	return newLogWriter(w, N(logNum), cfg)
}

// agePebbleWAL makes the obsolete WAL a recycled log reuses, as a running
// pebble leaves one: a new log file (PebbleWALFile, log number
// pebbleWALFileNum, the directory synced) filled by the peer's own writer
// with records until it holds at least bytes, one record in every
// pebbleWALAgingSyncBytes synced, then closed (LogWriter.Close: the EOF
// trailer, a final fdatasync). It returns the file's path.
func agePebbleWAL(ctx context.Context, fs vfs.FS, dir string, bytes int64) (string, error) {
	aging := &pebbleWALPeer{sync: true, path: filepath.Join(dir, PebbleWALFile), logNum: pebbleWALFileNum,
		syncSlots: make(chan struct{}, record.SyncConcurrency)}
	f, err := fs.Create(aging.path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return "", fmt.Errorf("create %s: %w", aging.path, err)
	}
	if err := syncDir(fs, dir); err != nil {
		_ = f.Close()
		return "", err
	}
	aging.writer = newPebbleWALWriter(vfs.NewSyncingFile(f, vfs.SyncingFileOptions{PreallocateSize: pebbleWALPreallocateBytes}),
		aging.logNum, aging.syncSlots)
	body := load.Body(0, pebbleWALAgingRecordBytes)
	var done sync.WaitGroup
	var syncErr error
	for end, synced := int64(0), int64(0); end < bytes; {
		if err := ctx.Err(); err != nil {
			_ = aging.Close()
			return "", fmt.Errorf("fill %s: %w", aging.path, err)
		}
		if end-synced < pebbleWALAgingSyncBytes {
			aging.mu.Lock()
			err = aging.writeLocked(body)
			aging.mu.Unlock()
			end = aging.written.Load()
		} else {
			end, err = aging.syncRecord(ctx, body, &done, &syncErr)
			synced = end
		}
		if err != nil {
			_ = aging.Close()
			return "", fmt.Errorf("fill %s to %d bytes: %w", aging.path, bytes, err)
		}
	}
	if err := aging.Close(); err != nil {
		return "", fmt.Errorf("fill %s to %d bytes: %w", aging.path, bytes, err)
	}
	return aging.path, nil
}

// reusePebbleWAL reuses the obsolete log at oldPath as the new log newPath
// as pebble's WAL manager does (wal.StandaloneManager.Create): ReuseForWrite
// renames it and opens it for writing without truncating it; the manager
// then learns the file's size from Stat, since ReuseForWrite may create a
// new file instead — here that is an error, the file must hold at least
// bytes. The caller syncs the directory.
func reusePebbleWAL(fs vfs.FS, oldPath, newPath string, bytes int64) (vfs.File, error) {
	f, err := fs.ReuseForWrite(oldPath, newPath, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("reuse %s as %s: %w", oldPath, newPath, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("stat %s: %w", newPath, err)
	}
	if fi.Size() < bytes {
		_ = f.Close()
		return nil, fmt.Errorf("%s holds %d bytes after ReuseForWrite, want the obsolete log's %d or more: the file was not reused", newPath, fi.Size(), bytes)
	}
	return f, nil
}

// countingSyncs counts a file's successful Syncs.
type countingSyncs struct {
	vfs.File
	syncs *atomic.Int64
}

func (f countingSyncs) Sync() error {
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.syncs.Add(1)
	return nil
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("close directory %s: %w", dir, err)
	}
	return nil
}

func (p *pebbleWALPeer) Info() Info { return p.info }

func (p *pebbleWALPeer) NewOp(worker, sizeBytes int) load.Op {
	msg := load.Body(worker, sizeBytes)
	if !p.sync {
		return func(context.Context) error {
			if err := p.failed.get(); err != nil {
				return err
			}
			p.mu.Lock()
			err := p.writeLocked(msg)
			p.mu.Unlock()
			if err != nil {
				return p.failed.set(fmt.Errorf("pebble-wal: write record: %w", err))
			}
			return nil
		}
	}
	var done sync.WaitGroup
	var syncErr error
	return func(ctx context.Context) error {
		if err := p.failed.get(); err != nil {
			return err
		}
		end, err := p.syncRecord(ctx, msg, &done, &syncErr)
		if err != nil {
			return err
		}
		raise(&p.durable, end)
		return nil
	}
}

// writeLocked appends msg without a sync. p.mu is held: offsets grow under
// it, so written is stored here.
func (p *pebbleWALPeer) writeLocked(msg []byte) error {
	if p.closed {
		return os.ErrClosed
	}
	end, err := p.writer.WriteRecord(msg)
	if err != nil {
		return err
	}
	p.written.Store(end)
	return nil
}

// syncRecord appends msg with a sync request and waits for the sync: the
// commit pipeline's order (slot, mutex, SyncRecord, unlock, wait). It
// returns the log offset just past msg, durable when it returns nil.
func (p *pebbleWALPeer) syncRecord(ctx context.Context, msg []byte, done *sync.WaitGroup, syncErr *error) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	select {
	case p.syncSlots <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	*syncErr = nil
	done.Add(1)
	p.mu.Lock()
	var end int64
	var err error
	if p.closed {
		err = os.ErrClosed
	} else {
		end, err = p.writer.SyncRecord(msg, done, syncErr)
	}
	if err == nil {
		p.written.Store(end) // offsets grow under p.mu
	}
	p.mu.Unlock()
	if err != nil {
		// Not queued: the flush loop will neither release the slot nor
		// the WaitGroup.
		done.Done()
		<-p.syncSlots
		return 0, p.failed.set(fmt.Errorf("pebble-wal: sync record: %w", err))
	}
	done.Wait()
	if *syncErr != nil {
		return 0, p.failed.set(fmt.Errorf("pebble-wal: sync: %w", *syncErr))
	}
	return end, nil
}

// Drain appends an empty record with a sync (the LogWriter has no other
// sync call but Close; pebble's DB.LogData(nil, Sync) does the same) and
// waits for it: every record before it is then durable.
func (p *pebbleWALPeer) Drain(ctx context.Context) error {
	if err := p.failed.get(); err != nil {
		return err
	}
	if written, durable := p.Positions(); written == durable {
		return nil
	}
	var done sync.WaitGroup
	var syncErr error
	end, err := p.syncRecord(ctx, nil, &done, &syncErr)
	if err != nil {
		return err
	}
	raise(&p.durable, end)
	return nil
}

// Close flushes, syncs and closes the log (LogWriter.Close).
func (p *pebbleWALPeer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	written := p.written.Load()
	if err := p.writer.Close(); err != nil {
		return p.failed.set(fmt.Errorf("pebble-wal: close %s: %w", p.path, err))
	}
	raise(&p.durable, written)
	return nil
}
