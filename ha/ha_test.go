package ha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/faultseam"
	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/internal/tcpproxy"
	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
)

var quiet = slog.New(slog.DiscardHandler)

// Short intervals keep the tests fast; the protocol is the same.
var (
	fastMaster = MasterOptions{ListenAddr: "127.0.0.1:0", SendHeartbeatInterval: 100 * time.Millisecond,
		HousekeepingInterval: time.Second, Logger: quiet}
	fastSlave = SlaveOptions{SendHeartbeatInterval: 100 * time.Millisecond, HousekeepingInterval: time.Second,
		ReconnectMinBackoff: 10 * time.Millisecond, ReconnectMaxBackoff: 100 * time.Millisecond, Logger: quiet}
)

// storeOptions are small segments and logic files, so a few hundred
// messages roll segments and files.
func storeOptions(o engine.Options) engine.Options {
	if o.SegmentSizeBytes == 0 {
		o.SegmentSizeBytes = 64 << 10
	}
	o.ConsumeQueueFileSizeBytes = 20 * 50
	o.IndexSlotCount = 7
	o.IndexMaxEntries = 40
	o.Logger = quiet
	return o
}

func open(t testing.TB, dir string, o engine.Options) *engine.Store {
	t.Helper()
	s, err := engine.Open(context.Background(), dir, storeOptions(o))
	if errors.Is(err, mappedfile.ErrUnsupported) {
		testenv.Skip(t, testenv.Uring, "backend %s: %v", o.Backend, err)
	}
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	return s
}

// runningSlave is a Slave running in a goroutine.
type runningSlave struct {
	*Slave
	store  *engine.Store
	cancel context.CancelFunc
	done   chan error
}

func startSlave(t testing.TB, store *engine.Store, addr string, o SlaveOptions) *runningSlave {
	t.Helper()
	o.MasterAddress = addr
	s, err := NewSlave(store, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rs := &runningSlave{Slave: s, store: store, cancel: cancel, done: make(chan error, 1)}
	go func() { rs.done <- s.Run(ctx) }()
	return rs
}

// stop stops the slave and returns what Run returned.
func (rs *runningSlave) stop() error {
	rs.cancel()
	return <-rs.done
}

func startMaster(t testing.TB, store *engine.Store, o MasterOptions) *Master {
	t.Helper()
	m, err := NewMaster(store, o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func message(i, size int) *engine.Message {
	body := make([]byte, size)
	for j := range body {
		body[j] = byte(i*13 + j)
	}
	return &engine.Message{Topic: "HA", QueueID: int32(i % 3), Body: body, Properties: []engine.Property{
		{Name: "TAGS", Value: "t"}, {Name: "KEYS", Value: fmt.Sprintf("k%d", i)}, {Name: "UNIQ_KEY", Value: fmt.Sprintf("U%08d", i)}}}
}

// produce puts n messages from index first and returns the results.
func produce(t testing.TB, s *engine.Store, first, n int, rng *rand.Rand) []engine.PutResult {
	t.Helper()
	var out []engine.PutResult
	for i := first; i < first+n; i++ {
		res, err := s.Put(context.Background(), message(i, 1+rng.IntN(2000)))
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		out = append(out, res)
	}
	return out
}

// waitCaughtUp waits until the slave holds, readable and dispatched,
// everything the master has, and returns that end.
func waitCaughtUp(t testing.TB, master, slave *engine.Store) int64 {
	t.Helper()
	end := master.Stats().WroteOffset // all appended, readable or not yet (a buffered backend commits later)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := master.WaitDispatched(ctx, end); err != nil {
		t.Fatalf("the master's log did not become readable up to %d: %v", end, err)
	}
	if err := slave.WaitDispatched(ctx, end); err != nil {
		t.Fatalf("the slave did not catch up to %d (at %d): %v", end, slave.MaxOffset(), err)
	}
	// The tests read the logs through CommitLogReaders, which read
	// committed bytes (uring-direct commits after its readable end).
	waitUntil(t, "both logs committed", func() bool {
		return master.CommitLogReader().End() >= end && slave.CommitLogReader().End() >= end
	})
	return end
}

func readLog(t testing.TB, s *engine.Store, from, to int64) []byte {
	t.Helper()
	buf := make([]byte, to-from)
	if n, err := s.CommitLogReader().ReadAt(buf, from); int64(n) != to-from {
		t.Fatalf("read the CommitLog [%d,%d): %d bytes, %v", from, to, n, err)
	}
	return buf
}

// sameLog checks that the slave's CommitLog equals the master's from the
// slave's first offset to its end.
func sameLog(t testing.TB, master, slave *engine.Store) {
	t.Helper()
	from, to := slave.MinOffset(), slave.MaxOffset()
	a, b := readLog(t, master, from, to), readLog(t, slave, from, to)
	if !bytes.Equal(a, b) {
		i := 0
		for i < len(a) && a[i] == b[i] {
			i++
		}
		t.Fatalf("the slave's CommitLog differs from the master's at %d ([%d,%d))", from+int64(i), from, to)
	}
}

// consumeWhileReplicating long-polls every queue of the slave and checks
// each message against the master's bytes until stop; it returns how many
// it read.
func consumeWhileReplicating(master, slave *engine.Store, stop <-chan struct{}) (int, error) {
	next := make([]int64, 3)
	read := 0
	for {
		for q := range next {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			res, err := slave.GetLongPoll(ctx, "g", "HA", int32(q), next[q], 16, nil)
			cancel()
			if err != nil {
				return read, err
			}
			for i := range res.Messages {
				raw, err := res.Raw(i)
				m := res.Messages[i]
				if err == nil && !bytes.Equal(raw, readLogAt(master, m.PhysicalOffset, int64(m.Size))) {
					err = fmt.Errorf("the slave's message at %d differs from the master's", m.PhysicalOffset)
				}
				if err != nil {
					res.Release()
					return read, err
				}
				read++
			}
			if res.Status == engine.Found {
				next[q] = res.NextBeginOffset
			}
			res.Release()
		}
		select {
		case <-stop:
			return read, nil
		default:
		}
	}
}

func readLogAt(s *engine.Store, off, n int64) []byte {
	buf := make([]byte, n)
	s.CommitLogReader().ReadAt(buf, off)
	return buf
}

// TestReplicationForEveryBackendPair: a master streams over TCP (sendfile
// from the segment where the backend allows it) to a slave while producers
// write and a consumer reads the slave; the slave ends byte-identical, for
// every pair of registered backends, and verifies.
func TestReplicationForEveryBackendPair(t *testing.T) {
	for _, mb := range engine.BackendNames() {
		for _, sb := range engine.BackendNames() {
			t.Run(mb+"->"+sb, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(len(mb)), uint64(len(sb))))
				master := open(t, t.TempDir(), engine.Options{Backend: mb})
				defer master.Close()
				slave := open(t, t.TempDir(), engine.Options{Backend: sb, Role: engine.Slave})
				defer slave.Close()
				produce(t, master, 0, 40, rng) // history before the slave
				m := startMaster(t, master, fastMaster)
				defer m.Close()
				rs := startSlave(t, slave, m.Addr().String(), fastSlave)
				stop := make(chan struct{})
				consumed := make(chan error, 1)
				go func() { _, err := consumeWhileReplicating(master, slave, stop); consumed <- err }()
				produce(t, master, 40, 80, rng)
				waitCaughtUp(t, master, slave)
				close(stop)
				if err := <-consumed; err != nil {
					t.Fatal(err)
				}
				if err := rs.stop(); err != nil {
					t.Fatalf("slave: %v", err)
				}
				sameLog(t, master, slave)
				if slave.MinOffset() != 0 || slave.MaxOffset() != master.MaxOffset() {
					t.Fatalf("slave [%d,%d), master [%d,%d)", slave.MinOffset(), slave.MaxOffset(), master.MinOffset(), master.MaxOffset())
				}
				rep, err := slave.Verify(context.Background())
				if err != nil || len(rep.Problems) > 0 {
					t.Fatalf("verify the slave: %v %v", err, rep.Problems)
				}
			})
		}
	}
}

// TestSyncMaster: with a slave connected every Put is PUT_OK and its
// record is on the slave when Put returns; with the slave gone Puts get
// FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE, never PUT_OK, and the records
// stay on the master; the slave, back, catches up and Puts are PUT_OK again.
func TestSyncMaster(t *testing.T) {
	ctx := context.Background()
	for _, flush := range []engine.FlushMode{engine.FlushAsync, engine.FlushSync} {
		t.Run(flush.String(), func(t *testing.T) {
			master := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.SyncMaster, FlushMode: flush,
				SlaveTimeout: 300 * time.Millisecond})
			defer master.Close()
			slave := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.Slave})
			defer slave.Close()
			m := startMaster(t, master, fastMaster)
			defer m.Close()
			rs := startSlave(t, slave, m.Addr().String(), fastSlave)
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := m.WaitSlaves(wctx, 1); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for p := 0; p < 4; p++ {
				wg.Add(1)
				go func(p int) {
					defer wg.Done()
					for i := 0; i < 40; i++ {
						res, err := master.Put(ctx, message(p*100+i, 1+(p*7919+i*104729)%1000))
						if err != nil {
							errs <- fmt.Errorf("put with a slave: %v %w", res.Status, err)
							return
						}
						end := res.PhysicalOffset + int64(res.Size)
						if held := slave.Stats().WroteOffset; held < end {
							errs <- fmt.Errorf("PUT_OK for a record ending at %d; the slave holds up to %d", end, held)
						}
					}
				}(p)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			// The slave goes away.
			if err := rs.stop(); err != nil {
				t.Fatal(err)
			}
			held := slave.Stats().WroteOffset
			statuses := map[engine.PutStatus]int{}
			for i := 0; i < 5; i++ {
				res, err := master.Put(ctx, message(1000+i, 100))
				statuses[res.Status]++
				switch {
				case res.Status == engine.PutOK:
					t.Fatalf("PUT_OK without a slave (slave holds up to %d)", held)
				case !errors.Is(err, engine.ErrFlushSlaveTimeout) && !errors.Is(err, engine.ErrSlaveNotAvailable):
					t.Fatalf("put without a slave: %v %v", res.Status, err)
				case res.Size == 0:
					t.Fatal("the record is not on the master")
				}
			}
			t.Logf("without the slave: %v", statuses)
			// Back: it catches up from where it was, and PUT_OK returns.
			rs = startSlave(t, slave, m.Addr().String(), fastSlave)
			defer rs.stop()
			waitCaughtUp(t, master, slave)
			if res, err := master.Put(ctx, message(2000, 100)); res.Status != engine.PutOK {
				t.Fatalf("with the slave back: %v %v", res.Status, err)
			}
			sameLog(t, master, slave)
			if st := rs.Status(); st.Connects != 1 || !st.Connected {
				t.Fatalf("slave status %+v", st)
			}
		})
	}
}

// TestEmptySlaveStart: an empty slave copies the master's whole CommitLog
// by default, and from the master's newest segment with
// StartAtLastSegment; either way it then follows byte for byte.
func TestEmptySlaveStart(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 3))
	master := open(t, t.TempDir(), engine.Options{Backend: "mmap"})
	defer master.Close()
	produce(t, master, 0, 200, rng)
	seg := master.CommitLogReader().SegmentSizeBytes()
	lastSeg := master.MaxOffset() - master.MaxOffset()%seg
	if lastSeg < 3*seg {
		t.Fatalf("only %d segments of history", lastSeg/seg+1)
	}
	for _, c := range []struct {
		start EmptySlaveStart
		from  int64
	}{{StartAtMinOffset, 0}, {StartAtLastSegment, lastSeg}} {
		t.Run(c.start.String(), func(t *testing.T) {
			o := fastMaster
			o.EmptySlaveStart = c.start
			m := startMaster(t, master, o)
			defer m.Close()
			slave := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.Slave})
			defer slave.Close()
			rs := startSlave(t, slave, m.Addr().String(), fastSlave)
			defer rs.stop()
			waitCaughtUp(t, master, slave)
			if slave.MinOffset() != c.from {
				t.Fatalf("the slave starts at %d, want %d", slave.MinOffset(), c.from)
			}
			sameLog(t, master, slave)
			rep, err := slave.Verify(context.Background())
			if err != nil || len(rep.Problems) > 0 {
				t.Fatalf("verify: %v %v", err, rep.Problems)
			}
		})
	}
}

// TestDroppedAndBlackholedConnections: through a proxy, a dropped
// connection and a black-holed one (both sides silent) are noticed by both
// sides (housekeeping), the slave connects again and resumes, and it ends
// byte-identical. A SYNC_MASTER Put meanwhile never gets PUT_OK.
func TestDroppedAndBlackholedConnections(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(4, 5))
	master := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.SyncMaster, SlaveTimeout: 200 * time.Millisecond})
	defer master.Close()
	slave := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.Slave})
	defer slave.Close()
	m := startMaster(t, master, fastMaster)
	defer m.Close()
	proxy, err := tcpproxy.New("127.0.0.1:0", m.Addr().String(), tcpproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	rs := startSlave(t, slave, proxy.Addr(), fastSlave)
	defer rs.stop()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := m.WaitSlaves(wctx, 1); err != nil {
		t.Fatal(err)
	}
	putOK := func(i int) {
		t.Helper()
		res, err := master.Put(ctx, message(i, 1+rng.IntN(1500)))
		if res.Status != engine.PutOK {
			t.Fatalf("put %d: %v %v", i, res.Status, err)
		}
	}
	for i := 0; i < 30; i++ {
		putOK(i)
	}

	// Dropped.
	if n := proxy.Drop(); n != 1 {
		t.Fatalf("dropped %d connections", n)
	}
	waitUntil(t, "the slave connects again", func() bool { return rs.Status().Connects >= 2 && reportedSlaves(m) == 1 })
	for i := 30; i < 60; i++ {
		putOK(i)
	}

	// Black-holed: nothing passes, nothing is closed.
	proxy.Blackhole(true)
	for i := 60; i < 63; i++ {
		if res, _ := master.Put(ctx, message(i, 100)); res.Status == engine.PutOK {
			t.Fatal("PUT_OK through a black hole")
		}
	}
	waitUntil(t, "the master drops the silent slave", func() bool { return len(m.Slaves()) == 0 })
	waitUntil(t, "the slave drops the silent master", func() bool { return !rs.Status().Connected })
	if res, err := master.Put(ctx, message(63, 100)); res.Status != engine.SlaveNotAvailable {
		t.Fatalf("with no slave: %v %v", res.Status, err)
	}
	proxy.Blackhole(false)
	waitUntil(t, "the slave is back", func() bool { return reportedSlaves(m) == 1 && rs.Status().Connected })
	for i := 64; i < 80; i++ {
		putOK(i)
	}
	waitCaughtUp(t, master, slave)
	sameLog(t, master, slave)
	if rs.Status().Connects < 3 {
		t.Fatalf("connects %d", rs.Status().Connects)
	}
}

// reportedSlaves counts the connected slaves whose first report was
// accepted (those a SYNC_MASTER Put waits for).
func reportedSlaves(m *Master) int {
	n := 0
	for _, s := range m.Slaves() {
		if s.RequestedOffset >= 0 {
			n++
		}
	}
	return n
}

func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSmallFramesSplitRecords: frames far smaller than the records split
// every one of them; readers of the slave never see a partial record and
// the slave ends byte-identical.
func TestSmallFramesSplitRecords(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 7))
	master := open(t, t.TempDir(), engine.Options{Backend: "mmap"})
	defer master.Close()
	slave := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.Slave})
	defer slave.Close()
	o := fastMaster
	o.TransferBatchSize = 97
	m := startMaster(t, master, o)
	defer m.Close()
	rs := startSlave(t, slave, m.Addr().String(), fastSlave)
	defer rs.stop()
	stop := make(chan struct{})
	consumed := make(chan error, 1)
	var read int
	go func() {
		var err error
		read, err = consumeWhileReplicating(master, slave, stop)
		consumed <- err
	}()
	produce(t, master, 0, 100, rng)
	waitCaughtUp(t, master, slave)
	close(stop)
	if err := <-consumed; err != nil {
		t.Fatal(err)
	}
	sameLog(t, master, slave)
	frames := uint64(0)
	for _, s := range m.Slaves() {
		frames = s.Frames
	}
	if frames < uint64(master.MaxOffset()/97) {
		t.Fatalf("%d frames for %d bytes", frames, master.MaxOffset())
	}
	t.Logf("%d frames, %d messages read from the slave while it replicated", frames, read)
}

// crashMaster replicates to the slave a master whose newest records are
// not flushed, then cuts the master's power (the MemFS keeps only flushed
// bytes, as a power loss does) and opens it again; writeAfter more records
// are then put (other records at offsets the slave holds). It returns the
// reopened master and where its CommitLog ended right after the crash.
func crashMaster(t *testing.T, slave *engine.Store, writeAfter int) (*engine.Store, int64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(8, uint64(writeAfter)))
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	dir := t.TempDir()
	o := engine.Options{BackendImpl: fs, FlushInterval: time.Hour, FlushThoroughInterval: time.Hour, FlushLeastPages: 1 << 20,
		ConsumeQueueFlushInterval: time.Hour, ConsumeQueueFlushThoroughInterval: time.Hour}
	master := open(t, dir, o)
	produce(t, master, 0, 80, rng)
	if err := master.Close(); err != nil { // flushed: these survive the crash
		t.Fatal(err)
	}
	master = open(t, dir, o)
	produce(t, master, 80, 25, rng) // not flushed (unless a segment fills)
	m := startMaster(t, master, fastMaster)
	rs := startSlave(t, slave, m.Addr().String(), fastSlave)
	waitCaughtUp(t, master, slave)
	if err := rs.stop(); err != nil {
		t.Fatal(err)
	}
	m.Close()
	fs.Crash(mappedfile.TornNone, rng)
	// The store's own files (abort, checkpoint) live in the MemFS too and
	// went through the crash with it; Close only stops the dead store's
	// goroutines and drops its lock, then the file system comes back up.
	master.Close()
	fs.Restart()
	master = open(t, dir, o)
	crashEnd := master.MaxOffset()
	if crashEnd >= slave.MaxOffset() || crashEnd%(64<<10) == 0 {
		t.Fatalf("want a crash that cuts the master's last segment: master %d, slave %d", crashEnd, slave.MaxOffset())
	}
	if writeAfter > 0 {
		produce(t, master, 1000, writeAfter, rng) // other records at offsets the slave holds
	}
	return master, crashEnd
}

// TestDivergedSlaveIsRefusedAndRepaired: after a master crash lost a tail
// the slave holds, the slave is refused — whether the master is now behind
// it or has written other records at those offsets — with an error naming
// both offsets and the repair, and its data is untouched. FindDivergence
// finds the master's crash point, TruncateCommitLog cuts the slave there,
// and the slave then follows the master byte for byte.
func TestDivergedSlaveIsRefusedAndRepaired(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name       string
		writeAfter int
	}{{"master behind", 0}, {"master rewrote", 40}} {
		t.Run(c.name, func(t *testing.T) {
			slaveFS := mappedfile.NewMemFS(mappedfile.MemOptions{})
			slaveDir := t.TempDir()
			so := engine.Options{BackendImpl: slaveFS, Role: engine.Slave}
			slave := open(t, slaveDir, so)
			master, crashEnd := crashMaster(t, slave, c.writeAfter)
			defer master.Close()
			slaveEnd := slave.MaxOffset()
			before := readLog(t, slave, 0, slaveEnd)
			m := startMaster(t, master, fastMaster)
			defer m.Close()
			rs := startSlave(t, slave, m.Addr().String(), fastSlave)
			var err error
			select {
			case err = <-rs.done:
			case <-time.After(20 * time.Second):
				rs.stop()
				t.Fatal("the diverged slave was not refused")
			}
			msg := fmt.Sprint(err)
			if !errors.Is(err, ErrDiverged) || !strings.Contains(msg, fmt.Sprint(slaveEnd)) || !strings.Contains(msg, "repair-slave") ||
				(c.writeAfter == 0 && !strings.Contains(msg, fmt.Sprintf("ends at %d", crashEnd))) {
				t.Fatalf("refusal: %v", err)
			}
			t.Logf("refused: %v", err)
			if slave.MaxOffset() != slaveEnd || !bytes.Equal(readLog(t, slave, 0, slaveEnd), before) {
				t.Fatal("the refused slave's CommitLog changed")
			}
			// The repair.
			d, err := FindDivergence(ctx, slave, m.Addr().String(), fastSlave)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("divergence %+v", d)
			if !d.Diverged || d.SlaveEnd != slaveEnd || d.Offset != crashEnd {
				t.Fatalf("divergence %+v; the master's crash left it at %d", d, crashEnd)
			}
			if err := slave.Close(); err != nil {
				t.Fatal(err)
			}
			res, err := engine.TruncateCommitLog(ctx, slaveDir, d.Offset, storeOptions(so))
			if err != nil || res.Offset != d.Offset || res.CutBytes != slaveEnd-d.Offset {
				t.Fatalf("truncate: %+v %v", res, err)
			}
			slave = open(t, slaveDir, so)
			defer slave.Close()
			rs = startSlave(t, slave, m.Addr().String(), fastSlave)
			defer rs.stop()
			produce(t, master, 5000, 10, rand.New(rand.NewPCG(9, 9)))
			waitCaughtUp(t, master, slave)
			sameLog(t, master, slave)
			if slave.MaxOffset() != master.MaxOffset() {
				t.Fatalf("slave at %d, master at %d", slave.MaxOffset(), master.MaxOffset())
			}
		})
	}
}

// TestRestarts: a master that restarts (cleanly) and a slave that
// restarts are both resumed from; the slave reports its newest record
// first and compares it.
func TestRestarts(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	mdir, sdir := t.TempDir(), t.TempDir()
	mo := engine.Options{Backend: "mmap"}
	so := engine.Options{Backend: "transient", Role: engine.Slave}
	master := open(t, mdir, mo)
	slave := open(t, sdir, so)
	m := startMaster(t, master, fastMaster)
	rs := startSlave(t, slave, m.Addr().String(), fastSlave)
	produce(t, master, 0, 60, rng)
	waitCaughtUp(t, master, slave)

	// The master restarts; the slave keeps trying and resumes.
	m.Close()
	master.Close()
	master = open(t, mdir, mo)
	defer master.Close()
	m = startMaster(t, master, MasterOptions{ListenAddr: m.Addr().String(), SendHeartbeatInterval: 100 * time.Millisecond,
		HousekeepingInterval: time.Second, Logger: quiet})
	defer m.Close()
	produce(t, master, 60, 30, rng)
	waitCaughtUp(t, master, slave)
	if st := rs.Status(); st.Connects < 2 {
		t.Fatalf("slave status %+v", st)
	}

	// The slave restarts.
	if err := rs.stop(); err != nil {
		t.Fatal(err)
	}
	end := slave.MaxOffset()
	slave.Close()
	slave = open(t, sdir, so)
	defer slave.Close()
	rs = startSlave(t, slave, m.Addr().String(), fastSlave)
	defer rs.stop()
	produce(t, master, 90, 30, rng)
	waitCaughtUp(t, master, slave)
	sameLog(t, master, slave)
	var requested int64 = -1
	for _, s := range m.Slaves() {
		requested = s.RequestedOffset
	}
	if requested <= 0 || requested >= end {
		t.Fatalf("the restarted slave asked for %d; its newest record starts before %d", requested, end)
	}
}

// TestGarbageOnTheHAPort: bytes that are not the protocol get a clear
// error on either side and touch no data.
func TestGarbageOnTheHAPort(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 13))
	master := open(t, t.TempDir(), engine.Options{Backend: "mmap"})
	defer master.Close()
	produce(t, master, 0, 20, rng)
	end := master.MaxOffset()
	var logs bytes.Buffer
	var logMu sync.Mutex
	o := fastMaster
	o.Logger = slog.New(slog.NewTextHandler(lockedWriter{&logs, &logMu}, nil))
	m := startMaster(t, master, o)
	defer m.Close()

	// An HTTP client on the master's port.
	c, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.1\r\nHost: mq\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	answer, _ := io.ReadAll(c)
	c.Close()
	if len(answer) != headerSize {
		t.Fatalf("the master answered %d bytes", len(answer))
	}
	if off, size := parseHeader(answer); off != end || size != 0 {
		t.Fatalf("the master answered a frame at %d of %d bytes; want a heartbeat at its end %d", off, size, end)
	}
	waitUntil(t, "the refusal is logged", func() bool {
		logMu.Lock()
		defer logMu.Unlock()
		return strings.Contains(logs.String(), "is it an HA slave") && strings.Contains(logs.String(), "GET / HT")
	})
	if m.Refused() != 1 || len(m.Slaves()) != 0 || master.MaxOffset() != end {
		t.Fatalf("refused %d, slaves %d, end %d", m.Refused(), len(m.Slaves()), master.MaxOffset())
	}

	// A slave pointed at something that is not an HA master.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
			c.Close()
		}
	}()
	slave := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.Slave})
	defer slave.Close()
	rs := startSlave(t, slave, ln.Addr().String(), fastSlave)
	// The status is read while the slave runs: stopping it during an
	// attempt leaves that attempt's error (context canceled) as the last.
	var st SlaveStatus
	waitUntil(t, "two attempts, the last refused", func() bool {
		st = rs.Status()
		return st.Connects >= 2 && st.LastError != ""
	})
	if err := rs.stop(); err != nil {
		t.Fatalf("a protocol error is retried, not fatal: %v", err)
	}
	if !strings.Contains(st.LastError, "is it an HA master") || slave.MaxOffset() != 0 {
		t.Fatalf("status %+v, slave end %d", st, slave.MaxOffset())
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestOptions: every bad value is refused with an error naming it.
func TestOptions(t *testing.T) {
	master := open(t, t.TempDir(), engine.Options{Backend: "mem"})
	defer master.Close()
	slave := open(t, t.TempDir(), engine.Options{Backend: "mem", Role: engine.Slave})
	defer slave.Close()
	for _, c := range []struct {
		o    MasterOptions
		want string
	}{
		{MasterOptions{ListenAddr: "127.0.0.1:0", SendHeartbeatInterval: -1}, "SendHeartbeatInterval"},
		{MasterOptions{ListenAddr: "127.0.0.1:0", SendHeartbeatInterval: time.Minute}, "must exceed"},
		{MasterOptions{ListenAddr: "127.0.0.1:0", TransferBatchSize: -5}, "TransferBatchSize"},
		{MasterOptions{ListenAddr: "127.0.0.1:0", TransferBatchSize: 8 << 20}, "TransferBatchSize"},
		{MasterOptions{ListenAddr: "nowhere"}, "ListenAddr"},
		{MasterOptions{ListenAddr: "127.0.0.1:0", EmptySlaveStart: 7}, "EmptySlaveStart"},
	} {
		if _, err := NewMaster(master, c.o); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v", c.o, err)
		}
	}
	for _, c := range []struct {
		o    SlaveOptions
		want string
	}{
		{SlaveOptions{}, "MasterAddress"},
		{SlaveOptions{MasterAddress: "nohost"}, "MasterAddress"},
		{SlaveOptions{MasterAddress: "a:1", HousekeepingInterval: time.Second}, "must exceed"},
		{SlaveOptions{MasterAddress: "a:1", ReconnectMinBackoff: time.Minute}, "ReconnectMinBackoff"},
		{SlaveOptions{MasterAddress: "a:1", MaxFrameBytes: 10}, "MaxFrameBytes"},
		{SlaveOptions{MasterAddress: "a:1", DialTimeout: -1}, "negative"},
	} {
		if _, err := NewSlave(slave, c.o); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v", c.o, err)
		}
	}
	if _, err := NewMaster(slave, fastMaster); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("a master on a slave store: %v", err)
	}
	if _, err := NewSlave(master, SlaveOptions{MasterAddress: "a:1"}); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("a slave on a master store: %v", err)
	}
	if _, err := ParseEmptySlaveStart("sometimes"); !errors.Is(err, ErrInvalidOption) {
		t.Error("a bad empty-slave start was accepted")
	}
}

// TestSlaveDiskFailure: a sync-flush slave acknowledges only what it made
// durable; when its disk fails (msync returns EIO, through the backends'
// fault seam) it acknowledges nothing more and stops with the error, and
// the SYNC_MASTER keeps serving without PUT_OK.
func TestSlaveDiskFailure(t *testing.T) {
	ctx := context.Background()
	master := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.SyncMaster, SlaveTimeout: 300 * time.Millisecond})
	defer master.Close()
	sdir := t.TempDir()
	inj := faultseam.New(t, sdir)
	slave := open(t, sdir, engine.Options{Backend: "mmap", Role: engine.Slave, FlushMode: engine.FlushSync})
	defer slave.Close()
	m := startMaster(t, master, fastMaster)
	defer m.Close()
	rs := startSlave(t, slave, m.Addr().String(), fastSlave)
	defer rs.stop()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := m.WaitSlaves(wctx, 1); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		res, err := master.Put(ctx, message(i, 500))
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		if end, durable := res.PhysicalOffset+int64(res.Size), slave.FlushedOffset(); durable < end {
			t.Fatalf("PUT_OK for a record ending at %d; the sync-flush slave has %d durable", end, durable)
		}
	}
	inj.Fail(faultseam.Rule{Kinds: []segfile.OpKind{segfile.OpMsync}, PathContains: "commitlog", Err: syscall.EIO})
	acked := master.ReplicatedOffset()
	for i := 20; i < 30; i++ {
		if res, _ := master.Put(ctx, message(i, 500)); res.Status == engine.PutOK {
			t.Fatalf("PUT_OK after the slave's disk failed (slave durable up to %d)", slave.FlushedOffset())
		}
	}
	if master.ReplicatedOffset() != acked {
		t.Fatalf("the slave acknowledged %d after its disk failed at %d", master.ReplicatedOffset(), acked)
	}
	select {
	case err := <-rs.done:
		if !errors.Is(err, syscall.EIO) {
			t.Fatalf("the slave stopped with %v; want its EIO", err)
		}
		t.Logf("the slave stopped: %v", err)
		rs.done <- err // for the deferred stop
	case <-time.After(20 * time.Second):
		t.Fatal("the slave did not stop after its disk failed")
	}
	if inj.Hits() == 0 {
		t.Fatal("no msync failed")
	}
}
