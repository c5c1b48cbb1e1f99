package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
)

// benchBackends are the backends the Put benchmarks compare: every
// registered one ("mem" shows the engine's own cost with no I/O).
var benchBackends = BackendNames()

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
	if errors.Is(err, mappedfile.ErrUnsupported) {
		testenv.Skip(b, backendNeed(backend), "backend %s cannot run here: %v", backend, err)
	}
	if err != nil {
		b.Fatalf("backend %s: %v", backend, err)
	}
	defer s.Close()
	msgs := make([]*Message, producers)
	for i := range msgs {
		msgs[i] = testMessage("BenchTopic", int32(i%4), i, size)
	}
	// Warm up outside the timer: the first Puts wait for the first
	// segment and the one made ahead of it (256 MiB each), which would
	// otherwise be most of a short run's time.
	for i := 0; i < 1000; i++ {
		if _, err := s.Put(ctx, msgs[0]); err != nil {
			b.Fatal(err)
		}
	}
	before := s.Stats().Puts
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
	b.ReportMetric(float64(st.Puts-before)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkGet reads 32 × 1 KiB messages per Get from the page cache and
// writes them to a loopback TCP connection, by copy and by sendfile.
//
//	go test -run '^$' -bench 'Get' -benchmem ./engine/
func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, b.TempDir(), Options{Backend: "mmap", SegmentSizeBytes: 64 << 20, Logger: quietLogger})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const n, size = 20000, 1024
	m := testMessage("G", 0, 0, size)
	var last PutResult
	for i := 0; i < n; i++ {
		if last, err = s.Put(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	waitFor(b, "dispatch", func() bool { return s.Stats().DispatchedOffset >= last.PhysicalOffset+int64(last.Size) })
	for _, path := range []string{"copy", "sendfile"} {
		b.Run("path="+path, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				c, err := ln.Accept()
				if err == nil {
					io.Copy(io.Discard, c)
					c.Close()
				}
			}()
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var bytes int64
			b.ResetTimer()
			off := int64(0)
			for i := 0; i < b.N; i++ {
				res, err := s.Get(ctx, "g", "G", 0, off, 32, nil)
				if err != nil || res.Status != Found {
					b.Fatalf("get at %d: %v %v", off, res.Status, err)
				}
				var w int64
				if path == "copy" {
					w, err = res.CopyTo(conn)
				} else {
					w, err = res.WriteTo(ctx, conn)
				}
				if err != nil {
					b.Fatal(err)
				}
				bytes += w
				off = res.NextBeginOffset
				if off >= n {
					off = 0
				}
				res.Release()
			}
			b.StopTimer()
			b.SetBytes(bytes / int64(b.N))
			b.ReportMetric(float64(b.N*32)/b.Elapsed().Seconds(), "msgs/s")
			conn.Close()
			<-done
		})
	}
}

// BenchmarkEncodeRecord is the CPU of a Put's record path alone, on one
// goroutine and with no I/O: the encode outside the append lock and the
// encoder's work under it (the patch, the whole-record checksum when the
// store recycles segments, the copy into segment memory, the dispatch
// feed), into a destination of 64 record slots reused in turn. The feed
// is taken every 1024 records, as dispatch takes it.
//
//	go test -run '^$' -bench EncodeRecord -count 10 ./engine/
func BenchmarkEncodeRecord(b *testing.B) {
	for _, crc := range []bool{false, true} {
		for _, bare := range []bool{true, false} {
			for _, size := range []int{1024, 4096} {
				b.Run(fmt.Sprintf("recordcrc=%t/bare=%t/size=%d", crc, bare, size), func(b *testing.B) {
					benchEncodeRecord(b, crc, bare, size)
				})
			}
		}
	}
}

func benchEncodeRecord(b *testing.B, recordCRC, bare bool, size int) {
	o := Options{}.withDefaults()
	s := &Store{opts: o, recordCRC: recordCRC, log: &commitLog{feed: newDispatchFeed()}}
	m := testMessage("BenchTopic", 1, 7, size)
	if bare {
		m.Properties = nil
	}
	qc := &queueCounter{topic: m.Topic}
	const slots = 64
	dst := make([]byte, slots*(size+512))
	var records []fedRecord
	var hashes []int32
	e := &encodeBuffer{}
	now := time.Now()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, _, err := s.encode(e, m, now); err != nil {
			b.Fatal(err)
		}
		e.queueOffset, e.storeTimestamp, e.fromOffset = int64(i), now.UnixMilli(), 0
		e.fed.topic = qc.topic
		at := (i % slots) * (size + 512)
		if err := e.EncodeAt(dst[at:at+e.size], int64(at)); err != nil {
			b.Fatal(err)
		}
		if i%1024 == 1023 {
			records, hashes = s.log.feed.take(records, hashes)
		}
	}
}
