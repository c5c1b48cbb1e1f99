package peers

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/record"
	"github.com/mqstore/mqstore/internal/pagecache"
	"github.com/mqstore/mqstore/internal/testenv"
)

// readPebbleWAL reads every record of a pebble-wal log with pebble's
// record.Reader, stopping cleanly at the end of the data.
func readPebbleWAL(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return readPebbleWALLog(t, f, path, pebbleWALFileNum)
}

// readPebbleWALLog reads every record of log logNum from r (name in
// failures) with pebble's record.Reader, stopping cleanly at the end of the
// log: the end of the data, or the EOF trailer LogWriter.Close writes.
func readPebbleWALLog(t *testing.T, r io.Reader, name string, logNum uint64) [][]byte {
	t.Helper()
	rr := newPebbleWALReader(record.NewReader, r, logNum)
	var records [][]byte
	for {
		next, err := rr.Next()
		if errors.Is(err, io.EOF) {
			return records
		}
		if err != nil {
			t.Fatalf("%s: log %d: record %d: %v", name, logNum, len(records), err)
		}
		rec, err := io.ReadAll(next)
		if err != nil {
			t.Fatalf("%s: log %d: record %d: %v", name, logNum, len(records), err)
		}
		records = append(records, rec)
	}
}

// newPebbleWALReader calls newReader with logNum as its file-number type
// (withLogNum's counterpart for the reader).
func newPebbleWALReader[N ~uint64](newReader func(io.Reader, N) *record.Reader, r io.Reader, logNum uint64) *record.Reader {
	return newReader(r, N(logNum))
}

// copyPrefix copies the first n bytes of src into a new file: what a crash
// that keeps only those bytes leaves.
func copyPrefix(t *testing.T, src string, n int64) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) < n {
		t.Fatalf("%s holds %d bytes, fewer than the %d reported durable", src, len(data), n)
	}
	dst := filepath.Join(t.TempDir(), "crashed.log")
	if err := os.WriteFile(dst, data[:n], 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestPebbleWALRecordsSurvive: the log cut at the durable offset — what a
// crash after the acknowledgements keeps at least — holds, read back with
// pebble's record.Reader, every record acknowledged (sync) or drained
// (async), byte for byte, and the drain records are empty.
func TestPebbleWALRecordsSurvive(t *testing.T) {
	const workers, perWorker = 8, 60
	for _, flush := range []string{FlushSync, FlushAsync} {
		t.Run(flush, func(t *testing.T) {
			p, dir := openPeer(t, peerCase{PebbleWAL, flush}, workers)
			appendConcurrently(t, p, workers, perWorker)
			if flush == FlushAsync {
				if err := p.Drain(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			_, durable := p.Positions()
			records := readPebbleWAL(t, copyPrefix(t, filepath.Join(dir, PebbleWALFile), durable))
			checkWorkersRecords(t, records, workers, perWorker)
		})
	}
}

// TestSyncedOnDisk proves that what a peer reports durable is on the device:
// no page of its data files is dirty or under writeback (after every
// acknowledgement for sync, after Drain for async). With fdatasync, fsync
// or msync made no-ops (strace -f -e inject=fdatasync,fsync,msync:retval=0)
// it fails.
func TestSyncedOnDisk(t *testing.T) {
	testenv.NeedRoot(t, "reading page flags (/proc/kpageflags) needs root")
	dataFiles := map[string]string{PebbleWAL: ".log", Pebble: ".log", NATS: ".blk", NATSInProc: ".blk"}
	for _, c := range allCases() {
		t.Run(c.String(), func(t *testing.T) {
			p, dir := openPeer(t, c, 8)
			appendConcurrently(t, p, 8, 60)
			if c.flush == FlushAsync {
				if err := p.Drain(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			var checked int
			err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || !strings.HasSuffix(path, dataFiles[c.name]) {
					return err
				}
				fi, err := d.Info()
				if err != nil || fi.Size() == 0 {
					return err
				}
				checked++
				if err := pagecache.CheckSynced(path, 0, fi.Size()); err != nil {
					if errors.Is(err, pagecache.ErrNoAccess) {
						testenv.Skip(t, testenv.Root, "%v", err)
					}
					return err
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if checked == 0 {
				t.Fatalf("no %s data file with data under %s", dataFiles[c.name], dir)
			}
		})
	}
}

// TestPebbleWALGroupCommits: concurrent sync producers share fdatasyncs —
// fewer syncs ran than records were acknowledged — and one producer gets
// one sync per record.
func TestPebbleWALGroupCommits(t *testing.T) {
	const perWorker = 40
	for _, workers := range []int{1, 16} {
		p, _ := openPeer(t, peerCase{PebbleWAL, FlushSync}, workers)
		appendConcurrently(t, p, workers, perWorker)
		records, syncs := int64(workers*perWorker), p.(*pebbleWALPeer).syncs.Load()
		switch {
		case workers == 1 && syncs != records:
			t.Fatalf("one producer: %d fdatasyncs for %d records, want one each", syncs, records)
		case workers > 1 && syncs >= records:
			t.Fatalf("%d producers: %d fdatasyncs for %d records: no group commit", workers, syncs, records)
		}
		t.Logf("%d producers: %d records, %d fdatasyncs", workers, records, syncs)
	}
}
