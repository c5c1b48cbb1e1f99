// Package handoff keeps a listening socket open for a process's life and
// hands its connections to one term at a time: the server of the current
// role (an HA master, a remoting broker) serves a Term, and closing the
// Term ends that server without closing the socket, so the address a
// broker registered stays valid across role changes. Connections that
// arrive while no term is open are closed; their clients connect again.
package handoff

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Socket is a listening socket whose connections go to the current Term.
type Socket struct {
	ln      net.Listener
	log     *slog.Logger
	prepare func(net.Conn) (net.Conn, bool)

	mu   sync.Mutex
	term *Term
	wg   sync.WaitGroup
}

// Listen opens a socket on addr. prepare, when not nil, runs on each
// accepted connection before it is handed over (in its own goroutine): it
// returns the connection to hand over, or false to drop it (prepare
// closes it).
func Listen(addr string, prepare func(net.Conn) (net.Conn, bool), log *slog.Logger) (*Socket, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return New(ln, prepare, log), nil
}

// New hands over ln's connections; the Socket owns ln.
func New(ln net.Listener, prepare func(net.Conn) (net.Conn, bool), log *slog.Logger) *Socket {
	if log == nil {
		log = slog.Default()
	}
	s := &Socket{ln: ln, log: log, prepare: prepare}
	s.wg.Add(1)
	go s.accept()
	return s
}

// Addr is the socket's address.
func (s *Socket) Addr() net.Addr { return s.ln.Addr() }

// Close closes the socket and the current term, and waits for the
// connections being prepared.
func (s *Socket) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	if s.term != nil {
		s.term.Close() // first: a prepared connection may wait for the term
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Socket) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("accept failed", "addr", s.ln.Addr(), "err", err)
			time.Sleep(10 * time.Millisecond) // an accept error (EMFILE): let descriptors free up
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handOver(c)
		}()
	}
}

func (s *Socket) handOver(c net.Conn) {
	if s.prepare != nil {
		var ok bool
		if c, ok = s.prepare(c); !ok {
			return
		}
	}
	s.mu.Lock()
	t := s.term
	s.mu.Unlock()
	if t == nil || !t.deliver(c) {
		c.Close() // no term now: the client connects again
	}
}

// StartTerm closes the current term, if any, and returns a new one that
// receives the socket's connections from now on.
func (s *Socket) StartTerm() *Term {
	t := &Term{addr: s.ln.Addr(), conns: make(chan net.Conn), done: make(chan struct{})}
	s.mu.Lock()
	if s.term != nil {
		s.term.Close()
	}
	s.term = t
	s.mu.Unlock()
	return t
}

// EndTerm closes the current term: connections are closed until the next.
func (s *Socket) EndTerm() {
	s.mu.Lock()
	if s.term != nil {
		s.term.Close()
		s.term = nil
	}
	s.mu.Unlock()
}

// Term is a net.Listener for one term of a Socket; closing it leaves the
// socket open.
type Term struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (t *Term) deliver(c net.Conn) bool {
	select {
	case t.conns <- c:
		return true
	case <-t.done:
		return false
	}
}

// Accept returns the next connection of the term, or net.ErrClosed once
// the term is closed.
func (t *Term) Accept() (net.Conn, error) {
	select {
	case c := <-t.conns:
		return c, nil
	case <-t.done:
		return nil, net.ErrClosed
	}
}

// Close ends the term (not the socket).
func (t *Term) Close() error {
	t.once.Do(func() { close(t.done) })
	return nil
}

// Addr is the socket's address.
func (t *Term) Addr() net.Addr { return t.addr }
