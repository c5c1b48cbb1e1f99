package peers

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/mqstore/mqstore/bench/load"
)

// The tuned pebble DB's write path: the options of pebble's own benchmark
// tool (cmd/pebble newPebbleDB) — 64 MiB memtables, four of them before
// writes stop, L0 compactions from 2 files and no L0 write stop below 1000,
// concurrent compactions, columnar blocks with value separation for values
// of 512 bytes and more — with the compaction concurrency capped by the CPUs.
const (
	pebbleMemTableBytes            = 64 << 20
	pebbleMemTableStopWrites       = 4
	pebbleL0CompactionThreshold    = 2
	pebbleL0StopWritesThreshold    = 1000
	pebbleLBaseMaxBytes            = 64 << 20
	pebbleMaxCompactionConcurrency = 3
	pebbleValueSeparationMinBytes  = 512
)

// pebbleOpenKey is written (synced) once at Open: its sequence number tells
// where the benchmark's writes start.
var pebbleOpenKey = []byte("\x00mqpeer-open")

// pebblePeer appends to a pebble DB: each producer owns one Batch, reused
// (Reset, Set, Commit) for a unique key (worker, sequence) per message.
// flush=sync commits with pebble.Sync: the commit pipeline group-commits
// concurrent batches into one WAL fdatasync. flush=async commits with
// pebble.NoSync. Memtable flushes and compactions run as in production:
// they are pebble's cost of being an LSM.
//
// Durable bytes are WAL batch bytes (Batch.Len per message). With Sync a
// message is durable when Commit returns. With NoSync pebble syncs its WAL
// only when it rotates it and its flushes sync sstables and the MANIFEST;
// the API tells neither when a rotated WAL was synced nor its offset, so
// durable counts conservatively the messages a completed memtable flush
// covers (FlushEnd: every sequence number up to the largest it wrote), and
// everything written before a Drain.
type pebblePeer struct {
	positions
	info   Info
	db     *pebble.DB
	sync   bool
	failed stickyError

	// firstSeq is the sequence number of the benchmark's first write.
	firstSeq uint64
	// messageBytes is the batch size of every message (all workers send
	// the same size); 0 until the first NewOp.
	messageBytes atomic.Int64
	// flushedSeq is the largest sequence number a completed flush wrote.
	flushedSeq atomic.Uint64
	// drained is written as of the last completed Drain.
	drained atomic.Int64

	mu      sync.Mutex
	batches []*pebble.Batch
	closed  bool
}

func pebbleOptions(listener *pebble.EventListener) *pebble.Options {
	compactions := min(pebbleMaxCompactionConcurrency, runtime.GOMAXPROCS(0))
	o := &pebble.Options{
		FormatMajorVersion:          pebble.FormatNewest,
		MemTableSize:                pebbleMemTableBytes,
		MemTableStopWritesThreshold: pebbleMemTableStopWrites,
		L0CompactionThreshold:       pebbleL0CompactionThreshold,
		L0StopWritesThreshold:       pebbleL0StopWritesThreshold,
		LBaseMaxBytes:               pebbleLBaseMaxBytes,
		CompactionConcurrencyRange:  func() (int, int) { return 1, compactions },
		Logger:                      quietLogger{},
		EventListener:               listener,
	}
	o.Experimental.EnableColumnarBlocks = func() bool { return true }
	o.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{Enabled: true, MinimumSize: pebbleValueSeparationMinBytes,
			MaxBlobReferenceDepth: 10, RewriteMinimumAge: 5 * time.Minute, TargetGarbageRatio: 1.0}
	}
	o.EnsureDefaults()
	return o
}

// pebbleOptionsMap is pebble's own rendering of its options (the [Options]
// section of an OPTIONS file), every value as pebble will use it.
func pebbleOptionsMap(o *pebble.Options) map[string]string {
	m := map[string]string{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(o.String()))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && section == "[Options]" {
			m[k] = v
		}
	}
	return m
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

func describePebble(sync bool) (Info, error) {
	version, versionErr := moduleVersion(pebbleModule)
	options := pebbleOptionsMap(pebbleOptions(&pebble.EventListener{}))
	options["batches"] = "one Batch per producer, reused: Reset, Set(key, body), Commit"
	options["keys"] = "16 bytes: worker (8, big endian) and its message number (8): unique and increasing per producer"
	options["value_separation"] = fmt.Sprintf("on for values >= %d bytes (blob files), as pebble's benchmark tool", pebbleValueSeparationMinBytes)
	info := Info{Name: Pebble, Flush: flushName(sync), Version: version, Options: options}
	if sync {
		info.Label = "pebble " + version + " DB tuned for appends, Batch.Commit(pebble.Sync)"
		options["writeOptions"] = "pebble.Sync"
		info.Durability = DurabilityInfo{
			Ack:          "after the WAL fdatasync covering the batch (the commit pipeline group-commits concurrent batches) and its memtable insert",
			ProcessCrash: "nothing acknowledged",
			PowerLoss:    "nothing acknowledged",
			Mechanism:    "WAL fdatasync by record.LogWriter's flush loop, group-committed; flushes fsync sstables, blob files and the MANIFEST",
		}
	} else {
		info.Label = "pebble " + version + " DB tuned for appends, Batch.Commit(pebble.NoSync)"
		options["writeOptions"] = "pebble.NoSync"
		info.Durability = DurabilityInfo{
			Ack:          "after the batch is copied into the WAL's in-memory block and inserted in the memtable, before any write(2)",
			ProcessCrash: "the WAL records not yet written to the OS (the current 32 KiB block's tail and unwritten full blocks)",
			PowerLoss: "everything since the last WAL sync: pebble syncs a WAL only when it rotates it (memtable full, " +
				strconv.Itoa(pebbleMemTableBytes>>20) + " MiB) or a Sync write or Flush asks; durable is counted from completed memtable flushes",
			Mechanism: "none per write; the WAL is synced when closed at rotation, flushes fsync sstables and the MANIFEST; Drain is DB.LogData(nil, pebble.Sync)",
		}
	}
	return info, versionErr
}

func openPebble(dir string, info Info) (*pebblePeer, error) {
	p := &pebblePeer{info: info, sync: info.Flush == FlushSync}
	listener := &pebble.EventListener{
		FlushEnd: func(fi pebble.FlushInfo) {
			if fi.Err != nil {
				return
			}
			for _, t := range fi.Output {
				raiseUint(&p.flushedSeq, uint64(t.LargestSeqNum))
			}
		},
		BackgroundError: func(err error) {
			p.failed.set(fmt.Errorf("pebble: background error: %w", err))
		},
	}
	db, err := pebble.Open(dir, pebbleOptions(listener))
	if err != nil {
		return nil, fmt.Errorf("pebble: open %s: %w", dir, err)
	}
	p.db = db
	b := db.NewBatch()
	err = b.Set(pebbleOpenKey, nil, nil)
	if err == nil {
		err = b.Commit(pebble.Sync)
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("pebble: write the open marker: %w", err)
	}
	p.firstSeq = uint64(b.SeqNum()) + 1
	if err := b.Close(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("pebble: close the open marker's batch: %w", err)
	}
	return p, nil
}

func raiseUint(v *atomic.Uint64, n uint64) {
	for {
		cur := v.Load()
		if n <= cur || v.CompareAndSwap(cur, n) {
			return
		}
	}
}

func (p *pebblePeer) Info() Info { return p.info }

func (p *pebblePeer) NewOp(worker, sizeBytes int) load.Op {
	msg := load.Body(worker, sizeBytes)
	key := make([]byte, 16)
	binary.BigEndian.PutUint64(key, uint64(worker))
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return failingOp(fmt.Errorf("pebble: closed"))
	}
	b := p.db.NewBatch()
	p.batches = append(p.batches, b)
	p.mu.Unlock()
	if err := b.Set(key, msg, nil); err != nil {
		return failingOp(fmt.Errorf("pebble: batch: %w", err))
	}
	n := int64(b.Len())
	if !p.messageBytes.CompareAndSwap(0, n) && p.messageBytes.Load() != n {
		return failingOp(fmt.Errorf("pebble: worker %d's messages are %d batch bytes, another worker's %d: every worker must send one size",
			worker, n, p.messageBytes.Load()))
	}
	opts := pebble.NoSync
	if p.sync {
		opts = pebble.Sync
	}
	var seq uint64
	return func(context.Context) error {
		if err := p.failed.get(); err != nil {
			return err
		}
		seq++
		binary.BigEndian.PutUint64(key[8:], seq)
		b.Reset()
		if err := b.Set(key, msg, nil); err != nil {
			return p.failed.set(fmt.Errorf("pebble: batch set: %w", err))
		}
		if err := b.Commit(opts); err != nil {
			return p.failed.set(fmt.Errorf("pebble: commit: %w", err))
		}
		p.written.Add(n)
		if p.sync {
			p.durable.Add(n)
		}
		return nil
	}
}

// Positions implements Durability (see pebblePeer for what NoSync counts).
func (p *pebblePeer) Positions() (writtenBytes, durableBytes int64) {
	if p.sync {
		return p.positions.Positions()
	}
	durableBytes = p.drained.Load()
	if n, flushed := p.messageBytes.Load(), p.flushedSeq.Load(); n > 0 && flushed >= p.firstSeq {
		durableBytes = max(durableBytes, int64(flushed-p.firstSeq+1)*n)
	}
	writtenBytes = p.written.Load()
	return writtenBytes, min(durableBytes, writtenBytes)
}

// Drain syncs the WAL through an empty, synced LogData batch: every batch
// committed before it is then durable.
func (p *pebblePeer) Drain(ctx context.Context) error {
	if err := p.failed.get(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	written := p.written.Load()
	if p.sync {
		return nil // every counted batch was synced before its Commit returned
	}
	if err := p.db.LogData(nil, pebble.Sync); err != nil {
		return p.failed.set(fmt.Errorf("pebble: sync the WAL: %w", err))
	}
	raise(&p.drained, written)
	return nil
}

func (p *pebblePeer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	for _, b := range p.batches {
		_ = b.Close() // a batch whose commit failed is not reusable; Close reports nothing we need
	}
	if err := p.db.Close(); err != nil {
		return fmt.Errorf("pebble: close: %w", err)
	}
	return nil
}
