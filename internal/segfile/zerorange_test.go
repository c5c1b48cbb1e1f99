//go:build linux

package segfile_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
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

const (
	zrSize     = 3 << 20
	zrValidEnd = 700_000 // not page aligned
)

// zrDirt is the non-zero data a crash may leave around and past the valid
// end: a torn record across it, one byte at the end of a lone page, a run
// of pages across a MiB boundary (a scan chunk's size), the file's last
// byte. Offsets and lengths.
var zrDirt = [][2]int64{
	{zrValidEnd - 50, 3050},
	{1<<20 + 4*4096 - 1, 1},
	{2<<20 - 2*4096, 5 * 4096},
	{zrSize - 1, 1},
}

// residentPages counts the pages of [off, off+n) of path in the page cache.
func residentPages(t *testing.T, path string, off, n int64) int {
	t.Helper()
	c, err := pagecache.Resident(path, off, n)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dirtyPages returns, page by page (4 KiB of the file), which pages of
// [from, to) hold a non-zero byte of zrDirt.
func dirtyPages(from, to int64) map[int64]bool {
	pages := map[int64]bool{}
	for _, d := range zrDirt {
		for b := max(d[0], from); b < min(d[0]+d[1], to); b++ {
			pages[b/4096] = true
		}
	}
	return pages
}

// TestZeroRangeRewritesOnlyNonZeroPages: ZeroRange writes zeros exactly over
// the pages of the range that hold non-zero bytes (clipped to the range) and
// nowhere else, never fallocates, and fdatasyncs last; the bytes before the
// range are kept, the range reads as zeros, every page is clean afterwards
// (with root). A prewritten file keeps no unwritten extent; a fallocated
// file keeps its unwritten tail unwritten and unread (not even cached).
func TestZeroRangeRewritesOnlyNonZeroPages(t *testing.T) {
	type fileKind struct {
		name     string
		dir      string
		prewrite bool
		synced   bool // the dirt was written back before ZeroRange (a power loss after writeback)
		extents  bool // check extents and residency (a file system with unwritten extents)
	}
	kinds := []fileKind{
		{"prewritten", "", true, false, true},
		{"prewritten-synced", "", true, true, true},
		{"fallocated", "", false, false, true},
		{"fallocated-synced", "", false, true, true},
	}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		kinds = append(kinds, fileKind{"tmpfs", "/dev/shm", true, false, false})
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			dir := t.TempDir()
			if k.dir != "" {
				var err error
				if dir, err = os.MkdirTemp(k.dir, "segfile-test-"); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(dir) })
			}
			if k.extents {
				needExtents(t, dir)
			}
			spec := mappedfile.Spec{Path: filepath.Join(dir, "seg"), SizeBytes: zrSize, Prewrite: k.prewrite}
			f, _, err := segfile.OpenOrCreate(context.Background(), spec, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for _, d := range zrDirt {
				if _, err := f.WriteAt(bytes.Repeat([]byte{0xA5}, int(d[1])), d[0]); err != nil {
					t.Fatal(err)
				}
			}
			if k.synced {
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
				// Drop the cached copies: ZeroRange must find the dirt on disk.
				if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
					t.Fatal(err)
				}
			}
			before, err := os.ReadFile(spec.Path)
			if err != nil {
				t.Fatal(err)
			}
			if k.synced {
				unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
			}
			inj := faultseam.New(t, dir)
			if err := segfile.ZeroRange(f, zrValidEnd, zrSize-zrValidEnd); err != nil {
				t.Fatal(err)
			}
			calls := inj.Calls()
			if len(calls) == 0 || calls[len(calls)-1].Kind != segfile.OpFdatasync {
				t.Fatalf("calls %v: want fdatasync last", calls)
			}
			want := dirtyPages(zrValidEnd, zrSize)
			got := map[int64]bool{}
			var wrote int64
			for _, c := range calls[:len(calls)-1] {
				if c.Kind != segfile.OpPwrite {
					t.Fatalf("ZeroRange issued %v", c)
				}
				if c.Offset < zrValidEnd || c.Offset+c.Length > zrSize {
					t.Fatalf("zeros written at [%d,%d), outside [%d,%d)", c.Offset, c.Offset+c.Length, zrValidEnd, zrSize)
				}
				wrote += c.Length
				for p := c.Offset / 4096; p <= (c.Offset+c.Length-1)/4096; p++ {
					if !want[p] {
						t.Fatalf("zeros written over page %d, which held only zeros (%v)", p, c)
					}
					got[p] = true
				}
			}
			if len(got) != len(want) {
				t.Fatalf("rewrote pages %v, want %v", got, want)
			}
			var wantBytes int64
			for p := range want {
				wantBytes += min((p+1)*4096, zrSize) - max(p*4096, zrValidEnd)
			}
			if wrote != wantBytes {
				t.Fatalf("wrote %d bytes of zeros, want %d (each non-zero page once, clipped to the range)", wrote, wantBytes)
			}
			after, err := os.ReadFile(spec.Path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after[:zrValidEnd], before[:zrValidEnd]) {
				t.Fatal("bytes before the range changed")
			}
			if !isZero(after[zrValidEnd:]) {
				t.Fatal("the range does not read as zeros")
			}
			if !k.extents {
				return // tmpfs pages stay dirty: there is nothing to write them back to
			}
			if err := pagecache.CheckSynced(spec.Path, 0, zrSize); errors.Is(err, pagecache.ErrNoAccess) {
				testenv.Skip(t, testenv.Root, "page flags: %v", err)
			} else if err != nil {
				t.Fatalf("after ZeroRange: %v", err)
			}
			u := disktest.Unwritten(t, spec.Path, zrValidEnd, zrSize-zrValidEnd)
			switch {
			case k.prewrite && u != 0:
				t.Fatalf("%d bytes of a prewritten file's range turned unwritten", u)
			case !k.prewrite && u < (zrSize-zrValidEnd)/2:
				t.Fatalf("only %d bytes of a fallocated tail still unwritten: ZeroRange converted what needed no zeros", u)
			}
		})
	}
}

// TestZeroRangeDoesNotReadUnwrittenTail: on a fallocated file ZeroRange
// reads only the data (the torn bytes), so the unwritten tail does not even
// enter the page cache.
func TestZeroRangeDoesNotReadUnwrittenTail(t *testing.T) {
	dir := t.TempDir()
	needExtents(t, dir)
	spec := mappedfile.Spec{Path: filepath.Join(dir, "seg"), SizeBytes: zrSize}
	f, _, err := segfile.OpenOrCreate(context.Background(), spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(bytes.Repeat([]byte{1}, 10000), zrValidEnd-5000); err != nil {
		t.Fatal(err)
	}
	if err := segfile.ZeroRange(f, zrValidEnd, zrSize-zrValidEnd); err != nil {
		t.Fatal(err)
	}
	tailFrom := int64(zrValidEnd+5000+4095) &^ 4095
	if n := residentPages(t, spec.Path, tailFrom, zrSize-tailFrom); n != 0 {
		t.Fatalf("%d pages of the unwritten tail were read into the page cache", n)
	}
}

// TestZeroRangeErrors: a failed zeroing write is returned (EIO), and no
// sync follows it; a cancelled context stops the scan; an O_DIRECT
// descriptor is refused (its reads would bypass what the page cache holds).
func TestZeroRangeErrors(t *testing.T) {
	dir := t.TempDir()
	spec := mappedfile.Spec{Path: filepath.Join(dir, "seg"), SizeBytes: zrSize, Prewrite: true}
	f, _, err := segfile.OpenOrCreate(context.Background(), spec, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dirty := func() {
		if _, err := f.WriteAt([]byte("torn"), zrValidEnd+10); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("pwrite-EIO", func(t *testing.T) {
		dirty()
		inj := faultseam.New(t, dir)
		inj.Fail(faultseam.Rule{Kinds: []segfile.OpKind{segfile.OpPwrite}, Err: syscall.EIO})
		if err := segfile.ZeroRange(f, zrValidEnd, zrSize-zrValidEnd); !errors.Is(err, syscall.EIO) {
			t.Fatalf("ZeroRange with the write failing: %v, want EIO", err)
		}
		for _, c := range inj.Calls() {
			if c.Kind == segfile.OpFdatasync {
				t.Fatalf("a sync after a failed write: %v", inj.Calls())
			}
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		dirty()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := segfile.ZeroRangeContext(ctx, f, zrValidEnd, zrSize-zrValidEnd); !errors.Is(err, context.Canceled) {
			t.Fatalf("ZeroRange with a cancelled context: %v", err)
		}
	})
	t.Run("O_DIRECT", func(t *testing.T) {
		needExtents(t, dir)
		d, err := os.OpenFile(spec.Path, os.O_RDWR|unix.O_DIRECT, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if err := segfile.ZeroRange(d, zrValidEnd, zrSize-zrValidEnd); !errors.Is(err, mappedfile.ErrInvalidArgument) {
			t.Fatalf("ZeroRange on an O_DIRECT descriptor: %v, want ErrInvalidArgument", err)
		}
	})
	t.Run("bad-range", func(t *testing.T) {
		if err := segfile.ZeroRange(f, -1, 10); !errors.Is(err, mappedfile.ErrInvalidArgument) {
			t.Fatalf("ZeroRange at -1: %v", err)
		}
	})
}
