package mappedfile_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
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
				if err := fs.MkdirAll("/d"); err != nil {
					t.Fatal(err)
				}
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
				if _, err := fs.Open(ctx, mappedfile.Spec{Path: "/d/seg", SizeBytes: size}); !errors.Is(err, mappedfile.ErrClosed) {
					t.Fatalf("open before Restart: %v, want ErrClosed (the file system is down)", err)
				}
				fs.Restart()
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

// TestMemFSKillKeepsThePageCacheVolatile: a kill keeps every committed byte
// readable (the page cache survives the process) but not durable: a later
// power loss loses what nobody synced; SyncFile or a Flush makes it stay.
func TestMemFSKillKeepsThePageCacheVolatile(t *testing.T) {
	ctx := context.Background()
	const size = 16 * mappedfile.PageSize
	for _, buffered := range []bool{false, true} {
		for _, sync := range []string{"none", "SyncFile", "Flush"} {
			t.Run(fmt.Sprintf("buffered=%v/sync=%s", buffered, sync), func(t *testing.T) {
				fs := mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: buffered})
				if err := fs.MkdirAll("/d"); err != nil {
					t.Fatal(err)
				}
				spec := mappedfile.Spec{Path: "/d/seg", SizeBytes: size}
				mf, err := fs.Open(ctx, spec)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := mf.Append(5000, fill(0xAA, 5000)); err != nil {
					t.Fatal(err)
				}
				if _, err := mf.Commit(ctx, 0); err != nil {
					t.Fatal(err)
				}
				if _, err := mf.Append(100, fill(0xBB, 100)); err != nil { // committed only when write-through
					t.Fatal(err)
				}
				if _, err := mf.(mappedfile.Overwriter).WriteAt([]byte{0xCC}, 10); err != nil {
					t.Fatal(err)
				}
				fs.Kill()
				if _, err := mf.Append(1, fill(1, 1)); !errors.Is(err, mappedfile.ErrClosed) {
					t.Fatalf("append after kill: %v", err)
				}
				if _, err := mf.Commit(ctx, 0); !errors.Is(err, mappedfile.ErrClosed) {
					t.Fatalf("commit after kill: %v", err)
				}
				if durable, _ := fs.Durable("/d/seg"); !bytes.Equal(durable, make([]byte, size)) {
					t.Fatal("a kill made unsynced bytes durable")
				}
				fs.Restart()
				want := append(fill(0xAA, 5000), fill(0xBB, 100)...)
				if buffered {
					want = append(fill(0xAA, 5000), make([]byte, 100)...) // never committed: lost with the process
				}
				want[10] = 0xCC
				mf, err = fs.Open(ctx, spec)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]byte, 5100)
				if _, err := mf.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("after the kill the page cache holds %x…, want %x… (%v)", got[:16], want[:16], err)
				}
				switch sync {
				case "SyncFile":
					if err := fs.SyncFile("/d/seg"); err != nil {
						t.Fatal(err)
					}
				case "Flush":
					// A file reopened full has nothing pending: its Flush
					// syncs nothing, as msync of an empty range does not.
					if _, err := mf.Flush(ctx, 0); err != nil {
						t.Fatal(err)
					}
					want = make([]byte, 5100)
				default:
					want = make([]byte, 5100)
				}
				fs.Crash(mappedfile.TornNone, nil)
				fs.Restart()
				durable, _ := fs.Durable("/d/seg")
				if !bytes.Equal(durable[:5100], want) {
					t.Fatalf("after the power loss the disk holds %x…, want %x…", durable[:16], want[:16])
				}
			})
		}
	}
}

// TestMemFSNamesNeedADirectorySync: creations, renames and removals survive a
// power loss only once their directory is synced; a directory made by Open
// (not MkdirAll) takes its files with it.
func TestMemFSNamesNeedADirectorySync(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(fs.MkdirAll("/s/a"))
	must(fs.WriteFile("/s/a/synced", []byte("1")))
	must(fs.WriteFile("/s/a/gone", []byte("1")))
	must(fs.WriteFile("/s/a/renamed.tmp", []byte("r")))
	must(fs.SyncDir("/s/a"))
	must(fs.WriteFile("/s/a/unsynced", []byte("2")))
	must(fs.Remove("/s/a/gone"))
	must(fs.Rename("/s/a/renamed.tmp", "/s/a/renamed"))
	mf, err := fs.Open(ctx, mappedfile.Spec{Path: "/s/implicit/seg", SizeBytes: 4096})
	must(err)
	must(mf.Close())
	if names, _ := fs.List("/s/a"); fmt.Sprint(names) != "[renamed synced unsynced]" {
		t.Fatalf("before the crash: %v", names)
	}
	fs.Crash(mappedfile.TornNone, nil) // a nil rng loses every unsynced change
	fs.Restart()
	if names, _ := fs.List("/s/a"); fmt.Sprint(names) != "[gone renamed.tmp synced]" {
		t.Fatalf("after the crash: %v, want the synced names only", names)
	}
	if ok, _ := fs.Exists("/s/implicit"); ok {
		t.Fatal("a directory nobody synced survived")
	}
	if b, err := fs.ReadFile("/s/a/renamed.tmp"); err != nil || string(b) != "r" {
		t.Fatalf("read %q %v", b, err)
	}
	if _, err := fs.ReadFile("/s/a/unsynced"); !errors.Is(err, iofs.ErrNotExist) {
		t.Fatalf("read of a lost file: %v", err)
	}
	// With an rng each unsynced change survives or not.
	kept := map[bool]int{}
	for seed := uint64(0); seed < 40; seed++ {
		fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
		must(fs.MkdirAll("/s"))
		must(fs.WriteFile("/s/x", nil))
		fs.Crash(mappedfile.TornNone, rand.New(rand.NewPCG(seed, 1)))
		fs.Restart()
		ok, _ := fs.Exists("/s/x")
		kept[ok]++
	}
	if kept[true] == 0 || kept[false] == 0 {
		t.Fatalf("an unsynced creation survived %d times and vanished %d times in 40 crashes", kept[true], kept[false])
	}
}

// TestMemFSTruncateSyncsOnlyTheZeroing: Truncate makes its zeros durable,
// not the unsynced bytes below the cut (the contract promises only those).
func TestMemFSTruncateSyncsOnlyTheZeroing(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	if err := fs.MkdirAll("/d"); err != nil {
		t.Fatal(err)
	}
	mf, _ := fs.Open(ctx, mappedfile.Spec{Path: "/d/seg", SizeBytes: 4 * mappedfile.PageSize})
	if _, err := mf.Append(3000, fill(0xAA, 3000)); err != nil {
		t.Fatal(err)
	}
	if err := mf.Truncate(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	fs.Crash(mappedfile.TornNone, nil)
	fs.Restart()
	if durable, _ := fs.Durable("/d/seg"); !bytes.Equal(durable, make([]byte, 4*mappedfile.PageSize)) {
		t.Fatalf("Truncate synced the bytes below the cut: %x…", durable[:8])
	}
}

// TestMemFSArmCrashAndClone: ArmCrash crashes at the n-th operation; a Clone
// is independent of its original.
func TestMemFSArmCrashAndClone(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	if err := fs.MkdirAll("/d"); err != nil {
		t.Fatal(err)
	}
	mf, _ := fs.Open(ctx, mappedfile.Spec{Path: "/d/seg", SizeBytes: mappedfile.PageSize})
	if _, err := mf.Append(10, fill(1, 10)); err != nil {
		t.Fatal(err)
	}
	clone := fs.Clone()
	fs.ArmCrash(2, mappedfile.TornNone, nil)
	if _, err := mf.Flush(ctx, 0); err != nil { // operation 1
		t.Fatal(err)
	}
	if _, err := mf.Append(10, fill(2, 10)); !errors.Is(err, mappedfile.ErrClosed) { // operation 2: the crash
		t.Fatalf("the armed operation: %v, want ErrClosed", err)
	}
	if !fs.Down() || fs.Disarm() {
		t.Fatal("the armed crash did not fire")
	}
	fs.Restart()
	durable, _ := fs.Durable("/d/seg")
	if !bytes.Equal(durable[:20], append(fill(1, 10), make([]byte, 10)...)) {
		t.Fatalf("after the armed crash: %x", durable[:20])
	}
	// The clone was taken before the flush: its disk has nothing, its page
	// cache the first append.
	cf, err := clone.Open(ctx, mappedfile.Spec{Path: "/d/seg", SizeBytes: mappedfile.PageSize})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 10)
	if _, err := cf.ReadAt(got, 0); err != nil || !bytes.Equal(got, fill(1, 10)) {
		t.Fatalf("clone's page cache: %x %v", got, err)
	}
	if d, _ := clone.Durable("/d/seg"); !bytes.Equal(d[:10], make([]byte, 10)) {
		t.Fatal("the clone's disk changed with the original's flush")
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
		"/s/cq": {"TopicA", "TopicB"}, "/s/cq/TopicA": {"0", "10"}, "/s": {"cq", "index"}, "/s/index": {},
	} {
		got, err := fs.ListDirs(dir)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ListDirs(%s) = %v, %v; want %v", dir, got, err, want)
		}
	}
	if _, err := fs.ListDirs("/none"); !errors.Is(err, iofs.ErrNotExist) {
		t.Errorf("ListDirs of a missing directory: %v, want fs.ErrNotExist", err)
	}
}

// TestMemFSOpenMakesANewFileOutsideTheLock: while Open makes a new file's
// bytes (hundreds of MiB for an IndexFile), the file system serves other
// files: another Open, a sync. Before, the whole file was zeroed under the
// file system's lock and a segment waiting to be created waited for it.
// The same path opened meanwhile is opened once, by whoever gets there
// first; the other Open says it is already open.
func TestMemFSOpenMakesANewFileOutsideTheLock(t *testing.T) {
	ctx := context.Background()
	fsys := mappedfile.NewMemFS(mappedfile.MemOptions{})
	other := make(chan error, 1)
	var racer mappedfile.MappedFile
	first := true
	mappedfile.SetMaking(fsys, func(path string) {
		if path != "/d/big" || !first {
			return
		}
		first = false
		go func() {
			mf, err := fsys.Open(ctx, mappedfile.Spec{Path: "/d/small", SizeBytes: 4096})
			if err == nil {
				_, err = mf.Append(1, fill(1, 1))
			}
			if err == nil {
				_, err = mf.Flush(ctx, 0)
			}
			if err == nil {
				err = mf.Close()
			}
			if err == nil {
				err = fsys.SyncDir("/d")
			}
			if err == nil { // the same path, made first by another Open
				racer, err = fsys.Open(ctx, mappedfile.Spec{Path: "/d/big", SizeBytes: 1 << 20})
			}
			other <- err
		}()
		// No deadline is a figure here: this waits forever when the other
		// Open needs the lock this one holds, and the test times out.
		if err := <-other; err != nil {
			t.Errorf("another file's operations while a new file is made: %v", err)
		}
	})
	_, err := fsys.Open(ctx, mappedfile.Spec{Path: "/d/big", SizeBytes: 1 << 20})
	if !errors.Is(err, mappedfile.ErrInvalidArgument) {
		t.Fatalf("opening a file another Open made meanwhile: %v, want already open", err)
	}
	if racer == nil {
		t.Fatal("the racing Open got nothing")
	}
	if err := racer.Close(); err != nil {
		t.Fatal(err)
	}
	mappedfile.SetMaking(fsys, nil)
	mf, err := fsys.Open(ctx, mappedfile.Spec{Path: "/d/big", SizeBytes: 1 << 20})
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	mf.Close()
}
