package remoting

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startServer(t *testing.T, h Handler, opts ServerOptions) *Server {
	t.Helper()
	opts.Conn.Logger = quietLogger()
	s, err := Listen("127.0.0.1:0", h, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func dial(t *testing.T, s *Server, h Handler) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), s.Addr().String(), h, ConnOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func deadline(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A request that blocks does not hold up the connection's next one, and
// the responses come back by opaque in whatever order they finish.
func TestConcurrentDispatchOnOneConnection(t *testing.T) {
	release := make(chan struct{})
	s := startServer(t, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		if req.Code == 1 {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		resp := NewResponse(req, 0, "")
		resp.Set("code", req.Field("n"))
		return resp
	}), ServerOptions{})
	c := dial(t, s, nil)
	ctx := deadline(t)
	held := make(chan *Command, 1)
	go func() {
		resp, err := c.Invoke(ctx, NewRequest(1, map[string]string{"n": "held"}, nil))
		if err != nil {
			t.Error(err)
		}
		held <- resp
	}()
	for i := range 20 {
		resp, err := c.Invoke(ctx, NewRequest(2, map[string]string{"n": "quick"}, nil))
		if err != nil || resp.Field("code") != "quick" || !resp.IsResponse() {
			t.Fatalf("request %d behind a held one: %v %+v", i, err, resp)
		}
	}
	close(release)
	if resp := <-held; resp == nil || resp.Field("code") != "held" {
		t.Fatalf("held request answered %+v", resp)
	}
}

func TestAnswersInTheRequestsSerializeType(t *testing.T) {
	s := startServer(t, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		return NewResponse(req, 0, "ok")
	}), ServerOptions{})
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	frame, _ := AppendFrame(nil, &Command{Code: 34, Opaque: 9, Language: "JAVA", SerializeType: SerializeRocketMQ})
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := ReadFrame(nc, 0)
	if err != nil {
		t.Fatal(err)
	}
	if resp.SerializeType != SerializeRocketMQ || resp.Opaque != 9 || !resp.IsResponse() || resp.Remark != "ok" {
		t.Fatalf("response %+v", resp)
	}
}

func TestServerToClientRequest(t *testing.T) {
	got := make(chan string, 1)
	s := startServer(t, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		// Ask the client something before answering.
		resp, err := c.Invoke(ctx, NewRequest(307, map[string]string{"q": "who"}, nil))
		if err != nil {
			return NewResponse(req, 1, err.Error())
		}
		got <- resp.Field("a")
		return NewResponse(req, 0, "")
	}), ServerOptions{})
	c := dial(t, s, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		resp := NewResponse(req, 0, "")
		resp.Set("a", "client:"+req.Field("q"))
		return resp
	}))
	resp, err := c.Invoke(deadline(t), NewRequest(1, nil, nil))
	if err != nil || resp.Code != 0 {
		t.Fatalf("%v %+v", err, resp)
	}
	if a := <-got; a != "client:who" {
		t.Fatalf("server got %q from the client", a)
	}
}

func TestOnewayGetsNoResponse(t *testing.T) {
	served := make(chan struct{}, 2)
	s := startServer(t, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		served <- struct{}{}
		return NewResponse(req, 0, "")
	}), ServerOptions{})
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	one, _ := AppendFrame(nil, &Command{Code: 15, Opaque: 1, Flag: FlagOneway})
	two, _ := AppendFrame(nil, &Command{Code: 15, Opaque: 2})
	nc.Write(append(one, two...))
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := ReadFrame(nc, 0)
	if err != nil || resp.Opaque != 2 {
		t.Fatalf("first response %+v %v: the oneway request (opaque 1) must not be answered", resp, err)
	}
	<-served
	<-served
}

// A bad frame drops the connection; the handler never sees it, and other
// connections go on.
func TestBadFrameDropsTheConnection(t *testing.T) {
	var served atomic.Int32
	closed := make(chan error, 4)
	s := startServer(t, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		served.Add(1)
		return NewResponse(req, 0, "")
	}), ServerOptions{OnClose: func(c *Conn) { closed <- c.Err() }, Conn: ConnOptions{MaxFrameBytes: 1 << 20}})
	for _, bad := range [][]byte{
		binary.BigEndian.AppendUint32(nil, 1<<20+1), // over the cap
		frameOf(0, []byte(`{"code":1,"extFields":{"n":1}}`), nil),
		frameOf(7, []byte(`{}`), nil),
	} {
		nc, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(bad)
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("after a bad frame the server should close the connection; read gave %v", err)
		}
		nc.Close()
		if err := <-closed; !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("connection closed with %v", err)
		}
	}
	if n := served.Load(); n != 0 {
		t.Fatalf("handler served %d bad frames", n)
	}
	c := dial(t, s, nil)
	if _, err := c.Invoke(deadline(t), NewRequest(1, nil, nil)); err != nil {
		t.Fatalf("a good connection after bad ones: %v", err)
	}
}

func TestInFlightBound(t *testing.T) {
	release := make(chan struct{})
	var running, peak atomic.Int32
	s := startServer(t, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		running.Add(-1)
		return NewResponse(req, 0, "")
	}), ServerOptions{Conn: ConnOptions{MaxInFlight: 2}})
	c := dial(t, s, nil)
	ctx := deadline(t)
	errs := make(chan error, 5)
	for range 5 {
		go func() {
			_, err := c.Invoke(ctx, NewRequest(1, nil, nil))
			errs <- err
		}()
	}
	for running.Load() < 2 {
		if ctx.Err() != nil {
			t.Fatal("two requests never ran")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	for range 5 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if p := peak.Load(); p != 2 {
		t.Fatalf("%d requests ran at once; the bound is 2", p)
	}
}

func TestServerWideInFlightBound(t *testing.T) {
	release := make(chan struct{})
	var running, peak atomic.Int32
	s := startServer(t, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		running.Add(-1)
		return NewResponse(req, 0, "")
	}), ServerOptions{MaxInFlightTotal: 3})
	ctx := deadline(t)
	errs := make(chan error, 6)
	for range 3 {
		c := dial(t, s, nil)
		for range 2 {
			go func() {
				_, err := c.Invoke(ctx, NewRequest(1, nil, nil))
				errs <- err
			}()
		}
	}
	for running.Load() < 3 {
		if ctx.Err() != nil {
			t.Fatal("three requests never ran")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	for range 6 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if p := peak.Load(); p != 3 {
		t.Fatalf("%d requests ran at once over three connections; the bound is 3", p)
	}
}

func TestConnectionBound(t *testing.T) {
	s := startServer(t, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		return NewResponse(req, 0, "")
	}), ServerOptions{MaxConns: 1})
	first := dial(t, s, nil)
	if _, err := first.Invoke(deadline(t), NewRequest(1, nil, nil)); err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("a connection over the bound should be closed; read gave %v", err)
	}
}

func TestCloseEndsHeldRequests(t *testing.T) {
	started := make(chan struct{})
	s := startServer(t, HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		close(started)
		<-ctx.Done()
		return nil
	}), ServerOptions{})
	c := dial(t, s, nil)
	errs := make(chan error, 1)
	go func() {
		_, err := c.Invoke(deadline(t), NewRequest(11, nil, nil))
		errs <- err
	}()
	<-started
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, ErrClosed) {
		t.Fatalf("a request pending when the server closed: %v", err)
	}
}
