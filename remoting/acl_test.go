package remoting

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/ha"
)

func TestParseACLRefusesBadLines(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"ak secretkey1 extra\n", "line 1: want ACCESS_KEY SECRET_KEY, got 3 fields"},
		{"# keys\nak secretkey1\nak secretkey2\n", `line 3: access key "ak" given twice`},
		{"\nak short\n", `line 2: the secret key of "ak" has 5 characters`},
		{"# nothing\n\n", "no access key"},
	} {
		if _, err := ParseACL(strings.NewReader(c.text)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseACL(%q) = %v, want an error with %q", c.text, err, c.want)
		}
	}
}

// The signature is RocketMQ's: the extension fields' values sorted by
// name, the access key among them, then the body — computed here the long
// way for one request.
func TestSignatureIsRocketMQs(t *testing.T) {
	req := NewRequest(SendMessage, map[string]string{"topic": "T", "b": "2", "a": "1"}, []byte("body"))
	Sign(req, "ak", []byte("secretkey1"))
	mac := hmac.New(sha1.New, []byte("secretkey1"))
	mac.Write([]byte("ak" + "1" + "2" + "T" + "body")) // AccessKey, a, b, topic: byte order, capitals first
	if want := base64.StdEncoding.EncodeToString(mac.Sum(nil)); req.ExtFields[FieldSignature] != want {
		t.Fatalf("signature %s, want %s", req.ExtFields[FieldSignature], want)
	}
}

func TestACLVerify(t *testing.T) {
	acl, err := ParseACL(strings.NewReader("ak secretkey1\nother secretkey2\n"))
	if err != nil {
		t.Fatal(err)
	}
	signed := func() *Command {
		req := NewRequest(SendMessage, map[string]string{"topic": "T"}, []byte("body"))
		Sign(req, "ak", []byte("secretkey1"))
		return req
	}
	if err := acl.Verify(signed()); err != nil {
		t.Fatalf("a signed request: %v", err)
	}
	for name, change := range map[string]func(*Command){
		"no access key":   func(r *Command) { delete(r.ExtFields, FieldAccessKey) },
		"unknown key":     func(r *Command) { r.ExtFields[FieldAccessKey] = "nobody" },
		"another's key":   func(r *Command) { r.ExtFields[FieldAccessKey] = "other" },
		"body changed":    func(r *Command) { r.Body = []byte("bodx") },
		"field changed":   func(r *Command) { r.ExtFields["topic"] = "U" },
		"field added":     func(r *Command) { r.ExtFields["queueId"] = "1" },
		"no signature":    func(r *Command) { delete(r.ExtFields, FieldSignature) },
		"not base64":      func(r *Command) { r.ExtFields[FieldSignature] = "!!" },
		"wrong secret":    func(r *Command) { Sign(r, "ak", []byte("secretkey2")) },
		"unsigned client": func(r *Command) { r.ExtFields = map[string]string{"topic": "T"} },
	} {
		req := signed()
		change(req)
		if err := acl.Verify(req); !errors.Is(err, ErrNoPermission) {
			t.Errorf("%s: Verify = %v, want ErrNoPermission", name, err)
		}
	}
}

// A server with an ACL answers an unsigned request NO_PERMISSION without
// calling its handler, and serves a signed one; over TLS, with the server's
// certificate verified by the client.
func TestServerWithTLSAndACL(t *testing.T) {
	dir := t.TempDir()
	if err := ha.GenerateCertificates(dir, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, ha.Certificates.Master), filepath.Join(dir, ha.Certificates.MasterKey))
	if err != nil {
		t.Fatal(err)
	}
	clientTLS, err := ha.LoadTLS(filepath.Join(dir, ha.Certificates.Slave), filepath.Join(dir, ha.Certificates.SlaveKey), filepath.Join(dir, ha.Certificates.CA), false)
	if err != nil {
		t.Fatal(err)
	}
	acl, err := ParseACL(strings.NewReader("ak secretkey1\n"))
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	h := HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		served++
		return NewResponse(req, Success, "")
	})
	s := startServer(t, h, ServerOptions{TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, ACL: acl})
	c, err := Dial(deadline(t), s.Addr().String(), nil, ConnOptions{Logger: quietLogger(), TLS: clientTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	resp, err := c.Invoke(deadline(t), NewRequest(SendMessage, map[string]string{"topic": "T"}, []byte("x")))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Code != NoPermission || served != 0 || !strings.Contains(resp.Remark, "no AccessKey") {
		t.Fatalf("unsigned request: code %d remark %q, handler called %d times", resp.Code, resp.Remark, served)
	}
	req := NewRequest(SendMessage, map[string]string{"topic": "T"}, []byte("x"))
	Sign(req, "ak", []byte("secretkey1"))
	if resp, err = c.Invoke(deadline(t), req); err != nil || resp.Code != Success || served != 1 {
		t.Fatalf("signed request: %v, code %d, handler called %d times", err, resp.Code, served)
	}

	// A connection with credentials signs every request it sends (a slave's
	// broker to its master's).
	signing, err := Dial(deadline(t), s.Addr().String(), nil, ConnOptions{Logger: quietLogger(), TLS: clientTLS,
		Credentials: &Credentials{AccessKey: "ak", SecretKey: []byte("secretkey1")}})
	if err != nil {
		t.Fatal(err)
	}
	defer signing.Close()
	for range 2 { // the second time over the first's signature
		if resp, err := signing.Invoke(deadline(t), NewRequest(SendMessage, map[string]string{"topic": "T"}, []byte("y"))); err != nil || resp.Code != Success {
			t.Fatalf("a request from a connection with credentials: %v, %v", err, resp)
		}
	}

	// A client that does not speak TLS gets nothing served.
	plain, err := Dial(deadline(t), s.Addr().String(), nil, ConnOptions{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := plain.Invoke(ctx, req); err == nil {
		t.Fatal("a plain-text request to a TLS server was answered")
	}
}
