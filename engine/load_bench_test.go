package engine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/segment"
	"github.com/mqstore/mqstore/internal/rmqmsg"
	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
)

var (
	loadDuration    = flag.Duration("load-duration", 2*time.Second, "BenchmarkPutLoad: length of the timed window")
	loadProducers   = flag.String("load-producers", "4,16,64,256", "BenchmarkPutLoad: producer counts, comma separated")
	loadBackends    = flag.String("load-backends", "", "BenchmarkPutLoad: backends (default every registered one but mem)")
	loadModes       = flag.String("load-modes", "sync", "BenchmarkPutLoad: flush modes, comma separated")
	loadBare        = flag.Bool("load-bare", false, "BenchmarkPutLoad: bodies without properties (no tags, no keys: the index does nothing)")
	loadLagLimit    = flag.Int64("load-lag-limit", 0, "BenchmarkPutLoad: Options.DispatchLagLimitBytes (0: the backend's default, negative: none)")
	loadFromLog     = flag.Bool("load-from-log", false, "BenchmarkPutLoad: dispatch reads every record back from the log (no dispatch feed)")
	loadPrewrite    = flag.String("load-prewrite", "", "BenchmarkPutLoad: Options.PrewriteSegments: default, on, off or auto")
	loadCancel      = flag.Bool("load-cancel", false, "BenchmarkPutLoad: Put with one cancellable context shared by the producers, as mqbench does")
	loadBackendOpts = flag.String("load-backend-options", "", `BenchmarkPutLoad: the backend's own options as JSON (uring-direct: '{"SyncMethod":1}')`)
	loadRecycle     = flag.Int("load-recycle", 0, "BenchmarkPutLoad: Options.RecycleSegments; the store is aged first (this many 64 MiB segments filled, then retired into the pool by retention), so the window writes into reused segments")
	loadBatching    = flag.String("load-batching", "", "BenchmarkPutLoad: Options.GroupCommitBatching: auto, merge or convoys")
	loadWarm        = flag.Bool("load-warm", false, "BenchmarkPutLoad: Options.WarmSegments (the allocation service touches each new segment before use)")
	loadSegment     = flag.Int64("load-segment", 64<<20, "BenchmarkPutLoad: Options.SegmentSizeBytes")
	loadCPUProfile  = flag.String("load-cpuprofile", "", "BenchmarkPutLoad: write a CPU profile of the timed window alone (not the ageing, the warm-up or the close) to this file")
	loadFixedKeys   = flag.Bool("load-fixed-keys", false, "BenchmarkPutLoad: each producer puts the same tags, KEYS and UNIQ_KEY every time (the benchmark's message before it put mqbench's: its index slots stay in the cache)")
)

// BenchmarkPutLoad is a closed loop of N producer goroutines, each putting
// 1 KiB messages for -load-duration after a 300 ms warm-up, the way
// mqbench's throughput cell does — mqbench's rocketmq message (rmqmsg:
// tags, two KEYS and a UNIQ_KEY unique per message, so each key lands in
// a random IndexFile slot), or bare bodies — with the figures a
// profile of the Put path needs: msgs/s, the process's CPU per message
// (getrusage: every goroutine of the store included), and messages per
// durable flush.
//
//	go test -run '^$' -bench PutLoad -benchtime 1x ./engine/ -args -load-producers 16,256 -load-backends uring-direct
func BenchmarkPutLoad(b *testing.B) {
	backends := BackendNames()
	if *loadBackends != "" {
		backends = strings.Split(*loadBackends, ",")
	}
	for _, mode := range strings.Split(*loadModes, ",") {
		for _, backend := range backends {
			if backend == "mem" && *loadBackends == "" {
				continue
			}
			for _, p := range strings.Split(*loadProducers, ",") {
				producers, err := strconv.Atoi(p)
				if err != nil || producers <= 0 {
					b.Fatalf("-load-producers: %q is not a count", p)
				}
				fm, err := ParseFlushMode(mode)
				if err != nil {
					b.Fatal(err)
				}
				b.Run(fmt.Sprintf("backend=%s/flush=%s/producers=%d", backend, mode, producers), func(b *testing.B) {
					benchPutLoad(b, backend, fm, producers)
				})
			}
		}
	}
}

// cpuTimes is the process's CPU time in user space and in the kernel. On a
// virtual machine the kernel's share of a durable write (the device's
// notifications exit to the hypervisor) moves with the host's load, so a
// change to the engine's own code is judged by the user share.
func cpuTimes() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

func benchPutLoad(b *testing.B, backend string, mode FlushMode, producers int) {
	ctx := context.Background()
	if *loadCancel {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
	}
	prewrite, err := ParsePrewriteMode(*loadPrewrite)
	if err != nil {
		b.Fatalf("-load-prewrite: %v", err)
	}
	batching, err := ParseBatchingMode(*loadBatching)
	if err != nil {
		b.Fatalf("-load-batching: %v", err)
	}
	var backendOpts any
	if *loadBackendOpts != "" {
		if backendOpts, err = DecodeBackendOptions(backend, []byte(*loadBackendOpts)); err != nil {
			b.Fatalf("-load-backend-options: %v", err)
		}
	}
	o := Options{Backend: backend, BackendOptions: backendOpts, FlushMode: mode, SegmentSizeBytes: *loadSegment, DispatchLagLimitBytes: *loadLagLimit, Logger: quietLogger,
		PrewriteSegments: prewrite, GroupCommitBatching: batching, dispatchFromLog: *loadFromLog, RecycleSegments: *loadRecycle, WarmSegments: *loadWarm}
	dir := b.TempDir()
	if *loadRecycle > 0 {
		if err := ageStoreForBench(ctx, dir, o, *loadRecycle); err != nil {
			b.Fatalf("age the store: %v", err)
		}
	}
	s, err := Open(ctx, dir, o)
	if errors.Is(err, mappedfile.ErrUnsupported) {
		testenv.Skip(b, backendNeed(backend), "backend %s cannot run here: %v", backend, err)
	}
	if err != nil {
		b.Fatalf("backend %s: %v", backend, err)
	}
	defer s.Close()
	var measuring atomic.Bool
	var stop atomic.Bool
	var count atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < producers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			m := testMessage("BenchTopic", int32(w%8), w, 1024)
			var values *rmqmsg.Values
			switch {
			case *loadBare:
				m.Properties = nil
			case !*loadFixedKeys:
				values = rmqmsg.New(w)
				m.Properties = nil
				for _, p := range values.Properties() {
					m.Properties = append(m.Properties, Property{Name: p.Name, Value: p.Value})
				}
				m.BornHost = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(50000+w%10000))
			}
			n := int64(0)
			for !stop.Load() {
				if values != nil {
					m.Properties[0].Value = values.Next()
				}
				if _, err := s.Put(ctx, m); err != nil {
					b.Error(err)
					return
				}
				if measuring.Load() {
					n++
				}
			}
			count.Add(n)
		}(w)
	}
	time.Sleep(300 * time.Millisecond)
	before := s.Stats()
	elapsed, user, sys := timedWindow(b, &measuring)
	cpu := user + sys
	after := s.Stats()
	stop.Store(true)
	wg.Wait()
	msgs := after.Puts - before.Puts
	b.ReportMetric(float64(msgs)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(max(msgs, 1)), "cpu-µs/msg")
	b.ReportMetric(float64(user.Nanoseconds())/1e3/float64(max(msgs, 1)), "user-µs/msg")
	if f := after.Flushes - before.Flushes; f > 0 {
		b.ReportMetric(float64(msgs)/float64(f), "msgs/flush")
	}
	b.ReportMetric(float64(after.Commits-before.Commits)/elapsed.Seconds(), "commits/s")
	b.ReportMetric(float64(after.DispatchWaits-before.DispatchWaits)/float64(max(msgs, 1)), "dispatch-waits/msg")
	if fed, read := after.DispatchFed-before.DispatchFed, after.DispatchRead-before.DispatchRead; fed+read > 0 {
		b.ReportMetric(float64(read)/float64(fed+read), "dispatch-read-share")
	}
	// The tails, over the store's life (the warm-up included): Put's
	// service time and a durable flush's.
	b.ReportMetric(float64(after.PutLatency.P999.Nanoseconds()), "put-p99.9-ns")
	b.ReportMetric(float64(after.FlushLatency.P999.Nanoseconds()), "flush-p99.9-ns")
	b.ReportMetric(float64(after.FlushLatency.Max.Nanoseconds()), "flush-max-ns")
}

// timedWindow is a load benchmark's timed window: -load-duration with
// measuring set, under the CPU profile -load-cpuprofile asks for (the
// window alone). It returns the window's length and the process's CPU in
// user space and in the kernel over it.
func timedWindow(b *testing.B, measuring *atomic.Bool) (elapsed, user, sys time.Duration) {
	stopProfile := func() {}
	if *loadCPUProfile != "" {
		f, err := os.Create(*loadCPUProfile)
		if err != nil {
			b.Fatalf("-load-cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			b.Fatalf("-load-cpuprofile: %v", err)
		}
		stopProfile = func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				b.Errorf("-load-cpuprofile: %v", err)
			}
		}
	}
	user0, sys0 := cpuTimes()
	t0 := time.Now()
	measuring.Store(true)
	time.Sleep(*loadDuration)
	measuring.Store(false)
	elapsed = time.Since(t0)
	user, sys = cpuTimes()
	stopProfile()
	return elapsed, user - user0, sys - sys0
}

// ageStoreForBench fills a store in dir with n segments and one more, async, with
// 64 KiB messages, and lets retention retire the n full ones into the
// pool (Options.RecycleSegments), their pages dropped from the page cache:
// a store that has been running.
func ageStoreForBench(ctx context.Context, dir string, o Options, n int) error {
	o.FlushMode, o.DeleteWhen, o.FileReservedTime, o.CleanInterval = FlushAsync, "*", time.Nanosecond, time.Hour
	// Pre-written: the window starts in the ageing's last segment (as
	// mqbench's ageing does).
	o.PrewriteSegments = PrewriteOn
	s, err := Open(ctx, dir, o)
	if err != nil {
		return err
	}
	m := &Message{Topic: "Aging", Body: make([]byte, 64<<10)}
	for s.log.queue.WroteOffset() < int64(n)*o.SegmentSizeBytes+1 {
		if _, err := s.Put(ctx, m); err != nil {
			s.Close()
			return err
		}
	}
	if _, err := s.Flush(ctx); err != nil {
		s.Close()
		return err
	}
	if err := s.WaitDispatched(ctx, s.log.queue.WroteOffset()); err != nil {
		s.Close()
		return err
	}
	for {
		deleted, err := s.CleanExpired(ctx)
		if err != nil {
			s.Close()
			return err
		}
		if deleted == 0 {
			break
		}
	}
	pooled := s.Stats().SegmentsPooled
	if err := s.Close(); err != nil {
		return err
	}
	// A running store's retired segments were written long before they are
	// reused: their pages are no longer in the page cache.
	names, err := filepath.Glob(filepath.Join(dir, commitLogDirName, "*"+segment.RecycleSuffix))
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := segfile.DropCache(name); err != nil {
			return err
		}
	}
	if pooled < n {
		return fmt.Errorf("%d segments pooled, want %d", pooled, n)
	}
	return nil
}
