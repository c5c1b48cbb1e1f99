package consumequeue

import (
	"context"
	"testing"

	"github.com/mqstore/mqstore/mappedfile"
)

// benchBackend makes a fresh backend and directory for one run of a
// benchmark (a run must not load the files of the previous one).
type benchBackend struct {
	name string
	make func(b *testing.B) (mappedfile.Backend, string)
}

var benchBackends = []benchBackend{
	{"mem", func(*testing.B) (mappedfile.Backend, string) {
		return mappedfile.NewMemFS(mappedfile.MemOptions{}), testRoot
	}},
	{"mmap", func(b *testing.B) (mappedfile.Backend, string) { return mmapBackend(b), b.TempDir() }},
}

// BenchmarkConsumeQueueAppend measures dispatching one unit; it must not
// allocate (file creation at a roll is amortized over 300,000 units).
func BenchmarkConsumeQueueAppend(b *testing.B) {
	ctx := context.Background()
	for _, bb := range benchBackends {
		b.Run("backend="+bb.name, func(b *testing.B) {
			backend, dir := bb.make(b)
			q, err := Open(ctx, Config{Dir: dir, Backend: backend}, "BenchTopic", 0)
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			b.SetBytes(UnitSize)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				u := Unit{PhysicalOffset: int64(i) * 200, Size: 200, TagsCode: 2598919}
				if err := q.Append(ctx, int64(i), u); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkConsumeQueueRead measures a consumer's batch read of 32 units.
func BenchmarkConsumeQueueRead(b *testing.B) {
	ctx := context.Background()
	const units = 100000
	for _, bb := range benchBackends {
		b.Run("backend="+bb.name+"/batch=32", func(b *testing.B) {
			backend, dir := bb.make(b)
			q, err := Open(ctx, Config{Dir: dir, Backend: backend}, "BenchTopic", 1)
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			for i := int64(0); i < units; i++ {
				if err := q.Append(ctx, i, Unit{PhysicalOffset: i * 200, Size: 200}); err != nil {
					b.Fatal(err)
				}
			}
			dst := make([]Unit, 32)
			b.SetBytes(32 * UnitSize)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				from := int64(i*32) % (units - 32)
				if n, err := q.Read(from, dst); err != nil || n != 32 {
					b.Fatalf("Read(%d) = %d, %v", from, n, err)
				}
			}
		})
	}
}
