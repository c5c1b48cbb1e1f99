package indexfile

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mmapio"
)

// mmapBackend returns the mmap backend and whether its files can
// overwrite (the IndexFile needs mappedfile.Overwriter).
func mmapBackend(t testing.TB, dir string) (mappedfile.Backend, bool) {
	t.Helper()
	backend := mmapio.New(mmapio.Options{})
	mf, err := backend.Open(context.Background(), mappedfile.Spec{Path: filepath.Join(dir, "probe"), SizeBytes: 4096})
	if err != nil {
		t.Fatalf("mmap backend: %v", err)
	}
	_, ok := mf.(mappedfile.Overwriter)
	if err := mf.Delete(); err != nil {
		t.Fatal(err)
	}
	return backend, ok
}

// TestOnDiskMmap builds an index through the mmap backend and checks that
// the files on disk are byte for byte those the MemFS builds, then reopens,
// truncates and continues.
func TestOnDiskMmap(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	backend, ok := mmapBackend(t, dir)
	if !ok {
		t.Fatal("the mmap backend's files do not implement mappedfile.Overwriter")
	}
	cfg := Config{Dir: dir, Backend: backend, SlotCount: 97, MaxEntries: 300, Now: fixedNow}
	x, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	keys := testKeys(30)
	calls := makeCalls(700, keys)
	putAll(t, x, calls[:650])
	if err := x.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	ref := mappedfile.NewMemFS(mappedfile.MemOptions{})
	y := openIndex(t, ref, 97, 300)
	defer y.Close()
	putAll(t, y, calls[:650])
	if err := y.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, f := range y.Files() {
		got, err := os.ReadFile(filepath.Join(dir, f.Name))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ref.Durable(f.Path)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s on disk differs from the MemFS build", f.Name)
		}
	}
	x, err = Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	checkQueries(t, x, calls[:650], keys)
	if err := x.TruncateByPhysical(ctx, calls[620].physical); err != nil {
		t.Fatal(err)
	}
	checkQueries(t, x, calls[:620], keys)
	putAll(t, x, calls[620:])
	checkQueries(t, x, calls, keys)
}

// BenchmarkCreateDefaultFile creates a default-size (420 MB) index file on
// the mmap backend and puts its first entry: the stall the first dispatch
// of a new store, and every roll, sees.
//
//	go test ./engine/indexfile -run '^$' -bench CreateDefaultFile -count 5
func BenchmarkCreateDefaultFile(b *testing.B) {
	ctx := context.Background()
	backend, _ := mmapBackend(b, b.TempDir())
	for b.Loop() {
		dir := b.TempDir()
		x, err := Open(ctx, Config{Dir: dir, Backend: backend})
		if err != nil {
			b.Fatal(err)
		}
		if err := x.Put(ctx, "T#k", 0, 1700000000000); err != nil {
			b.Fatal(err)
		}
		if err := x.Close(); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(dir)
	}
}

// specRecorder records the spec of every file a backend opens.
type specRecorder struct {
	mappedfile.Backend
	specs []mappedfile.Spec
}

func (r *specRecorder) Open(ctx context.Context, spec mappedfile.Spec) (mappedfile.MappedFile, error) {
	r.specs = append(r.specs, spec)
	return r.Backend.Open(ctx, spec)
}

// TestFilesAreRandomAccess: every index file, made or reopened, is opened
// with Spec.RandomAccess (a mapping advised MADV_RANDOM: small folios, no
// read-around) and without Spec.HugePages.
func TestFilesAreRandomAccess(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	rec := &specRecorder{Backend: mappedfile.NewMemFS(mappedfile.MemOptions{})}
	cfg := Config{Dir: dir, Backend: rec, SlotCount: 7, MaxEntries: 5, Now: fixedNow}
	x, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	putAll(t, x, makeCalls(12, testKeys(4))) // rolls over into new files
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if x, err = Open(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if len(rec.specs) < 3 {
		t.Fatalf("the index opened %d files, want a roll-over's and a reopen's", len(rec.specs))
	}
	for _, spec := range rec.specs {
		if !spec.RandomAccess || spec.HugePages {
			t.Errorf("%s opened with RandomAccess %v, HugePages %v: want random access in small pages", spec.Path, spec.RandomAccess, spec.HugePages)
		}
	}
}
