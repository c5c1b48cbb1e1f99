package engine

import (
	"context"
	"flag"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mqstore/mqstore/internal/disktest"
	"github.com/mqstore/mqstore/internal/segfile"
)

var (
	ceilingWork   = flag.Int("ceiling-work", 0, "BenchmarkGroupCommitCeiling: CRC-32 passes over its 1 KiB record a producer makes per Put outside the lock (about 35 ns each here): CPU a Put spends besides the least it can")
	ceilingLinger = flag.String("ceiling-linger", "spin", "BenchmarkGroupCommitCeiling: how the owner waits for the producers it released before it takes a batch: spin (yield in a loop, as the engine's owner does), park (until the producer that completes the batch wakes it) or none (two convoys)")
)

// BenchmarkGroupCommitCeiling is the least a closed loop of N producers
// can do to make 1 KiB records durable on this machine: no store around
// it, only what a group commit cannot leave out. A producer copies its
// record into a buffer under a mutex, queues a channel on the same lock and
// receives from it; one owner goroutine takes the queued waiters, writes
// the batch with one O_DIRECT pwritev2(RWF_DSYNC) into a pre-written file
// (a reused segment's written extents) and answers each. It runs with the
// same flags as BenchmarkPutLoad (-load-producers, -load-duration,
// -load-cpuprofile) and reports the same figures, so the two read side by
// side: what the store loses against this is the store's, not the device's
// or the machine's.
//
//	go test -run '^$' -bench GroupCommitCeiling -benchtime 1x ./engine/ -args -load-producers 64 -ceiling-linger spin
func BenchmarkGroupCommitCeiling(b *testing.B) {
	for _, p := range strings.Split(*loadProducers, ",") {
		producers, err := strconv.Atoi(p)
		if err != nil || producers <= 0 {
			b.Fatalf("-load-producers: %q is not a count", p)
		}
		switch *ceilingLinger {
		case "spin", "park", "none":
		default:
			b.Fatalf("-ceiling-linger: %q is not spin, park or none", *ceilingLinger)
		}
		b.Run("linger="+*ceilingLinger+"/work="+strconv.Itoa(*ceilingWork)+"/producers="+p, func(b *testing.B) {
			benchCeiling(b, producers)
		})
	}
}

const (
	ceilingRecord = 1024
	ceilingBlock  = 4096
	ceilingRing   = 256 << 20 // the file's bytes written over and over
	ceilingSlack  = 16 << 20  // past the ring: a batch that starts before its end
)

// ceilingLog is the model group commit.
type ceilingLog struct {
	fd     int
	linger string

	mu      sync.Mutex
	buf     []byte // the batch being filled; buf[0] is at absolute offset base
	spare   []byte
	base    int64
	pos     int64 // absolute end of the appended records
	queued  []chan struct{}
	spareQ  []chan struct{}
	inPut   atomic.Int64 // Puts from before their append to their return
	kick    chan struct{}
	parked  atomic.Bool
	lingerC chan struct{}

	flushes, records, writeNs atomic.Int64
	err                       error
}

func (l *ceilingLog) put(rec []byte, done chan struct{}) {
	l.inPut.Add(1)
	l.mu.Lock()
	copy(l.buf[l.pos-l.base:], rec)
	l.pos += int64(len(rec))
	l.queued = append(l.queued, done)
	n := len(l.queued)
	l.mu.Unlock()
	if n == 1 {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
	if l.parked.Load() && int64(n) >= l.inPut.Load() {
		select {
		case l.lingerC <- struct{}{}:
		default:
		}
	}
	<-done
	l.inPut.Add(-1)
}

// run is the owner: linger, take, write, answer; until stop is closed and
// nobody waits.
func (l *ceilingLog) run(stop <-chan struct{}) {
	lastWrite := 100 * time.Microsecond
	var timer *time.Timer
	for {
		l.mu.Lock()
		if len(l.queued) == 0 {
			l.mu.Unlock()
			select {
			case <-l.kick:
				continue
			case <-stop:
				return
			}
		}
		if int64(len(l.queued)) < l.inPut.Load() {
			switch l.linger {
			case "spin":
				deadline := time.Now().Add(lastWrite)
				for int64(len(l.queued)) < l.inPut.Load() && time.Now().Before(deadline) {
					l.mu.Unlock()
					runtime.Gosched()
					l.mu.Lock()
				}
			case "park":
				select {
				case <-l.lingerC:
				default:
				}
				l.parked.Store(true)
				l.mu.Unlock()
				if timer == nil {
					timer = time.NewTimer(lastWrite)
				} else {
					timer.Reset(lastWrite)
				}
				select {
				case <-l.lingerC:
					timer.Stop()
				case <-timer.C:
				}
				l.parked.Store(false)
				l.mu.Lock()
			}
		}
		taken := l.queued
		l.queued = l.spareQ[:0]
		batch, base, end := l.buf, l.base, l.pos
		// The next batch starts with the last, partly written block.
		next := end &^ (ceilingBlock - 1)
		copy(l.spare, batch[next-base:end-base])
		l.buf, l.spare, l.base = l.spare, batch, next
		l.mu.Unlock()

		n := (end - base + ceilingBlock - 1) &^ (ceilingBlock - 1)
		start := time.Now()
		_, err := unix.Pwritev2(l.fd, [][]byte{batch[:n]}, base%ceilingRing, unix.RWF_DSYNC)
		took := time.Since(start)
		if err != nil && l.err == nil {
			l.err = err
		}
		lastWrite = took
		l.writeNs.Add(int64(took))
		l.flushes.Add(1)
		l.records.Add(int64(len(taken)))
		for _, c := range taken {
			c <- struct{}{}
		}
		clear(taken)
		l.spareQ = taken
	}
}

func benchCeiling(b *testing.B, producers int) {
	fd := disktest.DirectFile(b, filepath.Join(b.TempDir(), "log"), func(f *os.File) error {
		return segfile.Prewrite(context.Background(), f, ceilingRing+ceilingSlack)
	})
	var err error
	bufBytes := max(1<<20, 2*producers*ceilingRecord+2*ceilingBlock)
	l := &ceilingLog{fd: fd, linger: *ceilingLinger, kick: make(chan struct{}, 1), lingerC: make(chan struct{}, 1)}
	for _, p := range []*[]byte{&l.buf, &l.spare} {
		if *p, err = segfile.MapAnonymous(int64(bufBytes)); err != nil { // page-aligned, as O_DIRECT needs
			b.Fatal(err)
		}
		defer segfile.Unmap(*p)
	}
	stopOwner := make(chan struct{})
	ownerDone := make(chan struct{})
	go func() {
		defer close(ownerDone)
		l.run(stopOwner)
	}()
	var measuring, stop atomic.Bool
	var count atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < producers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rec := make([]byte, ceilingRecord)
			for i := range rec {
				rec[i] = byte(w + i)
			}
			done := make(chan struct{}, 1)
			var sum uint32
			n := int64(0)
			for !stop.Load() {
				for range *ceilingWork {
					sum += crc32.ChecksumIEEE(rec)
				}
				rec[0] = byte(sum)
				l.put(rec, done)
				if measuring.Load() {
					n++
				}
			}
			count.Add(n)
		}(w)
	}
	time.Sleep(300 * time.Millisecond)
	f0, r0, w0 := l.flushes.Load(), l.records.Load(), l.writeNs.Load()
	elapsed, user, sys := timedWindow(b, &measuring)
	f1, r1, w1 := l.flushes.Load(), l.records.Load(), l.writeNs.Load()
	stop.Store(true)
	wg.Wait()
	close(stopOwner)
	<-ownerDone
	if l.err != nil {
		b.Fatalf("write: %v", l.err)
	}
	msgs := max(count.Load(), 1)
	b.ReportMetric(float64(msgs)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64((user+sys).Microseconds())/float64(msgs), "cpu-µs/msg")
	b.ReportMetric(float64(user.Nanoseconds())/1e3/float64(msgs), "user-µs/msg")
	if f := f1 - f0; f > 0 {
		b.ReportMetric(float64(r1-r0)/float64(f), "msgs/flush")
		b.ReportMetric(float64(w1-w0)/1e3/float64(f), "write-µs")
	}
}
