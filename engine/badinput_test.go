package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/internal/testenv"
)

// diskStore makes a closed mmap store with n messages in small segments.
func diskStore(t *testing.T, n int) (string, Options, []PutResult) {
	t.Helper()
	dir := t.TempDir()
	o := smallLogicsOptions(Options{Backend: "mmap"})
	o.IndexSlotCount, o.IndexMaxEntries = 101, 1000
	s := openStore(t, dir, o)
	res := putN(t, s, "B", 2, n, 300, nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, o, res
}

func segmentPath(dir string, offset int64) string {
	return filepath.Join(dir, commitLogDirName, segment.Name(offset))
}

// flipByte flips a bit inside the body of the record res and returns the
// segment file and its new content.
func flipByte(t *testing.T, dir string, o Options, res PutResult) (string, []byte) {
	t.Helper()
	seg := res.PhysicalOffset - res.PhysicalOffset%o.SegmentSizeBytes
	path := segmentPath(dir, seg)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pos := res.PhysicalOffset - seg + int64(res.Size) - 150 // inside the body
	b[pos] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, b
}

func TestFlippedByteInTheMiddleStopsOpen(t *testing.T) {
	dir, o, res := diskStore(t, 600)
	victim := res[100]
	seg := victim.PhysicalOffset - victim.PhysicalOffset%o.SegmentSizeBytes
	if last := res[len(res)-1].PhysicalOffset; last-seg < 3*o.SegmentSizeBytes {
		t.Fatalf("the victim's segment %d is among the 3 newest (last record at %d): the test needs an older one", seg, last)
	}
	path, b := flipByte(t, dir, o, victim)

	// By default Open scans from the third-newest segment (RocketMQ's rule):
	// it does not see the damage, Verify does, and reports its offset.
	s := openStore(t, dir, o)
	if s.recoveredFrom <= victim.PhysicalOffset {
		t.Fatalf("recovery scanned from %d, before the victim at %d", s.recoveredFrom, victim.PhysicalOffset)
	}
	rep, err := s.Verify(context.Background())
	if err != nil || len(rep.Problems) == 0 || rep.Problems[0].Offset != victim.PhysicalOffset || !strings.Contains(rep.Problems[0].What, "BODYCRC") {
		t.Fatalf("verify: %v %v; want the BODYCRC problem at %d first", err, rep.Problems, victim.PhysicalOffset)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// FullRecoveryScan checks every record at Open: it stops there.
	o.FullRecoveryScan = true
	_, err = Open(context.Background(), dir, o)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "offset "+itoa(victim.PhysicalOffset)) || !strings.Contains(err.Error(), "BODYCRC") {
		t.Fatalf("open with a flipped byte: %v; want ErrCorrupt naming offset %d and BODYCRC", err, victim.PhysicalOffset)
	}
	// Nothing was changed: the file is as it was.
	after, _ := os.ReadFile(path)
	if !bytes.Equal(after, b) {
		t.Fatal("a refused open changed the segment")
	}
	// With the truncate policy the log is cut there and the rest kept aside.
	o.OnCorruption = CorruptionTruncate
	s = openStore(t, dir, o)
	defer s.Close()
	if s.MaxOffset() != victim.PhysicalOffset {
		t.Fatalf("cut at %d, want %d", s.MaxOffset(), victim.PhysicalOffset)
	}
	broken, err := os.ReadFile(path + ".broken")
	if err != nil || len(broken) == 0 {
		t.Fatalf("no .broken copy: %v", err)
	}
	if !bytes.Equal(broken[:victim.Size], b[victim.PhysicalOffset-seg:victim.PhysicalOffset-seg+int64(victim.Size)]) {
		t.Fatal(".broken does not start with the corrupt record")
	}
	rep, err = s.Verify(context.Background())
	if err != nil || len(rep.Problems) != 0 {
		t.Fatalf("verify after the cut: %v %v", err, rep.Problems)
	}
}

// A flipped byte in the segments the default recovery scans stops Open —
// also when no periodic flush ran before the clean close (the close's own
// flush must make the checkpoint know every byte durable, or the damage
// would pass for a torn tail and be cut silently).
func TestFlippedByteInARecentSegmentStopsOpen(t *testing.T) {
	dir := t.TempDir()
	// Only full segments are flushed before Close (least pages above a
	// segment's 16, no thorough flush).
	o := smallLogicsOptions(Options{Backend: "mmap", FlushInterval: time.Hour, FlushThoroughInterval: time.Hour, FlushLeastPages: 1000})
	s := openStore(t, dir, o)
	res := putN(t, s, "B", 2, 600, 300, nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	victim := res[len(res)-2]
	flipByte(t, dir, o, victim)
	_, err := Open(context.Background(), dir, o)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "offset "+itoa(victim.PhysicalOffset)) || !strings.Contains(err.Error(), "BODYCRC") {
		t.Fatalf("open with a flipped byte: %v; want ErrCorrupt naming offset %d and BODYCRC", err, victim.PhysicalOffset)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestSegmentTruncatedByHand(t *testing.T) {
	dir, o, res := diskStore(t, 400)
	last := res[len(res)-1]
	seg := last.PhysicalOffset - last.PhysicalOffset%o.SegmentSizeBytes
	if err := os.Truncate(segmentPath(dir, seg), 1000); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), dir, o)
	if err == nil || !strings.Contains(err.Error(), segment.Name(seg)) || !strings.Contains(err.Error(), "1000 bytes") {
		t.Fatalf("open with a short segment: %v; want an error naming the file and its size", err)
	}
}

func TestMissingSegmentStopsOpen(t *testing.T) {
	dir, o, res := diskStore(t, 400)
	last := res[len(res)-1]
	seg := last.PhysicalOffset - last.PhysicalOffset%o.SegmentSizeBytes
	if err := os.Remove(segmentPath(dir, seg)); err != nil {
		t.Fatal(err)
	}
	// The durable log now ends early: Open must not silently drop the tail.
	_, err := Open(context.Background(), dir, o)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open with the last segment gone: %v; want ErrCorrupt", err)
	}
}

func TestMissingConsumeQueuesAreRebuilt(t *testing.T) {
	dir, o, res := diskStore(t, 300)
	if err := os.RemoveAll(filepath.Join(dir, consumeQueueDirName)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, indexDirName)); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, dir, o)
	defer s.Close()
	ctx := context.Background()
	got, err := s.Get(ctx, "g", "B", 1, 0, 200, nil)
	if err != nil || got.Status != Found || len(got.Messages) < 100 {
		t.Fatalf("rebuilt queue: %v %v", got, err)
	}
	got.Release()
	if r, err := s.QueryByUniqKey(ctx, "B", "U00000299"); err != nil || r.PhysicalOffset != res[299].PhysicalOffset {
		t.Fatalf("rebuilt index: %v", err)
	}
	rep, err := s.Verify(ctx)
	if err != nil || len(rep.Problems) != 0 || rep.Records != 300 {
		t.Fatalf("verify: %v %+v", err, rep)
	}
}

func TestReadOnlyStoreDirectory(t *testing.T) {
	dir, o, _ := diskStore(t, 50)
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o755)
		_, err := Open(context.Background(), dir, o)
		if err == nil || !errors.Is(err, os.ErrPermission) {
			t.Fatalf("open of a read-only store: %v", err)
		}
		return
	}
	// Root ignores permission bits: the same check in a child running as
	// nobody (TestMain runs readOnlyHelper there). The test binary is copied
	// where nobody can run it.
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	binDir := t.TempDir()
	if err := os.Chmod(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(binDir, "engine.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "MQSTORE_RO_DIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), readOnlyHelperOK) {
		t.Fatalf("read-only helper as nobody: %v\n%s", err, out)
	}
}

// readOnlyHelperOK is what readOnlyHelper prints when the check passed.
const readOnlyHelperOK = "read-only helper: refused with a permission error, nothing changed"

// readOnlyHelper runs, as an unprivileged user, the check of
// TestReadOnlyStoreDirectory on a store it cannot write; it returns the
// process exit code.
func readOnlyHelper(dir string) int {
	before := listAll(dir)
	_, err := Open(context.Background(), dir, Options{Logger: quietLogger})
	if err == nil || !errors.Is(err, os.ErrPermission) {
		fmt.Printf("read-only helper: open of a store this user cannot write: %v\n", err)
		return 1
	}
	if after := listAll(dir); after != before {
		fmt.Println("read-only helper: the refused open changed the directory")
		return 1
	}
	fmt.Println(readOnlyHelperOK)
	return 0
}

func listAll(dir string) string {
	var b strings.Builder
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil {
			b.WriteString(p + " " + itoa(info.Size()) + "\n")
		}
		return nil
	})
	return b.String()
}

func TestRetention(t *testing.T) {
	ctx := context.Background()
	var clock atomic.Int64 // the store's services read it from their goroutines
	clock.Store(time.Date(2026, 11, 29, 4, 0, 0, 0, time.Local).UnixNano())
	o := smallLogicsOptions(Options{Backend: "mmap"})
	o.now = func() time.Time { return time.Unix(0, clock.Load()) }
	o.FileReservedTime = time.Hour
	o.CleanInterval = time.Hour // passes are run by hand below
	// The disk is not full, whatever this machine's disk holds.
	o.diskUsed = func(string) (float64, error) { return 10, nil }
	s := openStore(t, t.TempDir(), o)
	defer s.Close()
	res := putN(t, s, "R", 1, 800, 300, nil)
	if _, err := s.flushOnce(ctx, 0, false); err != nil { // retention deletes only flushed segments
		t.Fatal(err)
	}
	segs := s.log.queue.Len()
	if segs < 4 {
		t.Fatalf("%d segments", segs)
	}
	// Not expired yet: nothing goes.
	if n, err := s.CleanExpired(ctx); err != nil || n != 0 {
		t.Fatalf("early clean: %d %v", n, err)
	}
	// A reader holds the oldest segment while it is deleted.
	held, err := s.Get(ctx, "g", "R", 0, 0, 5, nil)
	if err != nil || held.Status != Found {
		t.Fatal(err)
	}
	clock.Add(int64(24 * time.Hour)) // the next day at the DeleteWhen hour
	n, err := s.CleanExpired(ctx)
	if err != nil || n != segs-1 {
		t.Fatalf("clean after the reserved time: %d %v; want %d (all but the active segment)", n, err, segs-1)
	}
	// The reader still reads what it holds.
	for i := range held.Messages {
		if _, err := held.Message(i); err != nil {
			t.Fatalf("held message %d after deletion: %v", i, err)
		}
	}
	held.Release()
	if s.MinOffset() == 0 {
		t.Fatal("min offset did not move")
	}
	got, err := s.Get(ctx, "g", "R", 0, 0, 5, nil)
	if err != nil || got.Status != OffsetTooSmall || got.NextBeginOffset == 0 {
		t.Fatalf("get below the new minimum: %v %v", got.Status, err)
	}
	got.Release()
	got, _ = s.Get(ctx, "g", "R", 0, got.NextBeginOffset, 5, nil)
	if got.Status != Found || got.Messages[0].PhysicalOffset < s.MinOffset() {
		t.Fatalf("get at the new minimum: %v", got.Status)
	}
	got.Release()
	if _, err := s.ReadMessage(ctx, res[0].PhysicalOffset); err == nil {
		t.Fatal("a deleted message is still readable")
	}
	// Not at the DeleteWhen hour and the disk not full: nothing happens.
	clock.Store(time.Date(2026, 11, 30, 13, 0, 0, 0, time.Local).UnixNano())
	if n, _ := s.CleanExpired(ctx); n != 0 {
		t.Fatalf("clean outside the DeleteWhen hour: %d", n)
	}
}

// TestNoSpaceOnARealFilesystem fills a tiny loop-device file system: the Put
// fails cleanly, what was stored stays readable and the store reopens.
func TestNoSpaceOnARealFilesystem(t *testing.T) {
	testenv.NeedRoot(t, "to make and mount a loop-device file system")
	for _, tool := range []string{"mkfs.ext4", "mount", "umount", "losetup"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, testenv.Loop, "%s is not installed", tool)
		}
	}
	img := filepath.Join(t.TempDir(), "fs.img")
	mnt := t.TempDir()
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 8<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		testenv.Skip(t, testenv.Loop, "mkfs.ext4: %v %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		testenv.Skip(t, testenv.Loop, "cannot mount a loop device here: %v %s", err, out)
	}
	defer func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", mnt, err, out)
		}
	}()
	ctx := context.Background()
	dir := filepath.Join(mnt, "store")
	o := Options{Backend: "mmap", SegmentSizeBytes: 1 << 20, ConsumeQueueFileSizeBytes: 20 * 1000, IndexSlotCount: 100, IndexMaxEntries: 1000,
		Logger: quietLogger, NoPreallocate: true, FlushMode: FlushSync}
	s := openStore(t, dir, o)
	var stored []PutResult
	var putErr error
	for i := 0; i < 20000 && putErr == nil; i++ {
		var res PutResult
		res, putErr = s.Put(ctx, testMessage("N", 0, i, 1000))
		if putErr == nil {
			stored = append(stored, res)
		}
	}
	if putErr == nil {
		t.Fatal("8 MiB never filled")
	}
	if !errors.Is(putErr, syscall.ENOSPC) && !strings.Contains(putErr.Error(), "no space") {
		t.Fatalf("put on a full disk: %v; want ENOSPC", putErr)
	}
	for _, r := range stored[len(stored)-10:] {
		if _, err := s.ReadMessage(ctx, r.PhysicalOffset); err != nil {
			t.Fatalf("stored message unreadable after ENOSPC: %v", err)
		}
	}
	s.Close()
	s = openStore(t, dir, o)
	defer s.Close()
	rep, err := s.Verify(ctx)
	if err != nil || len(rep.Problems) != 0 || rep.Records < int64(len(stored)) {
		t.Fatalf("reopen after ENOSPC: %v records %d (stored %d) problems %v", err, rep.Records, len(stored), rep.Problems)
	}
}

// TestDiskUsedPercentIsWhatDfShows: retention's "disk full" is df's Use%
// (used over used plus available), not 1 − available/total, which counts
// the blocks reserved for root as used (on this machine's file system that
// read 76 % for a disk df showed 35 % full, and retention deleted data).
func TestDiskUsedPercentIsWhatDfShows(t *testing.T) {
	dir := t.TempDir()
	out, err := exec.Command("df", "-P", dir).Output()
	if err != nil {
		t.Fatalf("df: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	fields := strings.Fields(lines[len(lines)-1])
	if len(fields) < 5 || !strings.HasSuffix(fields[4], "%") {
		t.Fatalf("df -P output: %q", out)
	}
	dfPercent, err := strconv.ParseFloat(strings.TrimSuffix(fields[4], "%"), 64)
	if err != nil {
		t.Fatal(err)
	}
	got, err := diskUsedPercent(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got > dfPercent+0.5 || got < dfPercent-1.5 { // df rounds up; the disk may change a little between the two
		t.Fatalf("diskUsedPercent = %.2f, df says %v%%", got, dfPercent)
	}
}

// TestCutWithValidRecordsAfterKeepsThem: after an unclean shutdown whose
// checkpoint records no flushed offset (deleted here), a damaged record
// with valid records in later segments cannot be told from a torn tail and
// is cut — but every cut byte is kept in .broken files, not thrown away.
func TestCutWithValidRecordsAfterKeepsThem(t *testing.T) {
	dir, o, res := diskStore(t, 600)
	victim := res[len(res)/3]
	seg := victim.PhysicalOffset - victim.PhysicalOffset%o.SegmentSizeBytes
	if last := res[len(res)-1].PhysicalOffset; last-seg < 2*o.SegmentSizeBytes {
		t.Fatalf("the victim's segment %d has too few after it (last record at %d)", seg, last)
	}
	path, b := flipByte(t, dir, o, victim)
	if err := os.Remove(filepath.Join(dir, checkpointFileName)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, abortFileName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	o.FullRecoveryScan = true
	s := openStore(t, dir, o)
	defer s.Close()
	if s.MaxOffset() != victim.PhysicalOffset {
		t.Fatalf("cut at %d, want %d", s.MaxOffset(), victim.PhysicalOffset)
	}
	broken, err := os.ReadFile(path + ".broken")
	if err != nil || !bytes.Equal(broken[:victim.Size], b[victim.PhysicalOffset-seg:victim.PhysicalOffset-seg+int64(victim.Size)]) {
		t.Fatalf("the cut record is not kept in %s.broken: %v", path, err)
	}
	later := segmentPath(dir, seg+o.SegmentSizeBytes) + ".broken"
	if fi, err := os.Stat(later); err != nil || fi.Size() == 0 {
		t.Fatalf("the next segment's cut records are not kept in %s: %v", later, err)
	}
}

// TestFailedOpenLeavesNoParameters: an Open of a new store that fails after
// recording the store's parameters — here on a commitlog directory that
// holds something other than segments — removes what it recorded, so the
// directory is as it found it (bar the lock file) and an Open with other
// options is not refused against parameters no store was made with.
func TestFailedOpenLeavesNoParameters(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, commitLogDirName), 0o755); err != nil {
		t.Fatal(err)
	}
	notes := filepath.Join(dir, commitLogDirName, "notes.txt")
	if err := os.WriteFile(notes, []byte("not a segment\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{Backend: "mmap", SegmentSizeBytes: 64 << 10, Logger: quietLogger}
	if _, err := Open(ctx, dir, o); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open on a commitlog directory with notes.txt: %v, want ErrCorrupt", err)
	}
	if _, err := os.Stat(filepath.Join(dir, paramsFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the failed Open left %s behind: %v", paramsFileName, err)
	}
	if b, err := os.ReadFile(notes); err != nil || string(b) != "not a segment\n" {
		t.Fatalf("the failed Open changed %s: %q, %v", notes, b, err)
	}
	// Once the directory is put right, another segment size is taken.
	if err := os.Remove(notes); err != nil {
		t.Fatal(err)
	}
	o.SegmentSizeBytes = 128 << 10
	s, err := Open(ctx, dir, o)
	if err != nil {
		t.Fatalf("Open after the directory was put right: %v", err)
	}
	defer s.Close()
	if got := s.Options().SegmentSizeBytes; got != 128<<10 {
		t.Fatalf("segment size %d, want the second Open's %d", got, 128<<10)
	}
}
