package engine

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/mappedfile"
)

// TestEpochFileLayout: the file is RocketMQ's CheckpointFile text — the
// example in its source (2 entries, CRC 773307083) byte for byte — and it
// reads back.
func TestEpochFileLayout(t *testing.T) {
	entries := []EpochEntry{{7, 7000}, {8, 8000}}
	want := "2\n773307083\n7-7000\n8-8000\n"
	if got := string(encodeEpochs(entries)); got != want {
		t.Fatalf("encoded %q, want %q", got, want)
	}
	for _, text := range []string{want, strings.ReplaceAll(want, "\n", "\r\n")} {
		got, err := decodeEpochs([]byte(text))
		if err != nil || !reflect.DeepEqual(got, entries) {
			t.Fatalf("decode %q: %v, %v", text, got, err)
		}
	}
	if got, err := decodeEpochs(encodeEpochs(nil)); err != nil || len(got) != 0 {
		t.Fatalf("an empty history reads back as %v, %v", got, err)
	}
}

// TestEpochFileDamage: every kind of damage is refused with a reason.
func TestEpochFileDamage(t *testing.T) {
	for name, text := range map[string]string{
		"one line":         "2\n",
		"count":            "3\n773307083\n7-7000\n8-8000\n",
		"count not number": "x\n773307083\n7-7000\n8-8000\n",
		"crc":              "2\n773307084\n7-7000\n8-8000\n",
		"crc not number":   "2\nabc\n7-7000\n8-8000\n",
		"entry":            "2\n773307083\n7:7000\n8-8000\n",
		"edited entry":     "2\n773307083\n7-7001\n8-8000\n",
		"epoch order":      string(encodeEpochs([]EpochEntry{{8, 7000}, {7, 8000}})),
		"same epoch":       string(encodeEpochs([]EpochEntry{{7, 7000}, {7, 8000}})),
		"offset order":     string(encodeEpochs([]EpochEntry{{7, 8000}, {8, 7000}})),
		"same offset":      string(encodeEpochs([]EpochEntry{{7, 8000}, {8, 8000}})),
		"epoch zero":       string(encodeEpochs([]EpochEntry{{0, 0}})),
		"negative offset":  string(encodeEpochs([]EpochEntry{{1, -5}})),
	} {
		if got, err := decodeEpochs([]byte(text)); err == nil {
			t.Errorf("%s: %q decoded as %v", name, text, got)
		}
	}
}

func epochStoreOptions(fs *mappedfile.MemFS) Options {
	return smallLogicsOptions(Options{BackendImpl: fs, FlushMode: FlushSync})
}

// TestEpochAppendRules: append is durable, drops the suffix of the same
// epoch and later, replaces an epoch that holds no record, and refuses bad
// input without changing anything.
func TestEpochAppendRules(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	dir := t.TempDir()
	o := epochStoreOptions(fs)
	s := openStore(t, dir, o)
	if _, ok := s.LastEpoch(); ok || len(s.Epochs()) != 0 {
		t.Fatalf("a new store has epochs %v", s.Epochs())
	}
	res := putN(t, s, "E", 2, 20, 100, nil)
	mid := res[10].PhysicalOffset
	end := s.MaxOffset()
	steps := []struct {
		epoch int32
		start int64
		want  []EpochEntry
		bad   bool
	}{
		{1, 0, []EpochEntry{{1, 0}}, false},
		{3, mid, []EpochEntry{{1, 0}, {3, mid}}, false},
		{4, mid, []EpochEntry{{1, 0}, {4, mid}}, false}, // epoch 3 held nothing
		{2, mid, []EpochEntry{{1, 0}, {2, mid}}, false}, // epoch 2 rewrites 4
		{5, end, []EpochEntry{{1, 0}, {2, mid}, {5, end}}, false},
		{6, mid - 1, nil, true},
		{0, end, nil, true},
		{7, -1, nil, true},
	}
	for _, st := range steps {
		before := s.Epochs()
		err := s.AppendEpoch(ctx, st.epoch, st.start)
		if st.bad {
			if !errors.Is(err, ErrEpochInvalid) {
				t.Fatalf("append (%d, %d): %v, want ErrEpochInvalid", st.epoch, st.start, err)
			}
			if got := s.Epochs(); !reflect.DeepEqual(got, before) {
				t.Fatalf("a refused append changed the history from %v to %v", before, got)
			}
			continue
		}
		if err != nil {
			t.Fatalf("append (%d, %d): %v", st.epoch, st.start, err)
		}
		if got := s.Epochs(); !reflect.DeepEqual(got, st.want) {
			t.Fatalf("after (%d, %d): %v, want %v", st.epoch, st.start, got, st.want)
		}
		// Durable at once: what a power loss now keeps.
		data, ok := fs.Durable(filepath.Join(dir, epochFileName))
		if !ok || string(data) != string(encodeEpochs(st.want)) {
			t.Fatalf("after (%d, %d) the durable file holds %q", st.epoch, st.start, data)
		}
	}
	if last, ok := s.LastEpoch(); !ok || last != (EpochEntry{5, end}) {
		t.Fatalf("last epoch %v %v", last, ok)
	}
	fs.Crash(mappedfile.TornNone, nil)
	reopenAfter(s, fs)
	s = openStore(t, dir, o)
	defer s.Close()
	if got := s.Epochs(); !reflect.DeepEqual(got, []EpochEntry{{1, 0}, {2, mid}, {5, end}}) {
		t.Fatalf("after a power loss: %v", got)
	}
}

// TestEpochFileOnOpen: Open drops entries that start past the recovered
// end (keeps one starting at it), reads a .bak only when the file is
// missing, and refuses a damaged file naming it and the repair.
func TestEpochFileOnOpen(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	dir := t.TempDir()
	o := epochStoreOptions(fs)
	s := openStore(t, dir, o)
	putN(t, s, "E", 1, 10, 100, nil)
	end := s.MaxOffset()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, epochFileName)
	write := func(name string, entries []EpochEntry) {
		t.Helper()
		if err := fs.WriteFile(name, encodeEpochs(entries)); err != nil {
			t.Fatal(err)
		}
		if err := fs.SyncDir(dir); err != nil {
			t.Fatal(err)
		}
	}
	write(path, []EpochEntry{{1, 0}, {2, end}, {3, end + 100}})
	s = openStore(t, dir, o)
	if got := s.Epochs(); !reflect.DeepEqual(got, []EpochEntry{{1, 0}, {2, end}}) {
		t.Fatalf("entries past the end %d: %v", end, got)
	}
	if err := s.AppendEpoch(ctx, 4, end); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if data, _ := fs.ReadFile(path); string(data) != string(encodeEpochs([]EpochEntry{{1, 0}, {4, end}})) {
		t.Fatalf("file %q", data)
	}

	// A .bak only when the file is missing.
	write(path+".bak", []EpochEntry{{1, 0}, {9, end}})
	s = openStore(t, dir, o)
	if got := s.Epochs(); !reflect.DeepEqual(got, []EpochEntry{{1, 0}, {4, end}}) {
		t.Fatalf("with the file and a .bak: %v", got)
	}
	s.Close()
	if err := fs.Remove(path); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, o)
	if got := s.Epochs(); !reflect.DeepEqual(got, []EpochEntry{{1, 0}, {9, end}}) {
		t.Fatalf("from the .bak: %v", got)
	}
	s.Close()

	// Damage stops Open.
	if err := fs.WriteFile(path, []byte("2\n1\n1-0\n2-5\n")); err != nil {
		t.Fatal(err)
	}
	_, err := Open(ctx, dir, o)
	if !errors.Is(err, ErrEpochFile) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "Repair") {
		t.Fatalf("open with a damaged epoch file: %v", err)
	}
}

// TestEpochPrefixRetention: entries whose records all precede the first
// offset stored go; the newest stays.
func TestEpochPrefixRetention(t *testing.T) {
	h := []EpochEntry{{1, 0}, {2, 100}, {3, 200}}
	for _, c := range []struct {
		min  int64
		want []EpochEntry
	}{
		{0, h}, {99, h}, {100, h[1:]}, {150, h[1:]}, {200, h[2:]}, {1 << 40, h[2:]},
	} {
		if got := trimEpochPrefix(h, c.min); !reflect.DeepEqual(got, c.want) {
			t.Errorf("min %d: %v, want %v", c.min, got, c.want)
		}
	}
}

// TestFindConsistentPoint: the study's worked example and the edges.
func TestFindConsistentPoint(t *testing.T) {
	e := func(pairs ...int64) []EpochEntry {
		var out []EpochEntry
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, EpochEntry{int32(pairs[i]), pairs[i+1]})
		}
		return out
	}
	master := e(1, 0, 2, 900) // B, elected at 900 after A ran epoch 1
	for _, c := range []struct {
		name        string
		local       []EpochEntry
		localEnd    int64
		master      []EpochEntry
		masterEnd   int64
		want        ConsistentPoint
		wantFound   bool
		description string
	}{
		{"behind slave", e(1, 0), 800, master, 1200, ConsistentPoint{1, 800}, true, "C at 800: nothing to cut"},
		{"old master's unacked tail", e(1, 0), 1000, master, 1200, ConsistentPoint{1, 900}, true, "A cuts [900, 1000)"},
		{"lost tail", e(1, 0), 700, master, 1200, ConsistentPoint{1, 700}, true, "A lost its async tail"},
		{"same history", e(1, 0, 2, 900), 1000, master, 1200, ConsistentPoint{2, 1000}, true, ""},
		{"slave ahead in the master's epoch", e(1, 0, 2, 900), 1300, master, 1200, ConsistentPoint{2, 1200}, true, ""},
		{"empty local", nil, 0, master, 1200, ConsistentPoint{}, false, "a new replica"},
		{"empty master", e(1, 0), 500, nil, 0, ConsistentPoint{}, false, ""},
		{"no common epoch", e(3, 0), 500, master, 1200, ConsistentPoint{}, false, ""},
		{"same epoch number, other start", e(1, 0, 2, 800), 1000, master, 1200, ConsistentPoint{1, 800}, true, "epoch 2 of another history"},
		{"local epoch with no data", e(1, 0, 2, 900), 900, e(1, 0, 2, 900, 3, 1500), 2000, ConsistentPoint{2, 900}, true, ""},
		{"master epoch with no data", e(1, 0, 3, 900), 1100, e(1, 0, 2, 900, 4, 900), 1000, ConsistentPoint{1, 900}, true, ""},
		{"three epochs, fork in the middle", e(1, 0, 2, 100, 3, 300), 400, e(1, 0, 2, 100, 4, 250), 600, ConsistentPoint{2, 250}, true, ""},
	} {
		got, found := FindConsistentPoint(c.local, c.localEnd, c.master, c.masterEnd)
		if found != c.wantFound || got != c.want {
			t.Errorf("%s (%s): %+v %v, want %+v %v", c.name, c.description, got, found, c.want, c.wantFound)
		}
	}
}

// TestStartEpoch: an elected master's epoch starts at its flushed,
// dispatched end; a slave is refused.
func TestStartEpoch(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: true})
	o := smallLogicsOptions(Options{BackendImpl: fs, FlushMode: FlushAsync, FlushInterval: time.Hour, CommitInterval: time.Hour})
	dir := t.TempDir()
	s := openStore(t, dir, o)
	for i := 0; i < 50; i++ {
		if _, err := s.Put(ctx, testMessage("S", int32(i%2), i, 200)); err != nil {
			t.Fatal(err)
		}
	}
	end := s.Stats().WroteOffset
	e, err := s.StartEpoch(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if e != (EpochEntry{3, end}) || s.FlushedOffset() < end || s.DispatchedOffset() < end {
		t.Fatalf("epoch %v; wrote %d, flushed %d, dispatched %d", e, end, s.FlushedOffset(), s.DispatchedOffset())
	}
	if _, err := s.StartEpoch(ctx, 0); !errors.Is(err, ErrEpochInvalid) {
		t.Fatalf("epoch 0: %v", err)
	}
	s.Close()
	o.Role = Slave
	s = openStore(t, dir, o)
	defer s.Close()
	if _, err := s.StartEpoch(ctx, 4); !errors.Is(err, ErrSlaveReadOnly) {
		t.Fatalf("a slave started an epoch: %v", err)
	}
	if got := s.Epochs(); !reflect.DeepEqual(got, []EpochEntry{{3, end}}) {
		t.Fatalf("epochs %v", got)
	}
}

// TestDropEpochsAfter: the later epochs go, durably.
func TestDropEpochsAfter(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	dir := t.TempDir()
	s := openStore(t, dir, epochStoreOptions(fs))
	defer s.Close()
	putN(t, s, "E", 1, 10, 100, nil)
	end := s.MaxOffset()
	for _, e := range []EpochEntry{{1, 0}, {4, end / 2}, {6, end}} {
		if err := s.AppendEpoch(ctx, e.Epoch, e.StartOffset); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DropEpochsAfter(ctx, 4); err != nil {
		t.Fatal(err)
	}
	want := []EpochEntry{{1, 0}, {4, end / 2}}
	if got := s.Epochs(); !reflect.DeepEqual(got, want) {
		t.Fatalf("epochs %v, want %v", got, want)
	}
	if data, _ := fs.Durable(filepath.Join(dir, epochFileName)); string(data) != string(encodeEpochs(want)) {
		t.Fatalf("durable file %q", data)
	}
	if err := s.DropEpochsAfter(ctx, 9); err != nil || !reflect.DeepEqual(s.Epochs(), want) {
		t.Fatalf("nothing to drop: %v, epochs %v", err, s.Epochs())
	}
}
