package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/mappedfile"
)

// recycleOptions: small segments, retention by hand (CleanExpired) that
// finds every full segment expired, a pool of 4.
func recycleOptions(backend string) Options {
	o := smallLogicsOptions(Options{Backend: backend, FlushMode: FlushSync, RecycleSegments: 4,
		MaxMessageSizeBytes: 4 << 10, CleanInterval: time.Hour, DeleteWhen: "*", FileReservedTime: time.Nanosecond})
	o.diskUsed = func(string) (float64, error) { return 10, nil }
	return o
}

// fixedMessage is a message whose record has the same size and layout
// for every i: a reused segment's records then lie exactly over the old
// ones, the case where old bytes pass every check but the whole-record
// checksum.
func fixedMessage(i int) *Message {
	body := make([]byte, 500)
	for j := range body {
		body[j] = byte(i*7 + j)
	}
	return &Message{Topic: "Recycle", QueueID: int32(i % 2), Body: body, Properties: []Property{
		{Name: "TAGS", Value: "T" + fmt.Sprint(i%3)}, {Name: "KEYS", Value: fmt.Sprintf("k%08d", i)},
		{Name: "UNIQ_KEY", Value: fmt.Sprintf("U%08d", i)},
	}}
}

func putFixed(t *testing.T, s *Store, from, to int) []PutResult {
	t.Helper()
	return putAll(t, s, from, to, fixedMessage)
}

// ageStore fills s past a few segments and lets retention retire every
// full one into the pool.
func ageStore(t *testing.T, s *Store, n int) {
	t.Helper()
	putFixed(t, s, 0, n)
	if _, err := s.CleanExpired(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.SegmentsPooled < 2 {
		t.Fatalf("%d segments pooled after retention (%d retired): the test needs two", st.SegmentsPooled, st.SegmentsRetired)
	}
}

// checkMessages reads every result back by queue offset and compares its
// UNIQ_KEY.
func checkMessages(t *testing.T, s *Store, res []PutResult, from int) {
	t.Helper()
	ctx := context.Background()
	for k, r := range res {
		i := from + k
		got, err := s.Get(ctx, "g", "Recycle", int32(i%2), r.QueueOffset, 1, nil)
		if err != nil || got.Status != Found {
			t.Fatalf("message %d: %v %v", i, got.Status, err)
		}
		m, err := got.Message(0)
		got.Release()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if u, _ := m.UniqKey(); u != fmt.Sprintf("U%08d", i) || m.PhysicalOffset != r.PhysicalOffset {
			t.Fatalf("message %d: UNIQ_KEY %q at %d, want U%08d at %d", i, u, m.PhysicalOffset, i, r.PhysicalOffset)
		}
	}
}

// TestRecycledSegments runs a store whose retention feeds a pool of
// segments on each disk backend: the new segments come from the pool
// (their old bytes behind the write position), every message reads back,
// Verify finds nothing wrong, and a clean close and reopen — the log's end
// followed by old bytes, not zeros — keeps it all.
func TestRecycledSegments(t *testing.T) {
	for _, reg := range Backends() {
		if reg.Volatile {
			continue
		}
		if !reg.DirectIO { // writes through the page cache: refused (TestRecyclingStaysOn)
			continue
		}
		t.Run(reg.Name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			o := recycleOptions(reg.Name)
			if os.Getenv("RECYCLE_DEBUG") != "" {
				o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
			}
			s := openStore(t, dir, o)
			ageStore(t, s, 400)
			res := putFixed(t, s, 400, 700)
			st := s.Stats()
			if st.SegmentsRecycled < 2 {
				t.Fatalf("%d segments made from the pool (%d pooled, %d retired): want ≥ 2", st.SegmentsRecycled, st.SegmentsPooled, st.SegmentsRetired)
			}
			checkMessages(t, s, res, 400)
			rep, err := s.Verify(ctx)
			if err != nil || len(rep.Problems) > 0 {
				t.Fatalf("verify: %v %v", err, rep.Problems)
			}
			last := s.log.queue.Last()
			tail := make([]byte, 64)
			if n, _ := last.ReadAt(tail, last.WrotePosition()); n > 0 {
				t.Logf("bytes after the end: % x", tail[:n])
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if stale := oldBytesAfterEnd(t, dir, st.WroteOffset, o.SegmentSizeBytes); !stale {
				t.Fatal("the active segment holds zeros after its end: the test needs a reused one")
			}
			s = openStore(t, dir, o)
			defer s.Close()
			if got := s.MaxOffset(); got != st.WroteOffset {
				t.Fatalf("after a clean reopen the log ends at %d, it ended at %d", got, st.WroteOffset)
			}
			checkMessages(t, s, res, 400)
			more := putFixed(t, s, 700, 800)
			checkMessages(t, s, more, 700)
		})
	}
}

// TestReopenKeepsTheOldTail: after a clean close a reused segment's bytes
// past the end are a pooled file's old records, and a clean reopen leaves
// them (reading and writing up to a segment of them cost every restart);
// the log still ends where it did and takes appends. After a crash the
// tail past the cut is zeroed: there a complete record of this log may
// follow a torn one, and a later append of the same length would bring it
// back.
func TestReopenKeepsTheOldTail(t *testing.T) {
	for _, backend := range []string{"uring-direct"} {
		t.Run(backend, func(t *testing.T) {
			dir, o, res, end := agedClosedStore(t, backend)
			if !oldBytesAfterEnd(t, dir, end, o.SegmentSizeBytes) {
				t.Fatal("the active segment holds zeros after its end: the test needs a reused one")
			}
			s := openStore(t, dir, o)
			if !oldBytesAfterEnd(t, dir, end, o.SegmentSizeBytes) {
				t.Fatal("a clean reopen zeroed the reused segment's tail")
			}
			if got := s.MaxOffset(); got != end {
				t.Fatalf("after a clean reopen the log ends at %d, it ended at %d", got, end)
			}
			more := putFixed(t, s, 700, 720)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openStore(t, dir, o)
			checkMessages(t, s, res, 400)
			checkMessages(t, s, more, 700)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			// A crash that tore the second-newest record: the newest,
			// complete, lies past the cut.
			torn, newest := more[len(more)-2], more[len(more)-1]
			seg := patchLog(t, dir, o.SegmentSizeBytes, torn.PhysicalOffset+int64(torn.Size)-8, []byte{0xFF, 0xFF})
			fakeCrash(t, dir, torn.PhysicalOffset)
			s = openStore(t, dir, o)
			defer s.Close()
			if got := s.MaxOffset(); got != torn.PhysicalOffset {
				t.Fatalf("after the crash the log ends at %d, want it cut at the torn record, %d", got, torn.PhysicalOffset)
			}
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			at := newest.PhysicalOffset % o.SegmentSizeBytes
			for i, c := range b[at : at+int64(newest.Size)] {
				if c != 0 {
					t.Fatalf("after the crash the record past the cut still has byte %#x at %d: recovery must zero the tail", c, newest.PhysicalOffset+int64(i))
				}
			}
			checkMessages(t, s, more[:len(more)-2], 700)
		})
	}
}

// patchLog writes b over the closed store's CommitLog at the log offset
// off and returns the file it wrote.
func patchLog(t *testing.T, dir string, segSize, off int64, b []byte) string {
	t.Helper()
	path := segmentPath(dir, off-off%segSize)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, off%segSize); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// agedClosedStore makes a store on backend whose messages 400–699 went
// into segments taken from the pool, closed cleanly; it returns the
// store's directory and options, the Puts' results and the log's end.
func agedClosedStore(t *testing.T, backend string) (string, Options, []PutResult, int64) {
	t.Helper()
	dir := t.TempDir()
	o := recycleOptions(backend)
	s := openStore(t, dir, o)
	ageStore(t, s, 400)
	res := putFixed(t, s, 400, 700)
	st := s.Stats()
	if st.SegmentsRecycled < 2 {
		t.Fatalf("%d segments came from the pool, want at least 2", st.SegmentsRecycled)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, o, res, st.WroteOffset
}

// fakeCrash makes the closed store in dir look as if its last run had
// crashed with the CommitLog durable up to durable: the abort file is
// there, and the checkpoint's flushed offset says so.
func fakeCrash(t *testing.T, dir string, durable int64) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, abortFileName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cpPath := filepath.Join(dir, checkpointFileName)
	cp, err := os.ReadFile(cpPath)
	if err != nil {
		t.Fatal(err)
	}
	binary.BigEndian.PutUint64(cp[24:], uint64(durable))
	if err := os.WriteFile(cpPath, cp, 0o644); err != nil {
		t.Fatal(err)
	}
}

// oldBytesAfterEnd reports whether the CommitLog file holding end has
// bytes that are not zero after it.
func oldBytesAfterEnd(t *testing.T, dir string, end, segSize int64) bool {
	t.Helper()
	from := end - end%segSize
	b, err := os.ReadFile(filepath.Join(dir, commitLogDirName, fmt.Sprintf("%020d", from)))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range b[end-from:] {
		if c != 0 {
			return true
		}
	}
	return false
}

// TestRecycledTornRecordIsCut: after a crash, the last record of a reused
// segment holds the properties the file held before (same length, other
// values) — what a write whose last page never reached the device leaves
// over a pooled file. BODYCRC, the lengths and the 0x02 at the end all
// pass; the whole-record checksum must not, so recovery cuts the log
// before the record instead of serving it with another message's keys.
func TestRecycledTornRecordIsCut(t *testing.T) {
	for _, backend := range []string{"uring-direct"} {
		t.Run(backend, func(t *testing.T) {
			dir, o, res, _ := agedClosedStore(t, backend)
			last := res[len(res)-1]
			// The old use of the file: the same record, another message's keys.
			b, err := os.ReadFile(segmentPath(dir, last.PhysicalOffset-last.PhysicalOffset%o.SegmentSizeBytes))
			if err != nil {
				t.Fatal(err)
			}
			pos := last.PhysicalOffset % o.SegmentSizeBytes
			i := strings.Index(string(b[pos:pos+int64(last.Size)]), "U00000699")
			if i < 0 {
				t.Fatal("the last record has no UNIQ_KEY U00000699")
			}
			patchLog(t, dir, o.SegmentSizeBytes, last.PhysicalOffset+int64(i), []byte("U00000007"))
			// A crash: the checkpoint knew durable only what came before
			// the last record.
			fakeCrash(t, dir, last.PhysicalOffset)
			s := openStore(t, dir, o)
			defer s.Close()
			if got := s.MaxOffset(); got != last.PhysicalOffset {
				r, rerr := s.ReadMessage(context.Background(), last.PhysicalOffset)
				u, _ := r.UniqKey()
				t.Fatalf("recovery kept the log to %d, want it cut at %d; the record there reads UNIQ_KEY %q (%v)", got, last.PhysicalOffset, u, rerr)
			}
			checkMessages(t, s, res[:len(res)-1], 400)
		})
	}
}

// TestPooledFileWaitsForItsReaders: a segment retention retires while a
// reader holds it is not taken until the reader lets go, and its bytes
// stay the old ones meanwhile.
func TestPooledFileWaitsForItsReaders(t *testing.T) {
	dir := t.TempDir()
	o := recycleOptions("uring-direct")
	o.RecycleSegments = 1
	s := openStore(t, dir, o)
	defer s.Close()
	putFixed(t, s, 0, 300)
	first := s.log.queue.First()
	if !first.Retain() {
		t.Fatal("retain the first segment")
	}
	before := make([]byte, 4096)
	if _, err := first.ReadAt(before, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CleanExpired(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.pool.len() != 1 {
		t.Fatalf("%d files pooled, want 1", s.pool.len())
	}
	if ps := s.pool.take(1 << 40); ps != nil {
		t.Fatalf("took %s while a reader holds it", ps.path)
	}
	after := make([]byte, 4096)
	if _, err := first.ReadAt(after, 0); err != nil || string(after) != string(before) {
		t.Fatalf("the reader's bytes changed (%v)", err)
	}
	first.Release()
	ps := s.pool.take(1 << 40)
	if ps == nil {
		t.Fatal("the released file cannot be taken")
	}
	if ps.oldFrom != 0 || !strings.HasSuffix(ps.path, segmentRecycleName(0)) {
		t.Fatalf("pooled %s from %d", ps.path, ps.oldFrom)
	}
	if s.pool.take(ps.oldFrom) != nil {
		t.Fatal("a file was taken for an offset it held")
	}
}

func segmentRecycleName(from int64) string { return filepath.Base(pooledName("", from)) }

// TestPrepareZeroesTheOldBlank: the end-of-segment blank of a pooled file
// is zeroed before reuse (it carries no offset of its own), and nothing
// before it is touched.
func TestPrepareZeroesTheOldBlank(t *testing.T) {
	const size, maxRecord = 64 << 10, 4 << 10
	path := filepath.Join(t.TempDir(), segmentRecycleName(0))
	data := make([]byte, size)
	for i := range data[:size-3000] {
		data[i] = 0xAA
	}
	record.PutBlank(data[size-3000:], 3000)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	p := &segmentPool{size: size, tail: maxRecord + record.BlankSize}
	if err := p.prepare(context.Background(), &pooledSegment{path: path}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blankAt := size - 3000
	for i := blankAt; i < blankAt+record.BlankSize; i++ {
		if got[i] != 0 {
			t.Fatalf("byte %d of the blank is 0x%02x after prepare", i-blankAt, got[i])
		}
	}
	if got[0] != 0xAA || got[blankAt-4097] != 0xAA {
		t.Fatal("prepare zeroed more than the blank's block")
	}
}

// TestRecyclingStaysOn: a store that recycled keeps writing and checking
// whole-record checksums after RecycleSegments goes back to 0, and its
// pooled files are removed; the in-memory backend and those that write
// through the page cache refuse the option.
func TestRecyclingStaysOn(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := recycleOptions("uring-direct")
	s := openStore(t, dir, o)
	ageStore(t, s, 300)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	o.RecycleSegments = 0
	s = openStore(t, dir, o)
	defer s.Close()
	res := putFixed(t, s, 300, 310)
	r, err := s.ReadMessage(ctx, res[0].PhysicalOffset)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := record.LookupProperty(r.Properties, record.PropRecordCRC); !ok {
		t.Fatalf("a record written after recycling stopped has no %s property: %q", record.PropRecordCRC, r.Properties)
	}
	if left := pooledFiles(t, dir); len(left) > 0 {
		t.Fatalf("pooled files %v left with RecycleSegments 0", left)
	}
	mem := Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{}), RecycleSegments: 2, Logger: quietLogger}
	if _, err := Open(ctx, t.TempDir(), memIndexSizes(mem)); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("RecycleSegments on the in-memory backend: %v", err)
	}
	for _, b := range []string{"mmap", "transient", "uring"} {
		if _, err := Open(ctx, t.TempDir(), recycleOptions(b)); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), b+" backend") {
			t.Fatalf("RecycleSegments on the %s backend: %v", b, err)
		}
	}
}

// TestRecyclingSlaveFollowsItsMaster: a slave with RecycleSegments starts
// reusing segments at the first replicated record that carries the
// whole-record checksum (its recovery checks every record from there), not
// before — replicating a master that does not recycle, it takes every
// record and reuses nothing — and from there on refuses a record without a
// valid one.
func TestRecyclingSlaveFollowsItsMaster(t *testing.T) {
	ctx := context.Background()
	mdir := t.TempDir()
	mo := recycleOptions("uring-direct")
	mo.RecycleSegments = 0
	master := openStore(t, mdir, mo)
	putFixed(t, master, 0, 20)
	so := recycleOptions("uring-direct")
	so.Role = Slave
	sdir := t.TempDir()
	slave := openStore(t, sdir, so)
	defer slave.Close()
	plainEnd := master.MaxOffset()
	if _, err := slave.AppendReplicated(ctx, 0, logBytes(t, master, 0, plainEnd)); err != nil {
		t.Fatalf("records without the checksum: %v", err)
	}
	if from := slave.log.crcFrom.Load(); from >= 0 || slave.pool.enabled.Load() {
		t.Fatalf("the slave recycles (checksums from %d) before its master writes checksums", from)
	}
	if err := master.Close(); err != nil {
		t.Fatal(err)
	}
	mo.RecycleSegments = 4 // the master starts recycling: its records carry the checksum
	master = openStore(t, mdir, mo)
	defer master.Close()
	res := putFixed(t, master, 20, 40)
	if _, err := slave.AppendReplicated(ctx, plainEnd, logBytes(t, master, plainEnd, master.MaxOffset())); err != nil {
		t.Fatal(err)
	}
	if from := slave.log.crcFrom.Load(); from != plainEnd || !slave.pool.enabled.Load() {
		t.Fatalf("the slave's checksums start at %d (pool enabled %v), want %d", from, slave.pool.enabled.Load(), plainEnd)
	}
	r, err := slave.ReadMessage(ctx, res[19].PhysicalOffset)
	if u, _ := r.UniqKey(); err != nil || u != "U00000039" {
		t.Fatalf("replicated record: %q %v", u, err)
	}
	// A record whose checksum does not hold is refused from now on.
	next := putFixed(t, master, 40, 41)[0]
	bad := logBytes(t, master, next.PhysicalOffset, next.PhysicalOffset+int64(next.Size))
	bad[len(bad)-2] ^= 1 // a digit of the checksum
	if _, err := slave.AppendReplicated(ctx, next.PhysicalOffset, bad); !errors.Is(err, ErrReplicaData) || !strings.Contains(err.Error(), "whole-record checksum") {
		t.Fatalf("a record with a wrong checksum: %v", err)
	}
}

// TestLastNonZero: the search for a pooled file's old blank looks only at
// the end's window, finds the last byte that is not zero, and reports -1
// for zeros.
func TestLastNonZero(t *testing.T) {
	const size = 200 << 10
	path := filepath.Join(t.TempDir(), "f")
	data := make([]byte, size)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		set    int64 // a byte made non-zero (-1: none)
		window int64
		want   int64
	}{
		{-1, 100 << 10, -1},
		{size - 1, 100 << 10, size - 1},
		{size - 70000, 100 << 10, size - 70000}, // in the second chunk read
		{size - 150000, 100 << 10, -1},          // before the window
		{10, size, 10},
	} {
		clear(data)
		if c.set >= 0 {
			data[c.set] = 1
		}
		if _, err := f.WriteAt(data, 0); err != nil {
			t.Fatal(err)
		}
		got, err := lastNonZero(f, size, c.window)
		if err != nil || got != c.want {
			t.Errorf("byte %d set, window %d: got %d (%v), want %d", c.set, c.window, got, err, c.want)
		}
	}
}

// TestFullDiskEmptiesThePool: pooled files are space; with the disk over
// DiskMaxUsedRatio retention removes them before anything else, and
// retires nothing into the pool while it deletes segments.
func TestFullDiskEmptiesThePool(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := recycleOptions("uring-direct")
	used := 10.0
	o.diskUsed = func(string) (float64, error) { return used, nil }
	s := openStore(t, dir, o)
	defer s.Close()
	ageStore(t, s, 300)
	putFixed(t, s, 300, 400) // a segment more for retention to delete
	retired := s.Stats().SegmentsRetired
	if s.Stats().SegmentsPooled == 0 {
		t.Fatal("nothing pooled before the full-disk pass")
	}
	used = 90
	if _, err := s.CleanExpired(ctx); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.SegmentsPooled != 0 || st.SegmentsRetired != retired {
		t.Fatalf("after a pass on a full disk: %d pooled, %d retired (were %d)", st.SegmentsPooled, st.SegmentsRetired, retired)
	}
	if left := pooledFiles(t, dir); len(left) > 0 {
		t.Fatalf("pooled files %v left on a full disk", left)
	}
}

// TestMadeAheadSegmentReturnsToThePool: the segment the allocation
// service made ahead and nobody wrote goes back to the pool at Close
// (named by the offset it was made for, so it is not taken for that
// offset), instead of waiting in the log's directory for the next open to
// remove it.
func TestMadeAheadSegmentReturnsToThePool(t *testing.T) {
	dir := t.TempDir()
	o := recycleOptions("uring-direct")
	s := openStore(t, dir, o)
	putFixed(t, s, 0, 150) // a roll or two: the next segment is made ahead
	end := s.MaxOffset()
	next := end - end%o.SegmentSizeBytes + o.SegmentSizeBytes
	waitFor(t, "the segment made ahead", func() bool {
		_, err := os.Stat(filepath.Join(dir, commitLogDirName, fmt.Sprintf("%020d", next)))
		return err == nil
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, commitLogDirName, fmt.Sprintf("%020d", next))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the segment made ahead at %d is still in the log's directory (%v)", next, err)
	}
	if _, err := os.Stat(filepath.Join(dir, commitLogDirName, segmentRecycleName(next))); err != nil {
		t.Fatalf("the segment made ahead is not in the pool: %v", err)
	}
	s = openStore(t, dir, o)
	defer s.Close()
	if st := s.Stats(); st.SegmentsPooled != 1 || s.MaxOffset() != end {
		t.Fatalf("reopened: %d pooled, log ends at %d (was %d)", st.SegmentsPooled, s.MaxOffset(), end)
	}
	if ps := s.pool.take(next); ps != nil {
		t.Fatalf("the pooled file was taken for the offset it was made for: %s", ps.path)
	}
}

// pooledFiles lists the pooled files in a store's CommitLog directory.
func pooledFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, commitLogDirName, "*"+segment.RecycleSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return names
}
