package mappedfile_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

func fill(b byte, n int) mappedfile.Bytes { return bytes.Repeat([]byte{b}, n) }

func TestMemFSCrashKeepsOnlyFlushed(t *testing.T) {
	ctx := context.Background()
	const size = 16 * mappedfile.PageSize
	for _, tail := range []mappedfile.TornTail{mappedfile.TornNone, mappedfile.TornGarbage, mappedfile.TornPartialPage, mappedfile.TornRandomPages} {
		t.Run(tail.String(), func(t *testing.T) {
			for seed := uint64(0); seed < 50; seed++ {
				fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
				mf, err := fs.Open(ctx, mappedfile.Spec{Path: "/d/seg", SizeBytes: size})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := mf.Append(5000, fill(0xAA, 5000)); err != nil {
					t.Fatal(err)
				}
				if _, err := mf.Flush(ctx, 0); err != nil {
					t.Fatal(err)
				}
				if _, err := mf.Append(3*mappedfile.PageSize, fill(0xBB, 3*mappedfile.PageSize)); err != nil {
					t.Fatal(err)
				}
				fs.Crash(tail, rand.New(rand.NewPCG(seed, 9)))
				if _, err := mf.Append(1, fill(1, 1)); !errors.Is(err, mappedfile.ErrClosed) {
					t.Fatalf("append after crash: %v", err)
				}
				durable, _ := fs.Durable("/d/seg")
				if !bytes.Equal(durable[:5000], fill(0xAA, 5000)) {
					t.Fatal("flushed bytes lost")
				}
				end := 5000 + 3*mappedfile.PageSize
				for i, b := range durable[5000:end] {
					switch {
					case tail == mappedfile.TornNone && b != 0:
						t.Fatalf("seed %d: TornNone kept byte %d", seed, 5000+i)
					case (tail == mappedfile.TornPartialPage || tail == mappedfile.TornRandomPages) && b != 0 && b != 0xBB:
						t.Fatalf("seed %d: %v invented byte %#x at %d", seed, tail, b, 5000+i)
					}
				}
				if tail == mappedfile.TornPartialPage {
					n := bytes.IndexByte(durable[5000:end], 0)
					if n <= 0 {
						t.Fatalf("seed %d: no partial tail (%d)", seed, n)
					}
					if (5000+n)%mappedfile.PageSize == 0 {
						t.Fatalf("seed %d: partial tail ends on a page boundary", seed)
					}
				}
				for _, b := range durable[end:] {
					if b != 0 {
						t.Fatal("bytes past wrote after a crash")
					}
				}
				// Reopen sees exactly the durable bytes.
				mf2, err := fs.Open(ctx, mappedfile.Spec{Path: "/d/seg", SizeBytes: size})
				if err != nil {
					t.Fatal(err)
				}
				got := make([]byte, size)
				if _, err := mf2.ReadAt(got, 0); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, durable) {
					t.Fatal("reopened file differs from the durable bytes")
				}
			}
		})
	}
}

func TestMemFSListRemove(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	for _, name := range []string{"b", "a", "c"} {
		mf, err := fs.Open(ctx, mappedfile.Spec{Path: "/x/" + name, SizeBytes: 4096})
		if err != nil {
			t.Fatal(err)
		}
		if name != "c" {
			mf.Close()
		}
	}
	if _, err := fs.Open(ctx, mappedfile.Spec{Path: "/x/c", SizeBytes: 4096}); !errors.Is(err, mappedfile.ErrInvalidArgument) {
		t.Fatalf("second open of an open file: %v", err)
	}
	names, _ := fs.List("/x")
	if fmt.Sprint(names) != "[a b c]" {
		t.Fatalf("list: %v", names)
	}
	if err := fs.Remove("/x/c"); err == nil {
		t.Fatal("removed an open file")
	}
	if err := fs.Remove("/x/a"); err != nil {
		t.Fatal(err)
	}
	names, _ = fs.List("/x")
	if fmt.Sprint(names) != "[b c]" {
		t.Fatalf("list after remove: %v", names)
	}
}

func BenchmarkMemAppend(b *testing.B) {
	for _, size := range []int{128, 1024, 4096} {
		b.Run(fmt.Sprintf("size=%d", size), func(b *testing.B) {
			ctx := context.Background()
			const segment = 64 << 20
			rec := fill(0x5A, size)
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
			open := func(i int) mappedfile.MappedFile {
				mf, err := fs.Open(ctx, mappedfile.Spec{Path: fmt.Sprintf("/b/%020d", i), SizeBytes: segment})
				if err != nil {
					b.Fatal(err)
				}
				return mf
			}
			n := 0
			mf := open(n)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := mf.Append(size, &rec); err != nil { // a pointer: a slice in an interface would allocate
					b.StopTimer()
					mf.Delete()
					n++
					mf = open(n)
					b.StartTimer()
					if _, err := mf.Append(size, &rec); err != nil { // a pointer: a slice in an interface would allocate
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			mf.Delete()
		})
	}
}

func TestMemFSKillKeepsCommittedBytes(t *testing.T) {
	ctx := context.Background()
	const size = 16 * mappedfile.PageSize
	for _, buffered := range []bool{false, true} {
		fs := mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: buffered})
		mf, err := fs.Open(ctx, mappedfile.Spec{Path: "/d/seg", SizeBytes: size})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mf.Append(5000, fill(0xAA, 5000)); err != nil {
			t.Fatal(err)
		}
		if _, err := mf.Commit(ctx, 0); err != nil {
			t.Fatal(err)
		}
		// Committed, never flushed: a killed process leaves it in the page cache.
		if _, err := mf.Append(100, fill(0xBB, 100)); err != nil {
			t.Fatal(err)
		}
		if _, err := mf.(mappedfile.Overwriter).WriteAt([]byte{0xCC}, 10); err != nil {
			t.Fatal(err)
		}
		fs.Kill()
		if _, err := mf.Append(1, fill(1, 1)); !errors.Is(err, mappedfile.ErrClosed) {
			t.Fatalf("buffered %v: append after kill: %v", buffered, err)
		}
		if _, err := mf.Commit(ctx, 0); !errors.Is(err, mappedfile.ErrClosed) {
			t.Fatalf("buffered %v: commit after kill: %v", buffered, err)
		}
		durable, _ := fs.Durable("/d/seg")
		want := append(fill(0xAA, 5000), fill(0xBB, 100)...)
		if buffered {
			want = append(fill(0xAA, 5000), make([]byte, 100)...) // never committed: lost with the process
		}
		want[10] = 0xCC
		if !bytes.Equal(durable[:5100], want) {
			t.Fatalf("buffered %v: the kill kept %x…, want %x…", buffered, durable[:16], want[:16])
		}
	}
}

func TestMemFSListDirs(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	for _, p := range []string{"/s/cq/TopicB/1/00000000000000000000", "/s/cq/TopicA/0/00000000000000000000",
		"/s/cq/TopicA/10/00000000000000000000", "/s/cq/file", "/s/index/20260101000000000"} {
		mf, err := fs.Open(ctx, mappedfile.Spec{Path: p, SizeBytes: 4096})
		if err != nil {
			t.Fatal(err)
		}
		if err := mf.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for dir, want := range map[string][]string{
		"/s/cq": {"TopicA", "TopicB"}, "/s/cq/TopicA": {"0", "10"}, "/s": {"cq", "index"}, "/s/index": {}, "/none": {},
	} {
		got, err := fs.ListDirs(dir)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ListDirs(%s) = %v, %v; want %v", dir, got, err, want)
		}
	}
}
