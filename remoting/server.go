package remoting

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Defaults of ServerOptions.
const (
	DefaultMaxConns = 4096
	// DefaultMaxInFlightTotal bounds the requests served at once over all
	// of a server's connections.
	DefaultMaxInFlightTotal = 16384
	// DefaultIdleTimeout is longer than the clients' 30 s heartbeat and
	// their own 120 s idle close.
	DefaultIdleTimeout = 150 * time.Second
)

// ServerOptions configure a Server; zero fields take the defaults.
type ServerOptions struct {
	Conn ConnOptions // per connection; IdleTimeout defaults to DefaultIdleTimeout
	// MaxConns bounds the open connections (4096); one more is closed at
	// once and logged.
	MaxConns int
	// MaxInFlightTotal bounds the requests served at once over all the
	// connections (16384); a connection's reader waits for a free slot.
	MaxInFlightTotal int
	// OnClose, when set, is called once per connection after it closed
	// and its handlers returned (a registry drops the client).
	OnClose func(c *Conn)
	// TLS, when set, makes the server speak TLS with this configuration
	// on every connection it accepts.
	TLS *tls.Config
	// ACL, when set, answers every request it does not authenticate with
	// NO_PERMISSION before the handler sees it.
	ACL *ACL
}

// Server accepts remoting connections and serves each with a Handler.
type Server struct {
	ln      net.Listener
	handler Handler
	opts    ServerOptions
	log     *slog.Logger

	global chan struct{}

	mu     sync.Mutex
	conns  map[*Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Listen listens on addr (host:port, TCP) and serves connections in the
// background until Close.
func Listen(addr string, h Handler, opts ServerOptions) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("remoting: listen on %s: %w", addr, err)
	}
	return Serve(ln, h, opts), nil
}

// Serve serves connections accepted from ln in the background until Close.
func Serve(ln net.Listener, h Handler, opts ServerOptions) *Server {
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.Conn.IdleTimeout == 0 {
		opts.Conn.IdleTimeout = DefaultIdleTimeout
	}
	if opts.MaxInFlightTotal <= 0 {
		opts.MaxInFlightTotal = DefaultMaxInFlightTotal
	}
	opts.Conn = opts.Conn.withDefaults()
	if opts.TLS != nil {
		ln = tls.NewListener(ln, opts.TLS)
	}
	if opts.ACL != nil {
		h = authenticated{h: h, acl: opts.ACL}
	}
	s := &Server{ln: ln, handler: h, opts: opts, log: opts.Conn.Logger, conns: map[*Conn]struct{}{},
		global: make(chan struct{}, opts.MaxInFlightTotal)}
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Conns returns the open connections.
func (s *Server) Conns() []*Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		out = append(out, c)
	}
	return out
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	var delay time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// EMFILE and the like: back off instead of spinning.
			delay = min(max(delay*2, 5*time.Millisecond), time.Second)
			s.log.Warn("remoting: accept", slog.Any("err", err), slog.Duration("retryIn", delay))
			time.Sleep(delay)
			continue
		}
		delay = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return
		}
		if len(s.conns) >= s.opts.MaxConns {
			s.mu.Unlock()
			s.log.Warn("remoting: refusing a connection: too many open", slog.String("remote", nc.RemoteAddr().String()),
				slog.Int("maxConns", s.opts.MaxConns))
			nc.Close()
			continue
		}
		c := newConn(nc, s.handler, s.opts.Conn)
		c.global = s.global
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.run(c)
	}
}

func (s *Server) run(c *Conn) {
	defer s.wg.Done()
	c.readLoop()
	c.closeWith(nil)
	c.handlers.Wait()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	if s.opts.OnClose != nil {
		s.opts.OnClose(c)
	}
}

// Close stops accepting, closes every connection (held requests see their
// context end) and waits for their handlers to return.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	err := s.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	s.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Broadcast is a helper for server-to-client requests: it sends req oneway
// on c with a fresh opaque, logging (not returning) a failure.
func Broadcast(ctx context.Context, log *slog.Logger, conns []*Conn, req func() *Command) {
	for _, c := range conns {
		if err := c.InvokeOneway(ctx, req()); err != nil {
			log.Debug("remoting: notify", slog.String("remote", c.RemoteAddr().String()), slog.Any("err", err))
		}
	}
}
