package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/faultfile"
	"github.com/mqstore/mqstore/transientpool"
	"github.com/mqstore/mqstore/uring"
)

// testBackends are the backends every engine test runs against: the
// MemFS twice (write-through and buffered, as BackendImpl so a reopen in
// the same test finds its files) and every registered backend that keeps
// files on disk. Each returns the options that select it; a store reopened
// in the same test must reuse the same options.
var testBackends = func() []struct {
	name string
	opts func(t testing.TB) Options
} {
	list := []struct {
		name string
		opts func(t testing.TB) Options
	}{
		{"mem", func(testing.TB) Options {
			return memIndexSizes(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})})
		}},
		{"mem-buffered", func(testing.TB) Options {
			return memIndexSizes(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: true})})
		}},
	}
	for _, reg := range Backends() {
		if reg.Volatile {
			continue
		}
		list = append(list, struct {
			name string
			opts func(t testing.TB) Options
		}{reg.Name, func(testing.TB) Options { return Options{Backend: reg.Name} }})
	}
	return list
}()

// memIndexSizes gives a store on the MemFS IndexFiles of 2 MiB instead of
// the default 420 MB (openStore does it for every store on a test backend
// that sets no index size): the MemFS holds every byte of a file in memory
// (twice when buffered), and a default IndexFile per store made each test
// on it clear and copy hundreds of megabytes — seconds under the race
// detector, with the MemFS's lock held, so on a loaded 2-core machine a
// segment allocation ran past its timeout and a flush that should have
// run before a test's fault ran after it.
func memIndexSizes(o Options) Options {
	o.IndexSlotCount, o.IndexMaxEntries = 10_007, 100_000
	return o
}

var flushModes = []FlushMode{FlushAsync, FlushSync}

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// forEachBackendAndMode runs fn for backend × flush mode.
func forEachBackendAndMode(t *testing.T, fn func(t *testing.T, base Options)) {
	for _, b := range testBackends {
		for _, mode := range flushModes {
			t.Run(b.name+"/"+mode.String(), func(t *testing.T) {
				o := b.opts(t)
				o.FlushMode = mode
				o.Logger = quietLogger
				fn(t, o)
			})
		}
	}
}

// waitFor waits for a condition, failing after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func openStore(t testing.TB, dir string, o Options) *Store {
	t.Helper()
	if (o.BackendImpl != nil || o.Backend == "mem") && o.IndexSlotCount == 0 && o.IndexMaxEntries == 0 {
		o = memIndexSizes(o) // every test backend here keeps its files in a MemFS
	}
	s, err := Open(context.Background(), dir, o)
	if errors.Is(err, mappedfile.ErrUnsupported) {
		testenv.Skip(t, backendNeed(o.Backend), "backend %s cannot run here: %v", o.Backend, err)
	}
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

// backendNeed is the environment need a backend that cannot run here lacks.
func backendNeed(backend string) string {
	if strings.HasPrefix(backend, "uring") {
		return testenv.Uring
	}
	return testenv.Root // mlock limits (transient)
}

func testMessage(topic string, queueID int32, i int, size int) *Message {
	body := make([]byte, size)
	for j := range body {
		body[j] = byte(i*7 + j)
	}
	return &Message{Topic: topic, QueueID: queueID, Body: body, Properties: []Property{
		{Name: "TAGS", Value: "T" + fmt.Sprint(i%3)}, {Name: "KEYS", Value: fmt.Sprintf("k%d x%d", i, i)},
		{Name: "UNIQ_KEY", Value: fmt.Sprintf("U%08d", i)},
	}}
}

func TestRollsWriteBlanksByteByByte(t *testing.T) {
	forEachBackendAndMode(t, func(t *testing.T, o Options) {
		ctx := context.Background()
		o.SegmentSizeBytes = 64 << 10
		if o.Backend == "uring" || o.Backend == "uring-direct" {
			// Two staging buffers, so later segments get buffers that
			// hold an earlier segment's bytes where their blank goes.
			o.BackendOptions = uring.Options{StagingBuffers: 2}
		}
		dir := t.TempDir()
		s := openStore(t, dir, o)
		var results []PutResult
		for i := 0; i < 600; i++ {
			res, err := s.Put(ctx, testMessage("TopicA", int32(i%3), i, 100+i%700))
			if err != nil {
				t.Fatalf("put %d: %v", i, err)
			}
			if res.QueueOffset != int64(i/3) {
				t.Fatalf("put %d: queue offset %d, want %d", i, res.QueueOffset, i/3)
			}
			results = append(results, res)
		}
		last := results[len(results)-1]
		waitFor(t, "the last record is readable", func() bool { return s.MaxOffset() >= last.PhysicalOffset+int64(last.Size) })
		files := s.log.queue.Files()
		if len(files) < 4 {
			t.Fatalf("only %d segments", len(files))
		}
		for i, res := range results[1:] {
			prev := results[i]
			end := prev.PhysicalOffset + int64(prev.Size)
			if res.PhysicalOffset == end {
				continue
			}
			// A roll: the rest of prev's segment must be the blank.
			segEnd := (end/o.SegmentSizeBytes + 1) * o.SegmentSizeBytes
			if res.PhysicalOffset != segEnd {
				t.Fatalf("record %d at %d, previous ended at %d, segment end %d", i+1, res.PhysicalOffset, end, segEnd)
			}
			if int64(res.Size)+record.BlankSize <= segEnd-end {
				t.Fatalf("rolled although %d bytes + blank fit in %d", res.Size, segEnd-end)
			}
			blank := make([]byte, 8)
			if err := s.log.readAt(blank, end); err != nil {
				t.Fatal(err)
			}
			want := make([]byte, 8)
			binary.BigEndian.PutUint32(want, uint32(segEnd-end))
			binary.BigEndian.PutUint32(want[4:], 0xCBD43194)
			if !bytes.Equal(blank, want) {
				t.Fatalf("blank at %d: % x, want % x", end, blank, want)
			}
			// Zeros after it, not older bytes of a reused staging buffer
			// (the blank's encoder fills what it reserved).
			rest := make([]byte, segEnd-end-record.BlankSize)
			if err := s.log.readAt(rest, end+record.BlankSize); err != nil {
				t.Fatal(err)
			}
			if i := bytes.IndexFunc(rest, func(r rune) bool { return r != 0 }); i >= 0 {
				t.Fatalf("byte %d after the blank at %d is not zero", end+record.BlankSize+int64(i), end)
			}
		}
		for i, res := range results {
			r, err := s.ReadMessage(ctx, res.PhysicalOffset)
			if err != nil {
				t.Fatalf("read %d: %v", i, err)
			}
			want := testMessage("TopicA", int32(i%3), i, 100+i%700)
			if !bytes.Equal(r.Body, want.Body) || r.QueueOffset != res.QueueOffset || r.PhysicalOffset != res.PhysicalOffset {
				t.Fatalf("message %d read back wrong: %+v", i, r)
			}
			if u, _ := r.UniqKey(); u != fmt.Sprintf("U%08d", i) {
				t.Fatalf("uniq key %q", u)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// Reopen: queue offsets continue, nothing lost.
		s = openStore(t, dir, o)
		defer s.Close()
		res, err := s.Put(ctx, testMessage("TopicA", 1, 600, 10))
		if err != nil {
			t.Fatal(err)
		}
		if res.QueueOffset != 200 {
			t.Fatalf("queue offset after reopen %d, want 200", res.QueueOffset)
		}
		if res.PhysicalOffset < last.PhysicalOffset+int64(last.Size) {
			t.Fatalf("reopened store appends at %d, over data ending at %d", res.PhysicalOffset, last.PhysicalOffset+int64(last.Size))
		}
		n := 0
		if _, err := s.Scan(ctx, s.MinOffset(), func(int64, []byte, *record.Record) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if want := 601 + len(files) - 1; n < 601 {
			t.Fatalf("scan saw %d records and blanks, want at least %d", n, want)
		}
	})
}

// Every acknowledged message under sync flush is at or below the flushed
// position at the moment of its ack, and really durable (MemFS).
func TestGroupCommitAcksOnlyDurable(t *testing.T) {
	for _, buffered := range []bool{false, true} {
		t.Run(fmt.Sprintf("buffered=%v", buffered), func(t *testing.T) {
			ctx := context.Background()
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: buffered})
			// A flush that takes a while, as a disk's does, lets waiters queue up.
			slow := faultfile.NewFaulty(fs, faultfile.NewFaults(faultfile.Fault{Op: faultfile.OpFlush, Latency: time.Millisecond, PathContains: "commitlog"}))
			s := openStore(t, t.TempDir(), Options{BackendImpl: slow, FlushMode: FlushSync, SegmentSizeBytes: 128 << 10, Logger: quietLogger})
			defer s.Close()
			const producers, each = 16, 150
			var wg sync.WaitGroup
			errs := make(chan error, producers)
			for p := 0; p < producers; p++ {
				wg.Add(1)
				go func(p int) {
					defer wg.Done()
					for i := 0; i < each; i++ {
						m := testMessage("G", int32(p%4), p*each+i, 50+i)
						res, err := s.Put(ctx, m)
						if err != nil {
							errs <- err
							return
						}
						end := res.PhysicalOffset + int64(res.Size)
						if fl := s.FlushedOffset(); fl < end {
							errs <- fmt.Errorf("ack of a record ending at %d with flushed at %d", end, fl)
							return
						}
						seg := s.log.queue.Find(res.PhysicalOffset)
						durable, _ := fs.Durable(seg.Path())
						pos := res.PhysicalOffset - seg.FromOffset()
						r, err := record.Decode(durable[pos:pos+int64(res.Size)], res.PhysicalOffset, true)
						if err != nil || !bytes.Equal(r.Body, m.Body) {
							errs <- fmt.Errorf("acknowledged record at %d is not durable: %v", res.PhysicalOffset, err)
							return
						}
					}
				}(p)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			st := s.Stats()
			if st.Puts != producers*each || st.Flushes == 0 || st.Flushes > producers*each/2 {
				t.Fatalf("puts %d flushes %d: want group commit to batch", st.Puts, st.Flushes)
			}
			t.Logf("%d puts served by %d flushes", st.Puts, st.Flushes)
		})
	}
}

func TestFlushDiskTimeout(t *testing.T) {
	ctx := context.Background()
	faults := faultfile.NewFaults()
	fb := faultfile.NewFaulty(mappedfile.NewMemFS(mappedfile.MemOptions{}), faults)
	s := openStore(t, t.TempDir(), Options{BackendImpl: fb, FlushMode: FlushSync, SyncFlushTimeout: 100 * time.Millisecond,
		SegmentSizeBytes: 64 << 10, Logger: quietLogger})
	defer s.Close()
	// On a loaded machine even this one may time out; only the slow one below must.
	if _, err := s.Put(ctx, testMessage("T", 0, 0, 10)); err != nil && !errors.Is(err, ErrFlushDiskTimeout) {
		t.Fatal(err)
	}
	faults.Add(faultfile.Fault{Op: faultfile.OpFlush, Latency: 2 * time.Second})
	res, err := s.Put(ctx, testMessage("T", 0, 1, 10))
	if res.Status != FlushDiskTimeout || !errors.Is(err, ErrFlushDiskTimeout) {
		t.Fatalf("slow flush: status %v, err %v; want FlushDiskTimeout", res.Status, err)
	}
	if res.QueueOffset != 1 || res.PhysicalOffset == 0 {
		t.Fatalf("a timed-out put still says where it went: %+v", res)
	}
	faults.Clear()
	// The record was appended; it becomes durable with a later flush.
	deadline := time.Now().Add(10 * time.Second)
	for s.FlushedOffset() < res.PhysicalOffset+int64(res.Size) {
		if time.Now().After(deadline) {
			t.Fatal("the timed-out record never became durable")
		}
		if _, err := s.Put(ctx, testMessage("T", 0, 2, 10)); err != nil && !errors.Is(err, ErrFlushDiskTimeout) {
			t.Fatal(err)
		}
	}
	if s.Stats().FlushDiskTimeouts == 0 {
		t.Fatal("timeout not counted")
	}
}

func TestInputRules(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{}), SegmentSizeBytes: 1 << 20,
		MaxMessageSizeBytes: 4096, Logger: quietLogger})
	defer s.Close()
	if _, err := s.Put(ctx, testMessage("ok", 0, 0, 10)); err != nil {
		t.Fatal(err)
	}
	bigProps := []Property{{Name: "P", Value: strings.Repeat("v", 40000)}}
	cases := []struct {
		name   string
		m      *Message
		status PutStatus
		want   error
		text   string
	}{
		{"empty topic", &Message{Topic: ""}, MessageIllegal, ErrMessageIllegal, "topic"},
		{"bad topic char", &Message{Topic: "a b"}, MessageIllegal, ErrMessageIllegal, "topic"},
		{"slash in topic", &Message{Topic: "a/b"}, MessageIllegal, ErrMessageIllegal, "topic"},
		{"topic longer than a file name", &Message{Topic: strings.Repeat("a", 256)}, MessageIllegal, ErrMessageIllegal, "longer than 255"},
		{"negative queue", &Message{Topic: "t", QueueID: -1}, MessageIllegal, ErrMessageIllegal, "queue id -1"},
		{"body too large", &Message{Topic: "t", Body: make([]byte, 5000)}, MessageIllegal, ErrMessageIllegal, "5000"},
		{"record too large", &Message{Topic: "t", Body: make([]byte, 4090)}, MessageIllegal, ErrMessageIllegal, "maximum message size"},
		{"properties too large", &Message{Topic: "t", Properties: bigProps}, PropertiesSizeExceeded, ErrPropertiesTooLarge, "32767"},
		{"property separator", &Message{Topic: "t", Properties: []Property{{Name: "a\x01", Value: "v"}}}, MessageIllegal, ErrMessageIllegal, "property"},
	}
	before := s.log.queue.WroteOffset()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := s.Put(ctx, c.m)
			if res.Status != c.status || !errors.Is(err, c.want) {
				t.Fatalf("status %v err %v; want %v, %v", res.Status, err, c.status, c.want)
			}
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(c.text)) {
				t.Fatalf("error %q does not mention %q", err, c.text)
			}
			if w := s.log.queue.WroteOffset(); w != before {
				t.Fatalf("a refused put wrote: %d → %d", before, w)
			}
		})
	}
	// A long topic is fine: it takes the v2 format (up to 255 bytes, a
	// file name's most).
	long := strings.Repeat("x", 255)
	res, err := s.Put(ctx, &Message{Topic: long, Body: []byte("v2")})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.ReadMessage(ctx, res.PhysicalOffset)
	if err != nil || r.Magic != record.MagicV2 || r.Topic != long {
		t.Fatalf("v2 record: %v %+v", err, r.Magic)
	}
}

func TestReopenRules(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	o := Options{BackendImpl: fs, SegmentSizeBytes: 64 << 10, Logger: quietLogger}
	s := openStore(t, dir, o)
	if _, err := Open(ctx, dir, o); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pid") {
		t.Fatalf("second open: %v, want ErrLocked naming the pid", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	o2 := o
	o2.SegmentSizeBytes = 128 << 10
	if _, err := Open(ctx, dir, o2); !errors.Is(err, ErrConfigMismatch) || !strings.Contains(err.Error(), "65536") {
		t.Fatalf("reopen with another segment size: %v", err)
	}
	o3 := o
	o3.SegmentSizeBytes = 0 // take the recorded size
	s = openStore(t, dir, o3)
	if s.Options().SegmentSizeBytes != 64<<10 {
		t.Fatalf("recorded size not used: %d", s.Options().SegmentSizeBytes)
	}
	s.Close()
	for _, bad := range []Options{{SegmentSizeBytes: 1000}, {FlushMode: 7}, {FlushInterval: -1}, {Backend: "floppy"}} {
		bad.Logger = quietLogger
		if _, err := Open(ctx, t.TempDir(), bad); err == nil {
			t.Fatalf("options %+v accepted", bad)
		}
	}
	fresh := t.TempDir()
	if _, err := Open(ctx, fresh, Options{Backend: "floppy"}); !errors.Is(err, ErrUnknownBackend) {
		t.Fatalf("unknown backend: %v", err)
	}
	// Refused before anything is made: no parameters file that a retry
	// with other options would then be refused against.
	if _, err := os.Stat(filepath.Join(fresh, paramsFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an unknown backend left %s behind: %v", paramsFileName, err)
	}
}

func TestAsyncFlushCatchesUp(t *testing.T) {
	for _, b := range testBackends {
		t.Run(b.name, func(t *testing.T) {
			o := b.opts(t)
			o.FlushMode = FlushAsync
			o.Logger = quietLogger
			asyncFlushCatchesUp(t, o)
		})
	}
}

func asyncFlushCatchesUp(t *testing.T, o Options) {
	ctx := context.Background()
	o.FlushInterval = 10 * time.Millisecond
	o.CommitInterval = 5 * time.Millisecond
	o.SegmentSizeBytes = 256 << 10
	s := openStore(t, t.TempDir(), o)
	defer s.Close()
	var last PutResult
	for i := 0; i < 100; i++ {
		var err error
		if last, err = s.Put(ctx, testMessage("A", 0, i, 300)); err != nil {
			t.Fatal(err)
		}
	}
	// Fewer than 4 pages may stay pending until the thorough flush;
	// a thorough interval of 10 s is too long to wait, so check the
	// least-pages rule instead: pending < 4 pages, or all flushed.
	deadline := time.Now().Add(10 * time.Second)
	for {
		pending := last.PhysicalOffset + int64(last.Size) - s.FlushedOffset()
		if pending < 4*mappedfile.PageSize {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("async flusher left %d bytes pending", pending)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAllocationTimeoutFailsRoll(t *testing.T) {
	ctx := context.Background()
	faults := faultfile.NewFaults()
	fb := faultfile.NewFaulty(mappedfile.NewMemFS(mappedfile.MemOptions{}), faults)
	s := openStore(t, t.TempDir(), Options{BackendImpl: fb, SegmentSizeBytes: 16 << 10, AllocationTimeout: 20 * time.Millisecond, Logger: quietLogger})
	defer s.Close()
	faults.Add(faultfile.Fault{Op: faultfile.OpOpen, Latency: 2 * time.Second})
	var res PutResult
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		res, err = s.Put(ctx, testMessage("A", 0, i, 1000))
	}
	if res.Status != CreateMappedFileFailed || !errors.Is(err, ErrCreateSegmentFailed) || !strings.Contains(err.Error(), "not ready after") {
		t.Fatalf("roll with a slow allocation: %v %v", res.Status, err)
	}
	// A failed roll is not a write error: once segments can be made again,
	// Puts succeed.
	faults.Clear()
	waitFor(t, "puts to succeed again", func() bool {
		_, err := s.Put(ctx, testMessage("A", 0, 1000, 1000))
		return err == nil
	})
}

func TestOSPageCacheBusy(t *testing.T) {
	ctx := context.Background()
	faults := faultfile.NewFaults()
	fb := faultfile.NewFaulty(mappedfile.NewMemFS(mappedfile.MemOptions{}), faults)
	s := openStore(t, t.TempDir(), Options{BackendImpl: fb, SegmentSizeBytes: 1 << 20, OSPageCacheBusyTimeout: 20 * time.Millisecond, Logger: quietLogger})
	defer s.Close()
	faults.Add(faultfile.Fault{Op: faultfile.OpAppend, Nth: 1, Latency: time.Second})
	slow := make(chan error, 1)
	go func() {
		_, err := s.Put(ctx, testMessage("A", 0, 0, 10))
		slow <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		since := s.log.lockedSince.Load()
		if since != 0 && time.Now().UnixNano()-since > int64(40*time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow append never held the lock")
		}
		time.Sleep(time.Millisecond)
	}
	res, err := s.Put(ctx, testMessage("A", 0, 1, 10))
	if res.Status != OSPageCacheBusy || !errors.Is(err, ErrOSPageCacheBusy) {
		t.Fatalf("put while the lock is held: %v %v", res.Status, err)
	}
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
}

func TestWriteErrorStopsWritesKeepsReads(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	faults := faultfile.NewFaults()
	o := Options{BackendImpl: faultfile.NewFaulty(fs, faults), SegmentSizeBytes: 64 << 10, Logger: quietLogger, FlushMode: FlushSync}
	s := openStore(t, dir, o)
	var good []PutResult
	for i := 0; i < 20; i++ {
		res, err := s.Put(ctx, testMessage("A", 0, i, 500))
		if err != nil {
			t.Fatal(err)
		}
		good = append(good, res)
	}
	faults.Add(faultfile.Fault{Op: faultfile.OpAppend, Err: syscall.ENOSPC})
	res, err := s.Put(ctx, testMessage("A", 0, 20, 500))
	if res.Status != ServiceNotAvailable || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("put on a full disk: %v %v", res.Status, err)
	}
	if _, err := s.Put(ctx, testMessage("A", 0, 21, 5)); !errors.Is(err, ErrServiceNotAvailable) {
		t.Fatalf("put after a write error: %v", err)
	}
	for i, g := range good {
		if _, err := s.ReadMessage(ctx, g.PhysicalOffset); err != nil {
			t.Fatalf("read %d after the failure: %v", i, err)
		}
	}
	s.Close()
	faults.Clear()
	s = openStore(t, dir, o)
	defer s.Close()
	n := 0
	if _, err := s.Scan(ctx, 0, func(_ int64, _ []byte, r *record.Record) error {
		if r != nil {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 20 {
		t.Fatalf("reopened store has %d records, want 20", n)
	}
	if res, err := s.Put(ctx, testMessage("A", 0, 20, 500)); err != nil || res.QueueOffset != 20 {
		t.Fatalf("put after reopen: %+v %v", res, err)
	}
}

func TestSegmentNamesParsedStrictly(t *testing.T) {
	for _, bad := range []string{"0000000000000000000", "000000000000000000001", "0000000000000000000a", "-0000000000000000001"} {
		if _, err := segment.ParseName(bad); !errors.Is(err, segment.ErrCorruptDirectory) {
			t.Errorf("%q accepted", bad)
		}
	}
	if off, err := segment.ParseName("00000000001073741824"); err != nil || off != 1<<30 {
		t.Fatalf("parse: %d %v", off, err)
	}
	if segment.Name(1<<30) != "00000000001073741824" {
		t.Fatal(segment.Name(1 << 30))
	}
	_ = filepath.Join
}

// TestStatsLockedBytes: Stats counts the memory the backends hold locked —
// the transient pool's buffers, and segments warmed with LockSegments.
func TestStatsLockedBytes(t *testing.T) {
	const seg = 1 << 20
	ctx := context.Background()
	s, err := Open(ctx, t.TempDir(), Options{Backend: "transient", SegmentSizeBytes: seg, BackendOptions: transientpool.Options{PoolSize: 3}, Logger: quietLogger})
	if err != nil && strings.Contains(err.Error(), "RLIMIT_MEMLOCK") {
		testenv.Skip(t, testenv.Root, "an RLIMIT_MEMLOCK of 3 MiB (root has none): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	s.Close()
	if st.LockedBytes != 3*seg || st.PagesLocked != 3*seg/mappedfile.PageSize {
		t.Fatalf("transient with 3 buffers of %d: LockedBytes %d, PagesLocked %d", seg, st.LockedBytes, st.PagesLocked)
	}

	s, err = Open(ctx, t.TempDir(), Options{Backend: "mmap", SegmentSizeBytes: seg, WarmSegments: true, LockSegments: true, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Put(ctx, testMessage("T", 0, 0, 100)); err != nil {
		t.Fatal(err)
	}
	// The allocator warms (and locks) the next segment in the background.
	waitFor(t, "a locked segment", func() bool { return s.Stats().LockedBytes >= seg })
	if st := s.Stats(); st.LockedBytes%seg != 0 {
		t.Fatalf("mmap with locked segments: LockedBytes %d is not a whole number of segments", st.LockedBytes)
	}
}

// TestInMemoryBackendRefusesAStoreOnDisk: opening a directory that holds
// a store on disk with the in-memory backend is refused by name, rather
// than acknowledging Puts that vanish with the process while the stored
// log is ignored.
func TestInMemoryBackendRefusesAStoreOnDisk(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{Backend: "mmap", SegmentSizeBytes: 1 << 20, Logger: quietLogger})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), dir, Options{Backend: "mem", SegmentSizeBytes: 1 << 20, Logger: quietLogger})
	if !errors.Is(err, ErrConfigMismatch) || !strings.Contains(err.Error(), "holds a store on disk") {
		t.Fatalf("mem over a store on disk: %v, want ErrConfigMismatch naming it", err)
	}
}
