//go:build linux

package mmapio

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

func TestWarmTouchLockAdviseCool(t *testing.T) {
	for _, tc := range []struct {
		name            string
		opts            Options
		flushEveryPages int
	}{
		{"populate", Options{}, 0},
		{"populate/flushEvery=64", Options{}, 64},
		{"write", Options{TouchByWriting: true}, 0},
		{"write/flushEvery=64", Options{TouchByWriting: true}, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testWarm(t, tc.opts, tc.flushEveryPages)
		})
	}
}

func testWarm(t *testing.T, opts Options, flushEveryPages int) {
	const size = 4 << 20
	const written = 5000 // pages 0 and 1 hold records
	ctx := testContext(t)
	mf := openSegment(t, opts, "", "seg", size)
	appendPattern(t, mf, written)
	if _, err := mf.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	before := pageStates(t, mf.mapping)
	for i, s := range before[2:] {
		if s.present {
			t.Fatalf("page %d present before the warm-up", i+2)
		}
	}
	lockedBefore := lockedKiB(t)
	err := mf.Warm(ctx, mappedfile.WarmOptions{Touch: true, FlushEveryPages: flushEveryPages, Lock: true, Advise: true})
	if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EAGAIN) {
		testenv.Skip(t, testenv.Root, "mlock of %d bytes (or an RLIMIT_MEMLOCK that large): %v", size, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !opts.TouchByWriting && populateWriteUnsupported.Load() {
		t.Log("the kernel lacks MADV_POPULATE_WRITE: Touch fell back to writing zeros")
	}
	if mf.WrotePosition() != written || mf.FlushedPosition() != written {
		t.Fatalf("warm-up moved positions: wrote %d flushed %d", mf.WrotePosition(), mf.FlushedPosition())
	}
	after := pageStates(t, mf.mapping)
	for i, s := range after {
		if !s.present {
			t.Fatalf("page %d not present after the warm-up", i)
		}
	}
	if dirty, ok := dirtyPages(t, mf.mapping); ok {
		// Touched pages are dirty unless the warm-up flushed them.
		want := len(after) - 2
		if flushEveryPages > 0 {
			want = 0
		}
		if dirty != want {
			t.Errorf("%d dirty pages after the warm-up, want %d", dirty, want)
		}
	}
	if got := lockedKiB(t) - lockedBefore; got < size>>10 {
		t.Errorf("VmLck grew by %d KiB, want %d", got, size>>10)
	}
	buf := make([]byte, written)
	if _, err := mf.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	checkPattern(t, buf, 0)
	onDisk, err := os.ReadFile(mf.Path())
	if err != nil {
		t.Fatal(err)
	}
	checkPattern(t, onDisk[:written], 0)
	checkZeros(t, onDisk[written:], written)

	if err := mf.Cool(); err != nil {
		t.Fatal(err)
	}
	if got := lockedKiB(t) - lockedBefore; got != 0 {
		t.Errorf("VmLck is %d KiB above its level before the warm-up after Cool", got)
	}
	for i, s := range pageStates(t, mf.mapping) {
		if s.present {
			t.Fatalf("page %d still mapped after Cool", i)
		}
	}
	// Nothing was lost: the records come back from the page cache, and
	// appends go on.
	if _, err := mf.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	checkPattern(t, buf, 0)
	appendPattern(t, mf, 10000)
	if _, err := mf.Flush(ctx, 0); err != nil {
		t.Fatal(err)
	}
	buf = make([]byte, written+10000)
	if _, err := mf.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	checkPattern(t, buf, 0)
}

func TestWarmStopsOnCancelledContext(t *testing.T) {
	mf := openSegment(t, Options{}, "", "seg", 1<<20)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := mf.Warm(ctx, mappedfile.WarmOptions{Touch: true})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("warm with a cancelled context: %v", err)
	}
	if mf.Err() != nil {
		t.Fatalf("a cancelled warm-up left a sticky error: %v", mf.Err())
	}
	if err := mf.Warm(testContext(t), mappedfile.WarmOptions{FlushEveryPages: -1}); !errors.Is(err, mappedfile.ErrInvalidArgument) {
		t.Fatalf("negative FlushEveryPages: %v", err)
	}
}

const memlockChildEnv = "MMAPIO_TEST_MEMLOCK_CHILD"

// TestWarmLockMemlockLimit runs itself in a child process whose
// RLIMIT_MEMLOCK is 1 MiB and whose thread lacks CAP_IPC_LOCK, and checks
// that locking a 4 MiB segment fails with an error that explains the limit.
func TestWarmLockMemlockLimit(t *testing.T) {
	if os.Getenv(memlockChildEnv) == "1" {
		memlockChild(t)
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("re-run the test binary: %v", err)
	}
	cmd := exec.Command(exe, "-test.run=^TestWarmLockMemlockLimit$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), memlockChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestWarmLockMemlockLimit") {
		t.Fatalf("child did not pass:\n%s", out)
	}
	t.Logf("child:\n%s", out)
}

func memlockChild(t *testing.T) {
	const limitBytes = 1 << 20
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = limitBytes
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatal(err)
	}
	mf := openSegment(t, Options{}, "", "seg", 4*limitBytes)
	done := make(chan error)
	go func() {
		// Capabilities are per thread: drop CAP_IPC_LOCK on this one and
		// never unlock it, so the thread dies with the goroutine.
		runtime.LockOSThread()
		if err := dropCapability(unix.CAP_IPC_LOCK); err != nil {
			done <- err
			return
		}
		done <- mf.Warm(testContext(t), mappedfile.WarmOptions{Lock: true})
	}()
	err := <-done
	if err == nil {
		t.Fatal("mlock of 4 MiB under a 1 MiB RLIMIT_MEMLOCK succeeded")
	}
	t.Logf("error: %v", err)
	if !errors.Is(err, unix.ENOMEM) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("error does not wrap the errno: %v", err)
	}
	for _, want := range []string{"RLIMIT_MEMLOCK is 1048576 bytes", "4194304 bytes", "ulimit -l", mf.Path()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	if mf.Err() != nil {
		t.Errorf("a failed mlock left a sticky error: %v", mf.Err())
	}
}

// dropCapability clears capability c from the calling thread's effective set.
func dropCapability(c int) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[c/32].Effective &^= 1 << (c % 32)
	return unix.Capset(&hdr, &data[0])
}

// TestWarmPartialLastPage warms a segment whose size is not a whole number
// of pages, in one-page flush chunks, then fills it.
func TestWarmPartialLastPage(t *testing.T) {
	const size = 3*mappedfile.PageSize + 100
	for _, opts := range []Options{{}, {TouchByWriting: true}} {
		ctx := testContext(t)
		mf := openSegment(t, opts, "", "seg", size)
		appendPattern(t, mf, 10)
		if err := mf.Warm(ctx, mappedfile.WarmOptions{Touch: true, FlushEveryPages: 1, Advise: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := mf.Append(size-10, zeroCheckEncoder{}); err != nil {
			t.Fatal(err)
		}
		if flushed, err := mf.Flush(ctx, 0); err != nil || flushed != size {
			t.Fatalf("flush: %d, %v", flushed, err)
		}
		onDisk, err := os.ReadFile(mf.Path())
		if err != nil {
			t.Fatal(err)
		}
		checkPattern(t, onDisk, 0)
	}
}

// TestLockedBytes: the backend counts the mappings Warm locked, until Cool
// or the last release unlocks them.
func TestLockedBytes(t *testing.T) {
	const size = 1 << 20
	ctx := testContext(t)
	b := New(Options{})
	r := b.(mappedfile.LockReporter)
	dir := t.TempDir()
	open := func(name string) mappedfile.MappedFile {
		mf, err := b.Open(ctx, mappedfile.Spec{Path: filepath.Join(dir, name), SizeBytes: size})
		if err != nil {
			t.Fatal(err)
		}
		err = mappedfile.Warm(ctx, mf, mappedfile.WarmOptions{Lock: true})
		if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EAGAIN) {
			testenv.Skip(t, testenv.Root, "mlock of %d bytes (or an RLIMIT_MEMLOCK that large): %v", 2*size, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		return mf
	}
	a, c := open("a"), open("c")
	if got := r.LockedBytes(); got != 2*size {
		t.Fatalf("two locked segments: LockedBytes %d, want %d", got, 2*size)
	}
	if err := mappedfile.Cool(a); err != nil {
		t.Fatal(err)
	}
	if got := r.LockedBytes(); got != size {
		t.Fatalf("after Cool: LockedBytes %d, want %d", got, size)
	}
	if !c.Retain() {
		t.Fatal("retain")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := r.LockedBytes(); got != size {
		t.Fatalf("closed but retained: LockedBytes %d, want %d (still mapped)", got, size)
	}
	c.Release()
	if got := r.LockedBytes(); got != 0 {
		t.Fatalf("after the last release: LockedBytes %d, want 0", got)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}
