package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/hostctl"
	"golang.org/x/sys/unix"
)

// loopback is a TCP connection to a reader in this process that discards
// what it reads and counts it.
type loopback struct {
	conn     *net.TCPConn
	received atomic.Int64
	// want is the count waitReceived waits for; the reader signals
	// reached (buffered, one pending) when received gets there.
	want    atomic.Int64
	reached chan struct{}
	done    chan error
}

func newLoopback() (*loopback, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("loopback: %w", err)
	}
	defer ln.Close()
	l := &loopback{done: make(chan error, 1), reached: make(chan struct{}, 1)}
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
			if l.received.Add(int64(n)) >= l.want.Load() {
				select {
				case l.reached <- struct{}{}:
				default:
				}
			}
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

// waitReceived waits until the reader has read n bytes in all, blocked
// (not spinning: the process's CPU is the pass's work).
func (l *loopback) waitReceived(ctx context.Context, n int64) error {
	l.want.Store(n)
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for l.received.Load() < n {
		select {
		case <-l.reached:
		case <-ctx.Done():
			return fmt.Errorf("loopback reader got %d of %d bytes: %w", l.received.Load(), n, ctx.Err())
		case <-timeout.C:
			return fmt.Errorf("loopback reader got %d of %d bytes in a minute", l.received.Load(), n)
		}
	}
	return nil
}

func (l *loopback) close() {
	l.conn.Close()
	<-l.done
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
// (WriteTo). It runs on a locked OS thread whose CPU time (RUSAGE_THREAD)
// until the last send returns is the sender's cost; the pass's time and
// the process's CPU run until the reader has everything.
func consumePass(ctx context.Context, s *engine.Store, l *loopback, count int64, sendfile bool) (runfile.Repeat, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	base := l.received.Load()
	p0 := processCPU()
	start := time.Now()
	send := func() (msgs, sent int64, err error) {
		for offset := int64(0); offset < count; {
			res, err := s.Get(ctx, consumeGroup, benchTopic, 0, offset, 1024, nil)
			if err != nil {
				return msgs, sent, err
			}
			if res.Status != engine.Found {
				res.Release()
				return msgs, sent, fmt.Errorf("get at %d of %d: %s", offset, count, res.Status)
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
				return msgs, sent, fmt.Errorf("send: %w", err)
			}
		}
		return msgs, sent, nil
	}
	m, err := senderCPU(send, func(sent int64) error { return l.waitReceived(ctx, base+sent) }, threadCPU)
	if err != nil {
		return runfile.Repeat{}, err
	}
	elapsed := time.Since(start)
	p1 := processCPU()
	res := load.Result{Workload: WorkloadConsume, Messages: m.msgs, PayloadBytes: m.sent, ElapsedNs: elapsed.Nanoseconds(),
		CPUUserNs: int64(m.user), CPUSysNs: int64(m.sys)}
	f := runfile.Figures{MsgsPerSec: res.MsgsPerSec(), MBPerSec: res.MBPerSec(), CPUSecPerGiB: res.CPUSecPerGiB()}
	if m.sent > 0 {
		f.ProcessCPUSecPerGiB = (p1 - p0).Seconds() / (float64(m.sent) / (1 << 30))
	}
	return runfile.Repeat{Status: runfile.StatusOK, Figures: f, Result: res}, nil
}

// consumeSent is what a consume pass sent and the sending thread's CPU for it.
type consumeSent struct {
	msgs, sent int64
	user, sys  time.Duration
}

// senderCPU runs send and then wait (for the reader to have what was
// sent), and returns the CPU that threadCPU counts from send's start to
// its end: the sender's own, not the wait for the reader.
func senderCPU(send func() (msgs, sent int64, err error), wait func(sent int64) error, threadCPU func() (user, sys time.Duration)) (consumeSent, error) {
	u0, s0 := threadCPU()
	msgs, n, err := send()
	u1, s1 := threadCPU()
	if err != nil {
		return consumeSent{}, err
	}
	if err := wait(n); err != nil {
		return consumeSent{}, err
	}
	return consumeSent{msgs: msgs, sent: n, user: u1 - u0, sys: s1 - s0}, nil
}

// dropCaches makes the files under dir cold: sync, MADV_PAGEOUT on this
// process's own mappings of them (drop_caches never evicts a mapped page),
// then drop_caches. It returns the fraction of their pages still resident.
func dropCaches(h hostctl.Host, dir string) (float64, error) {
	pageOutMappings(dir)
	if err := h.DropCaches(); err != nil {
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
// every consume variant on it, Repeat times: hot and (with cold reads, as
// root) cold, each by copy and by sendfile.
func (r *runner) consumeCells(ctx context.Context, t *target, backend string, size int) {
	variants := []string{"hot-copy", "hot-sendfile"}
	if r.cfg.ColdReads && isRoot() {
		variants = append(variants, "cold-copy", "cold-sendfile")
	}
	cells := make([]runfile.Cell, len(variants))
	for i, v := range variants {
		cells[i] = r.newCell(system{backend: backend, size: size, pol: Policy{Flush: "async", Store: r.cfg.Store}}, WorkloadConsume, PressureNone, t)
		cells[i].Variant = v
		cells[i].Name = runfile.CellName(&cells[i], r.multiTarget())
	}
	fail := func(err error) {
		for i := range cells {
			cells[i].Repeats = append(cells[i].Repeats, failedRepeat(err))
			finishCell(&cells[i])
			r.record(cells[i])
		}
	}
	dir := filepath.Join(t.work, fmt.Sprintf("consume-%s-%d", backend, size))
	defer os.RemoveAll(dir)
	r.progress.step(fmt.Sprintf("consume-%s-%d: writing %s", backend, size, runfile.SizeLabel(int(r.cfg.ConsumeBytes))), 0, 1, 0)
	var s *engine.Store
	if err := fillStore(ctx, r.cfg.Store, dir, backend, size, r.cfg.ConsumeBytes, func(st *engine.Store) { s = st }); err != nil {
		fail(err)
		return
	}
	defer s.Close()
	count := s.MaxOffset() // an upper bound; the queue's end is found below
	if res, err := s.Get(ctx, consumeGroup, benchTopic, 0, 0, 1, nil); err == nil {
		count = res.MaxOffset
		res.Release()
	}
	options := optionsMap(s.Options())
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
			r.progress.step(cells[i].Name, rep+1, r.cfg.Repeat, 0)
			out := r.consumeRepeat(ctx, s, l, dir, v, count)
			out.Index = rep + 1
			cells[i].Repeats = append(cells[i].Repeats, out)
		}
	}
	for i := range cells {
		cells[i].Options = options
		cells[i].SenderCPU = runfile.SenderCPUSends
		finishCell(&cells[i])
		r.record(cells[i])
	}
}

// consumeRepeat is one pass of a consume variant over the store's count
// messages: cold variants drop the store's pages first and record how
// many stayed resident.
func (r *runner) consumeRepeat(ctx context.Context, s *engine.Store, l *loopback, dir, variant string, count int64) runfile.Repeat {
	resident := -1.0
	if strings.HasPrefix(variant, "cold") {
		var err error
		if resident, err = dropCaches(r.host, dir); err != nil {
			return failedRepeat(err)
		}
	}
	out, err := consumePass(ctx, s, l, count, strings.HasSuffix(variant, "sendfile"))
	if err != nil {
		out = failedRepeat(err)
		if ctx.Err() != nil {
			out.Status = runfile.StatusInterrupted
		}
	}
	if resident >= 0 {
		out.Figures.ResidentFraction = resident
	}
	return out
}
