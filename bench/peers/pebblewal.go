package peers

import (
	"context"
	"fmt"
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

// PebbleWALFile is the name of pebble-wal's log in its directory (pebble's
// WAL naming: the file number, six digits, ".log").
var PebbleWALFile = fmt.Sprintf("%06d.log", pebbleWALFileNum)

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

	mu     sync.Mutex // serialises the LogWriter's record calls and Close
	closed bool
}

func describePebbleWAL(sync bool) (Info, error) {
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
	if sync {
		info.Label = "pebble " + version + " record.LogWriter, group-committed SyncRecord"
		info.Options["commit"] = "SyncRecord under a mutex, the wait outside it; a sync-queue slot reserved first " +
			"(" + strconv.Itoa(record.SyncConcurrency) + " slots, pebble's commit pipeline); the flush loop syncs once for every queued waiter"
		info.Durability = DurabilityInfo{
			Ack:          "after the fdatasync that covers the record (one fdatasync for every record queued before the flush loop picked up its waiters)",
			ProcessCrash: "nothing acknowledged",
			PowerLoss:    "nothing acknowledged",
			Mechanism:    "fdatasync of the log by the LogWriter's flush loop, group-committed",
		}
	} else {
		info.Label = "pebble " + version + " record.LogWriter, WriteRecord without sync"
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

func openPebbleWAL(dir string, info Info) (*pebbleWALPeer, error) {
	fs := vfs.Default
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pebble-wal: %w", err)
	}
	path := filepath.Join(dir, PebbleWALFile)
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("pebble-wal: create %s: %w", path, err)
	}
	if err := syncDir(fs, dir); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("pebble-wal: %w", err)
	}
	p := &pebbleWALPeer{info: info, sync: info.Flush == FlushSync, path: path,
		syncSlots: make(chan struct{}, record.SyncConcurrency)}
	file := countingSyncs{File: vfs.NewSyncingFile(f, vfs.SyncingFileOptions{PreallocateSize: pebbleWALPreallocateBytes}),
		syncs: &p.syncs}
	p.writer = record.NewLogWriter(file, pebbleWALFileNum, record.LogWriterConfig{
		QueueSemChan:        p.syncSlots,
		WriteWALSyncOffsets: func() bool { return true },
	})
	return p, nil
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
