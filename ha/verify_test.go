package ha

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/tcpproxy"
)

// blackholedSyncMaster is a SYNC_MASTER with a healthy slave that
// reaches it through a proxy, and n Puts waiting for an acknowledgement
// while the proxy black-holes that slave: the only slave that holds their
// records cannot acknowledge them. It returns the end of the waiting
// records and their outcomes, which arrive on results.
type blackholedSyncMaster struct {
	master, slave *engine.Store
	m             *Master
	proxy         *tcpproxy.Proxy
	rs            *runningSlave
	start, end    int64
	results       chan engine.PutResult
	wg            sync.WaitGroup
	// durable, when set before the Puts return, is a sync-flush slave
	// store: a PUT_OK whose record it has not flushed when Put returns
	// is counted in early.
	durable atomic.Pointer[engine.Store]
	early   atomic.Int32
}

func startBlackholedSyncMaster(t *testing.T, n int) *blackholedSyncMaster {
	t.Helper()
	return startBlackholedWith(t, n, fastMaster, fastSlave)
}

// startBlackholedWith is startBlackholedSyncMaster with the master's and
// the healthy slave's options.
func startBlackholedWith(t *testing.T, n int, mo MasterOptions, so SlaveOptions) *blackholedSyncMaster {
	t.Helper()
	ctx := context.Background()
	b := &blackholedSyncMaster{results: make(chan engine.PutResult, n)}
	b.master = open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.SyncMaster, SlaveTimeout: 3 * time.Second})
	t.Cleanup(func() { b.master.Close() })
	b.slave = open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.Slave})
	t.Cleanup(func() { b.slave.Close() })
	b.m = startMaster(t, b.master, mo)
	t.Cleanup(func() { b.m.Close() })
	var err error
	if b.proxy, err = tcpproxy.New("127.0.0.1:0", b.m.Addr().String(), tcpproxy.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.proxy.Close() })
	b.rs = startSlave(t, b.slave, b.proxy.Addr(), so)
	t.Cleanup(func() { b.rs.stop() })
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.m.WaitSlaves(wctx, 1); err != nil {
		t.Fatal(err)
	}
	size := 0
	for i := 0; i < 10; i++ {
		res, err := b.master.Put(ctx, message(200+i, 300)) // the size of those below
		if res.Status != engine.PutOK {
			t.Fatalf("put %d with the healthy slave: %v %v", i, res.Status, err)
		}
		size = res.Size
	}
	b.proxy.Blackhole(true)
	b.start = b.master.Stats().WroteOffset
	b.end = b.start + int64(n)*int64(size)
	for i := 0; i < n; i++ {
		b.wg.Add(1)
		go func(i int) {
			defer b.wg.Done()
			res, _ := b.master.Put(ctx, message(100+i, 300))
			if d := b.durable.Load(); d != nil && res.Status == engine.PutOK && d.FlushedOffset() < res.PhysicalOffset+int64(res.Size) {
				b.early.Add(1)
			}
			b.results <- res
		}(i)
	}
	waitUntil(t, "the waiting records are readable", func() bool { return b.master.CommitLogReader().End() >= b.end })
	return b
}

// check waits for the Puts and fails on a PUT_OK; it returns how many
// waited in vain.
func (b *blackholedSyncMaster) check(t *testing.T) {
	t.Helper()
	b.wg.Wait()
	close(b.results)
	ok := 0
	for res := range b.results {
		if res.Status == engine.PutOK {
			ok++
		}
	}
	if ok > 0 {
		t.Fatalf("%d PUT_OKs for records only the black-holed slave holds (replicated offset %d, their end %d)",
			ok, b.master.ReplicatedOffset(), b.end)
	}
	if got := b.master.ReplicatedOffset(); got >= b.end {
		t.Fatalf("replicated offset %d covers the records only the black-holed slave holds (up to %d)", got, b.end)
	}
}

func rawReport(t *testing.T, addr string, offsets ...int64) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, off := range offsets {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(off))
		if _, err := c.Write(b[:]); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestRawSocketAcknowledgesNothing: while the healthy slave is
// black-holed, TCP clients that write the master's end as 8 bytes (one
// of them a second time, as a heartbeat) release no waiting Put.
func TestRawSocketAcknowledgesNothing(t *testing.T) {
	b := startBlackholedSyncMaster(t, 8)
	rawReport(t, b.m.Addr().String(), b.end)
	rawReport(t, b.m.Addr().String(), b.end, b.end)
	waitUntil(t, "the raw clients are seen", func() bool {
		n := 0
		for _, s := range b.m.Slaves() {
			if s.RequestedOffset == b.end {
				n++
				if s.Verified {
					t.Fatalf("a raw client counts as verified: %+v", s)
				}
			}
		}
		return n == 2
	})
	b.check(t)
}

// TestDivergedSlaveAcknowledgesNothing: while the healthy slave is
// black-holed, a slave with another history connects, whose newest record
// starts among the waiting records' offsets (its first report would cover
// most of them): it is refused with ErrDiverged and releases no Put, and
// its CommitLog is untouched.
func TestDivergedSlaveAcknowledgesNothing(t *testing.T) {
	b := startBlackholedSyncMaster(t, 8)
	other := open(t, t.TempDir(), engine.Options{Backend: "mmap"})
	defer other.Close()
	rng := rand.New(rand.NewPCG(21, 22))
	for i := 0; other.MaxOffset() < b.end-400; i++ {
		if _, err := other.Put(context.Background(), message(5000+i, 1+rng.IntN(60))); err != nil {
			t.Fatal(err)
		}
	}
	diverged := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.Slave})
	defer diverged.Close()
	if _, err := diverged.AppendReplicated(context.Background(), 0, readLog(t, other, 0, other.MaxOffset())); err != nil {
		t.Fatal(err)
	}
	verifyFrom, _, err := diverged.ReplicaResume(context.Background())
	if err != nil || verifyFrom <= b.start {
		t.Fatalf("the diverged slave's newest record starts at %d (%v); want it among the waiting records [%d,%d)", verifyFrom, err, b.start, b.end)
	}
	held := diverged.Stats().WroteOffset
	ds := startSlave(t, diverged, b.m.Addr().String(), fastSlave)
	select {
	case err = <-ds.done:
	case <-time.After(20 * time.Second):
		ds.stop()
		t.Fatal("the diverged slave was not refused")
	}
	if !errors.Is(err, ErrDiverged) {
		t.Fatalf("the diverged slave stopped with %v; want ErrDiverged", err)
	}
	t.Logf("refused: %v", err)
	b.check(t)
	if diverged.Stats().WroteOffset != held {
		t.Fatal("the refused slave's CommitLog changed")
	}
}

// TestVerifiedSlaveResumes: the black hole lifted, the healthy slave
// proves itself again and Puts are PUT_OK; Slaves says it is verified.
func TestVerifiedSlaveResumes(t *testing.T) {
	b := startBlackholedSyncMaster(t, 2)
	b.check(t) // they time out
	b.proxy.Blackhole(false)
	b.proxy.Drop()
	waitUntil(t, "the slave is verified again", func() bool {
		for _, s := range b.m.Slaves() {
			if s.Verified {
				return true
			}
		}
		return false
	})
	if res, err := b.master.Put(context.Background(), message(999, 100)); res.Status != engine.PutOK {
		t.Fatalf("with the slave back: %v %v", res.Status, err)
	}
	waitCaughtUp(t, b.master, b.slave)
	sameLog(t, b.master, b.slave)
}

// TestSyncFlushSlaveReconnectAcksOnlyFlushed: a sync-flush slave holding
// records it has not flushed connects (as after a reconnect) while Puts
// wait for them: they are PUT_OK only once the slave flushed them — its
// first report, the start of its newest record, acknowledges nothing.
func TestSyncFlushSlaveReconnectAcksOnlyFlushed(t *testing.T) {
	b := startBlackholedSyncMaster(t, 8)
	s := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.Slave, FlushMode: engine.FlushSync})
	defer s.Close()
	if _, err := s.AppendReplicated(context.Background(), 0, readLog(t, b.master, 0, b.end)); err != nil {
		t.Fatal(err)
	}
	if s.FlushedOffset() >= b.end {
		t.Fatalf("the slave flushed %d before it connected; the test needs unflushed records", s.FlushedOffset())
	}
	b.durable.Store(s)
	rs := startSlave(t, s, b.m.Addr().String(), fastSlave)
	defer rs.stop()
	b.wg.Wait()
	if n := b.early.Load(); n > 0 {
		t.Fatalf("%d PUT_OKs for records the sync-flush slave had not flushed", n)
	}
	close(b.results)
	ok := 0
	for res := range b.results {
		if res.Status == engine.PutOK {
			ok++
		}
	}
	if ok == 0 {
		t.Fatal("no PUT_OK: the slave holds and flushes the records")
	}
}

// TestOneRecordSlaveIsCompared: a slave whose only record, at offset 0,
// differs from the master's is refused with ErrDiverged and unchanged
// (its record was never compared: it reported the record's end and
// followed from there); one that holds the master's record follows.
func TestOneRecordSlaveIsCompared(t *testing.T) {
	ctx := context.Background()
	msg := func(fill byte) *engine.Message {
		body := bytes.Repeat([]byte{fill}, 200)
		return &engine.Message{Topic: "HA", QueueID: 0, Body: body}
	}
	master := open(t, t.TempDir(), engine.Options{Backend: "mmap"})
	defer master.Close()
	var first int64
	for i := 0; i < 5; i++ {
		res, err := master.Put(ctx, msg('m'))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = int64(res.Size)
		}
	}
	waitUntil(t, "the master's log committed", func() bool { return master.CommitLogReader().End() == master.Stats().WroteOffset })
	m := startMaster(t, master, fastMaster)
	defer m.Close()
	for _, c := range []struct {
		name string
		fill byte
	}{{"diverged", 'x'}, {"same", 'm'}} {
		t.Run(c.name, func(t *testing.T) {
			one := readLog(t, master, 0, first) // the master's own first record
			if c.fill != 'm' {
				other := open(t, t.TempDir(), engine.Options{Backend: "mmap"})
				defer other.Close()
				if _, err := other.Put(ctx, msg(c.fill)); err != nil {
					t.Fatal(err)
				}
				one = readLog(t, other, 0, other.MaxOffset())
			}
			slave := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.Slave})
			defer slave.Close()
			if _, err := slave.AppendReplicated(ctx, 0, one); err != nil {
				t.Fatal(err)
			}
			before := readLog(t, slave, 0, slave.Stats().WroteOffset)
			rs := startSlave(t, slave, m.Addr().String(), fastSlave)
			if c.fill == 'm' {
				defer rs.stop()
				waitCaughtUp(t, master, slave)
				sameLog(t, master, slave)
				return
			}
			var err error
			select {
			case err = <-rs.done:
			case <-time.After(20 * time.Second):
				rs.stop()
				t.Fatalf("the slave was not refused; it holds up to %d", slave.Stats().WroteOffset)
			}
			if !errors.Is(err, ErrDiverged) || !strings.Contains(err.Error(), "from 0") {
				t.Fatalf("refusal: %v", err)
			}
			if got := readLog(t, slave, 0, slave.Stats().WroteOffset); !bytes.Equal(got, before) {
				t.Fatal("the refused slave's CommitLog changed")
			}
		})
	}
}

// TestRepairProbeAcknowledgesNothing: while the healthy slave is
// black-holed, mqstore repair-slave's probes (FindDivergence) from a store
// that holds the waiting records report offsets among them: they release
// no Put.
func TestRepairProbeAcknowledgesNothing(t *testing.T) {
	b := startBlackholedSyncMaster(t, 8)
	p := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.Slave})
	defer p.Close()
	if _, err := p.AppendReplicated(context.Background(), 0, readLog(t, b.master, 0, b.end)); err != nil {
		t.Fatal(err)
	}
	d, err := FindDivergence(context.Background(), p, b.m.Addr().String(), fastSlave)
	if err != nil || d.Diverged {
		t.Fatalf("divergence %+v, %v", d, err)
	}
	b.check(t)
}
