//go:build linux

package segfile_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mqstore/mqstore/internal/disktest"
	"github.com/mqstore/mqstore/internal/faultseam"
	"github.com/mqstore/mqstore/internal/pagecache"
	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// needExtents is disktest.NeedExtents plus O_DIRECT, which the
// O_DIRECT prewrite tests need too.
func needExtents(t *testing.T, dir string) {
	t.Helper()
	disktest.NeedExtents(t, dir)
	f, err := os.CreateTemp(dir, "probe")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	d, err := os.OpenFile(f.Name(), os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		testenv.Skip(t, testenv.Extents, "O_DIRECT in %s: %v", dir, err)
	}
	d.Close()
}

// covered checks that the calls of kind on path cover [0, size) exactly,
// in order, without overlap.
func covered(t *testing.T, calls []faultseam.Call, kind segfile.OpKind, path string, size int64) {
	t.Helper()
	next := int64(0)
	for _, c := range calls {
		if c.Kind != kind || c.Path != path {
			continue
		}
		if c.Offset != next {
			t.Fatalf("%v at %d, want %d: %v", kind, c.Offset, next, calls)
		}
		next += c.Length
	}
	if next != size {
		t.Fatalf("%v calls cover [0,%d), want [0,%d)", kind, next, size)
	}
}

// TestPrewriteWritesEveryBlock: a segment created with Spec.Prewrite has no
// unwritten extent (one created without has nothing else); its zeros were
// written through the seam, in order, over [0, size), all before the
// fdatasync that precedes the rename. Through a buffered descriptor they go
// a page at a time into the page cache — nearly every page cached, clean
// afterwards (synced), the writeback paced by sync_file_range past a 32 MiB
// window; through an O_DIRECT one, none is cached.
func TestPrewriteWritesEveryBlock(t *testing.T) {
	dir := t.TempDir()
	needExtents(t, dir)
	type prewriteCase struct {
		name      string
		dir       string
		size      int64
		direct    bool // the segment's own descriptor is O_DIRECT
		cached    bool // every page cached (else none); not checked on tmpfs
		writeback bool // sync_file_range expected
	}
	cases := []prewriteCase{
		{"buffered/1MiB", dir, 1 << 20, false, true, false},
		{"buffered/70MiB+1000", dir, 70<<20 + 1000, false, true, true},
		{"direct/1MiB", dir, 1 << 20, true, false, false},
		{"direct/20MiB+4KiB", dir, 20<<20 + 4096, true, false, false},
	}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		shm, err := os.MkdirTemp("/dev/shm", "segfile-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(shm) })
		cases = append(cases, prewriteCase{"tmpfs/20MiB", shm, 20 << 20, false, true, false})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inj := faultseam.New(t, tc.dir)
			spec := mappedfile.Spec{Path: filepath.Join(tc.dir, strings.ReplaceAll(tc.name, "/", "-")), SizeBytes: tc.size, Prewrite: true}
			flags := 0
			if tc.direct {
				flags = unix.O_DIRECT
			}
			f, existed, err := segfile.OpenOrCreate(context.Background(), spec, flags)
			if err != nil || existed {
				t.Fatalf("create: %v (existed %v)", err, existed)
			}
			defer f.Close()
			if !strings.HasPrefix(tc.name, "tmpfs") {
				// Before anything reads the file or asks FIEMAP (whose SYNC
				// flag writes dirty pages back).
				checkCache(t, spec.Path, tc.size, tc.cached)
				if u := disktest.Unwritten(t, spec.Path, 0, tc.size); u != 0 {
					t.Fatalf("%d unwritten bytes in a prewritten segment", u)
				}
			}
			calls := inj.Calls()
			var order []string
			for _, c := range calls {
				if k := c.Name(); k != "sync_file_range" && (len(order) == 0 || order[len(order)-1] != k) {
					order = append(order, k)
				}
			}
			want := []string{"create", "fallocate", "pwrite", "fdatasync", "rename", "fsync-dir"}
			if !slices.Equal(order, want) {
				t.Fatalf("calls %v, want the order %v (sync_file_range aside)", calls, want)
			}
			tmp := spec.Path + ".tmp"
			covered(t, calls, segfile.OpPwrite, tmp, tc.size)
			if !tc.direct {
				for _, c := range calls {
					if c.Kind == segfile.OpPwrite && c.Length > 4096 {
						t.Fatalf("%v: a buffered prewrite writes a page at a time", c)
					}
				}
			}
			checkWriteback(t, calls, tmp, tc.writeback)
			if got, err := os.ReadFile(spec.Path); err != nil || int64(len(got)) != tc.size || !isZero(got) {
				t.Fatalf("a prewritten segment does not read as %d zeros (%v)", tc.size, err)
			}
		})
	}
	t.Run("without", func(t *testing.T) {
		spec := mappedfile.Spec{Path: filepath.Join(dir, "plain"), SizeBytes: 1 << 20}
		f, _, err := segfile.OpenOrCreate(context.Background(), spec, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if u := disktest.Unwritten(t, spec.Path, 0, spec.SizeBytes); u != spec.SizeBytes {
			t.Fatalf("a fallocated segment has %d of %d bytes unwritten: the check cannot tell", u, spec.SizeBytes)
		}
	})
}

// TestPrewritePacedSyncsEachStep: with Spec.PrewritePace, the zeros go in
// steps of PrewriteStepBytes, each one's writes covering it and then an
// fdatasync, before the next step's first write; pace is asked before each
// step and never again once it said no, and the rest then goes as an
// unpaced prewrite does (large O_DIRECT writes, or pages with no sync until
// the create's own). The segment is written and reads as zeros either way.
func TestPrewritePacedSyncsEachStep(t *testing.T) {
	dir := t.TempDir()
	needExtents(t, dir)
	const step = segfile.PrewriteStepBytes
	size := int64(3*step + 4096)
	for _, direct := range []bool{false, true} {
		for _, paced := range []int{-1, 2, 0} { // steps granted: every one, 2, none
			name := fmt.Sprintf("direct=%v/paced=%d", direct, paced)
			t.Run(name, func(t *testing.T) {
				inj := faultseam.New(t, dir)
				asked, said := 0, 0
				pace := func() bool {
					asked++
					if said < 0 {
						t.Errorf("pace asked again after it said no")
					}
					if paced >= 0 && asked > paced {
						said = -1
						return false
					}
					said++
					return true
				}
				spec := mappedfile.Spec{Path: filepath.Join(dir, strings.ReplaceAll(name, "/", "-")), SizeBytes: size,
					Prewrite: true, PrewritePace: pace}
				flags := 0
				if direct {
					flags = unix.O_DIRECT
				}
				f, existed, err := segfile.OpenOrCreate(context.Background(), spec, flags)
				if err != nil || existed {
					t.Fatalf("create: %v (existed %v)", err, existed)
				}
				f.Close()
				all := int((size + step - 1) / step)
				steps := all
				if paced >= 0 {
					steps = paced
				}
				tmp := spec.Path + ".tmp"
				calls := inj.Calls()
				covered(t, calls, segfile.OpPwrite, tmp, size)
				// Walk the calls: each step's writes end at its end, then
				// its sync; after the last step, writes and the one sync.
				var syncs []int64 // where the zeros written had reached at each fdatasync
				written, after := int64(0), 0
				for _, c := range calls {
					switch {
					case c.Path != tmp:
					case c.Kind == segfile.OpPwrite:
						written = c.Offset + c.Length
						if !direct && c.Length > 4096 {
							t.Fatalf("%v: a buffered prewrite writes a page at a time", c)
						}
						if len(syncs) == steps {
							after++
						}
					case c.Kind == segfile.OpFdatasync:
						syncs = append(syncs, written)
					case c.Kind == segfile.OpWriteback:
						t.Fatalf("%v: sync_file_range in a prewrite of less than a window", c)
					}
				}
				var want []int64
				for k := 1; k <= steps; k++ {
					want = append(want, min(int64(k)*step, size))
				}
				want = append(want, size) // the create's own sync
				if !slices.Equal(syncs, want) {
					t.Fatalf("fdatasyncs with the zeros written up to %v, want %v", syncs, want)
				}
				if direct && steps < all && after != 1 {
					// The rest, under 8 MiB: one O_DIRECT write at full speed.
					t.Fatalf("%d O_DIRECT writes after the steps, want 1 (full speed)", after)
				}
				wantAsked := steps
				if paced >= 0 {
					wantAsked++ // the no
				}
				if asked != wantAsked {
					t.Fatalf("pace asked %d times, want %d", asked, wantAsked)
				}
				if u := disktest.Unwritten(t, spec.Path, 0, size); u != 0 {
					t.Fatalf("%d unwritten bytes in a prewritten segment", u)
				}
				if got, err := os.ReadFile(spec.Path); err != nil || int64(len(got)) != size || !isZero(got) {
					t.Fatalf("a prewritten segment does not read as %d zeros (%v)", size, err)
				}
			})
		}
	}
}

// checkCache: no page of the new segment is dirty or under writeback (the
// fdatasync covered them: with root, through the page flags), and either
// every page is in the page cache or none is.
func checkCache(t *testing.T, path string, size int64, cached bool) {
	t.Helper()
	pages := int((size + 4095) / 4096)
	resident := residentPages(t, path, 0, size)
	// Synced pages are clean, and the kernel may reclaim clean pages at any
	// time under memory pressure (other tests, other processes): a buffered
	// prewrite must leave nearly all of them cached, not every one.
	if cached && resident < pages-pages/10 {
		t.Fatalf("%d of %d pages of the new segment cached, want nearly all (at least %d)", resident, pages, pages-pages/10)
	}
	if !cached && resident != 0 {
		t.Fatalf("%d of %d pages of the new segment cached, want none", resident, pages)
	}
	state, err := pagecache.State(path, 0, size)
	if errors.Is(err, pagecache.ErrNoAccess) {
		testenv.Skip(t, testenv.Root, "page flags: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range state {
		if p.Pending() {
			t.Fatalf("page %d still dirty or under writeback after the create: the sync did not cover it", p.Index)
		}
	}
}

// checkWriteback: with want, the windows' writeback was started in order
// (sync_file_range of each full 32 MiB window, each but the first also
// waiting for the window before it) and none after the last pwrite; without
// it, no sync_file_range at all.
func checkWriteback(t *testing.T, calls []faultseam.Call, path string, want bool) {
	t.Helper()
	var ranges [][2]int64
	for _, c := range calls {
		if c.Kind == segfile.OpWriteback {
			if c.Path != path {
				t.Fatalf("%v on another file", c)
			}
			ranges = append(ranges, [2]int64{c.Offset, c.Length})
		}
	}
	if !want {
		if len(ranges) != 0 {
			t.Fatalf("sync_file_range issued: %v", ranges)
		}
		return
	}
	const window = 32 << 20
	expect := [][2]int64{{0, window}, {window, window}, {0, window}}
	if !slices.Equal(ranges, expect) {
		t.Fatalf("sync_file_range over %v, want %v", ranges, expect)
	}
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// TestPrewriteFailureLeavesNothing: a failed zeroing write (a full disk:
// ErrNoSpace with the errno; an I/O error), a full disk at the fallocate, a
// failed sync or a cancelled context leaves neither the segment nor its
// temporary file, and the error says what failed.
func TestPrewriteFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	inj := faultseam.New(t, dir)
	for _, tc := range []struct {
		name   string
		rule   *faultseam.Rule
		cancel bool
		want   error
		says   string
		paced  bool
	}{
		{"pwrite-ENOSPC", &faultseam.Rule{Kinds: []segfile.OpKind{segfile.OpPwrite}, Nth: 2, Err: syscall.ENOSPC}, false, mappedfile.ErrNoSpace, "writing a 20971520-byte segment: mappedfile: no space left on the device: pwrite", false},
		{"fallocate-ENOSPC", &faultseam.Rule{Kinds: []segfile.OpKind{segfile.OpFallocate}, Nth: 1, Err: syscall.ENOSPC}, false, mappedfile.ErrNoSpace, "fallocate 20971520 bytes", false},
		{"pwrite-EIO", &faultseam.Rule{Kinds: []segfile.OpKind{segfile.OpPwrite}, Nth: 1, Err: syscall.EIO}, false, syscall.EIO, "prewrite: pwrite", false},
		{"fdatasync-EIO", &faultseam.Rule{Kinds: []segfile.OpKind{segfile.OpFdatasync}, Nth: 1, Err: syscall.EIO}, false, syscall.EIO, "fdatasync", false},
		{"cancelled", nil, true, context.Canceled, "prewrite", false},
		{"paced-step-fdatasync-EIO", &faultseam.Rule{Kinds: []segfile.OpKind{segfile.OpFdatasync}, Nth: 2, Err: syscall.EIO}, false, syscall.EIO, "a step's sync", true},
		{"paced-pwrite-ENOSPC", &faultseam.Rule{Kinds: []segfile.OpKind{segfile.OpPwrite}, Nth: 300, Err: syscall.ENOSPC}, false, mappedfile.ErrNoSpace, "writing a 20971520-byte segment", true},
		{"paced-cancelled", nil, true, context.Canceled, "prewrite", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := dir
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.rule != nil {
				inj.Fail(*tc.rule)
				defer inj.Clear()
			}
			if tc.cancel {
				// Cancelled while zeroing: at the second write.
				dir = t.TempDir()
				defer segfile.Install(dir, &cancelHook{kind: segfile.OpPwrite, nth: 2, cancel: cancel})()
			}
			spec := mappedfile.Spec{Path: filepath.Join(dir, tc.name), SizeBytes: 20 << 20, Prewrite: true}
			if tc.paced {
				spec.PrewritePace = func() bool { return true }
			}
			_, _, err := segfile.OpenOrCreate(ctx, spec, 0)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("create: %v, want %v saying %q", err, tc.want, tc.says)
			}
			if tc.rule != nil && !errors.Is(err, tc.rule.Err) {
				t.Fatalf("create: %v does not wrap the errno %v", err, tc.rule.Err)
			}
			for _, p := range []string{spec.Path, spec.Path + ".tmp"} {
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s left behind after a failed prewrite (%v)", p, err)
				}
			}
		})
	}
	t.Run("direct-misaligned", func(t *testing.T) {
		needExtents(t, dir)
		spec := mappedfile.Spec{Path: filepath.Join(dir, "misaligned"), SizeBytes: 1<<20 + 100, Prewrite: true}
		if _, _, err := segfile.OpenOrCreate(context.Background(), spec, unix.O_DIRECT); !errors.Is(err, mappedfile.ErrInvalidArgument) {
			t.Fatalf("O_DIRECT prewrite of %d bytes: %v, want ErrInvalidArgument", spec.SizeBytes, err)
		}
		if _, err := os.Stat(spec.Path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("temporary file left behind (%v)", err)
		}
	})
}

// cancelHook cancels a context at the n-th operation of a kind.
type cancelHook struct {
	kind   segfile.OpKind
	nth    int
	seen   int
	cancel func()
}

func (h *cancelHook) Before(op segfile.Op) error {
	if op.Kind == h.kind {
		if h.seen++; h.seen == h.nth {
			h.cancel()
		}
	}
	return nil
}

func (*cancelHook) After(segfile.Op, error) {}

// The crash test's child: it creates a prewritten segment and, through a
// seam hook, stops at the chosen operation (printing "stopped") until the
// parent kills it with SIGKILL: a process crash at that point of creation.
const (
	envCrashChild = "MQSTORE_SEGFILE_CRASH_CHILD" // the segment's path
	envCrashAt    = "MQSTORE_SEGFILE_CRASH_AT"    // op kind name, "#n" for the n-th
)

func TestMain(m *testing.M) {
	if path := os.Getenv(envCrashChild); path != "" {
		crashChild(path, os.Getenv(envCrashAt))
		return
	}
	os.Exit(m.Run())
}

type stopHook struct {
	kind string
	nth  int
	seen int
}

func (h *stopHook) Before(op segfile.Op) error {
	if op.Kind.String() == h.kind {
		if h.seen++; h.seen == h.nth {
			fmt.Println("stopped")
			select {} // until SIGKILL
		}
	}
	return nil
}

func (*stopHook) After(segfile.Op, error) {}

func crashChild(path, at string) {
	kind, nth, _ := strings.Cut(at, "#")
	n := 1
	fmt.Sscan(nth, &n)
	segfile.Install(filepath.Dir(path), &stopHook{kind: kind, nth: n})
	_, _, err := segfile.OpenOrCreate(context.Background(), mappedfile.Spec{Path: path, SizeBytes: 64 << 20, Prewrite: true}, 0)
	fmt.Println("not stopped:", err)
	os.Exit(2)
}

// TestCrashDuringPrewriteLeavesNoSegment: a process killed while zeroing a
// new segment, or after its sync but before the rename, leaves no file under
// the segment's name — only the temporary one, which the segment queue
// removes (IsSegmentTemp) — and creating the segment again yields a whole,
// written segment.
func TestCrashDuringPrewriteLeavesNoSegment(t *testing.T) {
	dir := t.TempDir()
	needExtents(t, dir)
	for _, at := range []string{"pwrite#3", "fdatasync#1", "rename#1"} {
		t.Run(at, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(at, "#", "-"))
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envCrashChild+"="+path, envCrashAt+"="+at)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || line != "stopped\n" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("child: %q, %v", line, err)
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			cmd.Wait()
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a crash at %s left %s visible (%v)", at, path, err)
			}
			if _, err := os.Stat(path + ".tmp"); err != nil || !segfile.IsSegmentTemp(filepath.Base(path+".tmp")) {
				t.Fatalf("the temporary file: %v", err)
			}
			f, existed, err := segfile.OpenOrCreate(context.Background(), mappedfile.Spec{Path: path, SizeBytes: 64 << 20, Prewrite: true}, 0)
			if err != nil || existed {
				t.Fatalf("create again: %v (existed %v)", err, existed)
			}
			f.Close()
			if u := disktest.Unwritten(t, path, 0, 64<<20); u != 0 {
				t.Fatalf("%d unwritten bytes after creating it again", u)
			}
		})
	}
}

// TestPrewriteWriteZeroes: an O_DIRECT prewrite asks the device to write
// the zeros (FALLOC_FL_WRITE_ZEROES) and falls back to O_DIRECT zeros where
// that is unsupported — either way the segment ends fully written, and
// Spec.Prewrote is told which ran; another error from it (EIO) fails the
// prewrite, naming the call. A buffered prewrite never asks, and says its
// zeros went through the page cache.
func TestPrewriteWriteZeroes(t *testing.T) {
	dir := t.TempDir()
	needExtents(t, dir)
	inj := faultseam.New(t, dir)
	var told []mappedfile.Zeros
	spec := mappedfile.Spec{Path: filepath.Join(dir, "direct"), SizeBytes: 4 << 20, Prewrite: true,
		Prewrote: func(z mappedfile.Zeros) { told = append(told, z) }}
	f, _, err := segfile.OpenOrCreate(context.Background(), spec, unix.O_DIRECT)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if u := disktest.Unwritten(t, spec.Path, 0, spec.SizeBytes); u != 0 {
		t.Fatalf("%d unwritten bytes", u)
	}
	if len(told) != 1 || (told[0] != mappedfile.ZerosByDevice && told[0] != mappedfile.ZerosDirect) {
		t.Fatalf("Prewrote told %v: want one O_DIRECT prewrite", told)
	}
	t.Logf("the zeros here: %v", told[0])
	asked := false
	for _, c := range inj.Calls() {
		asked = asked || c.Op.Kind == segfile.OpFallocate && c.Op.Mode == unix.FALLOC_FL_WRITE_ZEROES
	}
	if !asked {
		t.Fatal("the O_DIRECT prewrite never asked for FALLOC_FL_WRITE_ZEROES")
	}

	inj.Fail(faultseam.Rule{Kinds: []segfile.OpKind{segfile.OpFallocate}, PathContains: "eio"})
	spec.Path = filepath.Join(dir, "eio")
	if f, _, err := segfile.OpenOrCreate(context.Background(), spec, unix.O_DIRECT); err == nil {
		f.Close()
		t.Fatal("a prewrite whose fallocate failed with EIO succeeded")
	} else if !errors.Is(err, unix.EIO) {
		t.Fatalf("prewrite error %v, want EIO", err)
	}
	if len(told) != 1 {
		t.Fatalf("a failed prewrite was reported: %v", told)
	}

	before := len(inj.Calls())
	spec.Path = filepath.Join(dir, "buffered")
	f, _, err = segfile.OpenOrCreate(context.Background(), spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if len(told) != 2 || told[1] != mappedfile.ZerosCached {
		t.Fatalf("a buffered prewrite told %v, want zeros through the page cache", told[1:])
	}
	for _, c := range inj.Calls()[before:] {
		if c.Op.Kind == segfile.OpFallocate && c.Op.Mode == unix.FALLOC_FL_WRITE_ZEROES {
			t.Fatal("a buffered prewrite asked for FALLOC_FL_WRITE_ZEROES")
		}
	}
}
