package interop

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/mqstore/mqstore/broker"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/ha"
	"github.com/mqstore/mqstore/namesrv"
	"github.com/mqstore/mqstore/remoting"
)

// TestTLSAndACL: the unmodified client, with TLS and credentials, produces
// and consumes through a name server and a broker that serve TLS and whose
// remoting port authenticates every request by RocketMQ's ACL signature;
// a client without credentials, or with another secret, is refused and
// stores nothing.
func TestTLSAndACL(t *testing.T) {
	certs := t.TempDir()
	if err := ha.GenerateCertificates(certs, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(certs, ha.Certificates.Master), filepath.Join(certs, ha.Certificates.MasterKey))
	if err != nil {
		t.Fatal(err)
	}
	serverTLS := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	pemCA, err := os.ReadFile(filepath.Join(certs, ha.Certificates.CA))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	acl, err := remoting.ParseACL(strings.NewReader("interop-ak interop-secret-1\n"))
	if err != nil {
		t.Fatal(err)
	}

	ns, err := namesrv.Start(namesrv.Options{ListenAddr: "127.0.0.1:0", Logger: quiet(), Server: remoting.ServerOptions{TLS: serverTLS}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	ln, err := broker.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, err := broker.StoreHost(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	store, err := engine.Open(context.Background(), t.TempDir(), engine.Options{Backend: "mmap", SegmentSizeBytes: 16 << 20,
		ConsumeQueueFileSizeBytes: 20 * 4096, IndexSlotCount: 4096, IndexMaxEntries: 16384, StoreHost: host, Logger: quiet()})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	b, err := broker.New(store, ln, broker.Options{Namesrv: []string{ns.Addr()}, Logger: quiet(),
		ClientTLS: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool},
		Server:    remoting.ServerOptions{TLS: serverTLS, ACL: acl}})
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	n := &node{t: t, addr: b.Addr(), ns: ns.Addr(), store: store, broker: b}
	t.Cleanup(n.stop)
	waitFor(t, 10*time.Second, "the broker registered over TLS", func() bool { return len(ns.Brokers()) == 1 })

	// The client runs in processes of its own: its WithTls sets a
	// process-wide default, which would turn every other test's clients to
	// TLS.
	bin := build(t, "github.com/mqstore/mqstore/interop/internal/sendonce")
	send := func(body string, creds ...string) (string, error) {
		args := append([]string{"-namesrv", ns.Addr(), "-topic", "acl-topic", "-body", body, "-tls", "-instance", instance(t)}, creds...)
		out, err := exec.Command(bin, args...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	signed := []string{"-access-key", "interop-ak", "-secret-key", "interop-secret-1"}
	out, err := send("signed", signed...)
	if err != nil {
		t.Fatalf("a client with the ACL's credentials: %v: %s", err, out)
	}
	f := strings.Fields(out)
	if len(f) != 3 || f[0] != "SENT" {
		t.Fatalf("sendonce printed %q", out)
	}
	checkStored(t, &cluster{ns: ns, node: n}, &primitive.SendResult{Status: primitive.SendOK, MsgID: f[1], OffsetMsgID: f[2]}, []byte("signed"))

	for name, creds := range map[string][]string{
		"no credentials": nil,
		"another secret": {"-access-key", "interop-ak", "-secret-key", "interop-secret-2"},
		"unknown key":    {"-access-key", "someone", "-secret-key", "interop-secret-1"},
	} {
		out, err := send(name, creds...)
		if err == nil {
			t.Errorf("%s: the send was stored: %s", name, out)
		} else if !strings.Contains(out, "no permission") {
			t.Errorf("%s: %s; want the broker's refusal (no permission)", name, out)
		}
	}
	if got := n.countMessages("acl-topic", 4); got != 1 {
		t.Fatalf("the topic holds %d messages, want the signed one alone", got)
	}

	c := startConsumerProc(t, &cluster{ns: ns, node: n}, "interop-acl-consumer", "acl-topic", "", append([]string{"-tls"}, signed...)...)
	waitFor(t, 60*time.Second, "the signed message consumed over TLS", func() bool {
		c.got.mu.Lock()
		defer c.got.mu.Unlock()
		return c.got.byID[f[1]] == "signed"
	})
	c.stop()
}
