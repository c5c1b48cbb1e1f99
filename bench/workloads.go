package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/engine"
	"golang.org/x/sys/unix"
)

// The workloads beyond throughput and latency.
const (
	WorkloadConsume  = "consume"
	WorkloadE2E      = "e2e"
	WorkloadRecovery = "recovery"
)

const consumeGroup = "mqbench"

// fillStore appends bodies of sizeBytes to queue 0 of the bench topic with
// four producers until the CommitLog holds at least totalBytes, and returns
// the messages appended. It waits until every message is dispatched to the
// ConsumeQueue.
func (c *Config) fillStore(ctx context.Context, dir, backend string, sizeBytes int, totalBytes int64, keep func(*engine.Store)) error {
	s, err := c.storeOpen(ctx, dir, backend, "async")
	if err != nil {
		return err
	}
	if err := fill(ctx, s, sizeBytes, totalBytes); err != nil {
		s.Close()
		return err
	}
	if keep != nil {
		keep(s)
		return nil
	}
	return nil // the produce-crash worker keeps it open until killed
}

func fill(ctx context.Context, s *engine.Store, sizeBytes int, totalBytes int64) error {
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := &engine.Message{Topic: benchTopic, QueueID: 0, Body: Body(w, sizeBytes)}
			for s.MaxOffset() < totalBytes && ctx.Err() == nil {
				if _, err := s.Put(ctx, m); err != nil {
					errs[w] = fmt.Errorf("fill: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return waitDispatched(ctx, s)
}

func waitDispatched(ctx context.Context, s *engine.Store) error {
	deadline := time.Now().Add(30 * time.Second) // a dispatch stuck this long is a failure
	for s.Stats().DispatchedOffset < s.MaxOffset() {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("dispatch did not reach %d (at %d)", s.MaxOffset(), s.Stats().DispatchedOffset)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// --- consume ---

// consumeVariants lists the consume variants: hot and (as root) cold, each
// by copy and by sendfile.
func consumeVariants(root bool) []string {
	v := []string{"hot-copy", "hot-sendfile"}
	if root {
		v = append(v, "cold-copy", "cold-sendfile")
	}
	return v
}

// loopback is a TCP connection to a reader in this process that discards
// what it reads and counts it.
type loopback struct {
	conn     *net.TCPConn
	received atomic.Int64
	done     chan error
}

func newLoopback() (*loopback, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("loopback: %w", err)
	}
	defer ln.Close()
	l := &loopback{done: make(chan error, 1)}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			l.done <- err
			close(accepted)
			return
		}
		accepted <- c
		buf := make([]byte, 1<<20)
		for {
			n, err := c.Read(buf)
			l.received.Add(int64(n))
			if err != nil {
				c.Close()
				if errors.Is(err, io.EOF) {
					err = nil
				}
				l.done <- err
				return
			}
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, fmt.Errorf("loopback: %w", err)
	}
	if _, ok := <-accepted; !ok {
		conn.Close()
		return nil, fmt.Errorf("loopback: accept failed")
	}
	l.conn = conn.(*net.TCPConn)
	return l, nil
}

// waitReceived waits until the reader has read n bytes in all.
func (l *loopback) waitReceived(ctx context.Context, n int64) error {
	deadline := time.Now().Add(time.Minute)
	for l.received.Load() < n {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("loopback reader got %d of %d bytes", l.received.Load(), n)
		}
		runtime.Gosched()
	}
	return nil
}

func (l *loopback) close() {
	l.conn.Close()
	<-l.done
}

func threadCPU() (time.Duration, time.Duration) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// consumePass reads queue 0 from offset 0 to count through Get and sends
// every record to the loopback reader, by copy (CopyTo) or by sendfile
// (WriteTo). It runs on a locked OS thread whose CPU time (RUSAGE_THREAD) is
// the sender's cost.
func consumePass(ctx context.Context, s *engine.Store, l *loopback, count int64, sendfile bool) (Repeat, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	base := l.received.Load()
	u0, s0 := threadCPU()
	p0 := processCPU()
	start := time.Now()
	var msgs, sent int64
	for offset := int64(0); offset < count; {
		res, err := s.Get(ctx, consumeGroup, benchTopic, 0, offset, 1024, nil)
		if err != nil {
			return Repeat{}, err
		}
		if res.Status != engine.Found {
			res.Release()
			return Repeat{}, fmt.Errorf("get at %d of %d: %s", offset, count, res.Status)
		}
		var n int64
		if sendfile {
			n, err = res.WriteTo(ctx, l.conn)
		} else {
			n, err = res.CopyTo(l.conn)
		}
		if err == nil && n != res.TotalBytes() {
			err = fmt.Errorf("sent %d of %d bytes", n, res.TotalBytes())
		}
		msgs += int64(len(res.Messages))
		sent += n
		offset = res.NextBeginOffset
		res.Release()
		if err != nil {
			return Repeat{}, fmt.Errorf("send: %w", err)
		}
	}
	if err := l.waitReceived(ctx, base+sent); err != nil {
		return Repeat{}, err
	}
	elapsed := time.Since(start)
	u1, s1 := threadCPU()
	p1 := processCPU()
	res := load.Result{Workload: WorkloadConsume, Messages: msgs, PayloadBytes: sent, ElapsedNs: elapsed.Nanoseconds(),
		CPUUserNs: int64(u1 - u0), CPUSysNs: int64(s1 - s0)}
	f := Figures{MsgsPerSec: res.MsgsPerSec(), MBPerSec: res.MBPerSec(), CPUSecPerGiB: res.CPUSecPerGiB()}
	if sent > 0 {
		f.ProcessCPUSecPerGiB = (p1 - p0).Seconds() / (float64(sent) / (1 << 30))
	}
	return Repeat{Status: StatusOK, Figures: f, Result: res}, nil
}

// dropCaches makes the files under dir cold: sync, MADV_PAGEOUT on this
// process's own mappings of them (drop_caches never evicts a mapped page),
// then drop_caches. It returns the fraction of their pages still resident.
func dropCaches(dir string) (float64, error) {
	unix.Sync()
	pageOutMappings(dir)
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		return 1, fmt.Errorf("drop caches: %w", err)
	}
	return residentFraction(dir)
}

// pageOutMappings asks the kernel to reclaim this process's mappings of
// files under dir (found in /proc/self/maps).
func pageOutMappings(dir string) {
	abs, _ := filepath.Abs(dir)
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.HasPrefix(fields[5], abs+"/") {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		a, err1 := strconv.ParseUint(lo, 16, 64)
		b, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil && b > a {
			_, _, _ = unix.Syscall(unix.SYS_MADVISE, uintptr(a), uintptr(b-a), unix.MADV_PAGEOUT)
		}
	}
}

// residentFraction is the share of the pages of the regular files under dir
// that are in the page cache (mincore on a fresh read-only mapping, which
// faults nothing in).
func residentFraction(dir string) (float64, error) {
	var total, resident int64
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || !info.Mode().IsRegular() || info.Size() == 0 {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		mem, err := unix.Mmap(int(f.Fd()), 0, int(info.Size()), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return err
		}
		defer unix.Munmap(mem)
		vec := make([]byte, (len(mem)+4095)/4096)
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			return fmt.Errorf("mincore %s: %w", path, e)
		}
		for _, v := range vec {
			resident += int64(v & 1)
		}
		total += int64(len(vec))
		return nil
	})
	if total == 0 {
		return 0, err
	}
	return float64(resident) / float64(total), err
}

// consumeCells builds one store of ConsumeBytes for backend × size and runs
// every consume variant on it, Repeat times.
func (r *runner) consumeCells(ctx context.Context, t *target, backend string, size int) {
	variants := consumeVariants(isRoot())
	cells := make([]Cell, len(variants))
	for i, v := range variants {
		cells[i] = r.newCell(WorkloadConsume, backend, size, "async", "none", t, nil)
		cells[i].Variant = v
		cells[i].Name = cellName(&cells[i], r.multiTarget())
		cells[i].Producers = 0
	}
	fail := func(err error) {
		for i := range cells {
			cells[i].Repeats = append(cells[i].Repeats, failedRepeat(err))
			finishCell(&cells[i])
			r.record(false, cells[i])
		}
	}
	dir := filepath.Join(t.work, fmt.Sprintf("consume-%s-%d", backend, size))
	defer os.RemoveAll(dir)
	r.progress.step(fmt.Sprintf("consume-%s-%d: writing %s", backend, size, sizeLabel(int(r.cfg.ConsumeBytes))), 0, 1, 0)
	var s *engine.Store
	if err := r.cfg.fillStore(ctx, dir, backend, size, r.cfg.ConsumeBytes, func(st *engine.Store) { s = st }); err != nil {
		fail(err)
		return
	}
	defer s.Close()
	count := s.MaxOffset() // an upper bound; the queue's end is found below
	if res, err := s.Get(ctx, consumeGroup, benchTopic, 0, 0, 1, nil); err == nil {
		count = res.MaxOffset
		res.Release()
	}
	params := flushParams(s.Options())
	l, err := newLoopback()
	if err != nil {
		fail(err)
		return
	}
	defer l.close()
	// An unmeasured pass warms the page cache (uring-direct wrote around it).
	if _, err := consumePass(ctx, s, l, count, false); err != nil {
		fail(fmt.Errorf("warm-up pass: %w", err))
		return
	}
	for rep := 0; rep < r.cfg.Repeat && ctx.Err() == nil; rep++ {
		for i, v := range variants {
			r.progress.step(cells[i].Name, rep, r.cfg.Repeat, 0)
			resident := -1.0
			if strings.HasPrefix(v, "cold") {
				if resident, err = dropCaches(dir); err != nil {
					cells[i].Repeats = append(cells[i].Repeats, failedRepeat(err))
					continue
				}
			}
			out, err := consumePass(ctx, s, l, count, strings.HasSuffix(v, "sendfile"))
			if err != nil {
				out = failedRepeat(err)
				if ctx.Err() != nil {
					out.Status = StatusInterrupted
				}
			}
			out.Index = rep
			if resident >= 0 {
				out.Figures.ResidentFraction = resident
			}
			cells[i].Repeats = append(cells[i].Repeats, out)
		}
	}
	for i := range cells {
		cells[i].FlushParams = params
		finishCell(&cells[i])
		r.record(false, cells[i])
	}
}

func isRoot() bool { return os.Geteuid() == 0 }

// --- e2e ---

// e2eRepeat runs producers (the open loop of spec, each message's body
// stamped with the wall-clock start of its Put) and one long-polling
// consumer per queue; the store-to-delivery latency is the consumer's clock
// when it has decoded the message minus that stamp.
func (c *Config) e2eRepeat(ctx context.Context, dir, backend, flush string, spec load.Spec) (Repeat, map[string]string) {
	defer os.RemoveAll(dir)
	if spec.SizeBytes < 8 {
		return failedRepeat(fmt.Errorf("e2e needs bodies of at least 8 bytes (the timestamp), got %d", spec.SizeBytes)), nil
	}
	s, err := c.storeOpen(ctx, dir, backend, flush)
	if err != nil {
		return failedRepeat(err), nil
	}
	params := flushParams(s.Options())
	queues := min(spec.Workers(), 8)
	produced := make([]atomic.Int64, queues)
	windowStart := time.Now().Add(spec.Warmup).UnixNano()
	windowEnd := windowStart + spec.Duration.Nanoseconds()
	cctx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	var producing atomic.Bool
	producing.Store(true)
	hists := make([]*load.Histogram, queues)
	delivered := make([]int64, queues)
	errs := make([]error, queues)
	var wg sync.WaitGroup
	for q := range queues {
		hists[q] = load.NewHistogram()
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[q] = consumeQueue(cctx, s, int32(q), &produced[q], &producing, windowStart, windowEnd, hists[q], &delivered[q])
		}()
	}
	res := load.Run(ctx, spec, nil, func(worker int) load.Op {
		q := worker % queues
		m := &engine.Message{Topic: benchTopic, QueueID: int32(q), Body: Body(worker, spec.SizeBytes)}
		return func(ctx context.Context) error {
			binary.LittleEndian.PutUint64(m.Body, uint64(time.Now().UnixNano()))
			if _, err := s.Put(ctx, m); err != nil {
				return err
			}
			produced[q].Add(1)
			return nil
		}
	})
	producing.Store(false)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		stopConsumers()
		<-done
		var behind []string
		for q := range queues {
			behind = append(behind, fmt.Sprintf("q%d produced %d", q, produced[q].Load()))
		}
		errs = append(errs, fmt.Errorf("consumers did not receive every message within 10 s of the producers' end (%s; store max offset %d, dispatched %d)",
			strings.Join(behind, ", "), s.MaxOffset(), s.Stats().DispatchedOffset))
	}
	closeErr := s.Close()
	res.Workload = WorkloadE2E
	res.Delivery = load.Merged(hists...)
	for _, d := range delivered {
		res.Delivered += d
	}
	rep := Repeat{Result: res, Figures: e2eFigures(&res, spec.Duration)}
	rep.Status, rep.Reason = resultStatus(&res)
	if err := errors.Join(errs...); err != nil && rep.Status == StatusOK {
		rep.Status, rep.Reason = StatusFailed, err.Error()
	}
	if closeErr != nil && rep.Status == StatusOK {
		rep.Status, rep.Reason = StatusFailed, "close: "+closeErr.Error()
	}
	return rep, params
}

// consumeQueue long-polls queue q until the producers are done and it has
// read everything they produced there.
func consumeQueue(ctx context.Context, s *engine.Store, q int32, produced *atomic.Int64, producing *atomic.Bool,
	windowStart, windowEnd int64, h *load.Histogram, delivered *int64) error {
	var offset int64
	for {
		if !producing.Load() && offset >= produced.Load() {
			return nil
		}
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		res, err := s.GetLongPoll(pctx, consumeGroup, benchTopic, q, offset, 64, nil)
		cancel()
		if err != nil {
			return fmt.Errorf("consumer %d: %w", q, err)
		}
		if ctx.Err() != nil {
			res.Release()
			return nil
		}
		for i := range res.Messages {
			rec, err := res.Message(i)
			if err != nil {
				res.Release()
				return fmt.Errorf("consumer %d: %w", q, err)
			}
			now := time.Now().UnixNano()
			stamp := int64(binary.LittleEndian.Uint64(rec.Body))
			if stamp >= windowStart && stamp < windowEnd {
				h.Record(time.Duration(now - stamp))
				*delivered++
			}
		}
		offset = res.NextBeginOffset
		res.Release()
	}
}

func e2eFigures(r *load.Result, window time.Duration) Figures {
	f := figuresOf(r) // producer side: service and open-loop latency
	f.ServiceP50Ns, f.ServiceP99Ns, f.ServiceP999Ns = f.P50Ns, f.P99Ns, f.P999Ns
	p := r.Delivery.Percentiles()
	f.P50Ns, f.P90Ns, f.P99Ns, f.P999Ns, f.P9999Ns, f.MaxNs = p.P50Ns, p.P90Ns, p.P99Ns, p.P999Ns, p.P9999Ns, p.MaxNs
	f.MsgsPerSec = float64(r.Delivered) / window.Seconds()
	return f
}

// --- recovery ---

func recoveryVariants(root bool) []string {
	if root {
		return []string{"hot", "cold"}
	}
	return []string{"hot"}
}

// recoveryCells fills a store of RecoveryBytes in a child process, kills it
// with SIGKILL, and times engine.Open of the abandoned store: hot (page
// cache as the dead process left it) and, as root, cold (caches dropped).
func (r *runner) recoveryCells(ctx context.Context, t *target, backend string, size int) {
	for _, v := range recoveryVariants(isRoot()) {
		c := r.newCell(WorkloadRecovery, backend, size, "async", "none", t, nil)
		c.Variant, c.Producers = v, 0
		c.Name = cellName(&c, r.multiTarget())
		for rep := 0; rep < r.cfg.Repeat && ctx.Err() == nil; rep++ {
			r.progress.step(c.Name, rep, r.cfg.Repeat, 0)
			out, params := r.recoveryRepeat(ctx, t, backend, size, v == "cold", filepath.Join(t.work, fmt.Sprintf("%s-r%d", c.Name, rep)))
			out.Index = rep
			if params != nil {
				c.FlushParams = params
			}
			c.Repeats = append(c.Repeats, out)
			if out.Status != StatusOK {
				break
			}
		}
		finishCell(&c)
		if len(c.Repeats) == 0 && ctx.Err() != nil {
			c.Status, c.Reason = StatusInterrupted, "interrupted before it ran"
		}
		r.record(false, c)
	}
}

func (r *runner) recoveryRepeat(ctx context.Context, t *target, backend string, size int, cold bool, dir string) (Repeat, map[string]string) {
	defer os.RemoveAll(dir)
	spec := load.Spec{SizeBytes: size}
	w, err := startWorker(ctx, workerRequest{Kind: workerProduceCrash, Config: r.cfg, Backend: backend, Spec: spec, Dir: dir, Bytes: r.cfg.RecoveryBytes}, nil)
	if err != nil {
		return failedRepeat(err), nil
	}
	line, err := w.waitLine()
	if err != nil || line != "ready" {
		w.kill()
		if ctx.Err() != nil {
			return Repeat{Status: StatusInterrupted, Reason: "interrupted"}, nil
		}
		return failedRepeat(fmt.Errorf("producer: %q %v", line, err)), nil
	}
	w.kill() // SIGKILL with the store open
	resident := -1.0
	if cold {
		if resident, err = dropCaches(dir); err != nil {
			return failedRepeat(err), nil
		}
	}
	opts, err := r.cfg.storeOptions(backend, "async")
	if err != nil {
		return failedRepeat(err), nil
	}
	start := time.Now()
	s, err := engine.Open(ctx, dir, opts)
	elapsed := time.Since(start)
	if err != nil {
		return failedRepeat(fmt.Errorf("reopen after SIGKILL: %w", err)), nil
	}
	scanned := s.MaxOffset() - s.RecoveredFrom()
	crashed := s.RecoveredAfterCrash()
	params := flushParams(s.Options())
	if err := s.Close(); err != nil {
		return failedRepeat(fmt.Errorf("close after recovery: %w", err)), params
	}
	if !crashed {
		return failedRepeat(fmt.Errorf("the store did not see the crash (no abort file)")), params
	}
	res := load.Result{Workload: WorkloadRecovery, PayloadBytes: scanned, ElapsedNs: elapsed.Nanoseconds()}
	f := Figures{MBPerSec: res.MBPerSec(), OpenNs: elapsed.Nanoseconds(), ResidentFraction: max(resident, 0)}
	return Repeat{Status: StatusOK, Figures: f, Result: res}, params
}
