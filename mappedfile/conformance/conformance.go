// Package conformance is the test suite every MappedFile backend runs
// (pebble's vfstest, for mqstore's seam). A backend's tests call
//
//	conformance.Run(t, func(t testing.TB) mappedfile.Backend { return mybackend.New(...) },
//		conformance.WithInjector(faultseam.ForConformance))
//
// Every check opens its own files under t.TempDir() with segments of
// SegmentSizeBytes. Backends whose memory is sized up front (a buffer pool)
// size it from SegmentSizeBytes.
//
// For a backend whose files are files of the OS, the suite reads the page
// cache's flags (internal/pagecache, root) to prove that after Flush and
// after Truncate no page of the durable range is still dirty: run under
// `strace -f -e inject=fdatasync,fsync,msync:retval=0` those checks fail.
//
// With an Injector (WithInjector) the suite also proves, on the backend's
// real I/O, what a crash test of an in-memory file cannot: that Flush
// returning n means a sync covering [0, n) was issued after those bytes were
// written; that a failed write or sync is sticky and never retried, while
// one interrupted by a signal (EINTR) is issued again; that Truncate leaves
// the whole valid range synced, and on a prewritten segment writes zeros
// over the discarded pages only; and that creating and deleting a segment
// syncs its directory. For files on disk it also checks that a prewritten
// segment keeps no unwritten extent through appends, Truncate and a reopen.
// Allocation checks are separate (RunAllocs), for a test file built
// without -race.
package conformance

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/internal/disktest"
	"github.com/mqstore/mqstore/mappedfile"
)

// SegmentSizeBytes is the size of every segment the suite opens (64 pages).
const SegmentSizeBytes = 64 * mappedfile.PageSize

// Factory returns the backend under test; it is called once per check.
type Factory func(t testing.TB) mappedfile.Backend

type check struct {
	name string
	fn   func(t *testing.T, h *harness)
}

// Run runs every check against the backend. The checks that need an
// injector are added when opts give one; the Overwriter check when the
// backend's files implement it. Nothing is skipped: a check that does not
// apply is not run at all.
func Run(t *testing.T, factory Factory, opts ...Option) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	caps := probe(t, factory)
	checks := []check{
		{"NewFilePositions", testNewFilePositions},
		{"PositionsOnlyMoveForward", testPositionsOnlyMoveForward},
		{"FullAtBoundary", testFullAtBoundary},
		{"AppendToFullSegmentIsErrFull", testAppendToFullSegment},
		{"EncoderErrorPublishesNothing", testEncoderError},
		{"CommitFlushLeastPages", testLeastPages},
		{"FullSegmentIgnoresLeastPages", testFullSegmentFlush},
		{"ReadsStopAtReadable", testReadBounds},
		{"ConcurrentReadersWhileAppending", testConcurrentReaders},
		{"CommitAndFlushConcurrently", testCommitFlushConcurrently},
		{"SendRangeToTCP", testSendRange},
		{"DeleteWhileReferenced", testDeleteWhileReferenced},
		{"CloseThenOperations", testClose},
		{"ReopenTruncateAndContinue", testReopen},
		{"ReopenSizeMismatch", testSizeMismatch},
		{"WarmAndCool", testWarmCool},
	}
	if caps.overwriter {
		checks = append(checks, check{"OverwriteIsFlushed", testOverwrite})
	}
	if caps.onDisk {
		checks = append(checks, pageCacheChecks...)
		checks = append(checks, check{"PrewrittenSegmentStaysWritten", testPrewrittenSegmentStaysWritten})
	}
	if cfg.injector != nil {
		checks = append(checks, injectionChecks(caps)...)
		if caps.onDisk {
			checks = append(checks, check{"TruncateRewritesOnlyDiscardedPages", testTruncateRewritesOnlyDiscardedPages})
		}
	} else {
		t.Logf("conformance: backend %s runs without an injector: durability and stickiness of its I/O are not checked here", caps.name)
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, factory(t))
			if cfg.injector != nil {
				h.injector = cfg.injector(t, h.dir)
			}
			c.fn(t, h)
		})
	}
}

// RunAllocs runs the allocation checks (Append does not allocate). Call it
// from a test whose name contains "Allocs", in a file built with
// `//go:build !race` (the race detector allocates).
func RunAllocs(t *testing.T, factory Factory) {
	t.Run("AppendAllocs", func(t *testing.T) {
		testAppendAllocs(t, newHarness(t, factory(t)))
	})
}

// capabilities are what the suite learns about a backend by opening a file.
type capabilities struct {
	name       string
	overwriter bool
	onDisk     bool // its files are files of the OS (not in memory)
}

func probe(t *testing.T, factory Factory) capabilities {
	t.Helper()
	h := newHarness(t, factory(t))
	mf, err := h.backend.Open(h.ctx, h.spec("probe"))
	if err != nil {
		t.Fatalf("open a probe file: %v", err)
	}
	defer mf.Close()
	_, overwriter := mf.(mappedfile.Overwriter)
	_, statErr := os.Stat(mf.Path())
	_, lister := h.backend.(mappedfile.Lister)
	return capabilities{name: h.backend.Name(), overwriter: overwriter, onDisk: statErr == nil && !lister}
}

type harness struct {
	backend  mappedfile.Backend
	dir      string
	ctx      context.Context
	injector Injector // nil without WithInjector
}

func newHarness(t *testing.T, b mappedfile.Backend) *harness {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &harness{backend: b, dir: disktest.Dir(t), ctx: ctx}
}

func (h *harness) spec(name string) mappedfile.Spec {
	return mappedfile.Spec{Path: filepath.Join(h.dir, name), FromOffset: 1 << 30, SizeBytes: SegmentSizeBytes}
}

func (h *harness) open(t *testing.T, name string) mappedfile.MappedFile {
	t.Helper()
	mf, err := h.backend.Open(h.ctx, h.spec(name))
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	t.Cleanup(func() { _ = mf.Close() })
	return mf
}

// exists reports whether the backend still has the file.
func (h *harness) exists(t *testing.T, name string) bool {
	t.Helper()
	if l, ok := h.backend.(mappedfile.Lister); ok {
		names, err := l.List(h.dir)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		for _, n := range names {
			if n == name {
				return true
			}
		}
		return false
	}
	_, err := os.Stat(filepath.Join(h.dir, name))
	return err == nil
}

// pattern is the byte the suite writes at a segment position: every byte
// is predictable from its position, so readers can check what they see.
func pattern(pos int64) byte { return byte(pos*131 + pos>>8 + 7) }

type patternEncoder struct{}

func (patternEncoder) EncodeAt(dst []byte, filePos int64) error {
	for i := range dst {
		dst[i] = pattern(filePos + int64(i))
	}
	return nil
}

func checkPattern(t testing.TB, got []byte, filePos int64) {
	t.Helper()
	for i, b := range got {
		if want := pattern(filePos + int64(i)); b != want {
			t.Fatalf("byte at position %d: got %#x, want %#x", filePos+int64(i), b, want)
		}
	}
}

func appendN(t testing.TB, mf mappedfile.MappedFile, n int) int64 {
	t.Helper()
	pos, err := mf.Append(n, patternEncoder{})
	if err != nil {
		t.Fatalf("append %d at %d: %v", n, mf.WrotePosition(), err)
	}
	return pos
}

func commitFlush(t testing.TB, ctx context.Context, mf mappedfile.MappedFile) {
	t.Helper()
	if _, err := mf.Commit(ctx, 0); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if _, err := mf.Flush(ctx, 0); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

type positions struct{ wrote, committed, flushed, readable int64 }

func positionsOf(mf mappedfile.MappedFile) positions {
	return positions{mf.WrotePosition(), mf.CommittedPosition(), mf.FlushedPosition(), mf.ReadablePosition()}
}

func checkOrder(t testing.TB, p positions) {
	t.Helper()
	if !(p.wrote >= p.committed && p.committed >= p.flushed && p.flushed >= 0 && p.readable <= p.wrote && p.readable >= 0) {
		t.Fatalf("positions out of order: %+v (want wrote ≥ committed ≥ flushed ≥ 0, readable ≤ wrote)", p)
	}
}

func testNewFilePositions(t *testing.T, h *harness) {
	mf := h.open(t, "00000000001073741824")
	if got := positionsOf(mf); got != (positions{}) {
		t.Fatalf("new file positions: %+v, want all 0", got)
	}
	if mf.SizeBytes() != SegmentSizeBytes || mf.FromOffset() != 1<<30 {
		t.Fatalf("size %d from %d, want %d and %d", mf.SizeBytes(), mf.FromOffset(), SegmentSizeBytes, 1<<30)
	}
	if filepath.Base(mf.Path()) != "00000000001073741824" {
		t.Fatalf("path %q", mf.Path())
	}
	if !h.exists(t, "00000000001073741824") {
		t.Fatalf("file not created")
	}
	if err := mf.Err(); err != nil {
		t.Fatalf("Err on a new file: %v", err)
	}
}

func testPositionsOnlyMoveForward(t *testing.T, h *harness) {
	mf := h.open(t, "seg")
	rng := rand.New(rand.NewPCG(1, 2))
	prev := positionsOf(mf)
	for i := 0; ; i++ {
		n := 1 + rng.IntN(3000)
		wrote := mf.WrotePosition()
		if wrote+int64(n) > SegmentSizeBytes {
			break
		}
		if pos := appendN(t, mf, n); pos != wrote {
			t.Fatalf("append returned position %d, write position was %d", pos, wrote)
		}
		switch rng.IntN(4) {
		case 0:
			c, err := mf.Commit(h.ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if c != mf.WrotePosition() || mf.CommittedPosition() != c {
				t.Fatalf("Commit(0) returned %d, committed %d, wrote %d: want all equal", c, mf.CommittedPosition(), mf.WrotePosition())
			}
		case 1:
			if _, err := mf.Commit(h.ctx, 0); err != nil {
				t.Fatal(err)
			}
			fl, err := mf.Flush(h.ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if fl != mf.CommittedPosition() || mf.FlushedPosition() != fl {
				t.Fatalf("Flush(0) returned %d, flushed %d, committed %d: want all equal", fl, mf.FlushedPosition(), mf.CommittedPosition())
			}
		}
		cur := positionsOf(mf)
		checkOrder(t, cur)
		if cur.wrote < prev.wrote || cur.committed < prev.committed || cur.flushed < prev.flushed || cur.readable < prev.readable {
			t.Fatalf("a position moved backwards: %+v then %+v", prev, cur)
		}
		prev = cur
	}
	commitFlush(t, h.ctx, mf)
	if p := positionsOf(mf); p.flushed != p.wrote || p.readable != p.wrote {
		t.Fatalf("after Commit(0)+Flush(0): %+v, want flushed = readable = wrote", p)
	}
}

func testFullAtBoundary(t *testing.T, h *harness) {
	mf := h.open(t, "seg")
	appendN(t, mf, SegmentSizeBytes-100)
	for _, n := range []int{101, 1000, SegmentSizeBytes} {
		if _, err := mf.Append(n, patternEncoder{}); !errors.Is(err, mappedfile.ErrFull) {
			t.Fatalf("append %d with 100 left: err %v, want ErrFull", n, err)
		}
		if w := mf.WrotePosition(); w != SegmentSizeBytes-100 {
			t.Fatalf("a failed append moved wrote to %d", w)
		}
	}
	if pos := appendN(t, mf, 100); pos != SegmentSizeBytes-100 {
		t.Fatalf("exact fit at %d", pos)
	}
	if _, err := mf.Append(1, patternEncoder{}); !errors.Is(err, mappedfile.ErrFull) {
		t.Fatalf("append to a full file: %v, want ErrFull", err)
	}
	if err := mf.Err(); err != nil {
		t.Fatalf("ErrFull must not be sticky: Err() = %v", err)
	}
	commitFlush(t, h.ctx, mf)
	buf := make([]byte, SegmentSizeBytes)
	if n, err := mf.ReadAt(buf, 0); n != SegmentSizeBytes || (err != nil && err != io.EOF) {
		t.Fatalf("read whole full file: %d, %v", n, err)
	}
	checkPattern(t, buf, 0)
}

// headerEncoder writes an 8-byte header whatever the length it is given, as
// an end-of-segment BLANK encoder does: called with fewer than 8 bytes it
// panics, which is what a backend must never let happen.
type headerEncoder struct{}

func (headerEncoder) EncodeAt(dst []byte, _ int64) error {
	_ = dst[7]
	copy(dst, "BLANKHDR")
	return nil
}

// appendNoPanic calls Append and turns a panic into a test failure.
func appendNoPanic(t *testing.T, mf mappedfile.MappedFile, n int, enc mappedfile.Encoder) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("Append(%d) on a segment written up to %d of %d panicked: %v", n, mf.WrotePosition(), mf.SizeBytes(), r)
		}
	}()
	_, err = mf.Append(n, enc)
	return err
}

// testAppendToFullSegment: an Append on a full segment — filled by appends,
// or an existing file reopened (full until Truncate), whatever happened
// before — returns ErrFull (or, for 0 bytes, ErrInvalidArgument) and never
// calls the encoder with a short buffer.
func testAppendToFullSegment(t *testing.T, h *harness) {
	filled := h.open(t, "filled")
	appendN(t, filled, SegmentSizeBytes)
	commitFlush(t, h.ctx, filled)
	spec := h.spec("existing")
	first, err := h.backend.Open(h.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, first, 100)
	commitFlush(t, h.ctx, first)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	reopened, err := h.backend.Open(h.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reopened.Close() })
	for _, mf := range []mappedfile.MappedFile{filled, reopened} {
		for _, n := range []int{0, 1, 8, 4096} {
			err := appendNoPanic(t, mf, n, headerEncoder{})
			if !errors.Is(err, mappedfile.ErrFull) && !(n == 0 && errors.Is(err, mappedfile.ErrInvalidArgument)) {
				t.Fatalf("%s: Append(%d) on a full segment: %v, want ErrFull", filepath.Base(mf.Path()), n, err)
			}
			if w := mf.WrotePosition(); w != SegmentSizeBytes {
				t.Fatalf("a refused append moved wrote to %d", w)
			}
		}
		if err := mf.Err(); err != nil {
			t.Fatalf("%s: appends to a full segment left a sticky error: %v", filepath.Base(mf.Path()), err)
		}
	}
}

type failingEncoder struct{}

var errEncode = errors.New("encoder refuses")

func (failingEncoder) EncodeAt(dst []byte, _ int64) error {
	for i := range dst {
		dst[i] = 0xEE
	}
	return errEncode
}

func testEncoderError(t *testing.T, h *harness) {
	mf := h.open(t, "seg")
	appendN(t, mf, 100)
	if _, err := mf.Append(50, failingEncoder{}); !errors.Is(err, errEncode) {
		t.Fatalf("append with a failing encoder: %v, want the encoder's error", err)
	}
	if w := mf.WrotePosition(); w != 100 {
		t.Fatalf("failed encode moved wrote to %d", w)
	}
	if err := mf.Err(); err != nil {
		t.Fatalf("an encoder error must not be sticky: %v", err)
	}
	appendN(t, mf, 50)
	commitFlush(t, h.ctx, mf)
	buf := make([]byte, 150)
	if _, err := mf.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	checkPattern(t, buf, 0)
}

// buffered reports whether appended bytes wait for Commit (transient, uring)
// rather than being committed as written (mmap).
func buffered(t *testing.T, h *harness) bool {
	mf := h.open(t, "probe")
	appendN(t, mf, 10)
	return mf.CommittedPosition() < mf.WrotePosition()
}

func testLeastPages(t *testing.T, h *harness) {
	isBuffered := buffered(t, h)
	mf := h.open(t, "seg")
	const page = mappedfile.PageSize
	appendN(t, mf, 3*page+100)
	if isBuffered {
		c, err := mf.Commit(h.ctx, 4)
		if err != nil {
			t.Fatal(err)
		}
		if c != 0 || mf.CommittedPosition() != 0 {
			t.Fatalf("Commit(4) with 3 pages pending committed to %d", c)
		}
	} else if _, err := mf.Commit(h.ctx, 4); err != nil {
		t.Fatal(err)
	}
	fl, err := mf.Flush(h.ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if fl != 0 || mf.FlushedPosition() != 0 {
		t.Fatalf("Flush(4) with 3 pages pending flushed to %d", fl)
	}
	appendN(t, mf, page-100) // exactly 4 pages now
	if _, err := mf.Commit(h.ctx, 4); err != nil {
		t.Fatal(err)
	}
	if c := mf.CommittedPosition(); c != 4*page {
		t.Fatalf("Commit(4) with 4 pages pending: committed %d", c)
	}
	if fl, err = mf.Flush(h.ctx, 4); err != nil || fl != 4*page {
		t.Fatalf("Flush(4) with 4 pages pending: %d, %v", fl, err)
	}
	// The rule counts page numbers crossed (wrote/4096 − flushed/4096), not
	// bytes: 1 byte into the next page is 0 pages, and a partial page waits.
	appendN(t, mf, 1)
	if _, err := mf.Commit(h.ctx, 0); err != nil {
		t.Fatal(err)
	}
	if fl, err = mf.Flush(h.ctx, 1); err != nil || fl != 4*page {
		t.Fatalf("Flush(1) with 1 byte into page 5: %d, %v; want %d (0 pages by the rule)", fl, err, 4*page)
	}
	appendN(t, mf, page+9) // into page 6: 1 page crossed
	if _, err := mf.Commit(h.ctx, 0); err != nil {
		t.Fatal(err)
	}
	if fl, err = mf.Flush(h.ctx, 2); err != nil || fl != 4*page {
		t.Fatalf("Flush(2) with 1 page crossed: %d, %v", fl, err)
	}
	if fl, err = mf.Flush(h.ctx, 1); err != nil || fl != 5*page+10 {
		t.Fatalf("Flush(1) with 1 page crossed: %d, %v; want %d", fl, err, 5*page+10)
	}
	// Nothing pending: Flush(0) returns the same position.
	if fl, err = mf.Flush(h.ctx, 0); err != nil || fl != 5*page+10 {
		t.Fatalf("Flush(0) with nothing pending: %d, %v", fl, err)
	}
}

func testFullSegmentFlush(t *testing.T, h *harness) {
	mf := h.open(t, "seg")
	appendN(t, mf, SegmentSizeBytes-10)
	commitFlush(t, h.ctx, mf)
	appendN(t, mf, 10) // less than a page pending, but the segment is full
	if c, err := mf.Commit(h.ctx, 1000); err != nil || c != SegmentSizeBytes {
		t.Fatalf("Commit(1000) of a full segment: %d, %v", c, err)
	}
	if fl, err := mf.Flush(h.ctx, 1000); err != nil || fl != SegmentSizeBytes {
		t.Fatalf("Flush(1000) of a full segment: %d, %v", fl, err)
	}
}

func testReadBounds(t *testing.T, h *harness) {
	mf := h.open(t, "seg")
	buf := make([]byte, 64)
	if n, err := mf.ReadAt(buf, 0); n != 0 || err != io.EOF {
		t.Fatalf("read of an empty file: %d, %v; want 0, io.EOF", n, err)
	}
	appendN(t, mf, 1000)
	r := mf.ReadablePosition()
	if r > mf.WrotePosition() {
		t.Fatalf("readable %d past wrote %d", r, mf.WrotePosition())
	}
	// Whatever is readable must be what was written, and nothing beyond.
	full := make([]byte, 2000)
	n, err := mf.ReadAt(full, 0)
	if int64(n) != r || (r < 2000 && err != io.EOF) {
		t.Fatalf("read 2000 at 0 with readable %d: %d, %v; want %d, io.EOF", r, n, err, r)
	}
	checkPattern(t, full[:n], 0)
	commitFlush(t, h.ctx, mf)
	r = mf.ReadablePosition()
	if r != 1000 {
		t.Fatalf("readable after commit+flush: %d, want 1000", r)
	}
	n, err = mf.ReadAt(full, 500)
	if n != 500 || err != io.EOF {
		t.Fatalf("read crossing readable: %d, %v; want 500, io.EOF", n, err)
	}
	checkPattern(t, full[:n], 500)
	if n, err = mf.ReadAt(buf, 1000); n != 0 || err != io.EOF {
		t.Fatalf("read at readable: %d, %v; want 0, io.EOF", n, err)
	}
	if n, err = mf.ReadAt(buf, SegmentSizeBytes+10); n != 0 || err == nil {
		t.Fatalf("read past the segment: %d, %v; want an error", n, err)
	}
	if _, err = mf.ReadAt(buf, -1); !errors.Is(err, mappedfile.ErrOutOfRange) {
		t.Fatalf("read at -1: %v, want ErrOutOfRange", err)
	}
	if n, err = mf.ReadAt(buf[:10], 990); n != 10 || err != nil {
		t.Fatalf("read ending at readable: %d, %v; want 10, nil", n, err)
	}
	checkPattern(t, buf[:10], 990)
	var sink bytes.Buffer
	if _, err := mf.SendRange(h.ctx, &sink, 900, 101); !errors.Is(err, mappedfile.ErrOutOfRange) {
		t.Fatalf("send past readable: %v, want ErrOutOfRange", err)
	}
	if sink.Len() != 0 {
		t.Fatalf("a refused send wrote %d bytes", sink.Len())
	}
}

// concurrentRun is a concurrency test's goroutines: wg waits for them,
// done is set when the appender is done, errs takes their errors.
type concurrentRun struct {
	wg   sync.WaitGroup
	done atomic.Bool
	errs chan error
}

// appendUntilFull starts a concurrency test with its appender: records of 1
// to maxN bytes (a seeded random size) until the segment is full, then done
// is set; an append's error goes to errs.
func appendUntilFull(mf mappedfile.MappedFile, seed uint64, maxN int) *concurrentRun {
	r := &concurrentRun{errs: make(chan error, 8)}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.done.Store(true)
		rng := rand.New(rand.NewPCG(seed, seed+1))
		for {
			n := 1 + rng.IntN(maxN)
			if mf.WrotePosition()+int64(n) > SegmentSizeBytes {
				return
			}
			if _, err := mf.Append(n, patternEncoder{}); err != nil {
				r.errs <- err
				return
			}
		}
	}()
	return r
}

func testConcurrentReaders(t *testing.T, h *harness) {
	mf := h.open(t, "seg")
	run := appendUntilFull(mf, 3, 700)
	wg, done, errs := &run.wg, &run.done, run.errs
	wg.Add(1)
	go func() { // the commit and flush service
		defer wg.Done()
		for !done.Load() || mf.CommittedPosition() < mf.WrotePosition() {
			if _, err := mf.Commit(h.ctx, 0); err != nil {
				errs <- err
				return
			}
			if _, err := mf.Flush(h.ctx, 1); err != nil {
				errs <- err
				return
			}
		}
	}()
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 5))
			buf := make([]byte, 3*mappedfile.PageSize)
			for reads := 0; !done.Load() || reads < 50; reads++ {
				readable := mf.ReadablePosition()
				if readable == 0 {
					continue
				}
				pos := rng.Int64N(readable)
				n := min(int64(1+rng.IntN(len(buf))), readable-pos)
				m, err := mf.ReadAt(buf[:n], pos)
				if int64(m) != n || err != nil {
					errs <- errors.Join(errors.New("short read below readable"), err)
					return
				}
				for i := range buf[:m] {
					if buf[i] != pattern(pos+int64(i)) {
						errs <- errors.New("a reader saw bytes that were not written")
						return
					}
				}
			}
		}(uint64(r))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// testCommitFlushConcurrently runs an appender, a committer and a flusher
// at once, as the engine's commit service and flusher do (a long commit pass
// must not hold back the flush of what is already committed). Positions read
// flushed first, then committed, then wrote (each only grows) must stay in
// order throughout, and a final Commit(0)+Flush(0) makes everything flushed.
func testCommitFlushConcurrently(t *testing.T, h *harness) {
	mf := h.open(t, "seg")
	run := appendUntilFull(mf, 7, 3000)
	wg, done, errs := &run.wg, &run.done, run.errs
	serve := func(op func(context.Context, int) (int64, error)) {
		defer wg.Done()
		for !done.Load() {
			if _, err := op(h.ctx, 0); err != nil {
				errs <- err
				return
			}
		}
	}
	wg.Add(2)
	go serve(mf.Commit)
	go serve(mf.Flush)
	for !done.Load() {
		flushed := mf.FlushedPosition()
		committed := mf.CommittedPosition()
		wrote := mf.WrotePosition()
		if !(wrote >= committed && committed >= flushed) {
			done.Store(true)
			t.Errorf("positions out of order while committing and flushing at once: flushed %d, committed %d, wrote %d", flushed, committed, wrote)
			break
		}
		runtime.Gosched()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	commitFlush(t, h.ctx, mf)
	if p := positionsOf(mf); p.flushed != p.wrote || p.readable != p.wrote {
		t.Fatalf("after concurrent commits and flushes, Commit(0)+Flush(0): %+v, want flushed = readable = wrote", p)
	}
	buf := make([]byte, mf.WrotePosition())
	if n, err := mf.ReadAt(buf, 0); int64(n) != mf.WrotePosition() || (err != nil && !errors.Is(err, io.EOF)) {
		t.Fatalf("read back %d of %d bytes: %v", n, len(buf), err)
	}
	checkPattern(t, buf, 0)
}

func testSendRange(t *testing.T, h *harness) {
	mf := h.open(t, "seg")
	appendN(t, mf, SegmentSizeBytes-333)
	commitFlush(t, h.ctx, mf)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on loopback: %v", err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := conn.(syscall.Conn); !ok {
		t.Fatal("a TCP connection is not a syscall.Conn")
	}
	ranges := [][2]int64{{0, 1}, {1, 4095}, {4095, 2}, {5000, 70000}, {0, SegmentSizeBytes - 333}, {123456, 7}, {SegmentSizeBytes - 334, 1}, {100, 0}}
	var want []byte
	for _, r := range ranges {
		n, err := mf.SendRange(h.ctx, conn, r[0], r[1])
		if err != nil || n != r[1] {
			t.Fatalf("send [%d,+%d): %d, %v", r[0], r[1], n, err)
		}
		for p := r[0]; p < r[0]+r[1]; p++ {
			want = append(want, pattern(p))
		}
	}
	conn.Close()
	b := <-got
	if !bytes.Equal(b, want) {
		t.Fatalf("the reader got %d bytes, want %d (equal prefix %d)", len(b), len(want), commonPrefix(b, want))
	}
}

func commonPrefix(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

func testDeleteWhileReferenced(t *testing.T, h *harness) {
	mf, err := h.backend.Open(h.ctx, h.spec("seg"))
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, mf, 20000)
	commitFlush(t, h.ctx, mf)
	if !mf.Retain() {
		t.Fatal("Retain on an open file failed")
	}
	if err := mf.Delete(); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if h.exists(t, "seg") {
		t.Fatal("the file is still listed after Delete")
	}
	if mf.Retain() {
		t.Fatal("Retain succeeded on a deleted file")
	}
	buf := make([]byte, 20000)
	if n, err := mf.ReadAt(buf, 0); n != 20000 || err != nil {
		t.Fatalf("read through a held reference after Delete: %d, %v", n, err)
	}
	checkPattern(t, buf, 0)
	var sink bytes.Buffer
	if n, err := mf.SendRange(h.ctx, &sink, 100, 1000); n != 1000 || err != nil {
		t.Fatalf("send through a held reference after Delete: %d, %v", n, err)
	}
	checkPattern(t, sink.Bytes(), 100)
	if _, err := mf.Append(10, patternEncoder{}); err == nil {
		t.Fatal("append to a deleted file succeeded")
	}
	mf.Release()
	if _, err := mf.ReadAt(buf, 0); !errors.Is(err, mappedfile.ErrClosed) {
		t.Fatalf("read after the last reference is released: %v, want ErrClosed", err)
	}
	if err := mf.Delete(); !errors.Is(err, mappedfile.ErrClosed) {
		t.Fatalf("second delete: %v, want ErrClosed", err)
	}
}

func testClose(t *testing.T, h *harness) {
	mf, err := h.backend.Open(h.ctx, h.spec("seg"))
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, mf, 100)
	commitFlush(t, h.ctx, mf)
	if err := mf.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if !h.exists(t, "seg") {
		t.Fatal("Close removed the file")
	}
	buf := make([]byte, 10)
	if _, err := mf.ReadAt(buf, 0); !errors.Is(err, mappedfile.ErrClosed) {
		t.Errorf("read after close: %v", err)
	}
	if _, err := mf.Append(10, patternEncoder{}); !errors.Is(err, mappedfile.ErrClosed) {
		t.Errorf("append after close: %v", err)
	}
	if _, err := mf.Commit(h.ctx, 0); !errors.Is(err, mappedfile.ErrClosed) {
		t.Errorf("commit after close: %v", err)
	}
	if _, err := mf.Flush(h.ctx, 0); !errors.Is(err, mappedfile.ErrClosed) {
		t.Errorf("flush after close: %v", err)
	}
	if _, err := mf.SendRange(h.ctx, io.Discard, 0, 10); !errors.Is(err, mappedfile.ErrClosed) {
		t.Errorf("send after close: %v", err)
	}
	if mf.Retain() {
		t.Error("Retain after close succeeded")
	}
	if err := mf.Close(); !errors.Is(err, mappedfile.ErrClosed) {
		t.Errorf("second close: %v, want ErrClosed", err)
	}
}

func testReopen(t *testing.T, h *harness) {
	spec := h.spec("seg")
	mf, err := h.backend.Open(h.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, mf, 30000)
	commitFlush(t, h.ctx, mf)
	if err := mf.Close(); err != nil {
		t.Fatal(err)
	}

	mf, err = h.backend.Open(h.ctx, spec)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if p := positionsOf(mf); p != (positions{SegmentSizeBytes, SegmentSizeBytes, SegmentSizeBytes, SegmentSizeBytes}) {
		t.Fatalf("reopened positions %+v, want all %d until Truncate", p, SegmentSizeBytes)
	}
	buf := make([]byte, 30000)
	if _, err := mf.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	checkPattern(t, buf, 0)
	// Recovery decides the valid data ends at 20000: the rest must go.
	if err := mf.Truncate(h.ctx, 20000); err != nil {
		t.Fatalf("truncate: %v", err)
	}
	if p := positionsOf(mf); p != (positions{20000, 20000, 20000, 20000}) {
		t.Fatalf("positions after Truncate(20000): %+v", p)
	}
	if n, err := mf.ReadAt(buf[:10], 20000); n != 0 || err != io.EOF {
		t.Fatalf("read at the truncated end: %d, %v", n, err)
	}
	if pos := appendN(t, mf, 5000); pos != 20000 {
		t.Fatalf("append after truncate at %d", pos)
	}
	commitFlush(t, h.ctx, mf)
	if err := mf.Close(); err != nil {
		t.Fatal(err)
	}

	mf, err = h.backend.Open(h.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	all := make([]byte, SegmentSizeBytes)
	if _, err := mf.ReadAt(all, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	checkPattern(t, all[:25000], 0)
	for i := 25000; i < len(all); i++ {
		if all[i] != 0 {
			t.Fatalf("byte %d past the valid end is %#x after Truncate, want 0", i, all[i])
		}
	}
}

func testSizeMismatch(t *testing.T, h *harness) {
	mf := h.open(t, "seg")
	appendN(t, mf, 10)
	commitFlush(t, h.ctx, mf)
	if err := mf.Close(); err != nil {
		t.Fatal(err)
	}
	spec := h.spec("seg")
	spec.SizeBytes *= 2
	if other, err := h.backend.Open(h.ctx, spec); !errors.Is(err, mappedfile.ErrSizeMismatch) {
		if other != nil {
			other.Close()
		}
		t.Fatalf("reopen with another size: %v, want ErrSizeMismatch", err)
	}
}

func testWarmCool(t *testing.T, h *harness) {
	mf := h.open(t, "seg")
	err := mappedfile.Warm(h.ctx, mf, mappedfile.WarmOptions{Touch: true, FlushEveryPages: 16, Lock: true, Advise: true})
	if err != nil {
		t.Fatalf("warm: %v", err)
	}
	if p := positionsOf(mf); p.wrote != 0 || p.readable != 0 {
		t.Fatalf("warm-up moved positions: %+v", p)
	}
	appendN(t, mf, 9000)
	commitFlush(t, h.ctx, mf)
	if err := mappedfile.Cool(mf); err != nil {
		t.Fatalf("cool: %v", err)
	}
	buf := make([]byte, 9000)
	if _, err := mf.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	checkPattern(t, buf, 0)
	appendN(t, mf, 100)
	commitFlush(t, h.ctx, mf)
}

func testAppendAllocs(t *testing.T, h *harness) {
	t.Helper()
	mf := h.open(t, "seg")
	enc := patternEncoder{}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := mf.Append(64, enc); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Append allocates %.1f times per call, want 0", allocs)
	}
}

// testOverwrite checks the optional Overwriter: bytes rewritten below the
// flushed position are made durable by the next Flush, and overwrites past
// the write position are refused.
func testOverwrite(t *testing.T, h *harness) {
	spec := h.spec("seg")
	mf, err := h.backend.Open(h.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	ow, ok := mf.(mappedfile.Overwriter)
	if !ok {
		mf.Close()
		t.Fatalf("backend %s: a probe file implemented Overwriter, this one does not", h.backend.Name())
	}
	appendN(t, mf, 3*mappedfile.PageSize)
	commitFlush(t, h.ctx, mf)
	if _, err := ow.WriteAt([]byte("HEAD"), 10); err != nil {
		t.Fatal(err)
	}
	if _, err := ow.WriteAt([]byte("X"), 3*mappedfile.PageSize); !errors.Is(err, mappedfile.ErrOutOfRange) {
		t.Fatalf("overwrite past wrote: %v, want ErrOutOfRange", err)
	}
	got := make([]byte, 4)
	if _, err := mf.ReadAt(got, 10); err != nil || string(got) != "HEAD" {
		t.Fatalf("read after overwrite: %q %v", got, err)
	}
	// A swap hands back what it replaces.
	if err := ow.SwapEach([]byte("SWAP"), got, 4, []int64{10}); err != nil || string(got) != "HEAD" {
		t.Fatalf("swap: got back %q %v, want HEAD", got, err)
	}
	if err := ow.SwapEach([]byte("HEAD"), got, 4, []int64{10}); err != nil || string(got) != "SWAP" {
		t.Fatalf("swap back: got back %q %v, want SWAP", got, err)
	}
	if err := ow.SwapEach([]byte("X"), got[:1], 1, []int64{3 * mappedfile.PageSize}); !errors.Is(err, mappedfile.ErrOutOfRange) {
		t.Fatalf("swap past wrote: %v, want ErrOutOfRange", err)
	}
	if err := ow.SwapEach([]byte("HEAD"), got[:2], 4, []int64{10}); !errors.Is(err, mappedfile.ErrInvalidArgument) {
		t.Fatalf("swap into a short buffer: %v, want ErrInvalidArgument", err)
	}
	// SwapEach swaps in order: a field swapped twice hands back what the
	// first swap wrote. Fields of 4 bytes (the IndexFile's slots) and of 3.
	for _, width := range []int{4, 3} {
		at := []int64{100, 2 * mappedfile.PageSize, 100, 5000}
		p := []byte("aaaabbbbccccdddd")[:width*len(at)]
		before := make([]byte, width*len(at))
		for i, pos := range at {
			if _, err := mf.ReadAt(before[i*width:(i+1)*width], pos); err != nil {
				t.Fatal(err)
			}
		}
		old := make([]byte, len(p))
		if err := ow.SwapEach(p, old, width, at); err != nil {
			t.Fatalf("swap each, width %d: %v", width, err)
		}
		want := slices.Concat(before[:2*width], p[:width], before[3*width:])
		if !bytes.Equal(old, want) {
			t.Fatalf("swap each, width %d: got back %q, want %q", width, old, want)
		}
		for i, pos := range at {
			if i == 0 {
				continue // overwritten again by the third field
			}
			if _, err := mf.ReadAt(got[:width], pos); err != nil || !bytes.Equal(got[:width], p[i*width:(i+1)*width]) {
				t.Fatalf("swap each, width %d: field %d reads %q %v, want %q", width, i, got[:width], err, p[i*width:(i+1)*width])
			}
		}
		if err := ow.SwapEach(p[:width], old[:width], width, nil); !errors.Is(err, mappedfile.ErrInvalidArgument) {
			t.Fatalf("swap each of a field with no position: %v, want ErrInvalidArgument", err)
		}
		// Put the bytes back.
		restore := []int64{at[3], at[1], at[0]}
		back := slices.Concat(before[3*width:], before[width:2*width], before[:width])
		if err := ow.SwapEach(back, make([]byte, len(back)), width, restore); err != nil {
			t.Fatal(err)
		}
	}
	// A field past the written bytes refuses the whole call: nothing is written.
	untouched := make([]byte, 4)
	if _, err := mf.ReadAt(untouched, 200); err != nil {
		t.Fatal(err)
	}
	if err := ow.SwapEach([]byte("ZZZZYYYY"), make([]byte, 8), 4, []int64{200, 3 * mappedfile.PageSize}); !errors.Is(err, mappedfile.ErrOutOfRange) {
		t.Fatalf("swap each past wrote: %v, want ErrOutOfRange", err)
	}
	if _, err := mf.ReadAt(got, 200); err != nil || !bytes.Equal(got, untouched) {
		t.Fatalf("a refused swap each wrote its first field: %q %v, want %q", got, err, untouched)
	}
	if _, err := mf.Flush(h.ctx, 0); err != nil { // nothing appended: must still flush the overwrite
		t.Fatal(err)
	}
	// A swap each after that flush is flushed by the next one by itself.
	if err := ow.SwapEach([]byte("SWEPEACH"), make([]byte, 8), 4, []int64{6000, 7000}); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Flush(h.ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := mf.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ow.SwapEach(nil, nil, 4, nil); err == nil {
		t.Fatal("an empty swap each on a closed file succeeded")
	}
	// A MemFS crash would show a missed flush; for files on disk, reopen.
	if fs, ok := h.backend.(*mappedfile.MemFS); ok {
		durable, _ := fs.Durable(spec.Path)
		if string(durable[10:14]) != "HEAD" {
			t.Fatalf("overwrite not durable after Flush: %q", durable[10:14])
		}
		if string(durable[6000:6004])+string(durable[7000:7004]) != "SWEPEACH" {
			t.Fatalf("swap each not durable after Flush: %q %q", durable[6000:6004], durable[7000:7004])
		}
		return
	}
	mf, err = h.backend.Open(h.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	if _, err := mf.ReadAt(got, 10); err != nil || string(got) != "HEAD" {
		t.Fatalf("overwrite lost across reopen: %q %v", got, err)
	}
	if _, err := mf.ReadAt(got, 7000); err != nil || string(got) != "EACH" {
		t.Fatalf("swap each lost across reopen: %q %v", got, err)
	}
}
