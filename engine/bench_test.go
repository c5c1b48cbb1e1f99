package engine

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// benchBackends are the backends the Put benchmarks compare; "mem" shows the
// engine's own cost with no I/O.
var benchBackends = []string{"mem", "mmap", "transient", "uring", "uring-direct"}

// BenchmarkPut appends messages through the whole engine: size × flush mode
// × producers × backend. The async path must report 0 allocs/op.
//
//	go test -run '^$' -bench 'Put' -benchmem ./engine/
func BenchmarkPut(b *testing.B) {
	for _, backend := range benchBackends {
		for _, mode := range flushModes {
			for _, producers := range []int{1, 16} {
				for _, size := range []int{128, 1024, 4096} {
					name := fmt.Sprintf("backend=%s/flush=%s/producers=%d/size=%d", backend, mode, producers, size)
					b.Run(name, func(b *testing.B) { benchPut(b, backend, mode, producers, size) })
				}
			}
		}
	}
}

func benchPut(b *testing.B, backend string, mode FlushMode, producers, size int) {
	ctx := context.Background()
	o := Options{Backend: backend, FlushMode: mode, SegmentSizeBytes: 256 << 20, Logger: quietLogger}
	s, err := Open(ctx, b.TempDir(), o)
	if err != nil {
		b.Skipf("backend %s: %v", backend, err)
	}
	defer s.Close()
	msgs := make([]*Message, producers)
	for i := range msgs {
		msgs[i] = testMessage("BenchTopic", int32(i%4), i, size)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	if producers == 1 {
		for i := 0; i < b.N; i++ {
			if _, err := s.Put(ctx, msgs[0]); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		var next atomic.Int64
		b.SetParallelism((producers + 1) / 2) // GOMAXPROCS × this goroutines
		b.RunParallel(func(pb *testing.PB) {
			m := msgs[next.Add(1)%int64(producers)]
			for pb.Next() {
				if _, err := s.Put(ctx, m); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.StopTimer()
	st := s.Stats()
	b.ReportMetric(float64(st.Puts)/b.Elapsed().Seconds(), "msgs/s")
}
