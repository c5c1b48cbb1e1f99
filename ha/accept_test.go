package ha

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine"
)

// failingListener fails its first fails Accepts with EMFILE, as a
// process out of descriptors does.
type failingListener struct {
	net.Listener
	mu    sync.Mutex
	fails int
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.fails > 0 {
		l.fails--
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// TestAcceptErrorsAreRetried: Accepts that fail with EMFILE are retried
// with a backoff; the slave that connects meanwhile is served.
func TestAcceptErrorsAreRetried(t *testing.T) {
	master := open(t, t.TempDir(), engine.Options{Backend: "mmap"})
	defer master.Close()
	produce(t, master, 0, 20, rand.New(rand.NewPCG(30, 31)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := fastMaster
	o.Listener = &failingListener{Listener: ln, fails: 4}
	m := startMaster(t, master, o)
	defer m.Close()
	slave := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.Slave})
	defer slave.Close()
	rs := startSlave(t, slave, m.Addr().String(), fastSlave)
	defer rs.stop()
	waitCaughtUp(t, master, slave)
	sameLog(t, master, slave)
	if n := m.AcceptErrors(); n != 4 {
		t.Fatalf("%d accept errors counted, want 4", n)
	}
}

// TestConnectionCap: beyond MaxConnections a connection is closed at
// once; a slot freed is used again.
func TestConnectionCap(t *testing.T) {
	master := open(t, t.TempDir(), engine.Options{Backend: "mmap"})
	defer master.Close()
	produce(t, master, 0, 20, rand.New(rand.NewPCG(32, 33)))
	end := master.CommitLogReader().End()
	o := fastMaster
	o.SendHeartbeatInterval, o.HousekeepingInterval = 5*time.Second, time.Minute // the held peers stay
	o.MaxConnections = 2
	m := startMaster(t, master, o)
	defer m.Close()
	held := []net.Conn{rawReport(t, m.Addr().String(), end), rawReport(t, m.Addr().String(), end)}
	waitUntil(t, "two connections held", func() bool { return len(m.Slaves()) == 2 })
	extra := rawReport(t, m.Addr().String(), end)
	extra.SetReadDeadline(time.Now().Add(20 * time.Second))
	// Closed with the report unread: a reset, or an end of file.
	if n, err := io.Copy(io.Discard, extra); (err != nil && !errors.Is(err, syscall.ECONNRESET)) || n != 0 {
		t.Fatalf("the connection beyond the cap read %d bytes, %v; want it closed at once", n, err)
	}
	if m.Refused() != 1 {
		t.Fatalf("refused %d", m.Refused())
	}
	held[0].Close()
	waitUntil(t, "the slot is freed", func() bool { return len(m.Slaves()) == 1 })
	slave := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.Slave})
	defer slave.Close()
	so := fastSlave
	so.SendHeartbeatInterval, so.HousekeepingInterval = 5*time.Second, time.Minute
	rs := startSlave(t, slave, m.Addr().String(), so)
	defer rs.stop()
	waitCaughtUp(t, master, slave)
}

// TestSilentPeerIsDropped: a peer that connects and never reports is
// dropped after a heartbeat interval, not held for the housekeeping one.
func TestSilentPeerIsDropped(t *testing.T) {
	master := open(t, t.TempDir(), engine.Options{Backend: "mmap"})
	defer master.Close()
	o := fastMaster
	o.HousekeepingInterval = time.Minute
	m := startMaster(t, master, o)
	defer m.Close()
	c, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := io.Copy(io.Discard, c); err != nil || n != 0 {
		t.Fatalf("a silent peer read %d bytes, %v; want the connection closed", n, err)
	}
	waitUntil(t, "the refusal counted", func() bool { return m.Refused() == 1 })
}

// TestRefusalsAreRateLimited: a flood of peers that are not slaves is
// logged at a bounded rate, each refused.
func TestRefusalsAreRateLimited(t *testing.T) {
	master := open(t, t.TempDir(), engine.Options{Backend: "mmap"})
	defer master.Close()
	var logs bytes.Buffer
	var logMu sync.Mutex
	o := fastMaster
	o.Logger = slog.New(slog.NewTextHandler(lockedWriter{&logs, &logMu}, nil))
	m := startMaster(t, master, o)
	defer m.Close()
	const peers = 40
	for i := 0; i < peers; i++ {
		c, err := net.Dial("tcp", m.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		io.Copy(io.Discard, c)
		c.Close()
	}
	waitUntil(t, "every peer refused", func() bool { return m.Refused() == peers })
	logMu.Lock()
	lines := strings.Count(logs.String(), "refused")
	logMu.Unlock()
	if lines > 10 {
		t.Fatalf("%d log lines for %d refused peers", lines, peers)
	}
	t.Logf("%d lines for %d refused peers", lines, peers)
}

// TestBadMasterBacksOff: a "master" that sends a frame of garbage on every
// connection does not reset the slave's reconnect backoff; the slave
// retries ever more slowly, up to its maximum backoff.
func TestBadMasterBacksOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var accepted []time.Time
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, time.Now())
			mu.Unlock()
			var rep [reportSize]byte
			io.ReadFull(c, rep[:])
			var frame [headerSize + 64]byte
			putHeader(frame[:], 0, 64)
			binary.BigEndian.PutUint32(frame[headerSize:], 64) // a TOTALSIZE, then no record magic
			c.Write(frame[:])
			c.Close()
		}
	}()
	slave := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.Slave})
	defer slave.Close()
	rs := startSlave(t, slave, ln.Addr().String(), fastSlave)
	waitUntil(t, "8 attempts", func() bool { return rs.Status().Connects >= 8 })
	if err := rs.stop(); err != nil {
		t.Fatalf("bad data is retried, not fatal: %v", err)
	}
	st := rs.Status()
	t.Logf("last error: %s", st.LastError)
	if st.Backoff != fastSlave.ReconnectMaxBackoff {
		t.Fatalf("backoff %v after %d failed sessions; want the maximum %v", st.Backoff, st.Connects, fastSlave.ReconnectMaxBackoff)
	}
	// The slave counts a connect once its dial returns, which can be
	// before this listener's goroutine has recorded the accept.
	waitUntil(t, "8 accepts recorded", func() bool { mu.Lock(); defer mu.Unlock(); return len(accepted) >= 8 })
	mu.Lock()
	defer mu.Unlock()
	if gap := accepted[7].Sub(accepted[6]); gap < fastSlave.ReconnectMaxBackoff {
		t.Fatalf("the 8th attempt came %v after the 7th; the backoff should have reached %v", gap, fastSlave.ReconnectMaxBackoff)
	}
}
