package failover

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/storefs"
)

// TestMeta: broker.meta round-trips; a damaged one, or one of another set
// or id, stops Start with ErrMeta naming the file, before anything is
// registered or opened.
func TestMeta(t *testing.T) {
	dir := t.TempDir()
	fsys := storefs.OS()
	if _, found, err := loadMeta(fsys, dir); found || err != nil {
		t.Fatalf("no file: found %v, %v", found, err)
	}
	want := Meta{Set: "s", ID: 3, RegisterCode: "abc"}
	if err := saveMeta(fsys, dir, want); err != nil {
		t.Fatal(err)
	}
	if got, found, err := loadMeta(fsys, dir); !found || err != nil || got != want {
		t.Fatalf("round trip: %+v %v %v", got, found, err)
	}
	opts := func(set string, id int64) Options {
		return Options{Set: set, ID: id, Dir: dir, Controllers: []string{deadAddr(t)}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, o := range []Options{opts("other", 0), opts("s", 4)} {
		if _, err := Start(ctx, o); !errors.Is(err, ErrMeta) {
			t.Fatalf("Start with %+v: %v, want ErrMeta", o, err)
		}
	}
	path := filepath.Join(dir, MetaFile)
	for _, bad := range []string{"", "{", `{"set":"s","id":-1,"registerCode":"x"}`, `{"set":"s","id":1}`} {
		if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Start(ctx, opts("s", 0))
		if !errors.Is(err, ErrMeta) || !strings.Contains(err.Error(), path) {
			t.Fatalf("broker.meta %q: %v, want ErrMeta naming the file", bad, err)
		}
	}
	for _, o := range []Options{{Dir: dir, Controllers: []string{"x:1"}}, {Set: "s", Controllers: []string{"x:1"}}, {Set: "s", Dir: dir},
		{Set: "s", Dir: dir, Controllers: []string{"x:1"}, MinInSyncReplicas: 1}, {Set: "s", Dir: dir, Controllers: []string{"x:1"}, ID: -2}} {
		if _, err := Start(ctx, o); err == nil {
			t.Fatalf("Start with %+v: no error", o)
		}
	}
}

// TestIdentity: the HA socket hands a master term only connections that
// identify their broker, named broker-ID/addr; anything else is closed,
// and so is every connection while no term is open.
func TestIdentity(t *testing.T) {
	h, err := listenHA("127.0.0.1:0", quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	term := h.StartTerm()
	fwd, err := newForwarder(h.Addr().String(), 7, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer fwd.Close()
	c, err := net.Dial("tcp", fwd.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := term.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := idOfAddr(got.RemoteAddr().String()); !ok || id != 7 {
		t.Fatalf("the connection is named %q", got.RemoteAddr())
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(got, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("forwarded %q, %v", buf, err)
	}
	got.Close()

	// Not an identified broker: closed without reaching the term.
	for _, pre := range []string{"GET / HTTP/1.1\r\n\r\n", "MQFI\x00\x00\x00\x00\x00\x00\x00\x00"} {
		raw, err := net.Dial("tcp", h.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		raw.Write([]byte(pre))
		raw.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := raw.Read(buf); err == nil {
			t.Fatalf("preamble %q: the connection stayed open", pre)
		}
		raw.Close()
	}
	// No term: an identified connection is closed too.
	term.Close()
	c2, err := net.Dial("tcp", fwd.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c2.Read(buf); err == nil {
		t.Fatal("a connection with no master term stayed open")
	}
	for _, a := range []string{"broker-x/1", "broker-0/a", "127.0.0.1:5", "broker-3"} {
		if _, ok := idOfAddr(a); ok {
			t.Fatalf("idOfAddr(%q) accepted", a)
		}
	}
}
