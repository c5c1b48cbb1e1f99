package tcpproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer echoes every connection until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func dialProxy(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func roundTrip(t *testing.T, c net.Conn, msg []byte) {
	t.Helper()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo through the proxy: %q, %v", got, err)
	}
}

func TestForwardsAndDelays(t *testing.T) {
	p, err := New("127.0.0.1:0", echoServer(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dialProxy(t, p)
	big := bytes.Repeat([]byte("0123456789"), 100_000) // 1 MB: many chunks, in order
	go c.Write(big)
	got := make([]byte, len(big))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("1 MB through the proxy: %v", err)
	}
	const d = 30 * time.Millisecond
	p.SetDelay(d)
	start := time.Now()
	roundTrip(t, c, []byte("ping"))
	// A lower bound only: load can make it slower, never faster.
	if rtt := time.Since(start); rtt < 2*d {
		t.Fatalf("round trip %v with a one-way delay of %v", rtt, d)
	}
}

func TestDropBlackholeRefuse(t *testing.T) {
	p, err := New("127.0.0.1:0", echoServer(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dialProxy(t, p)
	roundTrip(t, c, []byte("a"))

	// Black hole: nothing passes, nothing is closed; lifted, it all goes on.
	p.Blackhole(true)
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := c.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through a black hole: %d bytes, %v", n, err)
	}
	if p.Conns() != 1 {
		t.Fatalf("%d connections", p.Conns())
	}
	p.Blackhole(false)
	got := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "held" {
		t.Fatalf("after the black hole: %q %v", got, err)
	}

	// Drop: the client sees the end of the connection.
	if n := p.Drop(); n != 1 {
		t.Fatalf("dropped %d", n)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read from a dropped connection succeeded")
	}

	// Refuse: new connections are closed at once.
	p.Refuse(true)
	c2 := dialProxy(t, p)
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Fatal("a refused connection delivered bytes")
	}
	p.Refuse(false)
	roundTrip(t, dialProxy(t, p), []byte("back"))
}

func TestBadOptions(t *testing.T) {
	if _, err := New("127.0.0.1:0", "nowhere", Options{}); err == nil {
		t.Fatal("a target without a port was accepted")
	}
	if _, err := New("127.0.0.1:0", "127.0.0.1:1", Options{Delay: -time.Second}); err == nil {
		t.Fatal("a negative delay was accepted")
	}
}

// TestCut: a cut holds only the connections whose first bytes contain
// its pattern, open ones and new ones, both ways; healed, their bytes go
// on.
func TestCut(t *testing.T) {
	p, err := New("127.0.0.1:0", echoServer(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a, b := dialProxy(t, p), dialProxy(t, p)
	roundTrip(t, a, []byte("from-A hello"))
	roundTrip(t, b, []byte("from-B hello"))
	p.Cut("a", []byte("-A "))
	held := func(c net.Conn, msg string) {
		t.Helper()
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, err := c.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read through a cut: %d bytes, %v", n, err)
		}
	}
	held(a, "more")
	roundTrip(t, b, []byte("still"))
	a2 := dialProxy(t, p)
	held(a2, "from-A again")
	roundTrip(t, dialProxy(t, p), []byte("from-C"))
	p.Heal("a")
	got := make([]byte, 4)
	a.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(a, got); err != nil || string(got) != "more" {
		t.Fatalf("after the cut healed: %q %v", got, err)
	}
	got = make([]byte, len("from-A again"))
	a2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(a2, got); err != nil || string(got) != "from-A again" {
		t.Fatalf("a new connection after the cut healed: %q %v", got, err)
	}
}
