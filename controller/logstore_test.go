package controller

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/mqstore/mqstore/engine/storefs"
	"github.com/mqstore/mqstore/mappedfile"
)

var logCrashTrials = flag.Int("logstore.crash.trials", 150, "simulated power-loss trials of the raft log store")

const testDir = "/ctl/raft-log"

func openMem(t *testing.T, mfs *mappedfile.MemFS, seg int64) *LogStore {
	t.Helper()
	s, err := OpenLogStore(context.Background(), testDir, LogStoreOptions{Backend: mfs, SegmentBytes: seg})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func entry(i uint64, term uint64, n int) *raft.Log {
	data := bytes.Repeat([]byte{byte(i), byte(term)}, n/2+1)[:n]
	l := &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: data, AppendedAt: time.Unix(0, int64(i)*1000+7)}
	if i%3 == 0 {
		l.Extensions = []byte(fmt.Sprintf("ext%d", i))
	}
	if i%5 == 0 {
		l.Type = raft.LogNoop
		l.AppendedAt = time.Time{}
	}
	return l
}

func span(from, to, term uint64, n int) []*raft.Log {
	var out []*raft.Log
	for i := from; i <= to; i++ {
		out = append(out, entry(i, term, n))
	}
	return out
}

func sameLog(a, b *raft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type && bytes.Equal(a.Data, b.Data) &&
		bytes.Equal(a.Extensions, b.Extensions) && a.AppendedAt.Equal(b.AppendedAt)
}

// expect checks that s holds exactly want (first..last, each entry).
func expect(t *testing.T, s *LogStore, want []*raft.Log) {
	t.Helper()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	var wf, wl uint64
	if len(want) > 0 {
		wf, wl = want[0].Index, want[len(want)-1].Index
	}
	if first != wf || last != wl {
		t.Fatalf("first/last = %d/%d, want %d/%d", first, last, wf, wl)
	}
	for _, w := range want {
		var got raft.Log
		if err := s.GetLog(w.Index, &got); err != nil {
			t.Fatalf("get %d: %v", w.Index, err)
		}
		if !sameLog(&got, w) {
			t.Fatalf("entry %d = %+v, want %+v", w.Index, got, *w)
		}
	}
	for _, i := range []uint64{0, wf - 1, wl + 1} {
		if i == 0 && wf == 0 {
			continue
		}
		var got raft.Log
		if i != 0 && i >= wf && i <= wl {
			continue
		}
		if err := s.GetLog(i, &got); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("get %d outside %d-%d: %v", i, wf, wl, err)
		}
	}
}

func TestLogStoreConformance(t *testing.T) {
	type step struct {
		name   string
		do     func(s *LogStore) error
		fails  bool
		want   func() []*raft.Log
		reopen bool
	}
	// Segments of 256 bytes hold a few entries each, so every step crosses
	// segment boundaries.
	steps := []step{
		{name: "empty", do: func(*LogStore) error { return nil }, want: func() []*raft.Log { return nil }, reopen: true},
		{name: "index 0 refused", do: func(s *LogStore) error { return s.StoreLog(entry(0, 1, 4)) }, fails: true, want: func() []*raft.Log { return nil }},
		{name: "store 1-20", do: func(s *LogStore) error { return s.StoreLogs(span(1, 20, 1, 40)) },
			want: func() []*raft.Log { return span(1, 20, 1, 40) }, reopen: true},
		{name: "a batch with a hole refused", do: func(s *LogStore) error { return s.StoreLogs([]*raft.Log{entry(21, 1, 4), entry(23, 1, 4)}) }, fails: true,
			want: func() []*raft.Log { return span(1, 20, 1, 40) }},
		{name: "overwrite refused", do: func(s *LogStore) error { return s.StoreLogs(span(20, 21, 2, 4)) }, fails: true,
			want: func() []*raft.Log { return span(1, 20, 1, 40) }},
		{name: "middle range refused", do: func(s *LogStore) error { return s.DeleteRange(5, 6) }, fails: true,
			want: func() []*raft.Log { return span(1, 20, 1, 40) }},
		{name: "delete suffix 14-20", do: func(s *LogStore) error { return s.DeleteRange(14, 20) },
			want: func() []*raft.Log { return span(1, 13, 1, 40) }, reopen: true},
		{name: "replace the suffix at a new term", do: func(s *LogStore) error { return s.StoreLogs(span(14, 25, 2, 10)) },
			want: func() []*raft.Log { return append(span(1, 13, 1, 40), span(14, 25, 2, 10)...) }, reopen: true},
		{name: "delete a suffix past the end", do: func(s *LogStore) error { return s.DeleteRange(24, 100) },
			want: func() []*raft.Log { return append(span(1, 13, 1, 40), span(14, 23, 2, 10)...) }},
		{name: "delete prefix 1-9", do: func(s *LogStore) error { return s.DeleteRange(1, 9) },
			want: func() []*raft.Log { return append(span(10, 13, 1, 40), span(14, 23, 2, 10)...) }, reopen: true},
		{name: "delete a prefix from below the first", do: func(s *LogStore) error { return s.DeleteRange(0, 10) },
			want: func() []*raft.Log { return append(span(11, 13, 1, 40), span(14, 23, 2, 10)...) }, reopen: true},
		{name: "an entry bigger than a segment", do: func(s *LogStore) error { return s.StoreLogs(span(24, 25, 3, 1000)) },
			want: func() []*raft.Log {
				return append(append(span(11, 13, 1, 40), span(14, 23, 2, 10)...), span(24, 25, 3, 1000)...)
			}, reopen: true},
		{name: "empty and inverted ranges do nothing", do: func(s *LogStore) error {
			if err := s.DeleteRange(30, 40); err != nil {
				return err
			}
			return s.DeleteRange(20, 19)
		}, want: func() []*raft.Log {
			return append(append(span(11, 13, 1, 40), span(14, 23, 2, 10)...), span(24, 25, 3, 1000)...)
		}},
		{name: "delete all", do: func(s *LogStore) error { return s.DeleteRange(11, 25) }, want: func() []*raft.Log { return nil }, reopen: true},
		{name: "start again at 100", do: func(s *LogStore) error { return s.StoreLogs(span(100, 104, 4, 30)) },
			want: func() []*raft.Log { return span(100, 104, 4, 30) }, reopen: true},
		{name: "delete all but the last", do: func(s *LogStore) error { return s.DeleteRange(100, 103) },
			want: func() []*raft.Log { return span(104, 104, 4, 30) }, reopen: true},
		{name: "a store past the end drops the older entries", do: func(s *LogStore) error { return s.StoreLogs(span(110, 112, 5, 30)) },
			want: func() []*raft.Log { return span(110, 112, 5, 30) }, reopen: true},
	}
	mfs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	s := openMem(t, mfs, 256)
	for _, st := range steps {
		err := st.do(s)
		if (err != nil) != st.fails {
			t.Fatalf("%s: err = %v, want failure %v", st.name, err, st.fails)
		}
		expect(t, s, st.want())
		if st.reopen {
			s.Close()
			s = openMem(t, mfs, 256)
			expect(t, s, st.want())
		}
	}
	names, err := mfs.List(testDir)
	if err != nil {
		t.Fatal(err)
	}
	if segs := countSegs(names); segs != 1 {
		t.Fatalf("after deleting all but one entry, %d segment files remain: %v", segs, names)
	}
	s.Close()
}

func countSegs(names []string) int {
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, logSuffix) {
			n++
		}
	}
	return n
}

// TestLogStoreOnDisk runs the mmap backend in a real directory.
func TestLogStoreOnDisk(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := OpenLogStore(ctx, dir, LogStoreOptions{SegmentBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs(span(1, 100, 1, 100)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(91, 100); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 30); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = OpenLogStore(ctx, dir, LogStoreOptions{SegmentBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	expect(t, s, span(31, 90, 1, 100))
}

func TestLogStoreCorruptionBeforeTheLastSegment(t *testing.T) {
	mfs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	s := openMem(t, mfs, 256)
	if err := s.StoreLogs(span(1, 30, 1, 40)); err != nil {
		t.Fatal(err)
	}
	first := s.segs[0].file
	s.Close()
	// Flip a byte of the first segment's second entry (a disk gone bad).
	f, err := mfs.Open(context.Background(), mappedfile.Spec{Path: first.Path(), SizeBytes: first.SizeBytes()})
	if err != nil {
		t.Fatal(err)
	}
	ow := f.(mappedfile.Overwriter)
	if _, err := ow.WriteAt([]byte{0xff}, 90); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Flush(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := OpenLogStore(context.Background(), testDir, LogStoreOptions{Backend: mfs, SegmentBytes: 256}); !errors.Is(err, ErrLogCorrupt) || !strings.Contains(err.Error(), filepath.Base(first.Path())) {
		t.Fatalf("open with a bad frame in the first segment: %v", err)
	}
}

// model is what the test knows of the store: the acknowledged entries.
type model struct {
	entries map[uint64]*raft.Log
	first   uint64 // 0 when empty
	last    uint64
}

func (m *model) slice() []*raft.Log {
	var out []*raft.Log
	for i := m.first; m.first != 0 && i <= m.last; i++ {
		out = append(out, m.entries[i])
	}
	return out
}

// TestLogStoreSimulatedPowerLoss runs random appends and deletions on
// MemFS, cuts the power at a random operation, and checks that the
// reopened store holds every acknowledged entry, nothing deleted, and of
// the operation cut short either nothing, all, or a prefix of it.
func TestLogStoreSimulatedPowerLoss(t *testing.T) {
	cuts := map[string]int{}
	for trial := 1; trial <= *logCrashTrials; trial++ {
		seed := uint64(trial)
		t.Run(fmt.Sprint(seed), func(t *testing.T) { cuts[logCrashTrial(t, seed)]++ })
		if t.Failed() {
			return
		}
	}
	t.Logf("operations cut short by the power loss: %v", cuts)
	if *logCrashTrials >= 100 && (cuts["store"] == 0 || cuts["suffix"]+cuts["prefix"]+cuts["all"] == 0) {
		t.Fatalf("the trials never cut a store or a deletion short: %v", cuts)
	}
}

func logCrashTrial(t *testing.T, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	mfs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	const seg = 512
	s := openMem(t, mfs, seg)
	m := &model{entries: map[uint64]*raft.Log{}}
	term := uint64(1)
	// Some history first, then the armed crash.
	mfs.ArmCrash(int64(1+rng.IntN(120)), mappedfile.TornTail(rng.IntN(4)), rng)
	type pending struct {
		kind   string
		batch  []*raft.Log
		lo, hi uint64
	}
	var cut *pending
	for op := 0; op < 400 && cut == nil; op++ {
		p := &pending{}
		var err error
		switch r := rng.IntN(100); {
		case r < 6:
			// A clean restart: what the next operations touch was opened
			// by a scan, not created by this process.
			s.Close()
			p.kind = "reopen"
			if s, err = OpenLogStore(context.Background(), testDir, LogStoreOptions{Backend: mfs, SegmentBytes: seg}); err != nil {
				s = &LogStore{}
			} else {
				expect(t, s, m.slice())
			}
		case r < 70 || m.first == 0:
			next := m.last + 1
			if m.first == 0 && m.last == 0 {
				next = 1
			}
			n := 1 + rng.IntN(5)
			for i := 0; i < n; i++ {
				size := rng.IntN(200)
				if rng.IntN(20) == 0 {
					size = 600 // bigger than a segment
				}
				p.batch = append(p.batch, entry(next+uint64(i), term, size))
			}
			p.kind = "store"
			err = s.StoreLogs(p.batch)
			if err == nil {
				for _, l := range p.batch {
					m.entries[l.Index] = l
				}
				if m.first == 0 {
					m.first = p.batch[0].Index
				}
				m.last = p.batch[len(p.batch)-1].Index
			}
		case r < 85 && m.last > m.first:
			p.kind, p.lo, p.hi = "suffix", m.first+1+uint64(rng.IntN(int(m.last-m.first))), m.last
			err = s.DeleteRange(p.lo, p.hi)
			if err == nil {
				m.last = p.lo - 1
				term++
			}
		case r < 95 && m.last > m.first:
			p.kind, p.lo, p.hi = "prefix", m.first, m.first+uint64(rng.IntN(int(m.last-m.first)))
			err = s.DeleteRange(p.lo, p.hi)
			if err == nil {
				m.first = p.hi + 1
			}
		default:
			p.kind, p.lo, p.hi = "all", m.first, m.last
			err = s.DeleteRange(p.lo, p.hi)
			if err == nil {
				// The next store continues the index space.
				m.first = 0
			}
		}
		if err != nil {
			if !mfs.Down() {
				t.Fatalf("op %d %s failed without a crash: %v", op, p.kind, err)
			}
			cut = p
		}
	}
	if cut != nil && cut.kind == "reopen" {
		// The crash hit the reopen: nothing was changing.
		cut = &pending{kind: "none"}
	}
	if cut == nil {
		mfs.Disarm()
		mfs.Crash(mappedfile.TornTail(rng.IntN(4)), rng)
		cut = &pending{kind: "none"}
	}
	s.Close()
	mfs.Restart()
	s, err := OpenLogStore(context.Background(), testDir, LogStoreOptions{Backend: mfs, SegmentBytes: seg})
	if err != nil {
		t.Fatalf("reopen after a crash during %s: %v", cut.kind, err)
	}
	defer s.Close()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	// What may be there: the model, and for the cut operation its entries.
	known := func(i uint64) *raft.Log {
		for _, l := range cut.batch {
			if l.Index == i {
				return l
			}
		}
		return m.entries[i]
	}
	wantFirst, wantLast := m.first, m.last
	ok := false
	switch cut.kind {
	case "none":
		ok = first == wantFirst && (last == wantLast || wantFirst == 0 && last == 0)
	case "store":
		if m.first == 0 {
			ok = first == 0 && last == 0 || first == cut.batch[0].Index && last <= cut.batch[len(cut.batch)-1].Index
		} else {
			ok = first == wantFirst && last >= wantLast && last <= cut.batch[len(cut.batch)-1].Index
		}
	case "suffix":
		ok = first == wantFirst && last >= cut.lo-1 && last <= wantLast
	case "prefix":
		ok = first >= wantFirst && first <= cut.hi+1 && last == wantLast
	case "all":
		ok = first == 0 && last == 0 || first == wantFirst && last >= first-1 && last <= wantLast
	}
	if !ok {
		t.Fatalf("after a crash during %s (lo %d hi %d, batch %d): store holds %d-%d, the acknowledged log %d-%d",
			cut.kind, cut.lo, cut.hi, len(cut.batch), first, last, wantFirst, wantLast)
	}
	for i := first; first != 0 && i <= last; i++ {
		var got raft.Log
		if err := s.GetLog(i, &got); err != nil {
			t.Fatalf("get %d of %d-%d: %v", i, first, last, err)
		}
		if w := known(i); w == nil || !sameLog(&got, w) {
			t.Fatalf("entry %d after the crash = %+v, want %+v", i, got, w)
		}
	}
	// The recovered store takes new entries and keeps them.
	next := last + 1
	if first == 0 {
		next = max(m.last, last) + 1
	}
	if err := s.StoreLogs(span(next, next+2, term+1, 50)); err != nil {
		t.Fatalf("store after recovery: %v", err)
	}
	s.Close()
	s2, err := OpenLogStore(context.Background(), testDir, LogStoreOptions{Backend: mfs, SegmentBytes: seg})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if l, _ := s2.LastIndex(); l != next+2 {
		t.Fatalf("after storing %d-%d and reopening, last = %d", next, next+2, l)
	}
	return cut.kind
}

func TestStableStore(t *testing.T) {
	mfs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	s, err := OpenStableStore(mfs, "/ctl")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get([]byte("k")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing key: %v (raft tests the text \"not found\")", err)
	}
	if _, err := s.GetUint64([]byte("t")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing uint64: %v", err)
	}
	if err := s.Set([]byte("k"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("t"), 42); err != nil {
		t.Fatal(err)
	}
	// A power loss right after: both are durable.
	mfs.Crash(mappedfile.TornRandomPages, rand.New(rand.NewPCG(1, 2)))
	mfs.Restart()
	s, err = OpenStableStore(mfs, "/ctl")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get([]byte("k")); err != nil || string(v) != "v1" {
		t.Fatalf("k = %q, %v", v, err)
	}
	if v, err := s.GetUint64([]byte("t")); err != nil || v != 42 {
		t.Fatalf("t = %d, %v", v, err)
	}
	if _, err := s.GetUint64([]byte("k")); err == nil {
		t.Fatal("a 2-byte value read as a uint64")
	}
	// A crash in the middle of a Set leaves the old value or the new one.
	for n := int64(1); n <= 4; n++ {
		mfs.ArmCrash(n, mappedfile.TornGarbage, rand.New(rand.NewPCG(uint64(n), 3)))
		setErr := s.SetUint64([]byte("t"), uint64(100+n))
		mfs.Disarm()
		if !mfs.Down() {
			mfs.Crash(mappedfile.TornNone, nil)
		}
		mfs.Restart()
		s, err = OpenStableStore(mfs, "/ctl")
		if err != nil {
			t.Fatalf("reopen after a crash at op %d of a set: %v", n, err)
		}
		v, _ := s.GetUint64([]byte("t"))
		if setErr == nil && v != uint64(100+n) {
			t.Fatalf("a set that returned nil before the crash at op %d was lost: t = %d", n, v)
		}
		if v != 42 && v != uint64(100+n) {
			t.Fatalf("crash at op %d of a set: t = %d", n, v)
		}
		if err := s.SetUint64([]byte("t"), 42); err != nil {
			t.Fatal(err)
		}
	}
	if err := mfs.WriteFile("/ctl/"+stableFileName, []byte("{")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStableStore(mfs, "/ctl"); !errors.Is(err, ErrLogCorrupt) {
		t.Fatalf("open a torn stable file: %v", err)
	}
}

func TestSnapshotStore(t *testing.T) {
	mfs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	s, err := OpenSnapshotStore(mfs, "/ctl/snaps", 2)
	if err != nil {
		t.Fatal(err)
	}
	cfg := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "a", Address: "x:1"}}}
	for i := uint64(1); i <= 3; i++ {
		sink, err := s.Create(1, i*10, i, cfg, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(sink, "state %d", i)
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
	}
	canceled, _ := s.Create(1, 40, 4, cfg, 1, nil)
	fmt.Fprint(canceled, "never")
	canceled.Cancel()
	metas, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(metas) != 2 || metas[0].Index != 30 || metas[1].Index != 20 {
		t.Fatalf("list: %+v", metas)
	}
	meta, rc, err := s.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rc)
	if string(data) != "state 3" || meta.Size != int64(len(data)) || meta.Configuration.Servers[0].ID != "a" {
		t.Fatalf("snapshot 3: %q %+v", data, meta)
	}
	// A torn file is skipped, never half-read.
	path := filepath.Join("/ctl/snaps", metas[0].ID+snapSuffix)
	b, _ := mfs.ReadFile(path)
	b[len(b)/2] ^= 1
	if err := storefs.WriteFileAtomic(mfs, path, b); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Open(metas[0].ID); !errors.Is(err, ErrSnapshotCorrupt) {
		t.Fatalf("open a corrupt snapshot: %v", err)
	}
	if metas, _ := s.List(); len(metas) != 1 || metas[0].Index != 20 {
		t.Fatalf("list with a corrupt snapshot: %+v", metas)
	}
}

// TestLogStoreSuffixAtASegmentBoundaryAfterReopen deletes a suffix that
// starts exactly at a segment's first entry in a reopened store (the
// segment before it, untouched since the open, becomes the one appends go
// to), then appends.
func TestLogStoreSuffixAtASegmentBoundaryAfterReopen(t *testing.T) {
	mfs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	s := openMem(t, mfs, 256)
	// Three small entries fill part of the first segment; the big fourth
	// does not fit and starts the second.
	logs := append(span(1, 3, 1, 10), entry(4, 1, 150), entry(5, 1, 10))
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openMem(t, mfs, 256)
	defer func() { s.Close() }()
	if len(s.segs) != 2 || s.segs[1].first != 4 {
		t.Fatalf("want the second segment to start at 4: %d segments", len(s.segs))
	}
	if err := s.DeleteRange(4, 5); err != nil {
		t.Fatal(err)
	}
	// The small new entry fits in the first segment, untouched since the open.
	if err := s.StoreLogs(span(4, 5, 2, 10)); err != nil {
		t.Fatalf("append after deleting from the segment boundary: %v", err)
	}
	want := append(span(1, 3, 1, 10), span(4, 5, 2, 10)...)
	expect(t, s, want)
	s.Close()
	s = openMem(t, mfs, 256)
	expect(t, s, want)
}
