package conformance

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

// The checks that need an Injector: they look at the backend's real I/O.

func injectionChecks(caps capabilities) []check {
	checks := []check{
		{"FlushSyncsWhatItReports", testFlushSyncsWhatItReports},
		{"FailedIOIsStickyAndNeverRetried", testStickyAfterFailedIO},
		{"TruncateSyncsTheValidData", testTruncateSyncs},
		{"CreateAndDeleteSyncTheDirectory", testDirectorySyncs},
		{"InterruptedSyscallsAreRetried", testInterruptedSyscallsAreRetried},
	}
	if caps.overwriter {
		checks = append(checks, check{"FlushSyncsOverwrites", testOverwriteSynced})
	}
	return checks
}

func samePath(a, b string) bool { return filepath.Clean(a) == filepath.Clean(b) }

// firstUnsynced returns the first byte of [from, to) of path that no
// successful sync covers after it was last written, and false; or true when
// every byte is covered. The bytes were written into the backend's memory
// before ops[mark] (Append returned then); a write operation at index i
// hands them to the file, and only a sync at an index after it (or the
// write itself, when it is durable) makes them durable.
func firstUnsynced(ops []Op, path string, from, to int64, mark int) (int64, bool) {
	if to <= from {
		return 0, true
	}
	bounds := []int64{from, to}
	for _, op := range ops[mark:] {
		if samePath(op.Path, path) && op.Length > 0 {
			for _, b := range []int64{op.Offset, op.Offset + op.Length} {
				if b > from && b < to {
					bounds = append(bounds, b)
				}
			}
		}
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	for i := 0; i+1 < len(bounds); i++ {
		a, b := bounds[i], bounds[i+1]
		overlaps := func(op Op) bool { return op.Offset < b && op.Offset+op.Length > a }
		covers := func(op Op) bool { return op.Offset <= a && op.Offset+op.Length >= b }
		threshold := mark
		for j := mark; j < len(ops); j++ {
			op := ops[j]
			if op.Err != nil || !samePath(op.Path, path) || !op.Kind.isWrite() || !overlaps(op) {
				continue
			}
			if op.Kind == KindWriteDurable {
				threshold = max(threshold, j)
			} else {
				threshold = max(threshold, j+1)
			}
		}
		synced := false
		for j := threshold; j < len(ops) && !synced; j++ {
			op := ops[j]
			if op.Err != nil || !samePath(op.Path, path) || !op.Kind.isSync() {
				continue
			}
			synced = op.Kind == KindSync || covers(op)
		}
		if !synced {
			return a, false
		}
	}
	return 0, true
}

// formatOps lists the operations on path (the last 60), for a failure message.
func formatOps(ops []Op, path string) string {
	var lines []string
	for i, op := range ops {
		if samePath(op.Path, path) || samePath(op.NewPath, path) || samePath(op.Path, filepath.Dir(path)) {
			lines = append(lines, fmt.Sprintf("  %4d %v", i, op))
		}
	}
	if len(lines) > 60 {
		lines = append([]string{fmt.Sprintf("  … %d earlier", len(lines)-60)}, lines[len(lines)-60:]...)
	}
	if len(lines) == 0 {
		return "  (none)"
	}
	return strings.Join(lines, "\n")
}

// testFlushSyncsWhatItReports appends chunks at random, commits and flushes
// at random (with least-pages rules), and after every Flush checks that each
// byte below the position it returned was covered by a sync issued after
// the byte was written — for mmap an msync after the append, for a buffered
// backend a sync after the write that handed it to the file.
func testFlushSyncsWhatItReports(t *testing.T, h *harness) {
	mf := h.open(t, "seg")
	path := mf.Path()
	type written struct {
		from, to int64
		mark     int
	}
	var chunks []written
	check := func(what string, flushed int64) {
		t.Helper()
		ops := h.injector.Ops()
		for _, c := range chunks {
			if c.from >= flushed {
				continue
			}
			if at, ok := firstUnsynced(ops, path, c.from, min(c.to, flushed), c.mark); !ok {
				t.Fatalf("%s returned flushed %d, but byte %d (appended in [%d,%d) before operation %d) was not synced after it was written; operations on the file:\n%s",
					what, flushed, at, c.from, c.to, c.mark, formatOps(ops, path))
			}
		}
	}
	rng := rand.New(rand.NewPCG(11, 12))
	flushes := 0
	for {
		n := 1 + rng.IntN(3*mappedfile.PageSize)
		if mf.WrotePosition()+int64(n) > SegmentSizeBytes {
			break
		}
		from := appendN(t, mf, n)
		chunks = append(chunks, written{from, from + int64(n), len(h.injector.Ops())})
		switch rng.IntN(4) {
		case 0:
			if _, err := mf.Commit(h.ctx, rng.IntN(3)); err != nil {
				t.Fatal(err)
			}
		case 1:
			if _, err := mf.Commit(h.ctx, 0); err != nil {
				t.Fatal(err)
			}
			fallthrough
		case 2:
			leastPages := rng.IntN(3)
			fl, err := mf.Flush(h.ctx, leastPages)
			if err != nil {
				t.Fatal(err)
			}
			flushes++
			check(fmt.Sprintf("Flush(%d) number %d", leastPages, flushes), fl)
		}
	}
	commitFlush(t, h.ctx, mf)
	if fl, w := mf.FlushedPosition(), mf.WrotePosition(); fl != w {
		t.Fatalf("after Commit(0) and Flush(0): flushed %d, wrote %d", fl, w)
	}
	check("the final Flush(0)", mf.FlushedPosition())
}

// ioKinds returns the write and sync kinds ops issued on path, in order of
// first appearance.
func ioKinds(ops []Op, path string) []Kind {
	var kinds []Kind
	for _, op := range ops {
		if samePath(op.Path, path) && (op.Kind.isWrite() || op.Kind.isSync()) && !slices.Contains(kinds, op.Kind) {
			kinds = append(kinds, op.Kind)
		}
	}
	return kinds
}

// testStickyAfterFailedIO finds out which writes and syncs the backend's
// Commit and Flush issue, then fails each of them in turn (EIO, through the
// injector: the backend's own code sees the error) and checks that the
// failure is sticky — every later Append, Commit and Flush returns it, Err
// reports it — and that nothing is written or synced to that file again:
// after a failed fsync the state of the data is unknown, and a retry that
// succeeds would claim durability over pages the kernel may have dropped.
func testStickyAfterFailedIO(t *testing.T, h *harness) {
	mf := h.open(t, "probe-io")
	path := mf.Path()
	appendN(t, mf, 5000)
	m0 := len(h.injector.Ops())
	if _, err := mf.Commit(h.ctx, 0); err != nil {
		t.Fatal(err)
	}
	m1 := len(h.injector.Ops())
	if _, err := mf.Flush(h.ctx, 0); err != nil {
		t.Fatal(err)
	}
	ops := h.injector.Ops()
	phases := []struct {
		name  string
		kinds []Kind
	}{{"Commit", ioKinds(ops[m0:m1], path)}, {"Flush", ioKinds(ops[m1:], path)}}
	if len(phases[0].kinds)+len(phases[1].kinds) == 0 || !slices.ContainsFunc(append(phases[0].kinds, phases[1].kinds...), Kind.isSync) {
		t.Fatalf("Commit(0) and Flush(0) of 5000 new bytes issued no sync the injector saw; operations on the file:\n%s", formatOps(ops, path))
	}
	for _, phase := range phases {
		for _, kind := range phase.kinds {
			t.Run(phase.name+"/"+kind.String(), func(t *testing.T) {
				checkSticky(t, h, phase.name, kind)
			})
		}
	}
}

func checkSticky(t *testing.T, h *harness, phase string, kind Kind) {
	mf := h.open(t, "sticky-"+strings.ToLower(phase)+"-"+kind.String())
	path := mf.Path()
	appendN(t, mf, 5000)
	commitFlush(t, h.ctx, mf)
	appendN(t, mf, 5000)
	if phase == "Flush" {
		if _, err := mf.Commit(h.ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	flushedBefore := mf.FlushedPosition()
	h.injector.FailNext(path, syscall.EIO, kind)
	var err error
	if phase == "Commit" {
		_, err = mf.Commit(h.ctx, 0)
	} else {
		_, err = mf.Flush(h.ctx, 0)
	}
	ops := h.injector.Ops()
	failedAt := slices.IndexFunc(ops, func(op Op) bool {
		return op.Kind == kind && samePath(op.Path, path) && errors.Is(op.Err, syscall.EIO)
	})
	if failedAt < 0 {
		t.Fatalf("%s(0) did not issue the %v the probe saw; operations on the file:\n%s", phase, kind, formatOps(ops, path))
	}
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("%s(0) with its %v failing (EIO): %v, want an error wrapping EIO", phase, kind, err)
	}
	returnedAt := len(ops)
	if fl := mf.FlushedPosition(); fl != flushedBefore {
		t.Fatalf("a failed %s moved flushed from %d to %d", phase, flushedBefore, fl)
	}
	for round := 0; round < 2; round++ {
		if _, err := mf.Append(10, patternEncoder{}); !errors.Is(err, syscall.EIO) {
			t.Fatalf("Append after a failed %s: %v, want the sticky EIO", phase, err)
		}
		if _, err := mf.Commit(h.ctx, 0); !errors.Is(err, syscall.EIO) {
			t.Fatalf("Commit after a failed %s: %v, want the sticky EIO", phase, err)
		}
		if _, err := mf.Flush(h.ctx, 0); !errors.Is(err, syscall.EIO) {
			t.Fatalf("Flush after a failed %s: %v, want the sticky EIO (never retried)", phase, err)
		}
		if err := mf.Err(); !errors.Is(err, syscall.EIO) {
			t.Fatalf("Err() after a failed %s: %v, want EIO", phase, err)
		}
	}
	if fl := mf.FlushedPosition(); fl != flushedBefore {
		t.Fatalf("flushed moved from %d to %d after a failed %s", flushedBefore, fl, phase)
	}
	ops = h.injector.Ops()
	for i := failedAt + 1; i < len(ops); i++ {
		op := ops[i]
		if !samePath(op.Path, path) {
			continue
		}
		if op.Kind.isSync() {
			t.Fatalf("after the failed %v (operation %d) the file was synced again (operation %d: %v); a failed sync must never be retried; operations:\n%s",
				kind, failedAt, i, op, formatOps(ops, path))
		}
		if op.Kind.isWrite() && i >= returnedAt {
			t.Fatalf("after %s failed, a later call wrote to the file again (operation %d: %v); operations:\n%s", phase, i, op, formatOps(ops, path))
		}
	}
	buf := make([]byte, 5000)
	if _, err := mf.ReadAt(buf, 0); err != nil {
		t.Fatalf("read of the bytes flushed before the failure: %v", err)
	}
	checkPattern(t, buf, 0)
}

// testTruncateSyncs: recovery reopens a segment whose bytes may be only in
// the page cache (after a kill -9) and truncates it at the valid end; the
// Truncate must leave the whole valid range synced, not only the zeroed
// tail, or a power loss later loses records the store acknowledged again.
func testTruncateSyncs(t *testing.T, h *harness) {
	for _, validEnd := range []int64{20000, SegmentSizeBytes - 100, SegmentSizeBytes} {
		t.Run(fmt.Sprintf("validEnd=%d", validEnd), func(t *testing.T) {
			spec := h.spec(fmt.Sprintf("truncate-%d", validEnd))
			mf, err := h.backend.Open(h.ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			appendN(t, mf, SegmentSizeBytes)
			if _, err := mf.Commit(h.ctx, 0); err != nil { // in the file, not synced
				t.Fatal(err)
			}
			if err := mf.Close(); err != nil {
				t.Fatal(err)
			}
			mf, err = h.backend.Open(h.ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer mf.Close()
			mark := len(h.injector.Ops())
			if err := mf.Truncate(h.ctx, validEnd); err != nil {
				t.Fatal(err)
			}
			ops := h.injector.Ops()
			if at, ok := firstUnsynced(ops, spec.Path, 0, validEnd, mark); !ok {
				t.Fatalf("Truncate(%d) left byte %d of the valid data unsynced; operations on the file:\n%s", validEnd, at, formatOps(ops, spec.Path))
			}
		})
	}
}

// testDirectorySyncs: a new segment's name and a deleted one's removal
// must be durable when Open and Delete return — the directory is synced
// after the create (or rename into place) and after the unlink — and a new
// segment created under a temporary name is synced before it is renamed.
func testDirectorySyncs(t *testing.T, h *harness) {
	mark := len(h.injector.Ops())
	spec := h.spec("seg")
	mf, err := h.backend.Open(h.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	ops := h.injector.Ops()
	named := -1
	for i := mark; i < len(ops); i++ {
		op := ops[i]
		if op.Err == nil && (op.Kind == KindCreate && samePath(op.Path, spec.Path) || op.Kind == KindRename && samePath(op.NewPath, spec.Path)) {
			named = i
		}
	}
	if named < 0 {
		t.Fatalf("Open of a new segment: no create or rename of %s seen; operations:\n%s", spec.Path, formatOps(ops[mark:], spec.Path))
	}
	if op := ops[named]; op.Kind == KindRename {
		if !slices.ContainsFunc(ops[mark:named], func(o Op) bool { return o.Err == nil && o.Kind == KindSync && samePath(o.Path, op.Path) }) {
			t.Fatalf("the new segment was renamed from %s before that file was synced; operations:\n%s", op.Path, formatOps(ops, op.Path))
		}
	}
	syncDirAfter := func(ops []Op, from int) bool {
		return slices.ContainsFunc(ops[from:], func(o Op) bool {
			return o.Err == nil && o.Kind == KindSyncDir && samePath(o.Path, h.dir)
		})
	}
	if !syncDirAfter(ops, named+1) {
		t.Fatalf("Open created %s but did not sync the directory after it; operations:\n%s", spec.Path, formatOps(ops, spec.Path))
	}
	appendN(t, mf, 100)
	commitFlush(t, h.ctx, mf)
	mark = len(h.injector.Ops())
	if err := mf.Delete(); err != nil {
		t.Fatal(err)
	}
	ops = h.injector.Ops()
	removed := slices.IndexFunc(ops[mark:], func(o Op) bool { return o.Err == nil && o.Kind == KindRemove && samePath(o.Path, spec.Path) })
	if removed < 0 {
		t.Fatalf("Delete: no unlink of %s seen; operations:\n%s", spec.Path, formatOps(ops[mark:], spec.Path))
	}
	if !syncDirAfter(ops, mark+removed+1) {
		t.Fatalf("Delete unlinked %s but did not sync the directory after it; operations:\n%s", spec.Path, formatOps(ops, spec.Path))
	}
}

// testOverwriteSynced: bytes rewritten in place below the flushed position
// are synced by the next Flush, after the rewrite.
func testOverwriteSynced(t *testing.T, h *harness) {
	mf := h.open(t, "seg")
	ow := mf.(mappedfile.Overwriter)
	appendN(t, mf, 3*mappedfile.PageSize)
	commitFlush(t, h.ctx, mf)
	for i, at := range []int64{10, mappedfile.PageSize + 5, 2*mappedfile.PageSize - 2} {
		mark := len(h.injector.Ops())
		if _, err := ow.WriteAt([]byte("HEAD"), at); err != nil {
			t.Fatal(err)
		}
		if _, err := mf.Flush(h.ctx, 1+i); err != nil { // least pages must not hold an overwrite back
			t.Fatal(err)
		}
		ops := h.injector.Ops()
		if b, ok := firstUnsynced(ops, mf.Path(), at, at+4, mark); !ok {
			t.Fatalf("Flush after an overwrite of [%d,%d) left byte %d unsynced; operations:\n%s", at, at+4, b, formatOps(ops, mf.Path()))
		}
	}
}

// testInterruptedSyscallsAreRetried: a system call of Commit, Flush or
// Truncate interrupted by a signal (EINTR) did nothing and is issued again,
// so the call succeeds, leaves no sticky error, and the file holds what it
// should; the injector sees the operation twice, interrupted then done.
// Every write and sync kind each call issues as a system call is tried (an
// io_uring request never completes with EINTR for a file: a kind the
// backend sends through its ring is left out).
func testInterruptedSyscallsAreRetried(t *testing.T, h *harness) {
	for _, phase := range interruptPhases {
		kinds := syscallKinds(t, h, phase)
		for _, kind := range kinds {
			t.Run(phase.name+"/"+kind.String(), func(t *testing.T) {
				mf := h.open(t, "eintr-"+strings.ToLower(phase.name)+"-"+kind.String())
				phase.prepare(t, h, mf)
				mark := len(h.injector.Ops())
				h.injector.FailNext(mf.Path(), syscall.EINTR, kind)
				validEnd, err := phase.run(h, mf)
				if err != nil {
					t.Fatalf("%s with an interrupted %v: %v, want it retried and successful", phase.name, kind, err)
				}
				if err := mf.Err(); err != nil {
					t.Fatalf("sticky error after an EINTR: %v", err)
				}
				var attempts []Op
				for _, op := range h.injector.Ops()[mark:] {
					if op.Kind == kind && samePath(op.Path, mf.Path()) {
						attempts = append(attempts, op)
					}
				}
				if len(attempts) < 2 || !errors.Is(attempts[0].Err, syscall.EINTR) || attempts[1].Err != nil {
					t.Fatalf("the interrupted %v was not issued again: %v", kind, attempts)
				}
				commitFlush(t, h.ctx, mf)
				got := make([]byte, validEnd)
				if _, err := mf.ReadAt(got, 0); err != nil {
					t.Fatal(err)
				}
				checkPattern(t, got, 0)
				if err := mf.Close(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// interruptPhase is a call whose system calls the EINTR check interrupts:
// prepare brings a file to the state before it, run makes it and returns
// where the file's pattern must end afterwards. (Whether a backend issues
// any I/O in a phase at all is FailedIOIsStickyAndNeverRetried's concern.)
type interruptPhase struct {
	name    string
	prepare func(t *testing.T, h *harness, mf mappedfile.MappedFile)
	run     func(h *harness, mf mappedfile.MappedFile) (int64, error)
}

var interruptPhases = []interruptPhase{
	{"Commit",
		func(t *testing.T, h *harness, mf mappedfile.MappedFile) { appendN(t, mf, 5000) },
		func(h *harness, mf mappedfile.MappedFile) (int64, error) {
			_, err := mf.Commit(h.ctx, 0)
			return mf.WrotePosition(), err
		}},
	{"Flush",
		func(t *testing.T, h *harness, mf mappedfile.MappedFile) {
			appendN(t, mf, 5000)
			if _, err := mf.Commit(h.ctx, 0); err != nil {
				t.Fatal(err)
			}
		},
		func(h *harness, mf mappedfile.MappedFile) (int64, error) {
			_, err := mf.Flush(h.ctx, 0)
			return mf.WrotePosition(), err
		}},
	{"Truncate",
		func(t *testing.T, h *harness, mf mappedfile.MappedFile) {
			// Bytes past the valid end, beyond its page: zeros are written there.
			appendN(t, mf, 20000)
			commitFlush(t, h.ctx, mf)
		},
		func(h *harness, mf mappedfile.MappedFile) (int64, error) {
			validEnd := mf.WrotePosition() - 16000
			return validEnd, mf.Truncate(h.ctx, validEnd)
		}},
}

// syscallKinds runs phase on a probe file and returns the write and sync
// kinds it issued, none of them through the backend's io_uring.
func syscallKinds(t *testing.T, h *harness, phase interruptPhase) []Kind {
	t.Helper()
	mf := h.open(t, "eintr-probe-"+strings.ToLower(phase.name))
	phase.prepare(t, h, mf)
	mark := len(h.injector.Ops())
	if _, err := phase.run(h, mf); err != nil {
		t.Fatalf("%s: %v", phase.name, err)
	}
	ops := h.injector.Ops()[mark:]
	if err := mf.Close(); err != nil { // give a pooled backend its buffer back
		t.Fatal(err)
	}
	var kinds []Kind
	for _, kind := range ioKinds(ops, mf.Path()) {
		viaRing := slices.ContainsFunc(ops, func(op Op) bool {
			return op.Kind == kind && samePath(op.Path, mf.Path()) && strings.HasPrefix(op.Name, "io_uring")
		})
		if !viaRing {
			kinds = append(kinds, kind)
		}
	}
	return kinds
}
