package peers

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/mqstore/mqstore/bench/load"
)

// pebbleWALBlockBytes is the record format's block: a chunk never crosses
// one, so a reader may start at any multiple of it.
const pebbleWALBlockBytes = 32 << 10

// TestPebbleWALRecycled: with WithRecycledWAL the log the window writes is
// the obsolete log's file, renamed to the next log number before the first
// record — there with at least the requested bytes, the old name gone, the
// positions at zero — and written over in place: after the window the file
// has its old size, the durable prefix read back with pebble's reader as
// log 2 holds every acknowledged (sync) or drained (async) record byte for
// byte, the whole file reads as log 2 up to the EOF trailer, and past the
// new log's end the old log's records are still there as log 1.
func TestPebbleWALRecycled(t *testing.T) {
	const workers, perWorker, aged = 8, 60, 1 << 20
	for _, flush := range []string{FlushSync, FlushAsync} {
		t.Run(flush, func(t *testing.T) {
			dir := t.TempDir()
			p, err := Open(context.Background(), PebbleWAL, dir, flush, WithOutstanding(workers), WithRecycledWAL(aged))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			if _, err := os.Stat(filepath.Join(dir, PebbleWALFile)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the obsolete log %s is still there after the reuse: %v", PebbleWALFile, err)
			}
			path := filepath.Join(dir, PebbleWALRecycledFile)
			before, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if before.Size() < aged {
				t.Fatalf("%s holds %d bytes before the window, want the obsolete log's %d or more", path, before.Size(), aged)
			}
			if w, d := p.Positions(); w != 0 || d != 0 {
				t.Fatalf("positions (%d, %d) before the window: the aging is counted", w, d)
			}
			appendConcurrently(t, p, workers, perWorker)
			if flush == FlushAsync {
				if err := p.Drain(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			written, durable := p.Positions()
			if written >= aged {
				t.Fatalf("the window wrote %d bytes, not fewer than the %d aged: the test cannot see the old log's tail", written, aged)
			}
			records := readPebbleWALLog(t, openFile(t, copyPrefix(t, path, durable)), "durable prefix", pebbleWALRecycledFileNum)
			checkWorkersRecords(t, records, workers, perWorker)
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			after, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if after.Size() != before.Size() {
				t.Fatalf("%s: %d bytes after the window, %d before: not written over in place", path, after.Size(), before.Size())
			}
			if all := readPebbleWALLog(t, openFile(t, path), path, pebbleWALRecycledFileNum); len(all) != len(records) {
				t.Fatalf("%s read as log %d: %d records, the durable prefix %d", path, pebbleWALRecycledFileNum, len(all), len(records))
			}
			// The old log past the new one's end: from a block the window
			// left untouched (past its last block, which may end in the EOF
			// trailer's block), its records read as log 1.
			tailAt := (written/pebbleWALBlockBytes + 2) * pebbleWALBlockBytes
			f := openFile(t, path)
			old := readPebbleWALLog(t, io.NewSectionReader(f, tailAt, after.Size()-tailAt), "old tail", pebbleWALFileNum)
			if len(old) == 0 {
				t.Fatalf("%s from offset %d: no record of the old log %d", path, tailAt, pebbleWALFileNum)
			}
			for i, rec := range old {
				if string(rec) != string(load.Body(0, pebbleWALAgingRecordBytes)) {
					t.Fatalf("old tail record %d: %d bytes, not an aging record", i, len(rec))
				}
			}
		})
	}
}

// TestPebbleWALReusesTheObsoleteFile: the recycled log is the obsolete
// log's file (the same inode, renamed by ReuseForWrite, not truncated); a
// file smaller than asked for is refused as not reused.
func TestPebbleWALReusesTheObsoleteFile(t *testing.T) {
	dir := t.TempDir()
	const aged = 3*pebbleWALAgingSyncBytes/2 + 1 // past one synced record
	obsolete, err := agePebbleWAL(context.Background(), vfs.Default, dir, aged)
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.Stat(obsolete)
	if err != nil {
		t.Fatal(err)
	}
	if old.Size() < aged {
		t.Fatalf("the obsolete log holds %d bytes, want %d or more", old.Size(), aged)
	}
	if got := len(readPebbleWAL(t, obsolete)); int64(got) < aged/pebbleWALAgingRecordBytes {
		t.Fatalf("the obsolete log holds %d records", got)
	}
	path := filepath.Join(dir, PebbleWALRecycledFile)
	f, err := reusePebbleWAL(vfs.Default, obsolete, path, aged)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	reused, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(old, reused) || reused.Size() != old.Size() {
		t.Fatalf("%s (%d bytes) is not the obsolete log %s (%d bytes) reused", path, reused.Size(), obsolete, old.Size())
	}
	small := filepath.Join(dir, "small.log")
	if err := os.WriteFile(small, make([]byte, 10), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := reusePebbleWAL(vfs.Default, small, filepath.Join(dir, "000003.log"), 11); err == nil || !strings.Contains(err.Error(), "not reused") {
		t.Fatalf("a file smaller than asked for: %v", err)
	}
}

// TestRecycledWALDescribed: a recycled WAL is pebble-wal's alone — the
// other peers and a negative size are refused with ErrBadRecycledWAL —
// and its label and options say so; without one nothing speaks of it.
func TestRecycledWALDescribed(t *testing.T) {
	for _, name := range []string{Pebble, NATS, NATSInProc} {
		if _, err := Describe(name, FlushSync, WithRecycledWAL(1<<20)); !errors.Is(err, ErrBadRecycledWAL) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s with a recycled WAL: %v", name, err)
		}
		if _, err := Open(context.Background(), name, t.TempDir(), FlushSync, WithRecycledWAL(1<<20)); !errors.Is(err, ErrBadRecycledWAL) {
			t.Errorf("open %s with a recycled WAL: %v", name, err)
		}
	}
	if _, err := Describe(PebbleWAL, FlushSync, WithRecycledWAL(-1)); !errors.Is(err, ErrBadRecycledWAL) {
		t.Errorf("a negative recycled WAL: %v", err)
	}
	for _, flush := range []string{FlushSync, FlushAsync} {
		fresh, err := Describe(PebbleWAL, flush, WithRecycledWAL(0))
		if err != nil && !errors.Is(err, ErrNoBuildInfo) {
			t.Fatal(err)
		}
		if strings.Contains(fresh.Label, "recycled") || fresh.Options[load.RecycledLogOption] != "" ||
			!strings.Contains(fresh.Options["file"], "a new file (no WAL recycling)") {
			t.Errorf("%s on a new file: label %q, options %v", flush, fresh.Label, fresh.Options)
		}
		info, err := Describe(PebbleWAL, flush, WithRecycledWAL(5<<20))
		if err != nil && !errors.Is(err, ErrNoBuildInfo) {
			t.Fatal(err)
		}
		file := info.Options["file"]
		for _, want := range []string{"000002.log, a recycled WAL file", "000001.log filled beforehand by this peer's writer to at least 5242880 bytes",
			"vfs.ReuseForWrite", "written over from offset 0", "recyclable chunk format", "log number 2"} {
			if !strings.Contains(file, want) {
				t.Errorf("%s: file option %q lacks %q", flush, file, want)
			}
		}
		if !strings.Contains(info.Label, "on a recycled WAL file (log 2)") || info.Options[load.RecycledLogOption] == "" || info.Durability != fresh.Durability {
			t.Errorf("%s recycled: label %q, options %v, durability %+v (new file: %+v)", flush, info.Label, info.Options, info.Durability, fresh.Durability)
		}
	}
}

func openFile(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// checkWorkersRecords checks that records (empty drain records aside) are
// exactly perWorker copies of each worker's body.
func checkWorkersRecords(t *testing.T, records [][]byte, workers, perWorker int) {
	t.Helper()
	perBody := map[string]int{}
	for _, rec := range records {
		if len(rec) > 0 {
			perBody[string(rec)]++
		}
	}
	for w := range workers {
		body := string(load.Body(w, testMessageBytes))
		if got := perBody[body]; got != perWorker {
			t.Errorf("worker %d: %d of its %d records", w, got, perWorker)
		}
		delete(perBody, body)
	}
	if len(perBody) != 0 {
		t.Errorf("%d records that no worker wrote", len(perBody))
	}
}
