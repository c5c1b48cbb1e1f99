package segfile

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/mqstore/mqstore/internal/testenv"
)

// TestMapAnonymousHugeAlignsAndZeroes: the byte at lead is on a huge-page
// boundary, every byte reads zero and takes a write, and the memory goes
// back with UnmapHuge. Where the kernel's THP setting allows them, the
// aligned part is in huge pages (HugeBytes).
func TestMapAnonymousHugeAlignsAndZeroes(t *testing.T) {
	if runtime.GOOS != "linux" {
		testenv.Skip(t, testenv.THP, "transparent huge pages are Linux only")
	}
	page := int64(os.Getpagesize())
	const size = 4 * HugePageBytes
	mem, err := MapAnonymousHuge(2*page, size)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(mem)) != 2*page+size {
		t.Fatalf("len %d, want %d", len(mem), 2*page+size)
	}
	if a := uintptr(unsafe.Pointer(&mem[2*page])); a%HugePageBytes != 0 {
		t.Fatalf("the byte at lead is at %#x, not on a %d-byte boundary", a, HugePageBytes)
	}
	for i, b := range mem {
		if b != 0 {
			t.Fatalf("byte %d is %#x", i, b)
		}
	}
	for i := range mem {
		mem[i] = byte(i)
	}
	huge, err := HugeBytes(mem[2*page:])
	if err != nil {
		t.Fatal(err)
	}
	setting, _ := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	t.Logf("THP %q: %d of %d bytes in huge pages", strings.TrimSpace(string(setting)), huge, size)
	if huge > size {
		t.Fatalf("HugeBytes %d is more than the %d bytes asked about", huge, size)
	}
	if strings.Contains(string(setting), "[always]") || strings.Contains(string(setting), "[madvise]") {
		if huge == 0 {
			t.Fatalf("THP is %q, yet none of the %d aligned bytes is in a huge page", strings.TrimSpace(string(setting)), size)
		}
	}
	if err := UnmapHuge(mem); err != nil {
		t.Fatal(err)
	}
}

// TestMapAnonymousHugeRefusesPartialPages names what is wrong.
func TestMapAnonymousHugeRefusesPartialPages(t *testing.T) {
	if runtime.GOOS != "linux" {
		testenv.Skip(t, testenv.THP, "transparent huge pages are Linux only")
	}
	for _, c := range [][2]int64{{0, 0}, {0, 100}, {3, 4096}, {-4096, 4096}, {4 << 20, 4096}} {
		if mem, err := MapAnonymousHuge(c[0], c[1]); err == nil {
			_ = UnmapHuge(mem)
			t.Errorf("MapAnonymousHuge(%d, %d) did not fail", c[0], c[1])
		}
	}
}
