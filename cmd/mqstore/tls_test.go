//go:build linux

package main

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTLSCLI: certificates from mqstore gen-certs; a SYNC_MASTER producer
// with --tls-* and --wait-slaves 1; a plain TCP client and a TLS client
// with a certificate from another CA connect first: they read nothing, do
// not count as slaves and release no Put; then the slave with its own
// certificate connects and every message is acknowledged and on it.
func TestTLSCLI(t *testing.T) {
	base := t.TempDir()
	a, b := filepath.Join(base, "certs"), filepath.Join(base, "other")
	for _, d := range []string{a, b} {
		if out, errOut, code := runCLI(t, "gen-certs", d); code != 0 || !strings.Contains(out, "master.pem") {
			t.Fatalf("gen-certs %s: exit %d: %s %s", d, code, out, errOut)
		}
	}
	if fi, err := os.Stat(filepath.Join(a, "ca-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the CA key: %v %v", fi, err)
	}
	tlsFlags := func(dir, who string) []string {
		return []string{"--tls-cert", filepath.Join(dir, who+".pem"), "--tls-key", filepath.Join(dir, who+"-key.pem"),
			"--tls-ca", filepath.Join(dir, "ca.pem")}
	}
	m, s := filepath.Join(base, "M"), filepath.Join(base, "S")
	producer := startProcess(t, true, append([]string{"produce", "--dir", m, "--topic", "HA", "--queues", "2", "--count", "50",
		"--size", "300", "--role", "sync-master", "--ha-listen", "127.0.0.1:0", "--wait-slaves", "1", "--print-acks",
		"--ha-heartbeat", "200ms", "--ha-housekeeping", "2s"}, tlsFlags(a, "master")...)...)
	addr := producer.waitLine(t, listeningRE)[1]

	// Intruders: 8 bytes of plain TCP, and TLS with another CA's slave
	// certificate (trusting any master).
	plain, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	var rep [8]byte
	binary.BigEndian.PutUint64(rep[:], 0)
	plain.Write(rep[:])
	other, err := tls.LoadX509KeyPair(filepath.Join(b, "slave.pem"), filepath.Join(b, "slave-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := tls.Dial("tcp", addr, &tls.Config{Certificates: []tls.Certificate{other}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err == nil {
		defer foreign.Close()
		foreign.Write(rep[:])
	}
	for name, c := range map[string]net.Conn{"plain TCP": plain, "another CA": foreign} {
		if c == nil {
			continue
		}
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		if got, _ := io.ReadAll(c); len(got) > 0 && name == "another CA" {
			t.Fatalf("%s: read %d bytes over TLS", name, len(got))
		} else if name == "plain TCP" && len(got) > 0 && got[0] != 0x15 { // at most a TLS alert record
			t.Fatalf("%s: read %d bytes, not a TLS alert: %q", name, len(got), got)
		}
	}
	// The producer still waits in --wait-slaves: no intruder counted.
	if st := producer.stderr(); strings.Contains(st, "msg=\"ha master: slave starts\"") {
		t.Fatalf("an intruder was started as a slave:\n%s", st)
	}
	slave := startProcess(t, false, append([]string{"slave", "--dir", s, "--master", addr, "--status-interval", "0",
		"--ha-heartbeat", "200ms", "--ha-housekeeping", "2s"}, tlsFlags(a, "slave")...)...)
	var acks, notAcked []ack
	readAcks(bufio.NewScanner(producer.stdout), 50, &acks, &notAcked)
	if code := producer.wait(t); code != 0 || len(acks) != 50 || len(notAcked) > 0 {
		t.Fatalf("produce: exit %d, %d acks, %d not:\n%s", code, len(acks), len(notAcked), producer.stderr())
	}
	slave.stop(t, syscall.SIGTERM)
	checkAcksOn(t, s, acks, 300, 2)
	if st := producer.stderr(); strings.Count(st, "slave starts") != 1 || !strings.Contains(st, "refused") {
		t.Fatalf("want one slave started and the intruders refused:\n%s", st)
	}
}
