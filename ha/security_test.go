package ha

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine"
)

// certs generates a CA with a master and a slave certificate in a new
// directory and returns the master's and the slave's TLS configurations.
func certs(t *testing.T) (master, slave *tls.Config, dir string) {
	t.Helper()
	dir = t.TempDir()
	if err := GenerateCertificates(dir, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	n := Certificates
	var err error
	if master, err = LoadTLS(f(n.Master), f(n.MasterKey), f(n.CA), true); err != nil {
		t.Fatal(err)
	}
	if slave, err = LoadTLS(f(n.Slave), f(n.SlaveKey), f(n.CA), false); err != nil {
		t.Fatal(err)
	}
	return master, slave, dir
}

// intruderCheck: with the healthy slave black-holed and Puts waiting, an
// intruder (dial) connects and writes the master's end as its report: it
// reads none of the CommitLog and releases no Put.
func intruderCheck(t *testing.T, b *blackholedSyncMaster, dial func() (net.Conn, error)) {
	t.Helper()
	c, err := dial()
	if err != nil {
		t.Logf("the intruder could not connect: %v", err)
		b.check(t)
		return
	}
	defer c.Close()
	var rep [8]byte
	binary.BigEndian.PutUint64(rep[:], uint64(b.end))
	c.Write(rep[:])
	c.Write(rep[:])
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, _ := io.ReadAll(c)
	// A CommitLog record at its offset: the body bytes of message 100.
	if body := message(100, 300).Body; bytes.Contains(got, body[:64]) {
		t.Fatalf("the intruder read CommitLog bytes (%d bytes)", len(got))
	}
	for _, s := range b.m.Slaves() {
		if s.RequestedOffset == b.end {
			t.Fatalf("the intruder's report was accepted: %+v", s)
		}
	}
	b.check(t)
}

// startSecuredBlackholed is startBlackholedSyncMaster with the master
// and its healthy slave using mo's and so's TLS and secret.
func startSecuredBlackholed(t *testing.T, sec MasterOptions, ssec SlaveOptions) *blackholedSyncMaster {
	t.Helper()
	mo, so := fastMaster, fastSlave
	mo.TLS, mo.Secret = sec.TLS, sec.Secret
	so.TLS, so.Secret = ssec.TLS, ssec.Secret
	return startBlackholedWith(t, 4, mo, so)
}

// TestMutualTLS: a master and a slave with certificates from one CA
// replicate; a plain TCP client and a TLS client with a certificate from
// another CA read nothing of the CommitLog and release no Put.
func TestMutualTLS(t *testing.T) {
	mtls, stls, _ := certs(t)
	_, otherSlave, _ := certs(t) // another CA
	t.Run("plain TCP", func(t *testing.T) {
		b := startSecuredBlackholed(t, MasterOptions{TLS: mtls}, SlaveOptions{TLS: stls})
		intruderCheck(t, b, func() (net.Conn, error) { return net.Dial("tcp", b.m.Addr().String()) })
	})
	t.Run("another CA", func(t *testing.T) {
		b := startSecuredBlackholed(t, MasterOptions{TLS: mtls}, SlaveOptions{TLS: stls})
		intruderCheck(t, b, func() (net.Conn, error) {
			cfg := otherSlave.Clone()
			cfg.InsecureSkipVerify = true // the intruder trusts anything; the master must not
			return tls.Dial("tcp", b.m.Addr().String(), cfg)
		})
	})
	t.Run("no client certificate", func(t *testing.T) {
		b := startSecuredBlackholed(t, MasterOptions{TLS: mtls}, SlaveOptions{TLS: stls})
		intruderCheck(t, b, func() (net.Conn, error) {
			return tls.Dial("tcp", b.m.Addr().String(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		})
	})
	t.Run("slave refuses a master of another CA", func(t *testing.T) {
		master := open(t, t.TempDir(), engine.Options{Backend: "mmap"})
		defer master.Close()
		produce(t, master, 0, 5, rand.New(rand.NewPCG(40, 41)))
		otherMaster, _, _ := certs(t)
		o := fastMaster
		o.TLS = otherMaster
		m := startMaster(t, master, o)
		defer m.Close()
		slave := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.Slave})
		defer slave.Close()
		so := fastSlave
		so.TLS = stls
		rs := startSlave(t, slave, m.Addr().String(), so)
		waitUntil(t, "an attempt", func() bool { return rs.Status().LastError != "" })
		rs.stop()
		if st := rs.Status(); !strings.Contains(st.LastError, "TLS") || slave.MaxOffset() != 0 {
			t.Fatalf("status %+v, slave end %d", st, slave.MaxOffset())
		}
	})
}

// TestSharedSecret: with a shared secret, a slave that holds it
// replicates; a raw client, and one that answers with another secret,
// read nothing of the CommitLog and release no Put; a slave with the
// wrong secret is refused and learns why.
func TestSharedSecret(t *testing.T) {
	secret := []byte("0123456789abcdef-the-secret")
	b := startSecuredBlackholed(t, MasterOptions{Secret: secret}, SlaveOptions{Secret: secret})
	intruderCheck(t, b, func() (net.Conn, error) { return net.Dial("tcp", b.m.Addr().String()) })

	b = startSecuredBlackholed(t, MasterOptions{Secret: secret}, SlaveOptions{Secret: secret})
	intruderCheck(t, b, func() (net.Conn, error) {
		c, err := net.Dial("tcp", b.m.Addr().String())
		if err != nil {
			return nil, err
		}
		err = authenticateMaster(c, []byte("another secret, long enough"))
		if !errors.Is(err, ErrAuth) && err != nil && !strings.Contains(err.Error(), "refused the secret") {
			t.Fatalf("a wrong secret: %v", err)
		}
		return c, nil
	})

	slave := open(t, t.TempDir(), engine.Options{Backend: "mmap", Role: engine.Slave})
	defer slave.Close()
	so := fastSlave
	so.Secret = []byte("another secret, long enough")
	rs := startSlave(t, slave, b.m.Addr().String(), so)
	waitUntil(t, "an attempt", func() bool { return rs.Status().LastError != "" })
	rs.stop()
	if st := rs.Status(); !strings.Contains(st.LastError, "secret") || slave.MaxOffset() != 0 {
		t.Fatalf("status %+v, slave end %d", st, slave.MaxOffset())
	}
}

// TestClosedDoor: a master listens on loopback by default and refuses an
// address beyond it without TLS or a secret; secrets and TLS options are
// checked.
func TestClosedDoor(t *testing.T) {
	if !IsLoopback(DefaultListenAddr) {
		t.Fatalf("the default HA address %s is not loopback", DefaultListenAddr)
	}
	master := open(t, t.TempDir(), engine.Options{Backend: "mem"})
	defer master.Close()
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		if _, err := NewMaster(master, MasterOptions{ListenAddr: addr}); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "beyond this machine") {
			t.Errorf("listen on %s without TLS or a secret: %v", addr, err)
		}
	}
	if _, err := NewMaster(master, MasterOptions{ListenAddr: "127.0.0.1:0", Secret: []byte("short")}); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("a short secret: %v", err)
	}
	if _, err := NewMaster(master, MasterOptions{ListenAddr: "127.0.0.1:0", TLS: &tls.Config{MinVersion: tls.VersionTLS13}}); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("TLS without client verification: %v", err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "secret")
	os.WriteFile(path, []byte("0123456789abcdef0123\n"), 0o644)
	if _, err := LoadSecret(path); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable secret: %v", err)
	}
	os.Chmod(path, 0o600)
	if s, err := LoadSecret(path); err != nil || string(s) != "0123456789abcdef0123" {
		t.Errorf("the secret: %q %v", s, err)
	}
	_, _, cdir := certs(t)
	if err := GenerateCertificates(cdir, nil, time.Hour); !errors.Is(err, os.ErrExist) {
		t.Errorf("gen-certs over existing files: %v", err)
	}
}
