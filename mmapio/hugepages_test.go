//go:build linux

package mmapio

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
)

// vmFlags returns the VmFlags of the mapping of this process that holds
// b's first byte (/proc/self/smaps).
func vmFlags(t *testing.T, b []byte) []string {
	t.Helper()
	addr := uint64(uintptr(unsafe.Pointer(&b[0])))
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	in := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if lo, rest, ok := strings.Cut(line, "-"); ok && !strings.Contains(lo, ":") && !strings.Contains(lo, " ") {
			hi, _, _ := strings.Cut(rest, " ")
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = l <= addr && addr < h
				continue
			}
		}
		if v, ok := strings.CutPrefix(line, "VmFlags:"); ok && in {
			return strings.Fields(v)
		}
	}
	t.Fatalf("no mapping of this process holds %#x", addr)
	return nil
}

// hasVmFlag says whether the mapping that holds b's first byte has the
// VmFlags entry flag ("hg", "rr", "sr").
func hasVmFlag(t *testing.T, b []byte, flag string) bool {
	t.Helper()
	return slices.Contains(vmFlags(t, b), flag)
}

// openSpec opens spec with a default mmap backend.
func openSpec(t *testing.T, spec mappedfile.Spec) *file {
	t.Helper()
	mf, err := New(Options{}).Open(testContext(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	return mf.(*file)
}

// TestHugePagesAdvisesTheMapping: a segment opened with Spec.HugePages is
// mapped with MADV_HUGEPAGE (VmFlags "hg"), one opened without it is not,
// and both take appends and read them back alike.
func TestHugePagesAdvisesTheMapping(t *testing.T) {
	thp, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		testenv.Skip(t, testenv.THP, "the kernel has no transparent huge pages (%v): MADV_HUGEPAGE changes nothing there", err)
	}
	t.Logf("THP %q", strings.TrimSpace(string(thp)))
	dir := t.TempDir()
	for _, huge := range []bool{false, true} {
		f := openSpec(t, mappedfile.Spec{Path: filepath.Join(dir, strconv.FormatBool(huge)), SizeBytes: 8 << 20, HugePages: huge})
		if got := hasVmFlag(t, f.mapping, "hg"); got != huge {
			t.Errorf("HugePages %v: the mapping is advised huge: %v (VmFlags %v)", huge, got, vmFlags(t, f.mapping))
		}
		for f.WrotePosition() < 5<<20 {
			if _, err := f.Append(4000, patternEncoder{}); err != nil {
				t.Fatal(err)
			}
		}
		got := make([]byte, f.WrotePosition())
		if _, err := f.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		for i, b := range got {
			if b != patternByte(int64(i)) {
				t.Fatalf("HugePages %v: byte %d is %d, want %d", huge, i, b, patternByte(int64(i)))
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRandomAccessAdvisesTheMapping: a file opened with Spec.RandomAccess is
// mapped with MADV_RANDOM (VmFlags "rr"), one opened without it is not, and
// both take appends and overwrites and read them back alike.
func TestRandomAccessAdvisesTheMapping(t *testing.T) {
	dir := t.TempDir()
	for _, random := range []bool{false, true} {
		f := openSpec(t, mappedfile.Spec{Path: filepath.Join(dir, strconv.FormatBool(random)), SizeBytes: 4 << 20, RandomAccess: random})
		if got := hasVmFlag(t, f.mapping, "rr"); got != random {
			t.Errorf("RandomAccess %v: the mapping is advised random: %v (VmFlags %v)", random, got, vmFlags(t, f.mapping))
		}
		for f.WrotePosition() < 3<<20 {
			if _, err := f.Append(4000, patternEncoder{}); err != nil {
				t.Fatal(err)
			}
		}
		var old [4]byte
		if err := f.SwapEach([]byte{1, 2, 3, 4}, old[:], 4, []int64{1 << 20}); err != nil {
			t.Fatal(err)
		}
		if want := [4]byte{patternByte(1 << 20), patternByte(1<<20 + 1), patternByte(1<<20 + 2), patternByte(1<<20 + 3)}; old != want {
			t.Fatalf("RandomAccess %v: the overwrite found %v, want %v", random, old, want)
		}
		got := make([]byte, 4)
		if _, err := f.ReadAt(got, 1<<20); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, []byte{1, 2, 3, 4}) {
			t.Fatalf("RandomAccess %v: read back %v after the overwrite", random, got)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSmallFoliosWhileWriting: a new file opened with Spec.SmallFolios is
// advised MADV_RANDOM (VmFlags "rr") until an append fills it; a prewritten
// one, or one opened without the flag, is not advised at all.
func TestSmallFoliosWhileWriting(t *testing.T) {
	dir := t.TempDir()
	const size = 1 << 20
	for _, c := range []struct {
		name              string
		small, prewrite   bool
		advisedWhileEmpty bool
	}{
		{"small folios", true, false, true},
		{"small folios, prewritten", true, true, false},
		{"default", false, false, false},
	} {
		f := openSpec(t, mappedfile.Spec{Path: filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")), SizeBytes: size, SmallFolios: c.small, Prewrite: c.prewrite})
		advised := func() bool { return hasVmFlag(t, f.mapping, "rr") }
		if got := advised(); got != c.advisedWhileEmpty {
			t.Errorf("%s: advised random while empty: %v, want %v", c.name, got, c.advisedWhileEmpty)
		}
		for f.WrotePosition() < size-4096 {
			if _, err := f.Append(4096, patternEncoder{}); err != nil {
				t.Fatal(err)
			}
		}
		if got := advised(); got != c.advisedWhileEmpty {
			t.Errorf("%s: advised random one page before full: %v, want %v", c.name, got, c.advisedWhileEmpty)
		}
		if _, err := f.Append(4096, patternEncoder{}); err != nil {
			t.Fatal(err)
		}
		if advised() {
			t.Errorf("%s: still advised random once full", c.name)
		}
		got := make([]byte, size)
		if _, err := f.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		for i, b := range got {
			if b != patternByte(int64(i)) {
				t.Fatalf("%s: byte %d is %d, want %d", c.name, i, b, patternByte(int64(i)))
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWarmKeepsSmallFolios: warming a file kept in small folios touches it
// without advising it SEQUENTIAL (VmFlags "sr"), which would give the
// touch's faults large folios: it stays "rr".
func TestWarmKeepsSmallFolios(t *testing.T) {
	ctx := testContext(t)
	f := openSpec(t, mappedfile.Spec{Path: filepath.Join(t.TempDir(), "seg"), SizeBytes: 1 << 20, SmallFolios: true})
	defer f.Close()
	if err := f.Warm(ctx, mappedfile.WarmOptions{Advise: true, Touch: true}); err != nil {
		t.Fatal(err)
	}
	if !hasVmFlag(t, f.mapping, "rr") || hasVmFlag(t, f.mapping, "sr") {
		t.Fatalf("a warmed small-folio file has VmFlags %v, want rr and not sr", vmFlags(t, f.mapping))
	}
}
