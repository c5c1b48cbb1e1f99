package segfile_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mqstore/mqstore/internal/faultseam"
	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// kinds lists the kinds of calls, in order.
func kinds(calls []faultseam.Call) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Name())
	}
	return out
}

// TestHookSeesOnlyItsDirectory: a hook sees operations on paths under its
// directory (and the directory itself), not on a sibling whose name shares
// the prefix, and nothing once uninstalled.
func TestHookSeesOnlyItsDirectory(t *testing.T) {
	root := t.TempDir()
	dir, sibling := filepath.Join(root, "a"), filepath.Join(root, "ab")
	for _, d := range []string{dir, sibling} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	inj := faultseam.New(t, dir)
	for _, d := range []string{dir, sibling} {
		f, err := segfile.Create(filepath.Join(d, "f"), 0, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if err := segfile.Fdatasync(f.Name(), int(f.Fd())); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := segfile.SyncDir(d); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := kinds(inj.Calls()), []string{"create", "fdatasync", "fsync-dir"}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v (the sibling %s must not be seen)", got, want, sibling)
	}
	for _, c := range inj.Calls() {
		if !strings.HasPrefix(c.Path, dir) || strings.HasPrefix(c.Path, sibling) {
			t.Fatalf("call on %s seen by the hook of %s", c.Path, dir)
		}
	}
	n := len(inj.Calls())
	uninstall := segfile.Install(dir, inj) // a second, nested install is removed on its own
	uninstall()
	if err := segfile.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	if len(inj.Calls()) != n+1 {
		t.Fatalf("removing one installation removed the other: %d calls, want %d", len(inj.Calls()), n+1)
	}
}

// TestEINTRIsRetried: a system call interrupted by a signal is issued again
// (the seam sees both attempts) and the caller sees success.
func TestEINTRIsRetried(t *testing.T) {
	dir := t.TempDir()
	inj := faultseam.New(t, dir)
	path := filepath.Join(dir, "f")
	f, err := segfile.Create(path, 0, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	if err := segfile.Preallocate(f, 8192); err != nil {
		t.Fatal(err)
	}
	mapping, err := segfile.Map(f, 8192, true)
	if err != nil {
		t.Fatal(err)
	}
	defer segfile.Unmap(mapping)
	for _, tc := range []struct {
		kind segfile.OpKind
		call func() error
	}{
		{segfile.OpPwrite, func() error { return segfile.Pwrite(path, fd, []byte("data"), 0) }},
		{segfile.OpFdatasync, func() error { return segfile.Fdatasync(path, fd) }},
		{segfile.OpFsync, func() error { return segfile.Fsync(path, fd) }},
		{segfile.OpMsync, func() error { mapping[10] = 1; return segfile.Msync(path, mapping, 0, 4096) }},
		{segfile.OpFallocate, func() error { return segfile.Fallocate(path, fd, 0, 0, 8192) }},
		{segfile.OpFtruncate, func() error { return segfile.Ftruncate(path, fd, 8192) }},
		{segfile.OpSyncDir, func() error { return segfile.SyncDir(dir) }},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			inj.Fail(faultseam.Rule{Kinds: []segfile.OpKind{tc.kind}, Nth: 1, Err: unix.EINTR})
			defer inj.Clear()
			before := len(inj.Calls())
			if err := tc.call(); err != nil {
				t.Fatalf("%v interrupted once: %v, want it retried and successful", tc.kind, err)
			}
			calls := inj.Calls()[before:]
			if len(calls) != 2 || calls[0].Kind != tc.kind || !errors.Is(calls[0].Err, unix.EINTR) || calls[1].Kind != tc.kind || calls[1].Err != nil {
				t.Fatalf("calls %v, want the %v twice: interrupted, then successful", calls, tc.kind)
			}
		})
	}
}

// TestInjectedErrorReachesTheCaller: an injected errno is what the caller
// gets, the call is not issued, and it is not retried.
func TestInjectedErrorReachesTheCaller(t *testing.T) {
	dir := t.TempDir()
	inj := faultseam.New(t, dir)
	path := filepath.Join(dir, "f")
	f, err := segfile.Create(path, 0, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inj.Fail(faultseam.Rule{Kinds: []segfile.OpKind{segfile.OpPwrite}, Path: path, Nth: 2, Err: syscall.ENOSPC})
	for i, want := range []error{nil, syscall.ENOSPC, nil} {
		err := segfile.Pwrite(path, int(f.Fd()), []byte("abcd"), int64(4*i))
		if !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Fatalf("pwrite %d: %v, want %v", i+1, err, want)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "abcd\x00\x00\x00\x00abcd" {
		t.Fatalf("file %q: the failed pwrite reached the file", got)
	}
	if inj.Hits() != 1 || len(inj.Calls()) != 4 {
		t.Fatalf("hits %d, calls %v", inj.Hits(), inj.Calls())
	}
}

// TestOpenOrCreateIsDurable: a new segment is created under a temporary
// name, preallocated, synced, renamed into place and its directory synced,
// in that order; the returned file carries the segment's name. A failure on
// the way leaves no file behind.
func TestOpenOrCreateIsDurable(t *testing.T) {
	dir := t.TempDir()
	inj := faultseam.New(t, dir)
	spec := mappedfile.Spec{Path: filepath.Join(dir, "00000000000000000000"), SizeBytes: 1 << 20}
	f, existed, err := segfile.OpenOrCreate(context.Background(), spec, 0)
	if err != nil || existed {
		t.Fatalf("create: %v, existed %v", err, existed)
	}
	defer f.Close()
	if f.Name() != spec.Path {
		t.Fatalf("the new segment's file is named %s, want %s", f.Name(), spec.Path)
	}
	want := []string{"create", "fallocate", "fdatasync", "rename", "fsync-dir"}
	if got := kinds(inj.Calls()); !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", inj.Calls(), want)
	}
	for _, failing := range []segfile.OpKind{segfile.OpFallocate, segfile.OpFdatasync, segfile.OpRename, segfile.OpSyncDir} {
		t.Run("fail="+failing.String(), func(t *testing.T) {
			spec := mappedfile.Spec{Path: filepath.Join(dir, "seg-"+failing.String()), SizeBytes: 1 << 20}
			inj.Fail(faultseam.Rule{Kinds: []segfile.OpKind{failing}, Nth: 1, Err: syscall.EIO})
			defer inj.Clear()
			if _, _, err := segfile.OpenOrCreate(context.Background(), spec, 0); !errors.Is(err, syscall.EIO) {
				t.Fatalf("create with %v failing: %v, want EIO", failing, err)
			}
			for _, p := range []string{spec.Path, spec.Path + ".tmp"} {
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s left behind after a failed create (%v)", p, err)
				}
			}
		})
	}
}

// TestRemoveSyncsTheDirectory: Remove unlinks, then syncs the directory.
func TestRemoveSyncsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	inj := faultseam.New(t, dir)
	if err := segfile.Remove(path); err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(inj.Calls()), []string{"unlink", "fsync-dir"}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", inj.Calls(), want)
	}
}

// TestBeginEndReportForeignIO: I/O issued elsewhere (io_uring) goes through
// the same hook with Begin and End.
func TestBeginEndReportForeignIO(t *testing.T) {
	dir := t.TempDir()
	inj := faultseam.New(t, dir)
	op := segfile.Op{Kind: segfile.OpFdatasync, Path: filepath.Join(dir, "f"), Via: "io_uring"}
	inj.Fail(faultseam.Rule{Kinds: []segfile.OpKind{segfile.OpFdatasync}, Nth: 1})
	if err := segfile.Begin(op); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Begin of a failing request: %v, want EIO", err)
	}
	segfile.End(op, syscall.EIO)
	if err := segfile.Begin(op); err != nil {
		t.Fatal(err)
	}
	segfile.End(op, nil)
	calls := inj.Calls()
	if len(calls) != 2 || calls[0].Name() != "io_uring fdatasync" || !errors.Is(calls[0].Err, syscall.EIO) || calls[1].Err != nil {
		t.Fatalf("calls %v", calls)
	}
	outside := segfile.Op{Kind: segfile.OpFdatasync, Path: filepath.Join(t.TempDir(), "f")}
	if err := segfile.Begin(outside); err != nil {
		t.Fatalf("Begin outside the directory: %v", err)
	}
}
