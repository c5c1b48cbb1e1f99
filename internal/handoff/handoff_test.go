package handoff

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// closedByServer reports whether the server side closed c without
// writing (a read ends with EOF or a reset, not a timeout).
func closedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestTerms: connections go to the open term; closing a term leaves the
// socket open for the next; with no term, connections are closed; prepare
// may drop one; Close ends the term's Accept.
func TestTerms(t *testing.T) {
	s, err := Listen("127.0.0.1:0", func(c net.Conn) (net.Conn, bool) {
		var b [1]byte
		if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'y' {
			c.Close()
			return nil, false
		}
		return c, true
	}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dial := func(first byte) net.Conn {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write([]byte{first}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := dial('y'); !closedByServer(t, c) {
		t.Fatal("a connection with no term open was not closed")
	}
	for term := 0; term < 2; term++ {
		tl := s.StartTerm()
		if tl.Addr().String() != s.Addr().String() {
			t.Fatalf("term address %v, socket %v", tl.Addr(), s.Addr())
		}
		if c := dial('n'); !closedByServer(t, c) {
			t.Fatal("a connection prepare refused was not closed")
		}
		c := dial('y')
		got, err := tl.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := got.Write([]byte("!")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil || b[0] != '!' {
			t.Fatalf("term %d: read %q, %v", term, b, err)
		}
		got.Close()
		if term == 0 {
			tl.Close()
		} else {
			s.EndTerm()
		}
		if _, err := tl.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after the term ended: %v", err)
		}
	}
	tl := s.StartTerm()
	done := make(chan error, 1)
	go func() {
		_, err := tl.Accept()
		done <- err
	}()
	s.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}
