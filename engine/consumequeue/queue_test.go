package consumequeue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/faultfile"
)

const testRoot = "/store/consumequeue"

// unitFor is the unit test queues hold at queue offset i: records of
// varying size laid one after the other from physical offset 1000.
func unitFor(i int64) Unit {
	return Unit{PhysicalOffset: 1000 + i*300, Size: int32(100 + i%150), TagsCode: record.TagsCode(fmt.Sprintf("tag%d", i%5))}
}

func openQueue(t testing.TB, fs mappedfile.Backend, fileSize int64) *Queue {
	t.Helper()
	q, err := Open(context.Background(), Config{Dir: testRoot, Backend: fs, FileSizeBytes: fileSize}, "TopicTest", 3)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return q
}

func appendRange(t testing.TB, q *Queue, from, to int64) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := q.Append(context.Background(), i, unitFor(i)); err != nil {
			t.Fatalf("Append(%d): %v", i, err)
		}
	}
}

// checkQueue verifies offsets and every unit in [min, max).
func checkQueue(t *testing.T, q *Queue, minOffset, maxOffset int64) {
	t.Helper()
	if got := q.MinOffset(); got != minOffset {
		t.Errorf("MinOffset = %d, want %d", got, minOffset)
	}
	if got := q.MaxOffset(); got != maxOffset {
		t.Errorf("MaxOffset = %d, want %d", got, maxOffset)
	}
	wantPhys := int64(0)
	if maxOffset > minOffset {
		wantPhys = unitFor(maxOffset - 1).End()
	}
	// With nothing in [min, max) the last unit may be a pre-blank (0) or a
	// unit retention skipped: checked by the callers that know.
	if got := q.MaxPhysicalOffset(); got != wantPhys && (maxOffset == 0 || maxOffset > minOffset) {
		t.Errorf("MaxPhysicalOffset = %d, want %d", got, wantPhys)
	}
	for i := minOffset; i < maxOffset; i++ {
		u, err := q.Get(i)
		if err != nil || u != unitFor(i) {
			t.Fatalf("Get(%d) = %+v, %v; want %+v", i, u, err, unitFor(i))
		}
	}
	for _, off := range []int64{minOffset - 1, maxOffset} {
		if _, err := q.Get(off); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%d) outside [%d,%d): err %v, want ErrNotFound", off, minOffset, maxOffset, err)
		}
	}
}

func TestUnitLayout(t *testing.T) {
	if got := record.TagsCode("TagA"); got != 2598919 {
		t.Fatalf("TagsCode(TagA) = %d, want 2598919", got)
	}
	tests := []struct {
		name string
		unit Unit
		want []byte
	}{
		{"TagA", Unit{PhysicalOffset: 0x0102030405060708, Size: 0x0A0B0C0D, TagsCode: record.TagsCode("TagA")},
			[]byte{1, 2, 3, 4, 5, 6, 7, 8, 0x0A, 0x0B, 0x0C, 0x0D, 0, 0, 0, 0, 0x00, 0x27, 0xA8, 0x07}},
		{"negative tags code sign-extended", Unit{PhysicalOffset: 91, Size: 91, TagsCode: -2},
			[]byte{0, 0, 0, 0, 0, 0, 0, 91, 0, 0, 0, 91, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE}},
		{"pre-blank", Unit{Size: math.MaxInt32},
			[]byte{0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b [UnitSize]byte
			EncodeUnit(b[:], tt.unit)
			if !bytes.Equal(b[:], tt.want) {
				t.Fatalf("EncodeUnit = % x, want % x", b, tt.want)
			}
			if got := DecodeUnit(b[:]); got != tt.unit {
				t.Fatalf("DecodeUnit = %+v, want %+v", got, tt.unit)
			}
		})
	}
	// Through the queue: the bytes on "disk" after a flush.
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	q := openQueue(t, fs, 0)
	ctx := context.Background()
	if err := q.Append(ctx, 0, tests[0].unit); err != nil {
		t.Fatal(err)
	}
	if err := q.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	durable, ok := fs.Durable(filepath.Join(testRoot, "TopicTest", "3", "00000000000000000000"))
	if !ok {
		t.Fatal("no file 00000000000000000000")
	}
	if len(durable) != DefaultFileSizeBytes || !bytes.Equal(durable[:UnitSize], tests[0].want) || !allZero(durable[UnitSize:]) {
		t.Fatalf("file: %d bytes, first unit % x", len(durable), durable[:UnitSize])
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func TestFileNames(t *testing.T) {
	tests := []struct {
		name      string
		fileSize  int64
		from, to  int64
		wantFiles []string
	}{
		{"default size rolls at 300000 units", 0, 0, 300001, []string{"00000000000000000000", "00000000000006000000"}},
		{"default size starting in the second file", 0, 300005, 300006, []string{"00000000000006000000"}},
		{"10 units per file", 200, 0, 25, []string{"00000000000000000000", "00000000000000000200", "00000000000000000400"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
			q := openQueue(t, fs, tt.fileSize)
			defer q.Close()
			appendRange(t, q, tt.from, tt.to)
			names, err := fs.List(q.Dir())
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(names) != fmt.Sprint(tt.wantFiles) {
				t.Fatalf("files %v, want %v", names, tt.wantFiles)
			}
			checkQueue(t, q, tt.from, tt.to)
		})
	}
}

func TestReadAcrossFiles(t *testing.T) {
	for _, buffered := range []bool{false, true} {
		t.Run(fmt.Sprintf("buffered=%v", buffered), func(t *testing.T) {
			q := openQueue(t, mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: buffered}), 200)
			defer q.Close()
			appendRange(t, q, 0, 37)
			checkQueue(t, q, 0, 37)
			tests := []struct {
				from    int64
				dstLen  int
				wantLen int
			}{
				{0, 10, 10}, {0, 100, 10}, {8, 10, 2}, {10, 3, 3}, {30, 100, 7}, {36, 1, 1}, {5, 0, 0},
			}
			for _, tt := range tests {
				dst := make([]Unit, tt.dstLen)
				n, err := q.Read(tt.from, dst)
				if err != nil || n != tt.wantLen {
					t.Fatalf("Read(%d, [%d]) = %d, %v; want %d", tt.from, tt.dstLen, n, err, tt.wantLen)
				}
				for i := 0; i < n; i++ {
					if dst[i] != unitFor(tt.from+int64(i)) {
						t.Fatalf("Read(%d)[%d] = %+v", tt.from, i, dst[i])
					}
				}
			}
			// Reading everything in a loop crosses every file.
			var all []Unit
			buf := make([]Unit, 7)
			for off := q.MinOffset(); off < q.MaxOffset(); {
				n, err := q.Read(off, buf)
				if err != nil || n == 0 {
					t.Fatalf("Read(%d): %d, %v", off, n, err)
				}
				all = append(all, buf[:n]...)
				off += int64(n)
			}
			if len(all) != 37 {
				t.Fatalf("read %d units, want 37", len(all))
			}
			if _, err := q.Read(37, buf); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Read past the end: %v", err)
			}
		})
	}
}

func TestReDispatch(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, mappedfile.NewMemFS(mappedfile.MemOptions{}), 200)
	defer q.Close()
	appendRange(t, q, 0, 15)
	appendRange(t, q, 3, 15) // idempotent
	checkQueue(t, q, 0, 15)
	tests := []struct {
		name   string
		offset int64
		unit   Unit
		want   error
	}{
		{"other physical offset", 4, Unit{PhysicalOffset: 5, Size: unitFor(4).Size, TagsCode: unitFor(4).TagsCode}, ErrConflict},
		{"other size", 12, Unit{PhysicalOffset: unitFor(12).PhysicalOffset, Size: 1, TagsCode: unitFor(12).TagsCode}, ErrConflict},
		{"other tags", 14, Unit{PhysicalOffset: unitFor(14).PhysicalOffset, Size: unitFor(14).Size, TagsCode: 7}, ErrConflict},
		{"gap", 16, unitFor(16), ErrGap},
		{"negative offset", -1, unitFor(0), mappedfile.ErrInvalidArgument},
		{"zero size", 15, Unit{PhysicalOffset: 10}, mappedfile.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := q.Append(ctx, tt.offset, tt.unit); !errors.Is(err, tt.want) {
				t.Fatalf("Append(%d, %+v) = %v, want %v", tt.offset, tt.unit, err, tt.want)
			}
		})
	}
	checkQueue(t, q, 0, 15)
	// The repair after a conflict: truncate at the offset, append again.
	if err := q.TruncateAt(ctx, 12); err != nil {
		t.Fatal(err)
	}
	checkQueue(t, q, 0, 12)
	appendRange(t, q, 12, 16)
	checkQueue(t, q, 0, 16)
}

func TestPreBlankFill(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		start     int64
		wantFile  string
		wantBlank int
	}{
		{"inside the second file", 13, "00000000000000000200", 3},
		{"at a file boundary", 20, "00000000000000000400", 0},
		{"last unit of a file", 9, "00000000000000000000", 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
			q := openQueue(t, fs, 200)
			appendRange(t, q, tt.start, tt.start+15)
			checkQueue(t, q, tt.start, tt.start+15)
			if err := q.Flush(ctx, 0); err != nil {
				t.Fatal(err)
			}
			durable, ok := fs.Durable(filepath.Join(q.Dir(), tt.wantFile))
			if !ok {
				t.Fatalf("no file %s", tt.wantFile)
			}
			var blank [UnitSize]byte
			EncodeUnit(blank[:], Unit{Size: math.MaxInt32})
			for i := 0; i < tt.wantBlank; i++ {
				if !bytes.Equal(durable[i*UnitSize:(i+1)*UnitSize], blank[:]) {
					t.Fatalf("unit %d of %s = % x, want a pre-blank", i, tt.wantFile, durable[i*UnitSize:(i+1)*UnitSize])
				}
			}
			if got := DecodeUnit(durable[tt.wantBlank*UnitSize:]); got != unitFor(tt.start) {
				t.Fatalf("first real unit = %+v", got)
			}
			// A re-dispatch of a unit before the start is not checkable: nil.
			if tt.start > 0 {
				if err := q.Append(ctx, tt.start-1, unitFor(tt.start-1)); err != nil {
					t.Fatalf("Append below MinOffset: %v", err)
				}
			}
			q.Close()
			q = openQueue(t, fs, 200)
			defer q.Close()
			checkQueue(t, q, tt.start, tt.start+15)
			appendRange(t, q, tt.start+15, tt.start+17)
			checkQueue(t, q, tt.start, tt.start+17)
		})
	}
}

func TestReopen(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		count int64
	}{
		{"one unit", 1}, {"part of a file", 7}, {"exactly one file", 10}, {"exactly five files", 50}, {"many files", 93},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
			q := openQueue(t, fs, 200)
			appendRange(t, q, 0, tt.count)
			if err := q.Flush(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			q = openQueue(t, fs, 200)
			defer q.Close()
			checkQueue(t, q, 0, tt.count)
			if q.FlushedOffset() != tt.count {
				t.Errorf("FlushedOffset = %d", q.FlushedOffset())
			}
			appendRange(t, q, tt.count, tt.count+12)
			checkQueue(t, q, 0, tt.count+12)
		})
	}
	t.Run("never appended", func(t *testing.T) {
		q := openQueue(t, mappedfile.NewMemFS(mappedfile.MemOptions{}), 200)
		defer q.Close()
		checkQueue(t, q, 0, 0)
	})
	t.Run("wrong file size", func(t *testing.T) {
		fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
		q := openQueue(t, fs, 200)
		appendRange(t, q, 0, 3)
		q.Close()
		_, err := Open(ctx, Config{Dir: testRoot, Backend: fs, FileSizeBytes: 400}, "TopicTest", 3)
		if !errors.Is(err, mappedfile.ErrSizeMismatch) {
			t.Fatalf("Open with another size: %v", err)
		}
	})
}

func TestTruncateByPhysical(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		start     int64
		physical  int64
		wantMax   int64
		wantFiles int
	}{
		{"inside the last file", 0, unitFor(33).PhysicalOffset, 33, 4},
		{"between two records", 0, unitFor(33).PhysicalOffset - 1, 33, 4},
		{"at a file boundary", 0, unitFor(30).PhysicalOffset, 30, 4},
		{"inside an older file", 0, unitFor(12).PhysicalOffset, 12, 2},
		{"past the end", 0, unitFor(40).End(), 38, 4},
		{"everything", 0, 0, 0, 0},
		{"everything after pre-blanks keeps them", 5, unitFor(5).PhysicalOffset, 5, 1},
		{"down to the pre-blanks", 5, unitFor(8).PhysicalOffset, 8, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
			q := openQueue(t, fs, 200)
			defer q.Close()
			appendRange(t, q, tt.start, 38)
			if err := q.Flush(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if err := q.TruncateByPhysical(ctx, tt.physical); err != nil {
				t.Fatal(err)
			}
			wantMin := min(tt.start, tt.wantMax)
			checkQueue(t, q, wantMin, tt.wantMax)
			if names, _ := fs.List(q.Dir()); len(names) != tt.wantFiles {
				t.Fatalf("files %v, want %d", names, tt.wantFiles)
			}
			// The dropped units are zeros on disk.
			if tt.wantFiles > 0 {
				name := fmt.Sprintf("%020d", tt.wantMax*UnitSize/200*200)
				durable, _ := fs.Durable(filepath.Join(q.Dir(), name))
				if !allZero(durable[tt.wantMax*UnitSize%200:]) {
					t.Fatalf("bytes after the truncation point are not zero in %s", name)
				}
			}
			// Dispatch continues.
			next := tt.wantMax
			if next == 0 {
				next = tt.start
			}
			appendRange(t, q, next, 45)
			checkQueue(t, q, min(tt.start, next), 45)
		})
	}
}

func TestDeleteBefore(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name        string
		minPhysical int64
		wantDeleted int
		wantMin     int64
	}{
		{"nothing", 0, 0, 0},
		{"inside the first file", unitFor(4).PhysicalOffset, 0, 4},
		{"end of the first file's last record", unitFor(9).End(), 1, 10},
		{"just before that", unitFor(9).End() - 1, 0, 10},
		{"three files", unitFor(33).PhysicalOffset, 3, 33},
		{"past everything keeps the last file", unitFor(100).PhysicalOffset, 3, 38},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
			q := openQueue(t, fs, 200)
			appendRange(t, q, 0, 38)
			n, err := q.DeleteBefore(ctx, tt.minPhysical)
			if err != nil || n != tt.wantDeleted {
				t.Fatalf("DeleteBefore = %d, %v; want %d", n, err, tt.wantDeleted)
			}
			checkQueue(t, q, tt.wantMin, 38)
			if got := q.MaxPhysicalOffset(); got != unitFor(37).End() {
				t.Errorf("MaxPhysicalOffset = %d", got)
			}
			if names, _ := fs.List(q.Dir()); len(names) != 4-tt.wantDeleted {
				t.Fatalf("files %v", names)
			}
			if err := q.Flush(ctx, 0); err != nil {
				t.Fatal(err)
			}
			q.Close()
			// After a restart MinOffset is the first unit of the first file
			// until the engine applies DeleteBefore again.
			q = openQueue(t, fs, 200)
			defer q.Close()
			checkQueue(t, q, int64(tt.wantDeleted)*10, 38)
			if _, err := q.DeleteBefore(ctx, tt.minPhysical); err != nil {
				t.Fatal(err)
			}
			checkQueue(t, q, tt.wantMin, 38)
		})
	}
}

// TestCrash appends, flushes part of it, appends more, crashes the MemFS and
// recovers as the engine does: reopen, truncate to the CommitLog's end,
// re-dispatch every record (repairing conflicts). The flushed units must
// survive, the recovered end must be a unit boundary, and after the
// re-dispatch the queue must hold exactly what was written.
func TestCrash(t *testing.T) {
	for _, tail := range []mappedfile.TornTail{mappedfile.TornNone, mappedfile.TornGarbage, mappedfile.TornPartialPage, mappedfile.TornRandomPages} {
		t.Run(tail.String(), func(t *testing.T) {
			var pastFlush, conflicts int
			for seed := uint64(0); seed < 60; seed++ {
				p, c := crashOnce(t, tail, seed)
				pastFlush += p
				conflicts += c
			}
			t.Logf("%v: %d seeds recovered units past the flush, %d conflicts repaired", tail, pastFlush, conflicts)
			if tail == mappedfile.TornPartialPage && pastFlush == 0 {
				t.Fatal("no seed kept an unflushed unit: the test does not exercise torn tails")
			}
		})
	}
}

func crashOnce(t *testing.T, tail mappedfile.TornTail, seed uint64) (pastFlush, conflicts int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	q := openQueue(t, fs, 4000) // 200 units: one page and a bit
	written := 50 + rng.Int64N(500)
	flushed := rng.Int64N(written + 1)
	appendRange(t, q, 0, flushed)
	if err := q.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	appendRange(t, q, flushed, written)
	fs.Crash(tail, rng)
	fs.Restart()

	q = openQueue(t, fs, 4000)
	defer q.Close()
	if got := q.MaxOffset(); got < flushed {
		t.Fatalf("seed %d: MaxOffset %d after reopen, %d units were flushed", seed, got, flushed)
	} else if got > flushed {
		pastFlush = 1
	}
	if tail == mappedfile.TornNone && q.MaxOffset() != flushed {
		t.Fatalf("seed %d: MaxOffset %d after a clean tail, want %d", seed, q.MaxOffset(), flushed)
	}
	for i := int64(0); i < flushed; i++ {
		if u, err := q.Get(i); err != nil || u != unitFor(i) {
			t.Fatalf("seed %d: flushed unit %d = %+v, %v", seed, i, u, err)
		}
	}
	if err := q.TruncateByPhysical(ctx, unitFor(written-1).End()); err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < written; i++ {
		err := q.Append(ctx, i, unitFor(i))
		if errors.Is(err, ErrConflict) {
			conflicts++
			if err = q.TruncateAt(ctx, i); err == nil {
				err = q.Append(ctx, i, unitFor(i))
			}
		}
		if err != nil {
			t.Fatalf("seed %d: re-dispatch %d: %v", seed, i, err)
		}
	}
	checkQueue(t, q, 0, written)
	return pastFlush, conflicts
}

func TestList(t *testing.T) {
	ctx := context.Background()
	mem := mappedfile.NewMemFS(mappedfile.MemOptions{})
	appendRange(t, openQueue(t, mem, 200), 0, 1)
	if got, err := List(testRoot, mem); err != nil || len(got) != 1 || !slices.Equal(got["TopicTest"], []int32{3}) {
		t.Fatalf("List on MemFS = %v, %v; want map[TopicTest:[3]] (MemFS lists its directories)", got, err)
	}
	// Faulty over an OS backend is a Lister that answers ErrUnsupported:
	// List reads the OS file system.
	backend := mmapBackend(t)
	root := t.TempDir()
	for _, tq := range []struct {
		topic string
		id    int32
	}{{"TopicA", 0}, {"TopicA", 10}, {"TopicA", 2}, {"%RETRY%group", 0}} {
		q, err := Open(ctx, Config{Dir: root, Backend: backend, FileSizeBytes: 200}, tq.topic, tq.id)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Append(ctx, 0, unitFor(0)); err != nil {
			t.Fatal(err)
		}
		q.Close()
	}
	// Opening without appending creates nothing.
	q, err := Open(ctx, Config{Dir: root, Backend: backend, FileSizeBytes: 200}, "Untouched", 1)
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	got, err := List(root, mmapBackend(t))
	if err != nil {
		t.Fatal(err)
	}
	if viaFaulty, err := List(root, faultfile.NewFaulty(backend, faultfile.NewFaults())); err != nil || fmt.Sprint(viaFaulty) != fmt.Sprint(got) {
		t.Fatalf("List through Faulty = %v, %v", viaFaulty, err)
	}
	if want := "map[%RETRY%group:[0] TopicA:[0 2 10]]"; fmt.Sprint(got) != want {
		t.Fatalf("List = %v, want %s", got, want)
	}
}

func TestOpenArguments(t *testing.T) {
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	tests := []struct {
		name     string
		topic    string
		id       int32
		fileSize int64
	}{
		{"empty topic", "", 0, 0}, {"topic with a slash", "a/b", 0, 0}, {"dot dot", "..", 0, 0},
		{"negative queue id", "T", -1, 0}, {"size not a multiple of 20", "T", 0, 210}, {"negative size", "T", 0, -20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(context.Background(), Config{Dir: testRoot, Backend: fs, FileSizeBytes: tt.fileSize}, tt.topic, tt.id)
			if !errors.Is(err, mappedfile.ErrInvalidArgument) {
				t.Fatalf("Open: %v", err)
			}
		})
	}
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, mappedfile.NewMemFS(mappedfile.MemOptions{}), 200)
	appendRange(t, q, 0, 3)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Append(ctx, 3, unitFor(3)); !errors.Is(err, mappedfile.ErrClosed) {
		t.Errorf("Append after Close: %v", err)
	}
	if _, err := q.Get(0); !errors.Is(err, mappedfile.ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
	if err := q.Close(); !errors.Is(err, mappedfile.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

// TestConcurrentReaders runs readers against the appender, the flusher and
// retention; run it with -race.
func TestConcurrentReaders(t *testing.T) {
	ctx := context.Background()
	q := openQueue(t, mappedfile.NewMemFS(mappedfile.MemOptions{}), 200)
	defer q.Close()
	const total = 2000
	done := make(chan struct{})
	errs := make(chan error, 3)
	for r := 0; r < 2; r++ {
		go func() {
			buf := make([]Unit, 8)
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				from := q.MinOffset()
				n, err := q.Read(from, buf)
				if err != nil && !errors.Is(err, ErrNotFound) {
					errs <- err
					return
				}
				for i := 0; i < n; i++ {
					if buf[i] != unitFor(from+int64(i)) {
						errs <- fmt.Errorf("read %d: %+v", from+int64(i), buf[i])
						return
					}
				}
			}
		}()
	}
	go func() {
		for {
			select {
			case <-done:
				errs <- nil
				return
			default:
			}
			if err := q.Flush(ctx, 0); err != nil {
				errs <- err
				return
			}
		}
	}()
	for i := int64(0); i < total; i++ {
		if err := q.Append(ctx, i, unitFor(i)); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 {
			if _, err := q.DeleteBefore(ctx, unitFor(i-50).PhysicalOffset); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(done)
	for i := 0; i < 3; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestTruncateAllCrashLeavesAPrefix cuts the power at every operation of a
// truncation that empties the queue (the repair of a torn first unit):
// whatever unsynced removals survive, the files left must start at the
// queue's start — later units without the ones before them would move the
// queue's minimum past messages that exist.
func TestTruncateAllCrashLeavesAPrefix(t *testing.T) {
	ctx := context.Background()
	for seed := uint64(0); seed < 20; seed++ {
		for at := int64(1); at <= 12; at++ {
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
			q := openQueue(t, fs, 400) // 20 units a file
			appendRange(t, q, 0, 70)
			if err := q.Flush(ctx, 0); err != nil {
				t.Fatal(err)
			}
			fs.ArmCrash(at, mappedfile.TornNone, rand.New(rand.NewPCG(seed, uint64(at))))
			_ = q.TruncateAt(ctx, 0)
			fs.Disarm()
			q.Close()
			fs.Restart()
			q = openQueue(t, fs, 400)
			if q.MaxOffset() > 0 && q.MinOffset() != 0 {
				t.Fatalf("seed %d, power loss at operation %d of the truncation: the queue holds [%d, %d), units before %d are gone",
					seed, at, q.MinOffset(), q.MaxOffset(), q.MinOffset())
			}
			q.Close()
		}
	}
}

// TestAppendUnitsMatchesAppend: AppendUnits writes exactly what Append
// writes unit by unit — across file boundaries, from an empty queue that
// starts past 0, re-dispatching units already there (verified, not
// duplicated), and refusing a conflicting one and a gap.
func TestAppendUnitsMatchesAppend(t *testing.T) {
	ctx := context.Background()
	be := mappedfile.NewMemFS(mappedfile.MemOptions{})
	open := func(name string) *Queue {
		q, err := Open(ctx, Config{Dir: "/cq-" + name, Backend: be, FileSizeBytes: 7 * UnitSize}, "T", 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		return q
	}
	one, batch := open("one"), open("batch")
	units := make([]Unit, 40)
	for i := range units {
		units[i] = Unit{PhysicalOffset: int64(1000 + 100*i), Size: 100, TagsCode: int64(i)}
	}
	const start = 3
	for i, u := range units {
		if err := one.Append(ctx, start+int64(i), u); err != nil {
			t.Fatal(err)
		}
	}
	for _, run := range [][2]int{{0, 1}, {1, 9}, {9, 10}, {10, 33}, {33, 40}} {
		if err := batch.AppendUnits(ctx, start+int64(run[0]), units[run[0]:run[1]]); err != nil {
			t.Fatalf("units %v: %v", run, err)
		}
	}
	if err := batch.AppendUnits(ctx, start+5, units[5:12]); err != nil { // re-dispatch
		t.Fatalf("re-dispatch: %v", err)
	}
	for _, q := range []*Queue{one, batch} {
		if q.MinOffset() != start || q.MaxOffset() != start+int64(len(units)) {
			t.Fatalf("queue [%d, %d), want [%d, %d)", q.MinOffset(), q.MaxOffset(), start, start+len(units))
		}
	}
	for i := range units {
		a, errA := one.Get(start + int64(i))
		b, errB := batch.Get(start + int64(i))
		if errA != nil || errB != nil || a != b || b != units[i] {
			t.Fatalf("unit %d: Append %+v %v, AppendUnits %+v %v", i, a, errA, b, errB)
		}
	}
	bad := units[7]
	bad.Size++
	if err := batch.AppendUnits(ctx, start+6, []Unit{units[6], bad}); !errors.Is(err, ErrConflict) {
		t.Fatalf("conflicting re-dispatch: %v, want ErrConflict", err)
	}
	if err := batch.AppendUnits(ctx, start+int64(len(units))+1, units[:1]); !errors.Is(err, ErrGap) {
		t.Fatalf("append past the end: %v, want ErrGap", err)
	}
}
