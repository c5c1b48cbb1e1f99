package uring

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/mqstore/mqstore/internal/faultseam"
	"github.com/mqstore/mqstore/internal/pagecache"
	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// TestStagingRingWrapsUnderReaders appends records of many sizes to
// segments much larger than their staging ring, so the ring wraps many
// times and appends often find it full and commit first; readers follow
// the write position the whole time (from the ring, then from the file as
// the bytes move there) and must only ever see the bytes written there.
// At the end the file must hold exactly the appended bytes and zeros.
// The bytes differ from lap to lap of the ring (lapFill), so a piece of an
// append that never reached the ring shows as the previous lap's bytes.
func TestStagingRingWrapsUnderReaders(t *testing.T) {
	for _, v := range []struct {
		name string
		opts Options
	}{
		{"uring", Options{StagingBytes: 16 << 10}},
		{"uring-direct", Options{Direct: true, StagingBytes: 16 << 10}},
		{"uring-direct-sync-at-commit", Options{Direct: true, StagingBytes: 32 << 10, SyncAtCommit: true}},
		{"uring-direct-sync-at-commit-ring-dsync", Options{Direct: true, StagingBytes: 32 << 10, SyncAtCommit: true, SyncMethod: SyncDSync}},
		{"uring-sync-at-commit-linked", Options{StagingBytes: 32 << 10, SyncAtCommit: true, SyncMethod: SyncLinkedFsync}},
	} {
		t.Run(v.name, func(t *testing.T) {
			b := newTestBackend(t, v.opts)
			const size = 1 << 20
			path := filepath.Join(t.TempDir(), "seg")
			mf := openSeg(t, b, path, size)
			ctx := context.Background()
			want := make([]byte, size)
			_ = lapFill(7).EncodeAt(want, 0)
			rng := rand.New(rand.NewPCG(1, 2))
			var wg sync.WaitGroup
			var done atomic.Bool
			errs := make(chan error, 4)
			for r := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]byte, 9000)
					rr := rand.New(rand.NewPCG(uint64(r), 9))
					for !done.Load() {
						readable := mf.ReadablePosition()
						if readable == 0 {
							continue
						}
						// Mostly near the write position, where the ring is.
						pos := readable - 1 - rr.Int64N(min(readable, 40000))
						n := min(int64(len(buf)), readable-pos)
						if m, err := mf.ReadAt(buf[:n], pos); int64(m) != n || err != nil {
							errs <- fmt.Errorf("read [%d,+%d) below readable %d: %d, %v", pos, n, readable, m, err)
							return
						}
						if i := commonPrefix(buf[:n], want[pos:pos+n]); i != int(n) {
							errs <- fmt.Errorf("read [%d,+%d): byte at %d is %#x, want %#x", pos, n, pos+int64(i), buf[i], want[pos+int64(i)])
							return
						}
					}
				}()
			}
			for mf.WrotePosition() < size {
				n := int(min(int64(1+rng.IntN(6000)), size-mf.WrotePosition()))
				if _, err := mf.Append(n, lapFill(7)); err != nil {
					t.Fatal(err)
				}
				if rng.IntN(8) == 0 {
					if _, err := mf.Commit(ctx, 0); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := mf.Commit(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := mf.Flush(ctx, 0); err != nil {
				t.Fatal(err)
			}
			done.Store(true)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			onDisk, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if i := commonPrefix(onDisk, want); i != size {
				t.Fatalf("file differs at %d", i)
			}
		})
	}
}

// lapFill writes a byte of its position's hash: unlike fill's, which
// repeats every 256 bytes, a position and the one a ring's length later
// (any power of two up to 2^32) get different bytes.
type lapFill byte

func (f lapFill) EncodeAt(dst []byte, pos int64) error {
	for i := range dst {
		dst[i] = byte(f) + byte(uint64(pos+int64(i))*0x9e3779b97f4a7c15>>56)
	}
	return nil
}

// TestDirectFileHoldsZerosPastWrote: after every commit, an O_DIRECT
// segment written through a small, much reused ring holds exactly the
// appended bytes and zeros after them (the padded tail block never carries
// another segment's bytes).
func TestDirectFileHoldsZerosPastWrote(t *testing.T) {
	b := newTestBackend(t, Options{Direct: true, StagingBuffers: 1, StagingBytes: 32 << 10})
	dir := t.TempDir()
	const size = 64 << 10
	ctx := context.Background()
	// Fill the only staging buffer with non-zero bytes through a first segment.
	first := openSeg(t, b, filepath.Join(dir, "a"), size)
	for first.WrotePosition() < size {
		if _, err := first.Append(4096, fill(0xAA)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := first.Commit(ctx, 0); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "b")
	mf := openSeg(t, b, path, size)
	var wrote int64
	for _, n := range []int{100, 5000, 3000, 4096, 1, 20000, 777} {
		if _, err := mf.Append(n, fill(3)); err != nil {
			t.Fatal(err)
		}
		wrote += int64(n)
		if c, err := mf.Commit(ctx, 0); err != nil || c != wrote {
			t.Fatalf("commit: %d, %v; want %d", c, err, wrote)
		}
		onDisk, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, size)
		_ = fill(3).EncodeAt(want[:wrote], 0)
		if i := commonPrefix(onDisk, want); i != size {
			t.Fatalf("after committing %d bytes the file differs at %d: %#x, want %#x", wrote, i, onDisk[i], want[i])
		}
	}
}

// TestFailedTruncateNeverWritesAnotherSegment: a Truncate that cannot get
// a staging buffer in time fails; later appends to that file must never
// write into the buffer another segment was given meanwhile.
func TestFailedTruncateNeverWritesAnotherSegment(t *testing.T) {
	b := newTestBackend(t, Options{Direct: true, StagingBuffers: 1})
	dir := t.TempDir()
	const size = 8 * 4096
	ctx := context.Background()
	a := openSeg(t, b, filepath.Join(dir, "a"), size)
	if _, err := a.Append(3000, fill(1)); err != nil {
		t.Fatal(err)
	}
	// A reader holds the buffer while Truncate runs.
	reader := a.(*file).retainLease()
	if reader == nil {
		t.Fatal("no lease on a new segment")
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	truncErr := a.Truncate(short, 1000)
	cancel()
	reader.refs.Release()
	t.Logf("truncate while a reader held the buffer: %v", truncErr)
	// Another segment may now get a buffer — never a's.
	short, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	other, err := b.Open(short, mappedfile.Spec{Path: filepath.Join(dir, "b"), SizeBytes: size})
	if err == nil {
		defer other.Close()
		if _, err := other.Append(size, fill(9)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Append(500, fill(2)); err != nil {
		t.Logf("append after the truncate: %v", err)
	}
	if other != nil {
		got := make([]byte, size)
		if _, err := other.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, size)
		_ = fill(9).EncodeAt(want, 0)
		if i := commonPrefix(got, want); i != size {
			t.Fatalf("another segment's bytes changed at %d after appends to the truncated file", i)
		}
	}
}

// TestTruncateWithoutBufferChangesNothing: an existing segment reopened
// (no staging buffer) whose Truncate cannot get one fails without zeroing
// anything, and an append to it then fails with ErrNoStagingBuffer.
func TestTruncateWithoutBufferChangesNothing(t *testing.T) {
	for _, v := range backendVariants[:2] {
		t.Run(v.name, func(t *testing.T) {
			o := v.opts
			o.StagingBuffers = 1
			b := newTestBackend(t, o)
			dir := t.TempDir()
			const size = 8 * 4096
			ctx := context.Background()
			path := filepath.Join(dir, "a")
			a := openSeg(t, b, path, size)
			if _, err := a.Append(size, fill(4)); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Commit(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Flush(ctx, 0); err != nil {
				t.Fatal(err)
			}
			a.Close()
			holder := openSeg(t, b, filepath.Join(dir, "b"), size) // takes the only buffer
			_ = holder
			a = openSeg(t, b, path, size)
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			if err := a.Truncate(short, 5000); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("truncate with no buffer to be had: %v, want DeadlineExceeded", err)
			}
			if _, err := a.Append(10, fill(4)); !errors.Is(err, mappedfile.ErrFull) && !errors.Is(err, ErrNoStagingBuffer) {
				t.Fatalf("append after the failed truncate: %v, want ErrFull or ErrNoStagingBuffer", err)
			}
			onDisk, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]byte, size)
			_ = fill(4).EncodeAt(want, 0)
			if i := commonPrefix(onDisk, want); i != size {
				t.Fatalf("the failed truncate changed the file at %d", i)
			}
		})
	}
}

// TestTruncateSyncsEverything: after a crash the page cache may hold bytes
// of the segment below the valid end that were never synced; Truncate must
// make them durable even when it has nothing to zero (validEnd = size).
func TestTruncateSyncsEverything(t *testing.T) {
	testenv.NeedRoot(t, "pagemap and kpageflags tell whether a page is dirty")
	for _, v := range backendVariants[:2] {
		t.Run(v.name, func(t *testing.T) {
			b := newTestBackend(t, v.opts)
			path := filepath.Join(t.TempDir(), "seg")
			const size = 16 * 4096
			mf := openSeg(t, b, path, size)
			mf.Close()
			// What a killed process leaves: written, never synced.
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]byte, size)
			_ = fill(8).EncodeAt(want, 0)
			if _, err := f.WriteAt(want, 0); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if err := pagecache.CheckSynced(path, 0, size); err == nil {
				t.Fatal("the test's own writes are already clean: it cannot see a missing sync")
			}
			mf = openSeg(t, b, path, size)
			for _, end := range []int64{size, 5000} {
				if err := mf.Truncate(context.Background(), end); err != nil {
					t.Fatal(err)
				}
				if err := pagecache.CheckSynced(path, 0, size); err != nil {
					t.Fatalf("after Truncate(%d): %v", end, err)
				}
			}
		})
	}
}

// ctxCancelledLater is live for its first two Err calls (the commit's
// checks before it writes) and cancelled from then on: a ctx that is
// cancelled while the commit's write is under way.
type ctxCancelledLater struct {
	context.Context
	calls atomic.Int32
}

func (c *ctxCancelledLater) Err() error {
	if c.calls.Add(1) > 2 {
		return context.Canceled
	}
	return nil
}

// TestCancelledCtxKeepsWriteErrorSticky: a commit's write fails (its file
// descriptor now names /dev/full: ENOSPC) while its ctx gets cancelled; the
// write error must still become the file's sticky error.
func TestCancelledCtxKeepsWriteErrorSticky(t *testing.T) {
	for _, v := range backendVariants[:2] {
		t.Run(v.name, func(t *testing.T) {
			b := newTestBackend(t, v.opts)
			mf := openSeg(t, b, filepath.Join(t.TempDir(), "seg"), 16*4096)
			if _, err := mf.Append(5000, fill(1)); err != nil {
				t.Fatal(err)
			}
			full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
			if err != nil {
				testenv.Skip(t, testenv.Uring, "/dev/full: %v", err)
			}
			defer full.Close()
			f := mf.(*file)
			keep, err := unix.Dup(int(f.fd))
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Dup3(int(full.Fd()), int(f.fd), unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			_, cerr := mf.Commit(&ctxCancelledLater{Context: context.Background()}, 0)
			if err := unix.Dup3(keep, int(f.fd), unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			unix.Close(keep)
			if !errors.Is(cerr, unix.ENOSPC) {
				t.Fatalf("commit into /dev/full: %v, want ENOSPC", cerr)
			}
			if !errors.Is(mf.Err(), unix.ENOSPC) {
				t.Fatalf("sticky error after a failed write with a cancelled ctx: %v, want ENOSPC", mf.Err())
			}
			if _, err := mf.Commit(context.Background(), 0); !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("next commit: %v, want the sticky ENOSPC", err)
			}
		})
	}
}

// TestSyncedAtFlush: for the buffered backend, Flush (or a commit with
// SyncAtCommit) leaves no dirty page of the committed range behind.
func TestSyncedAtFlush(t *testing.T) {
	testenv.NeedRoot(t, "pagemap and kpageflags tell whether a page is dirty")
	for _, v := range []Options{{}, {SyncAtCommit: true}, {SyncAtCommit: true, SyncMethod: SyncLinkedFsync}} {
		t.Run(fmt.Sprintf("sync-at-commit=%v/%v", v.SyncAtCommit, v.SyncMethod), func(t *testing.T) {
			b := newTestBackend(t, v)
			path := filepath.Join(t.TempDir(), "seg")
			const size = 64 * 4096
			mf := openSeg(t, b, path, size)
			ctx := context.Background()
			if _, err := mf.Append(20*4096+17, fill(6)); err != nil {
				t.Fatal(err)
			}
			if _, err := mf.Commit(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if !v.SyncAtCommit {
				if err := pagecache.CheckSynced(path, 0, 20*4096+17); err == nil {
					t.Fatal("committed pages are clean before Flush: the test cannot see a missing sync")
				}
			}
			if fl, err := mf.Flush(ctx, 0); err != nil || fl != 20*4096+17 {
				t.Fatalf("flush: %d, %v", fl, err)
			}
			if err := pagecache.CheckSynced(path, 0, 20*4096+17); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestAppendLargerThanStaging: an append that cannot fit the staging ring
// is refused with a clear error and leaves the file as it was.
func TestAppendLargerThanStaging(t *testing.T) {
	b := newTestBackend(t, Options{StagingBytes: 16 << 10})
	mf := openSeg(t, b, filepath.Join(t.TempDir(), "seg"), 1<<20)
	if _, err := mf.Append(100, fill(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Append(16<<10, fill(1)); !errors.Is(err, mappedfile.ErrInvalidArgument) {
		t.Fatalf("append larger than the staging ring: %v, want ErrInvalidArgument", err)
	}
	if mf.WrotePosition() != 100 || mf.Err() != nil {
		t.Fatalf("after the refused append: wrote %d, err %v", mf.WrotePosition(), mf.Err())
	}
}

// TestStagingBuffersNotClearedAtOpen: Open of a new segment does not write
// over its staging buffer (a 1 GiB clear per segment was the cost).
func TestStagingBuffersNotClearedAtOpen(t *testing.T) {
	b := newTestBackend(t, Options{StagingBuffers: 1})
	dir := t.TempDir()
	const size = 64 << 10
	a := openSeg(t, b, filepath.Join(dir, "a"), size)
	if _, err := a.Append(size, fill(0x33)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	buf := a.(*file).lease.Load().buf
	c := openSeg(t, b, filepath.Join(dir, "c"), size)
	if got := c.(*file).lease.Load().buf; got != buf {
		t.Fatal("the second segment did not get the returned buffer")
	}
	if bytes.Count(buf.ring[:size], []byte{0}) == size {
		t.Fatal("the staging buffer was cleared at Open")
	}
}

// TestDurableCommitIsOneRequest: with SyncAtCommit a commit of uring-direct
// is one durable write (pwritev2 or an io_uring write, with RWF_DSYNC), or
// one write and one fsync linked in the same submission — whatever the commit's size, a wrap of the ring or a
// partial last block — and Flush then issues nothing.
func TestDurableCommitIsOneRequest(t *testing.T) {
	for _, c := range []struct {
		method SyncMethod
		want   []segfile.OpKind
	}{
		{SyncSyscalls, []segfile.OpKind{segfile.OpWriteDurable}},
		{SyncDSync, []segfile.OpKind{segfile.OpWriteDurable}},
		{SyncLinkedFsync, []segfile.OpKind{segfile.OpPwrite, segfile.OpFdatasync}},
	} {
		t.Run(c.method.String(), func(t *testing.T) {
			b := newTestBackend(t, Options{Direct: true, PreZero: true, SyncAtCommit: true, SyncMethod: c.method, StagingBytes: 64 << 10})
			dir := t.TempDir()
			mf := openSeg(t, b, filepath.Join(dir, "seg"), 1<<20)
			inj := faultseam.New(t, dir)
			ctx := context.Background()
			for i, n := range []int{100, 5000, 4096, 30000, 1, 50000, 7} { // 50000 wraps the 64 KiB ring
				before := len(inj.Calls())
				if _, err := mf.Append(n, fill(byte(i))); err != nil {
					t.Fatal(err)
				}
				if _, err := mf.Commit(ctx, 0); err != nil {
					t.Fatal(err)
				}
				if _, err := mf.Flush(ctx, 0); err != nil {
					t.Fatal(err)
				}
				calls := inj.Calls()[before:]
				var kinds []segfile.OpKind
				for _, call := range calls {
					kinds = append(kinds, call.Kind)
				}
				if !slices.Equal(kinds, c.want) {
					t.Fatalf("commit %d (%d bytes): issued %v, want %v", i, n, calls, c.want)
				}
				if w := calls[0]; w.Offset%4096 != 0 || w.Length%4096 != 0 || w.Offset+w.Length < mf.WrotePosition() {
					t.Fatalf("commit %d: the write %v does not cover whole blocks up to %d", i, w, mf.WrotePosition())
				}
			}
		})
	}
}

// TestStagingOverMemlockLimit runs in a child process without CAP_IPC_LOCK
// and with RLIMIT_MEMLOCK at 1 MiB, so the kernel refuses to pin a 4 MiB
// staging buffer. By default the backend still works, unregistered, and
// says why; with RequireRegistered NewBackend fails naming RLIMIT_MEMLOCK.
func TestStagingOverMemlockLimit(t *testing.T) {
	if os.Getenv("MQSTORE_URING_MEMLOCK_CHILD") == "1" {
		memlockChild(t)
		return
	}
	cmd := exec(t, "^TestStagingOverMemlockLimit$", "MQSTORE_URING_MEMLOCK_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("CHILD-OK")) {
		if bytes.Contains(out, []byte("needs uring")) {
			testenv.Skip(t, testenv.Uring, "child: %s", out)
		}
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}

// capsHeader and capsData are capset(2)'s arguments; package variables so
// their addresses never move.
var (
	capsHeader struct{ version, pid uint32 }
	capsData   [2]struct{ effective, permitted, inheritable uint32 }
)

func memlockChild(t *testing.T) {
	const capIPCLock = 14
	capsHeader.version = 0x20080522 // _LINUX_CAPABILITY_VERSION_3
	if _, _, e := syscall.RawSyscall(unix.SYS_CAPGET, uintptr(unsafe.Pointer(&capsHeader)), uintptr(unsafe.Pointer(&capsData)), 0); e != 0 {
		t.Fatalf("capget: %v", e)
	}
	capsData[0].effective &^= 1 << capIPCLock
	capsData[0].permitted &^= 1 << capIPCLock
	// Capabilities are per thread: drop it on this one, which creates the
	// ring (io_uring decides at setup whether to charge RLIMIT_MEMLOCK).
	runtime.LockOSThread()
	if _, _, e := syscall.RawSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&capsHeader)), uintptr(unsafe.Pointer(&capsData)), 0); e != 0 {
		t.Fatalf("capset without CAP_IPC_LOCK: %v", e)
	}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: 1 << 20, Max: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	opts := Options{StagingBuffers: 2, StagingBytes: 4 << 20, SegmentSizeBytes: 64 << 20}
	b := newTestBackend(t, opts)
	info := b.(StagingReporter).Staging()
	if info.Registered || !strings.Contains(info.NotRegistered, "RLIMIT_MEMLOCK") {
		t.Fatalf("over RLIMIT_MEMLOCK: %+v; want not registered, saying RLIMIT_MEMLOCK", info)
	}
	mf := openSeg(t, b, filepath.Join(t.TempDir(), "seg"), 64<<20)
	if _, err := mf.Append(5000, fill(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := mf.Commit(context.Background(), 0); err != nil {
		t.Fatalf("commit from an unregistered staging buffer: %v", err)
	}
	opts.RequireRegistered = true
	if _, err := NewBackend(opts); err == nil || !strings.Contains(err.Error(), "RLIMIT_MEMLOCK") {
		t.Fatalf("RequireRegistered over RLIMIT_MEMLOCK: %v; want an error naming RLIMIT_MEMLOCK", err)
	}
	fmt.Printf("CHILD-OK %s\n", info.NotRegistered)
}

// TestStagingRingInHugePages: where the kernel's THP setting allows them,
// a staging ring of a few huge pages is backed by them (Staging reports
// HugeBytes), and a segment written through it reads back exactly.
func TestStagingRingInHugePages(t *testing.T) {
	const ring = 8 << 20
	b := newTestBackend(t, Options{Direct: true, StagingBytes: ring})
	mf := openSeg(t, b, filepath.Join(t.TempDir(), "seg"), 16<<20)
	for mf.WrotePosition() < 12<<20 {
		if _, err := mf.Append(3001, lapFill(3)); err != nil {
			t.Fatal(err)
		}
	}
	in := b.(StagingReporter).Staging()
	setting, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	t.Logf("THP %q: %+v", strings.TrimSpace(string(setting)), in)
	if in.HugeBytes > int64(in.Mapped)*ring {
		t.Fatalf("HugeBytes %d exceeds the %d mapped rings of %d bytes", in.HugeBytes, in.Mapped, ring)
	}
	if (strings.Contains(string(setting), "[always]") || strings.Contains(string(setting), "[madvise]")) && in.HugeBytes == 0 {
		t.Fatalf("THP is %q, yet no byte of the staging ring is in a huge page", strings.TrimSpace(string(setting)))
	}
	wrote := mf.WrotePosition()
	got := make([]byte, wrote)
	if _, err := mf.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, wrote)
	_ = lapFill(3).EncodeAt(want, 0)
	if i := commonPrefix(got, want); i != len(want) {
		t.Fatalf("byte %d differs", i)
	}
}
