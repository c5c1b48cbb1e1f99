package indexfile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/faultfile"
)

const testDir = "/store/index"

// baseTime is the store time of the first test record, a whole second.
var baseTime = time.Date(2024, 3, 5, 6, 7, 8, 0, time.Local)

func fixedNow() time.Time { return baseTime.Add(9 * time.Millisecond) }

type putCall struct {
	key       string
	physical  int64
	timestamp int64
}

func openIndex(t testing.TB, backend mappedfile.Backend, slots, maxEntries int) *Index {
	t.Helper()
	x, err := Open(context.Background(), Config{Dir: testDir, Backend: backend, SlotCount: slots, MaxEntries: maxEntries, Now: fixedNow})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return x
}

func putAll(t testing.TB, x *Index, calls []putCall) {
	t.Helper()
	for _, c := range calls {
		if err := x.Put(context.Background(), c.key, c.physical, c.timestamp); err != nil {
			t.Fatalf("Put(%+v): %v", c, err)
		}
	}
}

// model is what a query must return over calls: matching hash and time,
// newest first. (Calls go to files in order, so "newest file first, newest
// entry first" is simply reverse order when the time window covers whole
// files; the tests pick windows for which that holds.)
func model(calls []putCall, key string, begin, end int64, max int) []int64 {
	hash := record.IndexKeyHash(key)
	var out []int64
	for i := len(calls) - 1; i >= 0 && len(out) < max; i-- {
		c := calls[i]
		if record.IndexKeyHash(c.key) == hash && c.timestamp >= begin && c.timestamp <= end {
			out = append(out, c.physical)
		}
	}
	return out
}

func query(t testing.TB, x *Index, key string, begin, end int64, max int) []int64 {
	t.Helper()
	got, err := x.Query(context.Background(), key, begin, end, max)
	if err != nil {
		t.Fatalf("Query(%s): %v", key, err)
	}
	return got
}

func checkQueries(t *testing.T, x *Index, calls []putCall, keys []string) {
	t.Helper()
	for _, key := range keys {
		want := model(calls, key, 0, 1<<62, 1<<30)
		if got := query(t, x, key, 0, 1<<62, 1<<30); !slices.Equal(got, want) {
			t.Fatalf("Query(%s) = %v, want %v", key, got, want)
		}
	}
}

// calls builds n puts over keys, one record per call, one second apart.
func makeCalls(n int, keys []string) []putCall {
	calls := make([]putCall, n)
	for i := range calls {
		calls[i] = putCall{key: keys[i%len(keys)], physical: 1000 + int64(i)*100, timestamp: baseTime.UnixMilli() + int64(i)*1000}
	}
	return calls
}

func testKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("TopicTest#key-%d", i)
	}
	return keys
}

func TestLayoutBytes(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	const slots, maxEntries = 7, 5
	x := openIndex(t, fs, slots, maxEntries)
	t0 := baseTime.UnixMilli() + 123
	calls := []putCall{
		{"TopicA#k1", 4096, t0},
		{"TopicA#k2", 8192, t0 + 2500},
		{"TopicA#k1", 9000, t0 + 7999},
	}
	putAll(t, x, calls)
	if err := x.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	name := "20240305060708009"
	if files := x.Files(); len(files) != 1 || files[0].Name != name {
		t.Fatalf("files %+v, want one named %s", files, name)
	}
	got, ok := fs.Durable(filepath.Join(testDir, name))
	if !ok {
		t.Fatal("no durable file")
	}
	// Build the expected bytes straight from docs/formats.md.
	want := make([]byte, 40+slots*4+maxEntries*20)
	be := binary.BigEndian
	be.PutUint64(want[0:], uint64(t0))
	be.PutUint64(want[8:], uint64(t0+7999))
	be.PutUint64(want[16:], 4096)
	be.PutUint64(want[24:], 9000)
	be.PutUint32(want[32:], 3) // hashSlotCount: every put
	be.PutUint32(want[36:], 4) // indexCount: 1 + 3 entries
	slotOf := map[string]int32{}
	for n, c := range calls {
		entry := int32(n + 1)
		hash := record.IndexKeyHash(c.key)
		slot := int(hash) % slots
		pos := 40 + slots*4 + int(entry)*20
		be.PutUint32(want[pos:], uint32(hash))
		be.PutUint64(want[pos+4:], uint64(c.physical))
		be.PutUint32(want[pos+12:], uint32((c.timestamp-t0)/1000))
		be.PutUint32(want[pos+16:], uint32(slotOf[fmt.Sprint(slot)]))
		slotOf[fmt.Sprint(slot)] = entry
		be.PutUint32(want[40+slot*4:], uint32(entry))
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("file bytes\n got % x\nwant % x", got, want)
	}
	// Spot checks that do not depend on the loop above.
	if td := be.Uint32(got[40+slots*4+3*20+12:]); td != 7 {
		t.Errorf("timeDiff of entry 3 = %d, want 7", td)
	}
	if prev := be.Uint32(got[40+slots*4+3*20+16:]); prev != 1 {
		t.Errorf("prevIndex of entry 3 = %d, want 1 (k1's first entry)", prev)
	}
	if !slices.Equal(query(t, x, "TopicA#k1", 0, 1<<62, 10), []int64{9000, 4096}) {
		t.Errorf("query k1: %v", query(t, x, "TopicA#k1", 0, 1<<62, 10))
	}
}

// collidingKeys returns two keys of different hashes in the same slot.
func collidingKeys(t *testing.T, slots int32) (string, string) {
	bySlot := map[int32]string{}
	for i := 0; i < 1000; i++ {
		k := fmt.Sprintf("TopicTest#c%d", i)
		h := record.IndexKeyHash(k)
		if other, ok := bySlot[h%slots]; ok && record.IndexKeyHash(other) != h {
			return other, k
		}
		bySlot[h%slots] = k
	}
	t.Fatal("no colliding keys")
	return "", ""
}

func TestChains(t *testing.T) {
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	x := openIndex(t, fs, 7, 2000)
	defer x.Close()
	a, b := collidingKeys(t, 7)
	// "Aa" and "BB" have the same Java hash: a full collision.
	keys := append(testKeys(40), a, b, "TopicTest#Aa", "TopicTest#BB")
	calls := makeCalls(900, keys)
	putAll(t, x, calls)
	checkQueries(t, x, calls, keys)
	gotA := query(t, x, a, 0, 1<<62, 1000)
	gotB := query(t, x, b, 0, 1<<62, 1000)
	if len(gotA) == 0 || len(gotB) == 0 {
		t.Fatalf("colliding keys found nothing: %v %v", gotA, gotB)
	}
	for _, off := range gotA {
		if slices.Contains(gotB, off) {
			t.Fatalf("key %s returned %d, an entry of %s (same slot, other hash)", a, off, b)
		}
	}
	full := query(t, x, "TopicTest#Aa", 0, 1<<62, 1000)
	if !slices.Equal(full, query(t, x, "TopicTest#BB", 0, 1<<62, 1000)) || len(full) != 2*900/len(keys) {
		t.Fatalf("same-hash keys: %v", full)
	}
	if got := query(t, x, "TopicTest#absent", 0, 1<<62, 10); len(got) != 0 {
		t.Fatalf("a key never put (hash %d, slot %d) found %v", record.IndexKeyHash("TopicTest#absent"), record.IndexKeyHash("TopicTest#absent")%7, got)
	}
}

func TestRollover(t *testing.T) {
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	x := openIndex(t, fs, 7, 5) // 4 entries per file
	defer x.Close()
	keys := testKeys(3)
	calls := makeCalls(10, keys)
	putAll(t, x, calls)
	files := x.Files()
	wantNames := []string{"20240305060708009", "20240305060708010", "20240305060708011"}
	wantCounts := []int32{5, 5, 3}
	if len(files) != len(wantNames) {
		t.Fatalf("%d files: %+v", len(files), files)
	}
	for i, f := range files {
		if f.Name != wantNames[i] || f.IndexCount != wantCounts[i] {
			t.Errorf("file %d: %s count %d, want %s count %d", i, f.Name, f.IndexCount, wantNames[i], wantCounts[i])
		}
		first, last := calls[4*i], calls[min(4*i+3, len(calls)-1)]
		if f.BeginPhyOffset != first.physical || f.EndPhyOffset != last.physical ||
			f.BeginTimestamp != first.timestamp || f.EndTimestamp != last.timestamp {
			t.Errorf("file %d header %+v", i, f.Header)
		}
	}
	checkQueries(t, x, calls, keys)
	if x.MaxPhysicalOffset() != calls[9].physical || x.LastTimestamp() != calls[9].timestamp {
		t.Errorf("MaxPhysicalOffset %d LastTimestamp %d", x.MaxPhysicalOffset(), x.LastTimestamp())
	}
}

func TestTimeRangeAndMax(t *testing.T) {
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	x := openIndex(t, fs, 11, 6) // 5 entries per file
	defer x.Close()
	keys := []string{"TopicTest#order-1"}
	calls := makeCalls(23, keys)
	putAll(t, x, calls)
	t0 := baseTime.UnixMilli()
	tests := []struct {
		name       string
		begin, end int64
		max        int
	}{
		{"everything", 0, 1 << 62, 100},
		{"max 3", 0, 1 << 62, 3},
		{"max 7 across files", 0, 1 << 62, 7},
		{"one second", t0 + 5000, t0 + 5000, 100},
		{"inside one file", t0 + 6000, t0 + 8500, 100},
		{"across files", t0 + 3000, t0 + 17000, 100},
		{"across files, max 4", t0 + 3000, t0 + 17000, 4},
		{"before everything", 0, t0 - 1, 100},
		{"after everything", t0 + 23000, 1 << 62, 100},
		{"end only in the newest", t0 + 21500, t0 + 22000, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := model(calls, keys[0], tt.begin, tt.end, tt.max)
			if got := query(t, x, keys[0], tt.begin, tt.end, tt.max); !slices.Equal(got, want) {
				t.Fatalf("Query [%d, %d] max %d = %v, want %v", tt.begin-t0, tt.end-t0, tt.max, got, want)
			}
		})
	}
	if _, err := x.Query(context.Background(), keys[0], 0, 1, 0); !errors.Is(err, mappedfile.ErrInvalidArgument) {
		t.Fatalf("max 0: %v", err)
	}
}

func TestTimeDiff(t *testing.T) {
	tests := []struct {
		ts, begin int64
		want      int32
	}{
		{5000, 1000, 4}, {1999, 1000, 0}, {500, 1000, 0}, {5000, 0, 0}, {1000 + 3_000_000_000_000, 1000, 2147483647},
	}
	for _, tt := range tests {
		if got := timeDiff(tt.ts, tt.begin); got != tt.want {
			t.Errorf("timeDiff(%d, %d) = %d, want %d", tt.ts, tt.begin, got, tt.want)
		}
	}
}

func TestReopen(t *testing.T) {
	ctx := context.Background()
	for _, count := range []int{0, 1, 3, 4, 9} {
		t.Run(fmt.Sprintf("entries=%d", count), func(t *testing.T) {
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
			x := openIndex(t, fs, 7, 5)
			keys := testKeys(3)
			calls := makeCalls(count+6, keys)
			putAll(t, x, calls[:count])
			before := x.Files()
			if err := x.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := x.Close(); err != nil {
				t.Fatal(err)
			}
			x = openIndex(t, fs, 7, 5)
			defer x.Close()
			if after := x.Files(); !slices.Equal(before, after) {
				t.Fatalf("files after reopen %+v, before %+v", after, before)
			}
			checkQueries(t, x, calls[:count], keys)
			putAll(t, x, calls[count:])
			checkQueries(t, x, calls, keys)
		})
	}
	t.Run("other sizes", func(t *testing.T) {
		fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
		x := openIndex(t, fs, 7, 5)
		putAll(t, x, makeCalls(2, testKeys(1)))
		x.Close()
		_, err := Open(ctx, Config{Dir: testDir, Backend: fs, SlotCount: 8, MaxEntries: 5})
		if !errors.Is(err, mappedfile.ErrSizeMismatch) {
			t.Fatalf("Open with other sizes: %v", err)
		}
	})
}

// TestFlushDurability crashes the MemFS after a Flush and more puts. What
// the Flush covered survives; so does what a roll made durable (a roll
// flushes the full file and the new file's header). The recovered index
// must be exactly the index of a prefix of the records, say where it ends
// (MaxPhysicalOffset), and take the rest when dispatch resumes there.
func TestFlushDurability(t *testing.T) {
	ctx := context.Background()
	for _, tail := range []mappedfile.TornTail{mappedfile.TornNone, mappedfile.TornGarbage, mappedfile.TornPartialPage, mappedfile.TornRandomPages} {
		t.Run(tail.String(), func(t *testing.T) {
			beyond := 0
			for seed := uint64(0); seed < 40; seed++ {
				rng := rand.New(rand.NewPCG(seed, 3))
				fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
				x := openIndex(t, fs, 13, 40) // 39 entries per file
				keys := testKeys(5)
				calls := makeCalls(100, keys)
				flushed := rng.IntN(90)
				putAll(t, x, calls[:flushed])
				if err := x.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				written := flushed + rng.IntN(90-flushed+1)
				putAll(t, x, calls[flushed:written])
				fs.Crash(tail, rng)
				fs.Restart()

				x = openIndex(t, fs, 13, 40)
				recovered := 0
				for recovered < len(calls) && calls[recovered].physical <= x.MaxPhysicalOffset() {
					recovered++
				}
				if recovered < flushed || recovered > written {
					t.Fatalf("seed %d: recovered %d records, flushed %d, written %d", seed, recovered, flushed, written)
				}
				if recovered > flushed {
					beyond++
				}
				if sameFile := flushed/39 == written/39; sameFile && recovered != flushed {
					t.Fatalf("seed %d: recovered %d records, want the %d flushed (no roll since)", seed, recovered, flushed)
				}
				checkQueries(t, x, calls[:recovered], keys)
				putAll(t, x, calls[recovered:])
				checkQueries(t, x, calls, keys)
				x.Close()
			}
			t.Logf("%v: %d of 40 seeds recovered records a roll had flushed", tail, beyond)
		})
	}
}

// TestRepairStaleHeader: the slots reached the disk but the header did not
// (the kernel wrote the slot pages back first). Open walks such slots back
// below indexCount so the older entries stay reachable.
func TestRepairStaleHeader(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	x := openIndex(t, fs, 7, 100)
	keys := testKeys(9)
	calls := makeCalls(60, keys)
	putAll(t, x, calls[:25])
	if err := x.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	stale := x.Files()[0].Header
	putAll(t, x, calls[25:])
	if err := x.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	x.Close()
	// Put the old header back, durably.
	mf, err := fs.Open(ctx, mappedfile.Spec{Path: filepath.Join(testDir, "20240305060708009"), SizeBytes: HeaderSize + 7*SlotSize + 100*EntrySize})
	if err != nil {
		t.Fatal(err)
	}
	var hb [HeaderSize]byte
	EncodeHeader(hb[:], stale)
	if _, err := mf.(mappedfile.Overwriter).WriteAt(hb[:], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	mf.Close()

	x = openIndex(t, fs, 7, 100)
	defer x.Close()
	checkQueries(t, x, calls[:25], keys)
	putAll(t, x, calls[25:])
	checkQueries(t, x, calls, keys)
}

func TestTruncateByPhysical(t *testing.T) {
	ctx := context.Background()
	keys := testKeys(4)
	calls := makeCalls(60, keys) // physical 1000, 1100, …; 24 entries per file: 24, 24, 12
	tests := []struct {
		name      string
		physical  int64
		kept      int
		wantFiles int
	}{
		{"nothing", 100000, 60, 3},
		{"inside the newest file", calls[55].physical, 55, 3},
		{"inside an older file", calls[30].physical, 30, 2},
		{"at a file's first record", calls[24].physical, 24, 1},
		{"between two records", calls[24].physical - 50, 24, 1},
		{"inside the first file", calls[3].physical, 3, 1},
		{"everything", calls[0].physical, 0, 0},
		{"before everything", 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
			x := openIndex(t, fs, 7, 25)
			putAll(t, x, calls)
			if err := x.TruncateByPhysical(ctx, tt.physical); err != nil {
				t.Fatal(err)
			}
			if n := len(x.Files()); n != tt.wantFiles {
				t.Fatalf("%d files, want %d: %+v", n, tt.wantFiles, x.Files())
			}
			// The index must equal one that never saw the dropped records.
			ref := mappedfile.NewMemFS(mappedfile.MemOptions{})
			y := openIndex(t, ref, 7, 25)
			putAll(t, y, calls[:tt.kept])
			if !slices.Equal(x.Files(), y.Files()) {
				t.Fatalf("headers after truncate\n%+v\nwant\n%+v", x.Files(), y.Files())
			}
			if err := x.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := y.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			for _, f := range y.Files() {
				got, _ := fs.Durable(f.Path)
				want, _ := ref.Durable(f.Path)
				if !bytes.Equal(got, want) {
					t.Fatalf("file %s differs from an index built without the dropped records", f.Name)
				}
			}
			checkQueries(t, x, calls[:tt.kept], keys)
			putAll(t, x, calls[tt.kept:])
			checkQueries(t, x, calls, keys)
			x.Close()
			y.Close()
		})
	}
}

func TestDeleteBefore(t *testing.T) {
	ctx := context.Background()
	keys := testKeys(4)
	calls := makeCalls(14, keys) // files end at 1300, 1700, 2100, 2300
	tests := []struct {
		physical    int64
		wantDeleted int
	}{{1000, 0}, {1300, 0}, {1301, 1}, {2100, 2}, {2101, 3}, {1 << 40, 3}}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.physical), func(t *testing.T) {
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
			x := openIndex(t, fs, 7, 5)
			defer x.Close()
			putAll(t, x, calls)
			n, err := x.DeleteBefore(ctx, tt.physical)
			if err != nil || n != tt.wantDeleted {
				t.Fatalf("DeleteBefore = %d, %v; want %d", n, err, tt.wantDeleted)
			}
			if names, _ := fs.List(testDir); len(names) != 4-tt.wantDeleted {
				t.Fatalf("files left: %v", names)
			}
			checkQueries(t, x, calls[4*tt.wantDeleted:], keys)
		})
	}
}

func TestBadFiles(t *testing.T) {
	ctx := context.Background()
	size := int64(HeaderSize + 7*SlotSize + 5*EntrySize)
	tests := []struct {
		name   string
		file   string
		header Header
	}{
		{"bad name", "2024030506070800x", Header{IndexCount: 1}},
		{"short name", "2024", Header{IndexCount: 1}},
		{"index count past max", "20240305060708009", Header{IndexCount: 6}},
		{"negative hash slot count", "20240305060708009", Header{IndexCount: 2, HashSlotCount: -1}},
		{"hash slot count past index count", "20240305060708009", Header{IndexCount: 2, HashSlotCount: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
			mf, err := fs.Open(ctx, mappedfile.Spec{Path: filepath.Join(testDir, tt.file), SizeBytes: size})
			if err != nil {
				t.Fatal(err)
			}
			var hb [HeaderSize]byte
			EncodeHeader(hb[:], tt.header)
			if _, err := mf.Append(int(size), mappedfile.Bytes(append(hb[:], make([]byte, size-HeaderSize)...))); err != nil {
				t.Fatal(err)
			}
			if _, err := mf.Flush(ctx, 0); err != nil {
				t.Fatal(err)
			}
			mf.Close()
			_, err = Open(ctx, Config{Dir: testDir, Backend: fs, SlotCount: 7, MaxEntries: 5})
			if !errors.Is(err, ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(tt.file)) {
				t.Fatalf("Open: %v; want ErrCorrupt naming %s", err, tt.file)
			}
			if !isFileName(tt.file) {
				return
			}
			// After a crash the newest file's header may be torn: it starts again.
			x, err := Open(ctx, Config{Dir: testDir, Backend: fs, SlotCount: 7, MaxEntries: 5, AfterCrash: true})
			if err != nil {
				t.Fatalf("Open after a crash: %v", err)
			}
			defer x.Close()
			if files := x.Files(); len(files) != 1 || files[0].IndexCount != 1 {
				t.Fatalf("after a crash the torn newest file is not restarted: %+v", files)
			}
		})
	}
	t.Run("zero header of the newest file", func(t *testing.T) {
		fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
		x := openIndex(t, fs, 7, 5)
		putAll(t, x, makeCalls(6, testKeys(2))) // second file created, not flushed
		x.Flush(ctx)
		first := x.Files()[0]
		x.Close()
		mf, _ := fs.Open(ctx, mappedfile.Spec{Path: filepath.Join(testDir, "20240305060708010"), SizeBytes: size})
		mf.(mappedfile.Overwriter).WriteAt(make([]byte, HeaderSize), 0)
		mf.Flush(ctx, 0)
		mf.Close()
		x = openIndex(t, fs, 7, 5)
		defer x.Close()
		files := x.Files()
		if len(files) != 2 || files[1].IndexCount != 1 || files[1].BeginPhyOffset != first.EndPhyOffset {
			t.Fatalf("files %+v", files)
		}
		calls := makeCalls(10, testKeys(2))
		putAll(t, x, calls[4:])
		checkQueries(t, x, calls, testKeys(2))
	})
}

// noOverwrite hides the Overwriter of the files a backend opens.
type noOverwrite struct{ mappedfile.Backend }

type plainFile struct{ mappedfile.MappedFile }

func (b noOverwrite) Open(ctx context.Context, spec mappedfile.Spec) (mappedfile.MappedFile, error) {
	mf, err := b.Backend.Open(ctx, spec)
	if err != nil {
		return nil, err
	}
	return plainFile{mf}, nil
}

func TestNeedsOverwriter(t *testing.T) {
	x := openIndex(t, noOverwrite{mappedfile.NewMemFS(mappedfile.MemOptions{})}, 7, 5)
	defer x.Close()
	err := x.Put(context.Background(), "T#k", 100, baseTime.UnixMilli())
	if !errors.Is(err, mappedfile.ErrUnsupported) {
		t.Fatalf("Put: %v", err)
	}
}

func TestStickyError(t *testing.T) {
	faults := faultfile.NewFaults()
	x := openIndex(t, faultfile.NewFaulty(mappedfile.NewMemFS(mappedfile.MemOptions{}), faults), 7, 50)
	defer x.Close()
	putAll(t, x, makeCalls(3, testKeys(2)))
	faults.Add(faultfile.Fault{Op: faultfile.OpAppend})
	calls := makeCalls(5, testKeys(2))
	if err := x.Put(context.Background(), calls[3].key, calls[3].physical, calls[3].timestamp); !errors.Is(err, faultfile.ErrInjected) {
		t.Fatalf("Put with a failing append: %v", err)
	}
	faults.Clear()
	if err := x.Put(context.Background(), calls[4].key, calls[4].physical, calls[4].timestamp); !errors.Is(err, faultfile.ErrInjected) {
		t.Fatalf("Put after a failure: %v, want the sticky error", err)
	}
}

// TestAlreadyIndexedIsSkipped: a re-dispatch after a crash puts again the
// records from the newest one indexed on. Older records are skipped; the
// newest one, whose keys may be only partly indexed, gets the missing keys
// and not a second entry for the ones it has (before, QueryMessages
// returned it twice); a key a record lists twice is indexed once.
func TestAlreadyIndexedIsSkipped(t *testing.T) {
	x := openIndex(t, mappedfile.NewMemFS(mappedfile.MemOptions{}), 7, 50)
	defer x.Close()
	keys := testKeys(2)
	calls := makeCalls(6, keys)
	putAll(t, x, calls)
	last := calls[len(calls)-1]
	// The last record has a second key, not indexed yet when the process died.
	second := putCall{key: "TopicTest#other", physical: last.physical, timestamp: last.timestamp}
	putAll(t, x, calls[2:])                           // the re-dispatch
	putAll(t, x, []putCall{second, second})           // its other key, listed twice
	if count := x.Files()[0].IndexCount; count != 8 { // 1 + 6 entries + the other key
		t.Fatalf("indexCount %d after the re-dispatch, want 8 (no entry twice)", count)
	}
	for _, c := range []putCall{last, second} {
		got := query(t, x, c.key, 0, 1<<62, 100)
		if n := slices.Index(got, c.physical); n < 0 || slices.Contains(got[n+1:], c.physical) {
			t.Fatalf("Query(%s) = %v: want %d once", c.key, got, c.physical)
		}
	}
}

func TestConcurrentQueries(t *testing.T) {
	ctx := context.Background()
	x := openIndex(t, mappedfile.NewMemFS(mappedfile.MemOptions{}), 101, 300)
	defer x.Close()
	keys := testKeys(20)
	calls := makeCalls(2000, keys)
	done := make(chan struct{})
	errs := make(chan error, 3)
	for r := 0; r < 2; r++ {
		go func(r int) {
			for i := 0; ; i++ {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				got, err := x.Query(ctx, keys[(i+r)%len(keys)], 0, 1<<62, 50)
				if err != nil {
					errs <- err
					return
				}
				for j := 1; j < len(got); j++ {
					if got[j] >= got[j-1] {
						errs <- fmt.Errorf("results not newest first: %v", got)
						return
					}
				}
			}
		}(r)
	}
	go func() {
		for {
			select {
			case <-done:
				errs <- nil
				return
			default:
			}
			if err := x.Flush(ctx); err != nil {
				errs <- err
				return
			}
		}
	}()
	for i, c := range calls {
		if err := x.Put(ctx, c.key, c.physical, c.timestamp); err != nil {
			t.Fatal(err)
		}
		if i%500 == 499 {
			if _, err := x.DeleteBefore(ctx, c.physical-30000); err != nil {
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

func TestNames(t *testing.T) {
	tests := []struct {
		name string
		now  []time.Time
		want []string
	}{
		{"distinct", []time.Time{baseTime, baseTime.Add(2 * time.Second)}, []string{"20240305060708000", "20240305060710000"}},
		{"same millisecond bumps", []time.Time{baseTime.Add(999 * time.Millisecond), baseTime.Add(999 * time.Millisecond)}, []string{"20240305060708999", "20240305060709000"}},
		{"clock went back", []time.Time{baseTime, baseTime.Add(-time.Hour)}, []string{"20240305060708000", "20240305060708001"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			i := 0
			x, err := Open(context.Background(), Config{Dir: testDir, Backend: mappedfile.NewMemFS(mappedfile.MemOptions{}),
				SlotCount: 3, MaxEntries: 2, Now: func() time.Time { return tt.now[min(i, len(tt.now)-1)] }})
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			for i = range tt.now {
				if err := x.Put(context.Background(), "T#k", int64(100+i), baseTime.UnixMilli()); err != nil {
					t.Fatal(err)
				}
			}
			var names []string
			for _, f := range x.Files() {
				names = append(names, f.Name)
			}
			if !slices.Equal(names, tt.want) {
				t.Fatalf("names %v, want %v", names, tt.want)
			}
		})
	}
}

func TestCovers(t *testing.T) {
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	x := openIndex(t, fs, 7, 5)
	defer x.Close()
	if x.Covers(0) {
		t.Fatal("an empty index covers offset 0")
	}
	calls := makeCalls(9, testKeys(2)) // three files, the last with one entry
	putAll(t, x, calls)
	for _, tt := range []struct {
		offset int64
		want   bool
	}{{0, true}, {calls[8].physical, true}, {calls[8].physical + 1, false}} {
		if got := x.Covers(tt.offset); got != tt.want {
			t.Errorf("Covers(%d) = %v, want %v", tt.offset, got, tt.want)
		}
	}
}

// TestTornHeaderBeforeTheNewest: after a crash, a file before the newest
// whose header is torn starts again and the files after it are deleted (the
// engine re-dispatches from the end of the file before it); without a crash
// it is corruption. Torn with its indexCount zero too (a power loss while
// the file was being created: it failed Open before).
func TestTornHeaderBeforeTheNewest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		victim  int
		garbage []byte // at hashSlotCount (32) and after
	}{
		{"hashSlotCount", 1, []byte{0xBC, 0, 0, 0}},
		{"the first file's hashSlotCount and a zero indexCount", 0, []byte{0x6B, 0xAD, 0x1D, 0xEA, 0, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) { tornHeaderBeforeTheNewest(t, tc.victim, tc.garbage) })
	}
}

func tornHeaderBeforeTheNewest(t *testing.T, victimIndex int, garbage []byte) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	x := openIndex(t, fs, 7, 5)
	putAll(t, x, makeCalls(14, testKeys(3))) // four files, the last not full
	if err := x.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	files := x.Files()
	if len(files) < 3 {
		t.Fatalf("%d files; the test needs at least 3", len(files))
	}
	x.Close()
	victim := files[victimIndex]
	mf, err := fs.Open(ctx, mappedfile.Spec{Path: victim.Path, SizeBytes: x.SizeBytes()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mf.(mappedfile.Overwriter).WriteAt(garbage, 32); err != nil {
		t.Fatal(err)
	}
	mf.Flush(ctx, 0)
	mf.Close()
	if _, err := Open(ctx, Config{Dir: testDir, Backend: fs, SlotCount: 7, MaxEntries: 5}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open without a crash: %v; want ErrCorrupt", err)
	}
	x, err = Open(ctx, Config{Dir: testDir, Backend: fs, SlotCount: 7, MaxEntries: 5, AfterCrash: true})
	if err != nil {
		t.Fatalf("Open after a crash: %v", err)
	}
	defer x.Close()
	got := x.Files()
	wantEnd := int64(0)
	if victimIndex > 0 {
		wantEnd = files[victimIndex-1].EndPhyOffset
	}
	if len(got) != victimIndex+1 || got[victimIndex].Name != victim.Name || got[victimIndex].IndexCount != 1 || x.MaxPhysicalOffset() != wantEnd {
		t.Fatalf("after a crash: files %+v, MaxPhysicalOffset %d; want the torn file restarted, ending at %d", got, x.MaxPhysicalOffset(), wantEnd)
	}
}

// TestPutKeysIsPutPerKey: PutKeys writes the same bytes as Put called for
// each key — records with several keys, a key listed twice, keys whose
// hashes collide, a roll to a new file in the middle of a record, and a
// re-dispatch of the newest record with a key it lacked.
func TestPutKeysIsPutPerKey(t *testing.T) {
	ctx := context.Background()
	one, batch := mappedfile.NewMemFS(mappedfile.MemOptions{}), mappedfile.NewMemFS(mappedfile.MemOptions{})
	x, y := openIndex(t, one, 7, 6), openIndex(t, batch, 7, 6)
	defer x.Close()
	defer y.Close()
	// "Aa" and "BB" have the same Java hash code: the file keeps one.
	records := [][]string{
		{"T#a", "T#b"}, {"T#c"}, {"T#d", "T#d", "T#e"}, {"T#Aa", "T#BB", "T#f"}, {"T#g", "T#h", "T#i", "T#j"},
	}
	ts := baseTime.UnixMilli()
	for i, keys := range records {
		phys := int64(1000 * (i + 1))
		for _, k := range keys {
			if err := x.Put(ctx, k, phys, ts+int64(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := y.PutKeys(ctx, keys, phys, ts+int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	last := int64(1000 * len(records))
	redo := []string{"T#h", "T#i", "T#j", "T#k"} // the re-dispatch brings a key the crash lost
	for _, k := range redo {
		if err := x.Put(ctx, k, last, ts+int64(len(records)-1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := y.PutKeys(ctx, redo, last, ts+int64(len(records)-1)); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(x.Flush(ctx), y.Flush(ctx)); err != nil {
		t.Fatal(err)
	}
	xf, yf := x.Files(), y.Files()
	if len(xf) != len(yf) || len(xf) < 2 {
		t.Fatalf("files %+v and %+v: want the same, at least two", xf, yf)
	}
	for i := range xf {
		a, _ := one.Durable(filepath.Join(testDir, xf[i].Name))
		b, _ := batch.Durable(filepath.Join(testDir, yf[i].Name))
		if xf[i] != yf[i] || !bytes.Equal(a, b) {
			t.Fatalf("file %d differs: %+v vs %+v", i, xf[i], yf[i])
		}
	}
}

// failingAppends opens files whose Append fails while fail is set; their
// overwrites go through.
type failingAppends struct {
	mappedfile.Backend
	fail *atomic.Bool
}

type failingAppendFile struct {
	mappedfile.MappedFile
	mappedfile.Overwriter
	fail *atomic.Bool
}

func (b failingAppends) Open(ctx context.Context, spec mappedfile.Spec) (mappedfile.MappedFile, error) {
	mf, err := b.Backend.Open(ctx, spec)
	if err != nil {
		return nil, err
	}
	return failingAppendFile{mf, mf.(mappedfile.Overwriter), b.fail}, nil
}

func (f failingAppendFile) Append(n int, enc mappedfile.Encoder) (int64, error) {
	if f.fail.Load() {
		return 0, faultfile.ErrInjected
	}
	return f.MappedFile.Append(n, enc)
}

// TestFailedAppendPutsTheSlotsBack: a record's slots are swapped for their
// new heads before its entries are appended; when the append fails the old
// heads go back, so no slot points at an entry that was never written.
func TestFailedAppendPutsTheSlotsBack(t *testing.T) {
	ctx := context.Background()
	var fail atomic.Bool
	x := openIndex(t, failingAppends{mappedfile.NewMemFS(mappedfile.MemOptions{}), &fail}, 3, 50)
	defer x.Close()
	if err := x.PutKeys(ctx, []string{"T#a", "T#b", "T#c", "T#d"}, 1000, baseTime.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	f := x.Files()[0]
	slots := func() []byte {
		mf := x.files[0].mf
		b := make([]byte, 3*SlotSize)
		if _, err := mf.ReadAt(b, HeaderSize); err != nil {
			t.Fatal(err)
		}
		return b
	}
	before := slots()
	fail.Store(true)
	if err := x.PutKeys(ctx, []string{"T#e", "T#f", "T#g"}, 2000, baseTime.UnixMilli()+1); !errors.Is(err, faultfile.ErrInjected) {
		t.Fatalf("PutKeys with a failing append: %v", err)
	}
	if after := slots(); !bytes.Equal(before, after) {
		t.Fatalf("slots %x after the failed append, want them as before: %x", after, before)
	}
	if got := x.Files()[0]; got != f {
		t.Fatalf("header %+v after the failed append, want %+v", got.Header, f.Header)
	}
}

// TestPutBatchIsPutPerKey: PutBatch of records in batches of any size
// writes the same bytes as a Put of each key of each record in turn —
// across file rolls within a batch, keys that share a slot within a
// record and between records, a key listed twice, records with more keys
// than maxDedupKeys, a re-dispatch of the newest record and records older
// than it (ignored).
func TestPutBatchIsPutPerKey(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		one, batch := mappedfile.NewMemFS(mappedfile.MemOptions{}), mappedfile.NewMemFS(mappedfile.MemOptions{})
		x, y := openIndex(t, one, 7, 40), openIndex(t, batch, 7, 40)
		var recs []RecordKeys
		offset, ts := int64(1000), baseTime.UnixMilli()
		for range 300 {
			n := rng.IntN(5)
			if rng.IntN(20) == 0 {
				n = maxDedupKeys + 1 + rng.IntN(4)
			}
			hashes := make([]int32, n)
			for i := range hashes {
				hashes[i] = int32(rng.IntN(12)) // 12 keys over 7 slots
			}
			switch r := rng.IntN(20); {
			case r == 0 && len(recs) > 0: // a re-dispatch of the last record, keys it may lack
				offset = recs[len(recs)-1].PhysicalOffset
			case r == 1 && len(recs) > 0: // an older record
				offset = recs[len(recs)-1].PhysicalOffset - 1 - rng.Int64N(500)
			default:
				offset = max(offset, recs0(recs)) + 1 + rng.Int64N(500)
				ts += rng.Int64N(3) + 1000*rng.Int64N(3) // whole seconds apart too: timeDiffs that differ
			}
			recs = append(recs, RecordKeys{Hashes: hashes, PhysicalOffset: offset, StoreTimestamp: ts})
		}
		for _, r := range recs {
			for _, h := range r.Hashes {
				if err := x.PutHashes(ctx, []int32{h}, r.PhysicalOffset, r.StoreTimestamp); err != nil {
					t.Fatal(err)
				}
			}
		}
		for rest := recs; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(70))
			if err := y.PutBatch(ctx, rest[:k]); err != nil {
				t.Fatal(err)
			}
			rest = rest[k:]
		}
		if err := errors.Join(x.Flush(ctx), y.Flush(ctx)); err != nil {
			t.Fatal(err)
		}
		xf, yf := x.Files(), y.Files()
		if len(xf) != len(yf) || len(xf) < 3 {
			t.Fatalf("seed %d: files %+v and %+v: want the same, at least three", seed, xf, yf)
		}
		for i := range xf {
			a, _ := one.Durable(filepath.Join(testDir, xf[i].Name))
			b, _ := batch.Durable(filepath.Join(testDir, yf[i].Name))
			if xf[i] != yf[i] || !bytes.Equal(a, b) {
				t.Fatalf("seed %d: file %d differs: %+v vs %+v", seed, i, xf[i], yf[i])
			}
			checkEntryTimes(t, b, recs)
		}
		if err := errors.Join(x.Close(), y.Close()); err != nil {
			t.Fatal(err)
		}
	}
}

// recs0 is the newest physical offset among recs, 0 when none.
func recs0(recs []RecordKeys) int64 {
	newest := int64(0)
	for _, r := range recs {
		newest = max(newest, r.PhysicalOffset)
	}
	return newest
}

// checkEntryTimes checks an index file's bytes against the records put,
// apart from the code that wrote them: the header begins at the record of
// its first entry, and every entry's TimeDiff is its record's store time
// in whole seconds after that begin.
func checkEntryTimes(t *testing.T, file []byte, recs []RecordKeys) {
	t.Helper()
	stored := map[int64]int64{} // the first record put at each offset: the one indexed
	for _, r := range recs {
		if _, ok := stored[r.PhysicalOffset]; !ok {
			stored[r.PhysicalOffset] = r.StoreTimestamp
		}
	}
	h := DecodeHeader(file[:HeaderSize])
	entries := file[HeaderSize+7*SlotSize:]
	for n := int32(1); n < h.IndexCount; n++ {
		e := DecodeEntry(entries[int(n)*EntrySize:])
		ts, ok := stored[e.PhyOffset]
		if !ok {
			t.Fatalf("entry %d names offset %d, where no record was put", n, e.PhyOffset)
		}
		if n == 1 && (h.BeginPhyOffset != e.PhyOffset || h.BeginTimestamp != ts) {
			t.Fatalf("header begins at %d, %d; its first entry's record is at %d, stored at %d", h.BeginPhyOffset, h.BeginTimestamp, e.PhyOffset, ts)
		}
		if want := int32((ts - h.BeginTimestamp) / 1000); e.TimeDiff != want {
			t.Fatalf("entry %d (record at %d, stored at %d): time diff %d, want %d after the begin %d", n, e.PhyOffset, ts, e.TimeDiff, want, h.BeginTimestamp)
		}
	}
}
