// Package tcpproxy is a small TCP proxy that emulates network trouble
// between two processes on one machine (which has no netem here): it
// forwards every connection it accepts to a target and can add a one-way
// delay in each direction, drop every open connection, black-hole them (no
// byte passes either way and nothing is closed, as when a network path dies
// silently), or refuse new connections. The replication tests use it, and
// the benchmark harness for its emulated HA round trip; what it emulates
// must be labelled as emulated wherever a figure is reported.
package tcpproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Proxy.
type Options struct {
	// Delay is added to every chunk of bytes in each direction, one way: a
	// request and its answer take 2×Delay more. 0: none.
	Delay time.Duration
	// Logger receives connection events (default: discarded).
	Logger *slog.Logger
}

// ErrClosed: the proxy was closed.
var ErrClosed = errors.New("tcpproxy: closed")

// maxQueuedChunks bounds the delayed chunks held per direction (at most
// 32 KiB each): a slow reader stops the proxy reading, as it would stop a
// sender.
const maxQueuedChunks = 256

// Proxy forwards connections from its listener to a target.
type Proxy struct {
	ln     net.Listener
	target string
	log    *slog.Logger
	delay  atomic.Int64 // ns
	refuse atomic.Bool

	mu         sync.Mutex
	links      map[*link]struct{}
	blackholed bool
	cuts       map[string][]byte // name -> what a connection's first bytes contain
	changed    chan struct{}     // closed (and replaced) when what is held changes
	closed     bool
	accepted   int

	wg sync.WaitGroup
}

// New listens on listen ("127.0.0.1:0" for any port) and forwards every
// connection to target.
func New(listen, target string, opts Options) (*Proxy, error) {
	if opts.Delay < 0 {
		return nil, fmt.Errorf("tcpproxy: delay %v is negative", opts.Delay)
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("tcpproxy: target %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: listen on %s: %w", listen, err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{ln: ln, target: target, log: log, links: make(map[*link]struct{}), cuts: map[string][]byte{}, changed: make(chan struct{})}
	p.delay.Store(int64(opts.Delay))
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetDelay changes the one-way delay for bytes read from now on.
func (p *Proxy) SetDelay(d time.Duration) {
	p.delay.Store(int64(max(d, 0)))
}

// Refuse makes the proxy close new connections at once (on) or forward
// them again (off); open connections are not touched.
func (p *Proxy) Refuse(on bool) { p.refuse.Store(on) }

// Blackhole stops every byte in both directions, on open and new
// connections, without closing anything (on); off lets the held bytes go on.
// An endpoint sees silence, and once its socket buffers fill, writes that
// block.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == p.blackholed {
		return
	}
	p.blackholed = on
	p.changedLocked()
}

// Cut black-holes, as Blackhole does, the connections whose client's first
// bytes (its first read, up to 32 KiB) contain pattern — one peer's
// connections when its protocol names the peer first (an identity
// preamble, a sender id in a request header) — until Heal(name).
func (p *Proxy) Cut(name string, pattern []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts[name] = bytes.Clone(pattern)
	p.changedLocked()
}

// Heal lifts the cut of that name.
func (p *Proxy) Heal(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.cuts[name]; ok {
		delete(p.cuts, name)
		p.changedLocked()
	}
}

func (p *Proxy) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// heldLocked reports whether l's bytes are held now.
func (p *Proxy) heldLocked(l *link) bool {
	if p.blackholed {
		return true
	}
	for _, pat := range p.cuts {
		if l.first != nil && bytes.Contains(l.first, pat) {
			return true
		}
	}
	return false
}

// Drop closes every open connection, both sides (the endpoints see a reset
// or end of stream), and returns how many there were.
func (p *Proxy) Drop() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	return len(links)
}

// Conns is the number of open connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Accepted is the number of connections accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.closed = true
	p.blackholed = false
	clear(p.cuts)
	p.changedLocked()
	p.mu.Unlock()
	err := p.ln.Close()
	p.Drop()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		p.accepted++
		p.mu.Unlock()
		if p.refuse.Load() {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{}
	first          []byte // the client's first read (Proxy.mu)
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		l.client.Close()
		l.server.Close()
	})
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	s, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		p.log.Warn("tcpproxy: dial the target", slog.String("target", p.target), slog.Any("err", err))
		c.Close()
		return
	}
	l := &link{client: c, server: s, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); p.pump(l, c, s, true) }()
	go func() { defer pumps.Done(); p.pump(l, s, c, false) }()
	pumps.Wait()
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// chunk is bytes read at one time, due for writing at due.
type chunk struct {
	data []byte
	due  time.Time
}

// pump copies src to dst through the delay queue until src ends (then it
// half-closes dst) or either side fails (then it closes the link).
func (p *Proxy) pump(l *link, src, dst net.Conn, fromClient bool) {
	queue := make(chan chunk, maxQueuedChunks)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		var timer *time.Timer
		for c := range queue {
			if wait := time.Until(c.due); wait > 0 {
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				select {
				case <-timer.C:
				case <-l.done:
					return
				}
			}
			if !p.passable(l) {
				return
			}
			if _, err := dst.Write(c.data); err != nil {
				l.close()
				return
			}
		}
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite() // src ended: pass the end of stream on
		}
	}()
	defer func() {
		close(queue)
		<-writerDone
	}()
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			if fromClient {
				p.mu.Lock()
				if l.first == nil {
					l.first = bytes.Clone(buf[:n])
				}
				p.mu.Unlock()
			}
			if !p.passable(l) {
				return
			}
			select {
			case queue <- chunk{data: buf[:n], due: time.Now().Add(time.Duration(p.delay.Load()))}:
			case <-l.done:
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				l.close()
			}
			return
		}
	}
}

// passable waits while l's bytes are held (the proxy black-holed, or a
// cut that matches l); false when the link closed meanwhile.
func (p *Proxy) passable(l *link) bool {
	for {
		p.mu.Lock()
		held, changed := p.heldLocked(l), p.changed
		p.mu.Unlock()
		if !held {
			return true
		}
		select {
		case <-changed:
		case <-l.done:
			return false
		}
	}
}
