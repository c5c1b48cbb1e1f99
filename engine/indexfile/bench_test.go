package indexfile

import (
	"context"
	"fmt"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

// Benchmark files: 500,000 slots and 2,000,000 entries (42 MB), a tenth of
// RocketMQ's, so the MemFS (which keeps two copies) fits in memory.
const benchSlots, benchEntries = 500_000, 2_000_000

// benchBackend makes a fresh backend and directory for one run of a
// benchmark (a run must not load the files of the previous one).
type benchBackend struct {
	name string
	make func(b *testing.B) (mappedfile.Backend, string)
}

func benchBackends(b *testing.B) []benchBackend {
	out := []benchBackend{{"mem", func(*testing.B) (mappedfile.Backend, string) {
		return mappedfile.NewMemFS(mappedfile.MemOptions{}), testDir
	}}}
	if _, ok := mmapBackend(b, b.TempDir()); ok {
		out = append(out, benchBackend{"mmap", func(b *testing.B) (mappedfile.Backend, string) {
			dir := b.TempDir()
			backend, _ := mmapBackend(b, dir)
			return backend, dir
		}})
	} else {
		b.Log("mmap left out: its files do not implement mappedfile.Overwriter")
	}
	return out
}

func benchKey(i int) string { return fmt.Sprintf("BenchTopic#order-%d", i) }

// BenchmarkIndexPut measures indexing one key (a roll, every 2 M entries,
// is amortized).
func BenchmarkIndexPut(b *testing.B) {
	ctx := context.Background()
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = benchKey(i)
	}
	for _, bb := range benchBackends(b) {
		b.Run("backend="+bb.name, func(b *testing.B) {
			backend, dir := bb.make(b)
			x, err := Open(ctx, Config{Dir: dir, Backend: backend, SlotCount: benchSlots, MaxEntries: benchEntries})
			if err != nil {
				b.Fatal(err)
			}
			defer x.Close()
			b.SetBytes(EntrySize)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := x.Put(ctx, keys[i&(len(keys)-1)], int64(i)*200, 1_700_000_000_000+int64(i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIndexQuery measures a lookup of one key among 200,000 entries of
// 50,000 keys (4 entries per key, plus slot collisions).
func BenchmarkIndexQuery(b *testing.B) {
	ctx := context.Background()
	const entries, keyCount = 200_000, 50_000
	for _, bb := range benchBackends(b) {
		b.Run("backend="+bb.name, func(b *testing.B) {
			backend, dir := bb.make(b)
			x, err := Open(ctx, Config{Dir: dir, Backend: backend, SlotCount: benchSlots, MaxEntries: benchEntries})
			if err != nil {
				b.Fatal(err)
			}
			defer x.Close()
			keys := make([]string, keyCount)
			for i := range keys {
				keys[i] = benchKey(i)
			}
			for i := 0; i < entries; i++ {
				if err := x.Put(ctx, keys[i%keyCount], int64(i)*200, 1_700_000_000_000+int64(i)*10); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				got, err := x.Query(ctx, keys[i%keyCount], 0, 1<<62, 32)
				if err != nil || len(got) < entries/keyCount {
					b.Fatalf("Query: %v, %v", got, err)
				}
			}
		})
	}
}
