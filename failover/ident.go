package failover

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mqstore/mqstore/internal/handoff"
)

// The HA protocol names a slave connection by its TCP address, and the
// engine's in-sync set is kept by that name; the controller's in-sync set
// is kept by broker id. So that a master can tell the controller which
// brokers are in sync, each slave connection starts with a 12-byte
// identity preamble — "MQFI" and the slave's broker id (int64, big-endian)
// — and the master's listener names the connection "broker-ID/host:port".
// The slave's HA client dials a loopback forwarder of its own broker,
// which connects to the master, writes the preamble and then copies bytes
// both ways.
const (
	identMagic      = "MQFI"
	identSize       = 12
	identTimeout    = 2 * time.Second
	identAddrPrefix = "broker-"
)

// idOfAddr returns the broker id of a connection name made by the
// identifying listener, and false for any other name.
func idOfAddr(addr string) (int64, bool) {
	rest, ok := strings.CutPrefix(addr, identAddrPrefix)
	if !ok {
		return 0, false
	}
	n, _, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(n, 10, 64)
	return id, err == nil && id > 0
}

type identAddr struct {
	id   int64
	peer net.Addr
}

func (a identAddr) Network() string { return a.peer.Network() }
func (a identAddr) String() string  { return fmt.Sprintf("%s%d/%s", identAddrPrefix, a.id, a.peer) }

type identConn struct {
	net.Conn
	addr identAddr
}

func (c *identConn) RemoteAddr() net.Addr { return c.addr }

// listenHA opens a broker's HA socket, open for the broker's life so the
// address it registered stays valid across role changes. While the broker
// is master, connections that identified themselves go to the term (the
// listener the HA master serves); otherwise they are closed.
func listenHA(addr string, log *slog.Logger) (*handoff.Socket, error) {
	s, err := handoff.Listen(addr, func(c net.Conn) (net.Conn, bool) { return identify(c, log) }, log)
	if err != nil {
		return nil, fmt.Errorf("failover: HA: %w", err)
	}
	return s, nil
}

// identify reads a slave connection's identity preamble and names the
// connection by it; a connection without one is closed.
func identify(c net.Conn, log *slog.Logger) (net.Conn, bool) {
	var pre [identSize]byte
	c.SetReadDeadline(time.Now().Add(identTimeout))
	if _, err := io.ReadFull(c, pre[:]); err != nil || string(pre[:4]) != identMagic {
		log.Warn("failover: HA connection without a broker identity closed", "peer", c.RemoteAddr(), "err", err)
		c.Close()
		return nil, false
	}
	c.SetReadDeadline(time.Time{})
	id := int64(binary.BigEndian.Uint64(pre[4:]))
	if id <= 0 {
		log.Warn("failover: HA connection with a bad broker id closed", "peer", c.RemoteAddr(), "id", id)
		c.Close()
		return nil, false
	}
	return &identConn{Conn: c, addr: identAddr{id: id, peer: c.RemoteAddr()}}, true
}

// forwarder is a slave's side of the identity: its HA client dials the
// forwarder, which connects to the master, sends the preamble and copies.
type forwarder struct {
	ln     net.Listener
	target string
	id     int64
	log    *slog.Logger

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newForwarder(target string, id int64, log *slog.Logger) (*forwarder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("failover: forwarder listen: %w", err)
	}
	f := &forwarder{ln: ln, target: target, id: id, log: log, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	return f, nil
}

func (f *forwarder) Addr() string { return f.ln.Addr().String() }

func (f *forwarder) Close() error {
	err := f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.wg.Wait()
	return err
}

func (f *forwarder) track(c net.Conn, on bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !on {
		if f.conns != nil {
			delete(f.conns, c)
		}
		return true
	}
	if f.conns == nil {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *forwarder) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.forward(c)
		}()
	}
}

func (f *forwarder) forward(down net.Conn) {
	defer down.Close()
	ctx, cancel := context.WithTimeout(context.Background(), identTimeout)
	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp", f.target)
	cancel()
	if err != nil {
		f.log.Debug("failover: connect to the master's HA address", "addr", f.target, "err", err)
		return
	}
	defer up.Close()
	if tc, ok := up.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if !f.track(down, true) || !f.track(up, true) {
		return
	}
	defer f.track(down, false)
	defer f.track(up, false)
	var pre [identSize]byte
	copy(pre[:], identMagic)
	binary.BigEndian.PutUint64(pre[4:], uint64(f.id))
	if _, err := up.Write(pre[:]); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, down)
	go pipe(down, up)
	<-done
	up.Close()
	down.Close()
	<-done
}
