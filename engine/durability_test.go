package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mmapio"
)

// Tests of the engine's durability rules: what a crash, a full disk or a failing
// service must not do to the data.

// gate blocks whoever waits on it until it is opened; opening twice is safe.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate  { return &gate{ch: make(chan struct{})} }
func (g *gate) wait() { <-g.ch }
func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// within runs fn and fails the test when it does not return in 10 s (a
// deadlock: the operation waits for something that waits for the test).
func within(t *testing.T, what string, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return in 10 s", what)
	}
}

// TestRecoverySyncsWhatTheDeadProcessLeft (item 1): a process dies with
// records in the page cache that no flush synced, across a roll; the
// restarted store claims them durable (its flushed offset, the next
// checkpoint), so recovery must sync them: a power loss right after must
// not lose them, nor the ConsumeQueue units and index entries the
// checkpoint then claims.
func TestRecoverySyncsWhatTheDeadProcessLeft(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	h := newHooked(fs)
	o := smallLogicsOptions(Options{BackendImpl: h, FlushMode: FlushAsync})
	dir := t.TempDir()
	s := openStore(t, dir, o)
	// The flusher never gets through: nothing of the CommitLog is synced.
	noFlush := newGate()
	h.set(on("flush", commitLogDirName, func(string) error { noFlush.wait(); return nil }))
	res := putN(t, s, "R", 2, 300, 500, nil) // several segments, dispatched
	if segs := s.log.queue.Len(); segs < 3 {
		t.Fatalf("%d segments: the test needs rolls", segs)
	}
	fs.Kill()
	noFlush.open()
	h.set(nil)
	reopenAfter(s, fs)
	s = openStore(t, dir, o)
	last := res[len(res)-1]
	if end := last.PhysicalOffset + int64(last.Size); s.FlushedOffset() < end {
		t.Fatalf("after the kill the store claims %d durable, the records end at %d", s.FlushedOffset(), end)
	}
	if err := s.flushLogics(ctx, 0); err != nil { // the checkpoint claims the queues and the index too
		t.Fatal(err)
	}
	fs.Crash(mappedfile.TornNone, nil)
	reopenAfter(s, fs)
	s = openStore(t, dir, o)
	defer s.Close()
	rep, err := s.Verify(ctx)
	if err != nil || len(rep.Problems) != 0 || rep.Records != int64(len(res)) {
		t.Fatalf("after kill, restart and power loss: %v, %d records of %d, problems %v", err, rep.Records, len(res), rep.Problems)
	}
	for i, r := range res {
		got, err := s.Get(ctx, "g", "R", int32(i%2), r.QueueOffset, 1, nil)
		if err != nil || got.Status != Found || got.Messages[0].PhysicalOffset != r.PhysicalOffset {
			t.Fatalf("message %d: %v %v", i, got.Status, err)
		}
		got.Release()
	}
}

// TestRetentionWhenDiskFull (item 2): above the disk ratio, retention
// deletes at most maxDeletesPerPass segments a pass, never one not yet
// flushed or not yet dispatched, and never stops the store: Puts with sync
// flush running meanwhile all succeed.
func TestRetentionWhenDiskFull(t *testing.T) {
	ctx := context.Background()
	h := newHooked(mappedfile.NewMemFS(mappedfile.MemOptions{}))
	o := smallLogicsOptions(Options{BackendImpl: h, FlushMode: FlushAsync, FlushLeastPages: 1000,
		FlushInterval: time.Hour, FlushThoroughInterval: time.Hour, CleanInterval: time.Hour, DeleteWhen: "3"})
	o.SegmentSizeBytes = 16 << 10
	o.now = func() time.Time { return time.Date(2026, 1, 1, 12, 0, 0, 0, time.Local) } // not a DeleteWhen hour
	o.diskUsed = func(string) (float64, error) { return 90, nil }
	o.DeleteWhen = "25"
	if _, err := Open(ctx, t.TempDir(), o); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("DeleteWhen 25: %v", err)
	}
	o.DeleteWhen = "3"
	s := openStore(t, t.TempDir(), o)
	defer s.Close()
	noFlush, noDispatch := newGate(), newGate()
	defer noFlush.open()
	defer noDispatch.open()
	h.set(func(op, path string) error {
		switch {
		case op == "flush" && strings.Contains(path, commitLogDirName):
			noFlush.wait()
		case op == "open" && strings.Contains(path, consumeQueueDirName):
			noDispatch.wait()
		}
		return nil
	})
	var last PutResult
	for i := 0; i < 500; i++ {
		var err error
		if last, err = s.Put(ctx, testMessage("D", int32(i%2), i, 900)); err != nil {
			t.Fatal(err)
		}
	}
	segs := s.log.queue.Len()
	if segs < 2*maxDeletesPerPass+2 {
		t.Fatalf("%d segments: the test needs more than two passes' worth", segs)
	}
	clean := func() int {
		t.Helper()
		var n int
		within(t, "a retention pass", func() (err error) {
			n, err = s.CleanExpired(ctx)
			return err
		})
		return n
	}
	if n := clean(); n != 0 {
		t.Fatalf("retention deleted %d segments nothing had flushed or dispatched", n)
	}
	noFlush.open()
	within(t, "a full flush", func() error { _, err := s.flushOnce(ctx, 0, false); return err })
	if n := clean(); n != 0 {
		t.Fatalf("retention deleted %d flushed segments dispatch had not read", n)
	}
	noDispatch.open()
	if err := s.WaitDispatched(ctx, last.PhysicalOffset+int64(last.Size)); err != nil {
		t.Fatal(err)
	}
	// Producers with sync flush run through the passes.
	var wg sync.WaitGroup
	putErr := make(chan error, 1)
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		so := s
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := so.Put(ctx, testMessage("P", 0, i, 200)); err != nil {
				putErr <- err
				return
			}
			if _, err := so.flushOnce(ctx, 0, false); err != nil {
				putErr <- err
				return
			}
		}
	}()
	total := 0
	for pass := 0; pass < 10; pass++ {
		n := clean()
		if n > maxDeletesPerPass {
			t.Fatalf("pass %d deleted %d segments, at most %d a pass", pass, n, maxDeletesPerPass)
		}
		total += n
		if n == 0 {
			break
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-putErr:
		t.Fatalf("a Put or flush failed while retention ran: %v", err)
	default:
	}
	if total < segs-1 {
		t.Fatalf("retention deleted %d of %d segments over its passes", total, segs)
	}
	if st := s.Stats(); st.WriteError != "" || st.DispatchError != "" {
		t.Fatalf("the store stopped: %q %q", st.WriteError, st.DispatchError)
	}
	if err := verifyClean(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// TestRetentionDoesNotBlockPutsAndGets (item 2): the unlink (and munmap) of
// a deleted segment happens outside the segment queue's lock.
func TestRetentionDoesNotBlockPutsAndGets(t *testing.T) {
	ctx := context.Background()
	h := newHooked(mappedfile.NewMemFS(mappedfile.MemOptions{}))
	o := smallLogicsOptions(Options{BackendImpl: h, CleanInterval: time.Hour})
	o.diskUsed = func(string) (float64, error) { return 90, nil }
	s := openStore(t, t.TempDir(), o)
	defer s.Close()
	putN(t, s, "B", 1, 500, 300, nil)
	if _, err := s.flushOnce(ctx, 0, false); err != nil {
		t.Fatal(err)
	}
	inDelete, release := newGate(), newGate()
	defer release.open()
	h.set(on("delete", commitLogDirName, func(string) error { inDelete.open(); release.wait(); return nil }))
	cleaned := make(chan error, 1)
	go func() { _, err := s.CleanExpired(ctx); cleaned <- err }()
	inDelete.wait()
	within(t, "a Put while a segment is being deleted", func() error {
		_, err := s.Put(ctx, testMessage("B", 0, 1000, 300))
		return err
	})
	within(t, "a Get while a segment is being deleted", func() error {
		res, err := s.Get(ctx, "g", "B", 0, 499, 1, nil)
		if err == nil {
			res.Release()
		}
		return err
	})
	release.open()
	h.set(nil)
	if err := <-cleaned; err != nil {
		t.Fatal(err)
	}
}

// TestFailedWarmUpRemovesTheSegment (item 3): when warming a new segment
// fails (mlock over RLIMIT_MEMLOCK), the allocator removes the file it
// made; the retried roll creates it afresh instead of opening it as a full
// segment (which panicked with mmap and stopped the store with uring).
func TestFailedWarmUpRemovesTheSegment(t *testing.T) {
	for _, backend := range []string{"mem", "mmap"} {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			var inner mappedfile.Backend = mappedfile.NewMemFS(mappedfile.MemOptions{})
			if backend == "mmap" {
				inner = mmapio.New(mmapio.Options{Logger: quietLogger})
			}
			h := newHooked(inner)
			var failures atomic.Int64
			h.set(on("warm", commitLogDirName, func(path string) error {
				if failures.Add(1) <= 3 {
					return fmt.Errorf("mlock of %s: RLIMIT_MEMLOCK is 64 KiB: %w", path, syscall.ENOMEM)
				}
				return nil
			}))
			o := Options{BackendImpl: h, SegmentSizeBytes: 16 << 10, WarmSegments: true, AllocationTimeout: 5 * time.Second,
				IndexSlotCount: 7, IndexMaxEntries: 100, ConsumeQueueFileSizeBytes: 2000, Logger: quietLogger}
			dir := t.TempDir()
			s := openStore(t, dir, o)
			var stored []PutResult
			refused := 0
			for i := 0; len(stored) < 100; i++ {
				res, err := s.Put(ctx, testMessage("W", 0, len(stored), 900))
				switch {
				case err == nil:
					stored = append(stored, res)
				case res.Status == CreateMappedFileFailed && refused < 50:
					refused++ // the roll failed; the producer retries
				default:
					t.Fatalf("put %d: %v %v (after %d refused rolls)", i, res.Status, err, refused)
				}
			}
			if refused == 0 {
				t.Fatal("no roll failed: the test did not exercise a failed warm-up")
			}
			if st := s.Stats(); st.WriteError != "" {
				t.Fatalf("the store stopped: %s", st.WriteError)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openStore(t, dir, o)
			defer s.Close()
			rep, err := s.Verify(ctx)
			if err != nil || len(rep.Problems) != 0 || rep.Records != int64(len(stored)) {
				t.Fatalf("after the reopen: %v, %d records of %d, %v", err, rep.Records, len(stored), rep.Problems)
			}
		})
	}
}

// TestDispatchFailureIsVisible (item 4): when dispatch fails for good (an
// I/O error opening a ConsumeQueue file), Put refuses writes, Stats and
// Close report it, and Close leaves the abort file: the next Open recovers
// and dispatches what was missed.
func TestDispatchFailureIsVisible(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	h := newHooked(fs)
	o := smallLogicsOptions(Options{BackendImpl: h})
	dir := t.TempDir()
	s := openStore(t, dir, o)
	h.set(on("open", consumeQueueDirName, func(string) error { return syscall.EIO }))
	first, err := s.Put(ctx, testMessage("F", 0, 0, 100))
	if err != nil {
		t.Fatal(err) // stored; its dispatch fails in the background
	}
	if err := s.WaitDispatched(ctx, first.PhysicalOffset+int64(first.Size)); !errors.Is(err, syscall.EIO) {
		t.Fatalf("WaitDispatched: %v, want the dispatch error", err)
	}
	if st := s.Stats(); !strings.Contains(st.DispatchError, "input/output error") {
		t.Fatalf("Stats.DispatchError = %q", st.DispatchError)
	}
	res, err := s.Put(ctx, testMessage("F", 0, 1, 100))
	if res.Status != ServiceNotAvailable || !errors.Is(err, ErrServiceNotAvailable) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("put after dispatch stopped: %v %v", res.Status, err)
	}
	if err := s.Close(); err == nil || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Close after dispatch stopped: %v, want the dispatch error", err)
	}
	if ok, _ := fs.Exists(filepath.Join(dir, abortFileName)); !ok {
		t.Fatal("Close removed the abort file: the next Open would not re-dispatch")
	}
	h.set(nil)
	s = openStore(t, dir, o)
	defer s.Close()
	if !s.RecoveredAfterCrash() {
		t.Fatal("the next Open did not recover")
	}
	got, err := s.Get(ctx, "g", "F", 0, 0, 1, nil)
	if err != nil || got.Status != Found || got.Messages[0].PhysicalOffset != first.PhysicalOffset {
		t.Fatalf("the message after recovery: %v %v", got.Status, err)
	}
	got.Release()
	if err := verifyClean(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// TestDispatchRetriesATransientError (item 4): a read of a segment closed
// under it does not stop dispatch for good.
func TestDispatchRetriesATransientError(t *testing.T) {
	ctx := context.Background()
	h := newHooked(mappedfile.NewMemFS(mappedfile.MemOptions{}))
	o := smallLogicsOptions(Options{BackendImpl: h})
	o.dispatchFromLog = true // the feed would spare dispatch the read
	s := openStore(t, t.TempDir(), o)
	defer s.Close()
	var reads atomic.Int64
	h.set(on("read", commitLogDirName, func(path string) error {
		if reads.Add(1) <= 3 {
			return fmt.Errorf("%s was deleted under the read: %w", path, mappedfile.ErrClosed)
		}
		return nil
	}))
	res, err := s.Put(ctx, testMessage("T", 0, 0, 100))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitDispatched(ctx, res.PhysicalOffset+int64(res.Size)); err != nil {
		t.Fatalf("dispatch after transient read errors: %v", err)
	}
	if reads.Load() < 4 {
		t.Fatalf("%d reads: the errors were not hit", reads.Load())
	}
	if st := s.Stats(); st.DispatchError != "" {
		t.Fatalf("dispatch stopped: %s", st.DispatchError)
	}
}

// TestRedispatchIndexesTheBoundaryRecordOnce (item 6): after a crash the
// re-dispatch starts at records the index already has; the newest of them
// (at the index's end offset) must not get a second entry, or a query
// returns it twice.
func TestRedispatchIndexesTheBoundaryRecordOnce(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	o := smallLogicsOptions(Options{BackendImpl: fs, FlushMode: FlushSync})
	o.IndexMaxEntries = 1000
	dir := t.TempDir()
	s := openStore(t, dir, o)
	res := putN(t, s, "Q", 1, 10, 100, nil)
	if err := s.flushLogics(ctx, 0); err != nil { // the checkpoint knows the index up to the last record
		t.Fatal(err)
	}
	fs.Kill()
	reopenAfter(s, fs)
	s = openStore(t, dir, o)
	defer s.Close()
	if err := s.WaitDispatched(ctx, s.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		key := fmt.Sprintf("k%d", i)
		got, err := s.QueryMessages(ctx, "Q", key, 0, 0, 10)
		if err != nil || len(got) != 1 || got[0].PhysicalOffset != r.PhysicalOffset {
			offs := make([]int64, len(got))
			for j := range got {
				offs[j] = got[j].PhysicalOffset
			}
			t.Fatalf("query of %s after the re-dispatch: %v %v, want the record at %d once", key, offs, err, r.PhysicalOffset)
		}
	}
}

// TestIndexCheckpointInTheSameMillisecond: a full flush of the logics
// checkpoints the index at the last dispatched record's store timestamp;
// records dispatched after it in the same millisecond leave the index
// file's EndTimestamp equal to the checkpoint's. A power loss during the
// next flush (its header written, its entries not synced) must not leave
// a file that recovery trusts with entries missing: recovery decides by
// the checkpoint's dispatched offset as well as by the timestamp. Every
// crash point of that flush is tried, with several torn write-backs.
func TestIndexCheckpointInTheSameMillisecond(t *testing.T) {
	ctx := context.Background()
	frozen := time.UnixMilli(1_800_000_000_000)
	const before, after = 10, 10
	for n := int64(1); ; n++ {
		fired := false
		for seed := uint64(1); seed <= 8; seed++ {
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
			o := smallLogicsOptions(Options{BackendImpl: fs, FlushMode: FlushSync})
			o.IndexMaxEntries = 1000
			o.ConsumeQueueFlushInterval, o.ConsumeQueueFlushThoroughInterval = time.Hour, time.Hour
			o.now = func() time.Time { return frozen }
			dir := t.TempDir()
			s := openStore(t, dir, o)
			var res []PutResult
			put := func(i int) {
				r, err := s.Put(ctx, testMessage("Q", 0, i, 100))
				if err != nil {
					t.Fatal(err)
				}
				res = append(res, r)
			}
			for i := 0; i < before; i++ {
				put(i)
			}
			if err := s.WaitDispatched(ctx, res[len(res)-1].PhysicalOffset+int64(res[len(res)-1].Size)); err != nil {
				t.Fatal(err)
			}
			if err := s.flushLogics(ctx, 0); err != nil {
				t.Fatal(err)
			}
			for i := before; i < before+after; i++ {
				put(i)
			}
			if err := s.WaitDispatched(ctx, res[len(res)-1].PhysicalOffset+int64(res[len(res)-1].Size)); err != nil {
				t.Fatal(err)
			}
			tail := []mappedfile.TornTail{mappedfile.TornPartialPage, mappedfile.TornRandomPages}[seed%2]
			fs.ArmCrash(n, tail, rand.New(rand.NewPCG(seed, uint64(n))))
			_ = s.flushLogics(ctx, 0)
			if fs.Disarm() {
				fs.Kill() // the flush completed before the crash point: nothing more to try
			} else {
				fired = true
			}
			reopenAfter(s, fs)
			s = openStore(t, dir, o)
			for i, r := range res { // sync flush: every record was acknowledged
				key := fmt.Sprintf("k%d", i)
				got, err := s.QueryMessages(ctx, "Q", key, 0, 0, 10)
				if err != nil || len(got) != 1 || got[0].PhysicalOffset != r.PhysicalOffset {
					s.Close()
					t.Fatalf("crash at operation %d of the flush (%v, seed %d): query of %s: %d results, %v; want the record at %d",
						n, tail, seed, key, len(got), err, r.PhysicalOffset)
				}
			}
			s.Close()
		}
		if !fired {
			t.Logf("%d crash points tried", n-1)
			return
		}
	}
}

// TestEncodeAtWritesFinalBytesOnce (item 6): the fields patched under the
// append lock are patched in the encode buffer before the copy, so the
// segment bytes are written once, each with its final value, TOTALSIZE last
// — no page can be written back holding a record without its
// STORETIMESTAMP. The check: after EncodeAt the source the copy came from
// is the record as stored (before the fix the patch went into the segment
// after the copy, and the source kept zeros there).
func TestEncodeAtWritesFinalBytesOnce(t *testing.T) {
	m := testMessage("E", 3, 7, 100)
	props, _ := record.EncodeProperties(nil, m.Properties)
	e := &encodeBuffer{size: record.Size(m, len(props)), queueOffset: 41, storeTimestamp: 1_700_000_000_123, fromOffset: 1 << 20}
	e.buf = make([]byte, e.size)
	if err := record.Encode(e.buf, m, props); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, e.size)
	if err := e.EncodeAt(dst, 4096); err != nil {
		t.Fatal(err)
	}
	r, err := record.Decode(dst, 1<<20+4096, true)
	if err != nil || r.QueueOffset != 41 || r.StoreTimestamp != 1_700_000_000_123 || r.PhysicalOffset != 1<<20+4096 {
		t.Fatalf("encoded record: %+v %v", r, err)
	}
	if !bytes.Equal(dst, e.buf[:e.size]) {
		t.Fatal("the segment bytes differ from the buffer they were copied from: fields were patched in the segment after the copy")
	}
}

// TestEncodeAtRecordCRC: the whole-record checksum a Put's record carries
// (a store that recycles segments) is the CRC of every byte before it, the
// fields patched under the lock included, with IPv6 hosts and a v2 topic
// moving them, and with a body of 0 bytes.
func TestEncodeAtRecordCRC(t *testing.T) {
	o := Options{StoreHost: netip.MustParseAddrPort("[2001:db8::1]:10911")}.withDefaults()
	s := &Store{opts: o, recordCRC: true, log: &commitLog{}}
	e := &encodeBuffer{}
	long := strings.Repeat("V2Topic", 30) // > 127 bytes: a v2 record
	for _, topic := range []string{"T", long} {
		for i, size := range []int{100, 333, 0, 4096} {
			m := testMessage(topic, 2, i, size)
			if i%2 == 1 {
				m.BornHost = netip.MustParseAddrPort("[2001:db8::2]:4000")
			}
			if _, _, err := s.encode(e, m, time.Now()); err != nil {
				t.Fatal(err)
			}
			e.queueOffset, e.storeTimestamp, e.fromOffset = int64(i), 1_700_000_000_000+int64(i), 1<<30
			dst := make([]byte, e.size)
			if err := e.EncodeAt(dst, 4096); err != nil {
				t.Fatal(err)
			}
			r, err := record.Decode(dst, 1<<30+4096, true)
			if err != nil {
				t.Fatalf("record %d (%d-byte body, topic %d bytes): %v", i, size, len(topic), err)
			}
			if err := record.CheckRecordCRC(dst, r.PhysicalOffset); err != nil {
				t.Fatalf("record %d (%d-byte body, topic %d bytes): %v", i, size, len(topic), err)
			}
		}
	}
}

// TestDirectoriesAndDeletesSurviveAPowerLoss (item 6): the directories the
// store creates (ConsumeQueue topic and queue directories, index, commitlog)
// and the files retention deletes are durable: a power loss that keeps no
// unsynced directory change keeps them as they were.
func TestDirectoriesAndDeletesSurviveAPowerLoss(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	o := smallLogicsOptions(Options{BackendImpl: fs, FlushMode: FlushSync, CleanInterval: time.Hour})
	o.diskUsed = func(string) (float64, error) { return 90, nil }
	dir := t.TempDir()
	s := openStore(t, dir, o)
	res := putN(t, s, "Dir", 2, 400, 300, nil)
	if err := s.flushLogics(ctx, 0); err != nil {
		t.Fatal(err)
	}
	n, err := s.CleanExpired(ctx)
	if err != nil || n == 0 {
		t.Fatalf("retention: %d %v", n, err)
	}
	first := s.MinOffset()
	fs.Crash(mappedfile.TornNone, nil) // every unsynced name change is lost
	reopenAfter(s, fs)
	for _, d := range []string{commitLogDirName, indexDirName, consumeQueueDirName, filepath.Join(consumeQueueDirName, "Dir", "1")} {
		if ok, _ := fs.Exists(filepath.Join(dir, d)); !ok {
			t.Fatalf("directory %s did not survive the power loss", d)
		}
	}
	names, err := fs.List(filepath.Join(dir, commitLogDirName))
	if err != nil {
		t.Fatal(err)
	}
	if names[0] != segment.Name(first) {
		t.Fatalf("after the power loss the CommitLog starts with %s; retention had deleted up to %s", names[0], segment.Name(first))
	}
	s = openStore(t, dir, o)
	defer s.Close()
	last := res[len(res)-1]
	got, err := s.Get(ctx, "g", "Dir", 1, last.QueueOffset, 1, nil)
	if err != nil || got.Status != Found {
		t.Fatalf("the last message after the power loss: %v %v", got.Status, err)
	}
	got.Release()
	if err := verifyClean(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// TestDispatchRetriesNoSpace: no space (or no descriptor) for a new
// ConsumeQueue file is retried, not the end of the store's writes: Puts go
// on, and once space is back every record is dispatched and readable
// without a reopen.
func TestDispatchRetriesNoSpace(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EMFILE} {
		t.Run(errno.Error(), func(t *testing.T) {
			ctx := context.Background()
			h := newHooked(mappedfile.NewMemFS(mappedfile.MemOptions{}))
			s := openStore(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: h}))
			defer s.Close()
			var failed atomic.Int32
			h.set(on("open", consumeQueueDirName, func(string) error { failed.Add(1); return errno }))
			var last PutResult
			for i := 0; i < 5; i++ {
				res, err := s.Put(ctx, testMessage("N", 0, i, 100))
				if err != nil {
					t.Fatalf("put %d while the ConsumeQueue file cannot be created: %v %v", i, res.Status, err)
				}
				last = res
			}
			waitFor(t, "dispatch tried", func() bool { return failed.Load() >= 2 })
			if st := s.Stats(); st.DispatchError != "" {
				t.Fatalf("dispatch stopped: %s", st.DispatchError)
			}
			h.set(nil)
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if err := s.WaitDispatched(wctx, last.PhysicalOffset+int64(last.Size)); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, "g", "N", 0, 0, 100, nil)
			if err != nil || len(got.Messages) != 5 {
				t.Fatalf("read back %v, %v", got, err)
			}
			got.Release()
			if res, err := s.Put(ctx, testMessage("N", 0, 9, 100)); err != nil {
				t.Fatalf("put after: %v %v", res.Status, err)
			}
		})
	}
}

// TestRecoveryKeepsAUnitWhoseRecordRetentionDeleted: a queue's last
// durable ConsumeQueue unit points into a segment retention has deleted
// (the queue got no record since), the queue then takes records whose
// units are still in the page cache when the power goes. Recovery cannot
// check that unit against its record — the record is gone — and must keep
// it: dropped as damaged, it left a gap the re-dispatch could not fill,
// and the store would not open (found by the power-loss trials on an aged
// store).
func TestRecoveryKeepsAUnitWhoseRecordRetentionDeleted(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	o := smallLogicsOptions(Options{BackendImpl: fs, FlushMode: FlushSync, CleanInterval: time.Hour,
		DeleteWhen: "*", FileReservedTime: time.Nanosecond,
		ConsumeQueueFlushInterval: time.Hour, ConsumeQueueFlushThoroughInterval: time.Hour})
	o.diskUsed = func(string) (float64, error) { return 10, nil }
	dir := t.TempDir()
	s := openStore(t, dir, o)
	putN(t, s, "G", 2, 120, 500, nil) // both queues, over several segments
	for s.log.queue.Len() < 6 {       // then queue 0 alone, into a new segment
		if _, err := s.Put(ctx, testMessage("G", 0, 0, 500)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil { // every unit durable
		t.Fatal(err)
	}
	s = openStore(t, dir, o)
	if _, err := s.CleanExpired(ctx); err != nil {
		t.Fatal(err)
	}
	q1, err := s.logics.queue(ctx, queueKey{topic: "G", queueID: 1}, false)
	if err != nil || q1 == nil {
		t.Fatal("queue 1", err)
	}
	if q1.MinOffset() != q1.MaxOffset() || q1.MaxOffset() == 0 {
		t.Fatalf("queue 1 holds [%d, %d) after retention: the test needs every unit it has to point before the log's start", q1.MinOffset(), q1.MaxOffset())
	}
	var acked []PutResult
	for i := 0; i < 5; i++ { // durable records whose units are not
		res, err := s.Put(ctx, testMessage("G", 1, 1000+i, 500))
		if err != nil {
			t.Fatal(err)
		}
		acked = append(acked, res)
	}
	fs.Crash(mappedfile.TornNone, nil)
	reopenAfter(s, fs)
	s = openStore(t, dir, o)
	defer s.Close()
	for _, r := range acked {
		got, err := s.Get(ctx, "g", "G", 1, r.QueueOffset, 1, nil)
		if err != nil || got.Status != Found || got.Messages[0].PhysicalOffset != r.PhysicalOffset {
			t.Fatalf("queue offset %d after the power loss: %v %v", r.QueueOffset, got.Status, err)
		}
		got.Release()
	}
}

// TestNoRetentionDeletesNothing: with NoRetention the retention service
// deletes no segment — not expired ones at a DeleteWhen of "*", not with a
// full disk — while the same store without it does.
func TestNoRetentionDeletesNothing(t *testing.T) {
	ctx := context.Background()
	for _, noRetention := range []bool{true, false} {
		fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
		o := smallLogicsOptions(Options{BackendImpl: fs, FlushMode: FlushSync, CleanInterval: 5 * time.Millisecond,
			DeleteWhen: "*", FileReservedTime: time.Nanosecond, NoRetention: noRetention})
		o.diskUsed = func(string) (float64, error) { return 99, nil }
		s := openStore(t, t.TempDir(), o)
		for s.log.queue.Len() < 4 {
			if _, err := s.Put(ctx, testMessage("G", 0, 0, 500)); err != nil {
				t.Fatal(err)
			}
		}
		before := s.log.queue.MinOffset()
		deadline := time.Now().Add(5 * time.Second)
		for s.log.queue.MinOffset() == before && time.Now().Before(deadline) && !noRetention {
			time.Sleep(5 * time.Millisecond)
		}
		if noRetention {
			time.Sleep(100 * time.Millisecond) // twenty cleaner intervals
		}
		deleted := s.log.queue.MinOffset() != before
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if deleted == noRetention {
			t.Errorf("NoRetention %v: a segment deleted: %v", noRetention, deleted)
		}
	}
}
