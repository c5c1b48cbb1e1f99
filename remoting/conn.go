package remoting

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Handler answers the requests a connection receives. Each request runs on
// its own goroutine, so a handler may block (a long poll) without holding up
// the connection's other requests; ctx ends when the connection closes.
// The returned response (nil: none) is written with the request's opaque,
// the response flag and the request's serialize type; it is not written
// when the request is oneway.
type Handler interface {
	ServeRemoting(ctx context.Context, c *Conn, req *Command) *Command
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, c *Conn, req *Command) *Command

// ServeRemoting implements Handler.
func (f HandlerFunc) ServeRemoting(ctx context.Context, c *Conn, req *Command) *Command {
	return f(ctx, c, req)
}

// Defaults of ConnOptions.
const (
	DefaultMaxInFlight  = 1024
	DefaultWriteTimeout = 30 * time.Second
)

// ConnOptions configure a connection; zero fields take the defaults.
type ConnOptions struct {
	// MaxFrameBytes caps an incoming frame (16 MiB). A larger one drops
	// the connection.
	MaxFrameBytes int
	// MaxInFlight bounds the requests served at once on the connection
	// (1024); the reader waits for a free slot before reading on.
	MaxInFlight int
	// IdleTimeout closes a connection that receives nothing this long
	// (0: never).
	IdleTimeout time.Duration
	// WriteTimeout bounds one frame's write (30 s).
	WriteTimeout time.Duration
	Logger       *slog.Logger
	// TLS, when set, makes Dial speak TLS with this configuration (a
	// server's connections take ServerOptions.TLS instead).
	TLS *tls.Config
	// Credentials, when set, sign every request Invoke and InvokeOneway
	// send (RocketMQ's ACL: Sign), for a server that authenticates them.
	Credentials *Credentials
}

// Credentials are an access key and its secret key.
type Credentials struct {
	AccessKey string
	SecretKey []byte
}

func (o ConnOptions) withDefaults() ConnOptions {
	if o.MaxFrameBytes <= 0 {
		o.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Conn is one remoting connection, server or client side. Requests go
// both ways: Invoke sends one and waits for its response; the connection's
// Handler answers the peer's.
type Conn struct {
	nc      net.Conn
	opts    ConnOptions
	handler Handler
	ctx     context.Context
	cancel  context.CancelFunc

	writeMu  sync.Mutex
	writeBuf []byte

	pendingMu sync.Mutex
	pending   map[int32]chan *Command
	opaque    atomic.Int32

	slots    chan struct{}
	global   chan struct{} // the server's bound over all its connections (nil: none)
	handlers sync.WaitGroup
	done     chan struct{} // closed when the reader has stopped
	closeErr atomic.Pointer[error]
	once     sync.Once

	values sync.Map
}

func newConn(nc net.Conn, h Handler, opts ConnOptions) *Conn {
	opts = opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{nc: nc, opts: opts, handler: h, ctx: ctx, cancel: cancel, pending: map[int32]chan *Command{},
		slots: make(chan struct{}, opts.MaxInFlight), done: make(chan struct{})}
	return c
}

// Dial connects to a remoting server; h answers the server's requests
// (nil: none are expected and each is answered REQUEST_CODE_NOT_SUPPORTED).
func Dial(ctx context.Context, addr string, h Handler, opts ConnOptions) (*Conn, error) {
	var nc net.Conn
	var err error
	if opts.TLS != nil {
		d := tls.Dialer{Config: opts.TLS}
		nc, err = d.DialContext(ctx, "tcp", addr)
	} else {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("remoting: dial %s: %w", addr, err)
	}
	c := newConn(nc, h, opts)
	go c.readLoop()
	return c, nil
}

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// LocalAddr is this end's address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// Context ends when the connection closes.
func (c *Conn) Context() context.Context { return c.ctx }

// Done is closed when the connection has stopped reading (closed).
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection closed (nil while open, or after a clean
// close by the peer).
func (c *Conn) Err() error {
	if p := c.closeErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Value returns what SetValue stored under key.
func (c *Conn) Value(key any) any {
	v, _ := c.values.Load(key)
	return v
}

// SetValue attaches a value to the connection (a handler's per-connection
// state).
func (c *Conn) SetValue(key, value any) { c.values.Store(key, value) }

// Close closes the connection: held requests see their context end,
// Invoke calls fail with ErrClosed.
func (c *Conn) Close() error {
	c.closeWith(nil)
	return nil
}

func (c *Conn) closeWith(err error) {
	c.once.Do(func() {
		if err != nil {
			c.closeErr.Store(&err)
		}
		c.cancel()
		c.nc.Close()
		c.pendingMu.Lock()
		for op, ch := range c.pending {
			close(ch)
			delete(c.pending, op)
		}
		c.pendingMu.Unlock()
	})
}

// readLoop reads frames until the connection fails or closes.
func (c *Conn) readLoop() {
	defer close(c.done)
	br := bufio.NewReaderSize(c.nc, 64<<10)
	for {
		if c.opts.IdleTimeout > 0 {
			c.nc.SetReadDeadline(time.Now().Add(c.opts.IdleTimeout))
		}
		cmd, err := ReadFrame(br, c.opts.MaxFrameBytes)
		if err != nil {
			c.readFailed(err)
			return
		}
		if cmd.IsResponse() {
			c.deliver(cmd)
			continue
		}
		select {
		case c.slots <- struct{}{}:
		case <-c.ctx.Done():
			return
		}
		if c.global != nil {
			select {
			case c.global <- struct{}{}:
			case <-c.ctx.Done():
				<-c.slots
				return
			}
		}
		c.handlers.Add(1)
		go c.serve(cmd)
	}
}

func (c *Conn) readFailed(err error) {
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), c.ctx.Err() != nil:
		c.closeWith(nil)
	case errors.As(err, &ne) && ne.Timeout():
		err = fmt.Errorf("remoting: connection from %s idle for %v: %w", c.nc.RemoteAddr(), c.opts.IdleTimeout, err)
		c.opts.Logger.Info("remoting: closing idle connection", slog.String("remote", c.nc.RemoteAddr().String()))
		c.closeWith(err)
	default:
		err = fmt.Errorf("remoting: connection with %s: %w", c.nc.RemoteAddr(), err)
		if errors.Is(err, ErrMalformed) || errors.Is(err, ErrFrameTooLarge) {
			c.opts.Logger.Warn("remoting: dropping connection after a bad frame", slog.String("remote", c.nc.RemoteAddr().String()),
				slog.Any("err", err))
		}
		c.closeWith(err)
	}
}

func (c *Conn) deliver(resp *Command) {
	c.pendingMu.Lock()
	ch, ok := c.pending[resp.Opaque]
	delete(c.pending, resp.Opaque)
	c.pendingMu.Unlock()
	if !ok {
		c.opts.Logger.Debug("remoting: response for no pending request", slog.Int("opaque", int(resp.Opaque)))
		return
	}
	ch <- resp
}

func (c *Conn) serve(req *Command) {
	defer c.handlers.Done()
	defer func() {
		<-c.slots
		if c.global != nil {
			<-c.global
		}
	}()
	var resp *Command
	if c.handler == nil {
		resp = NewResponse(req, 3, fmt.Sprintf("request code %d not supported", req.Code))
	} else {
		resp = c.handler.ServeRemoting(c.ctx, c, req)
	}
	if resp == nil {
		return
	}
	if req.IsOneway() {
		if resp.Done != nil {
			resp.Done()
		}
		return
	}
	resp.Opaque = req.Opaque
	resp.Flag |= FlagResponse
	resp.SerializeType = req.SerializeType
	if err := c.Write(c.ctx, resp); err != nil && c.ctx.Err() == nil {
		c.opts.Logger.Warn("remoting: write response", slog.String("remote", c.nc.RemoteAddr().String()), slog.Any("err", err))
	}
}

// Write writes one command, whole, under the connection's write lock. A
// failed write closes the connection (a partial frame cannot be taken back).
func (c *Conn) Write(ctx context.Context, cmd *Command) error {
	if cmd.Done != nil {
		defer cmd.Done()
	}
	if c.ctx.Err() != nil {
		return fmt.Errorf("write %v to %s: %w", cmd, c.nc.RemoteAddr(), ErrClosed)
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	buf, err := AppendFrame(c.writeBuf[:0], cmd)
	if err != nil {
		return err
	}
	if cap(buf) <= 1<<20 {
		c.writeBuf = buf
	}
	c.nc.SetWriteDeadline(time.Now().Add(c.opts.WriteTimeout))
	if _, err := c.nc.Write(buf); err != nil {
		err = fmt.Errorf("write %v to %s: %w", cmd, c.nc.RemoteAddr(), err)
		c.closeWith(err)
		return err
	}
	if cmd.WriteBody != nil {
		n, err := cmd.WriteBody(ctx, c.nc)
		if err == nil && n != cmd.BodyLen {
			err = fmt.Errorf("body writer wrote %d bytes of %d", n, cmd.BodyLen)
		}
		if err != nil {
			err = fmt.Errorf("write body of %v to %s: %w", cmd, c.nc.RemoteAddr(), err)
			c.closeWith(err)
			return err
		}
	}
	return nil
}

// Invoke sends a request and waits for its response until ctx ends.
func (c *Conn) Invoke(ctx context.Context, req *Command) (*Command, error) {
	if cr := c.opts.Credentials; cr != nil {
		Sign(req, cr.AccessKey, cr.SecretKey)
	}
	req.Flag &^= FlagResponse | FlagOneway
	req.Opaque = c.opaque.Add(1)
	ch := make(chan *Command, 1)
	c.pendingMu.Lock()
	if c.ctx.Err() != nil {
		c.pendingMu.Unlock()
		return nil, fmt.Errorf("invoke %v on %s: %w", req, c.nc.RemoteAddr(), ErrClosed)
	}
	c.pending[req.Opaque] = ch
	c.pendingMu.Unlock()
	forget := func() {
		c.pendingMu.Lock()
		delete(c.pending, req.Opaque)
		c.pendingMu.Unlock()
	}
	if err := c.Write(ctx, req); err != nil {
		forget()
		return nil, err
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("invoke %v on %s: connection closed before the response: %w", req, c.nc.RemoteAddr(), ErrClosed)
		}
		return resp, nil
	case <-ctx.Done():
		forget()
		return nil, fmt.Errorf("invoke %v on %s: %w", req, c.nc.RemoteAddr(), ctx.Err())
	}
}

// InvokeOneway sends a request with the oneway flag; no response comes.
func (c *Conn) InvokeOneway(ctx context.Context, req *Command) error {
	if cr := c.opts.Credentials; cr != nil {
		Sign(req, cr.AccessKey, cr.SecretKey)
	}
	req.Flag = req.Flag&^FlagResponse | FlagOneway
	req.Opaque = c.opaque.Add(1)
	return c.Write(ctx, req)
}
