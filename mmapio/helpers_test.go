//go:build linux

package mmapio

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// onTmpfs reports whether dir is on tmpfs, whose pages stay dirty forever
// (there is nothing to write them back to).
func onTmpfs(t testing.TB, dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	return st.Type == unix.TMPFS_MAGIC
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// openSegment opens a segment of sizeBytes named name in dir (a fresh
// temporary directory when dir is "").
func openSegment(t testing.TB, opts Options, dir, name string, sizeBytes int64) *file {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	mf, err := New(opts).Open(testContext(t), mappedfile.Spec{
		Path: filepath.Join(dir, name), FromOffset: 0, SizeBytes: sizeBytes,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mf.Close() })
	return mf.(*file)
}

// patternByte is the byte patternEncoder writes at a segment position.
func patternByte(pos int64) byte { return byte(pos%251) + 1 }

// patternEncoder fills dst with patternByte of each position.
type patternEncoder struct{}

func (patternEncoder) EncodeAt(dst []byte, filePos int64) error {
	for i := range dst {
		dst[i] = patternByte(filePos + int64(i))
	}
	return nil
}

func checkPattern(t testing.TB, got []byte, filePos int64) {
	t.Helper()
	for i, b := range got {
		if want := patternByte(filePos + int64(i)); b != want {
			t.Fatalf("byte at position %d is %#x, want %#x", filePos+int64(i), b, want)
		}
	}
}

func checkZeros(t testing.TB, got []byte, filePos int64) {
	t.Helper()
	for i, b := range got {
		if b != 0 {
			t.Fatalf("byte at position %d is %#x, want 0", filePos+int64(i), b)
		}
	}
}

func appendPattern(t testing.TB, mf mappedfile.MappedFile, n int) int64 {
	t.Helper()
	pos, err := mf.Append(n, patternEncoder{})
	if err != nil {
		t.Fatalf("append %d: %v", n, err)
	}
	return pos
}

// pageState is what /proc/self/pagemap and /proc/kpageflags say about one
// page of our address space.
type pageState struct {
	present bool
	dirty   bool // only meaningful when flagsKnown
	known   bool // PFN and flags were readable (needs CAP_SYS_ADMIN)
}

const (
	pagemapPresent = 1 << 63
	pagemapPFNMask = 1<<55 - 1
	kpfDirty       = 1 << 4
)

// pageStates reads the state of every page of b.
func pageStates(t testing.TB, b []byte) []pageState {
	t.Helper()
	pagemap, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatalf("open /proc/self/pagemap: %v", err)
	}
	defer pagemap.Close()
	kpageflags, kerr := os.Open("/proc/kpageflags")
	if kerr == nil {
		defer kpageflags.Close()
	}
	pages := (len(b) + mappedfile.PageSize - 1) / mappedfile.PageSize
	entries := make([]byte, 8*pages)
	first := int64(uintptr(unsafe.Pointer(unsafe.SliceData(b))) / mappedfile.PageSize)
	if _, err := pagemap.ReadAt(entries, first*8); err != nil {
		t.Fatalf("read pagemap: %v", err)
	}
	states := make([]pageState, pages)
	var flags [8]byte
	for i := range states {
		e := binary.LittleEndian.Uint64(entries[8*i:])
		states[i].present = e&pagemapPresent != 0
		pfn := int64(e & pagemapPFNMask)
		if !states[i].present || pfn == 0 || kerr != nil {
			continue
		}
		if _, err := kpageflags.ReadAt(flags[:], pfn*8); err != nil {
			continue
		}
		states[i].known = true
		states[i].dirty = binary.LittleEndian.Uint64(flags[:])&kpfDirty != 0
	}
	return states
}

// dirtyPages counts the dirty pages of b. When the kernel does not tell (no
// CAP_SYS_ADMIN, no /proc/kpageflags) the test is skipped — a failure when
// MQSTORE_TEST_REQUIRE names root — so ok is always true.
func dirtyPages(t testing.TB, b []byte) (dirty int, ok bool) {
	t.Helper()
	for _, s := range pageStates(t, b) {
		if !s.present {
			continue
		}
		if !s.known {
			testenv.Skip(t, testenv.Root, "page flags unreadable (/proc/kpageflags, CAP_SYS_ADMIN)")
		}
		if s.dirty {
			dirty++
		}
	}
	return dirty, true
}

// lockedKiB returns VmLck of this process.
func lockedKiB(t testing.TB) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatalf("open /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmLck:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("parse VmLck %q: %v", rest, err)
			}
			return kib
		}
	}
	t.Fatal("VmLck not in /proc/self/status")
	return 0
}

// mapsMention reports whether /proc/self/maps lists path.
func mapsMention(t testing.TB, path string) bool {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatalf("read /proc/self/maps: %v", err)
	}
	return strings.Contains(string(maps), path)
}

var errEncoderFailed = errors.New("test encoder failed")

// failingEncoder scribbles into dst, then fails.
type failingEncoder struct{}

func (failingEncoder) EncodeAt(dst []byte, _ int64) error {
	for i := range dst {
		dst[i] = 0xEE
	}
	return errEncoderFailed
}

// zeroCheckEncoder fails unless dst is all zeros, then writes the pattern.
type zeroCheckEncoder struct{}

func (zeroCheckEncoder) EncodeAt(dst []byte, filePos int64) error {
	for i, b := range dst {
		if b != 0 {
			return errors.New("mapping not zeroed at " + strconv.FormatInt(filePos+int64(i), 10))
		}
	}
	return patternEncoder{}.EncodeAt(dst, filePos)
}
