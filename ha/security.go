package ha

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The HA port streams the whole CommitLog to whoever speaks the protocol,
// and a SYNC_MASTER counts what its slaves acknowledge: it must be closed
// to everyone else. Three layers:
//
//   - a master listens on loopback unless told otherwise (DefaultListenAddr);
//   - mutual TLS 1.3 (MasterOptions.TLS, SlaveOptions.TLS; LoadTLS builds
//     both from PEM files): the slave verifies the master's certificate,
//     the master requires the slave's and verifies it against its CA;
//   - without TLS, a shared secret (MasterOptions.Secret,
//     SlaveOptions.Secret): an HMAC-SHA256 challenge–response in both
//     directions before the first report; the secret never crosses the
//     wire. It authenticates the peers when they connect; it neither hides
//     nor protects the bytes after that (use TLS where the network is not
//     trusted).
//
// A master refuses to listen beyond loopback with neither.

// ErrAuth: the peer did not authenticate (a bad or missing certificate, or
// the wrong secret).
var ErrAuth = errors.New("ha: authentication failed")

// MinSecretBytes is the shortest shared secret accepted.
const MinSecretBytes = 16

// The challenge–response: the master sends authHello (magic, version,
// its 32-byte nonce); the slave answers its own nonce and
// HMAC(secret, "slave" | master nonce | slave nonce); the master answers
// HMAC(secret, "master" | master nonce | slave nonce). Then the HA
// protocol starts, the slave's first report first.
const (
	authMagic    = "MQHA"
	authVersion  = 1
	nonceSize    = 32
	macSize      = sha256.Size
	authHelloLen = len(authMagic) + 1 + nonceSize
)

func authMAC(secret []byte, role string, masterNonce, slaveNonce []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("mqstore-ha " + role))
	h.Write(masterNonce)
	h.Write(slaveNonce)
	return h.Sum(nil)
}

// authenticateSlave runs the master's side of the challenge–response on c.
func authenticateSlave(c net.Conn, secret []byte) error {
	hello := make([]byte, authHelloLen)
	copy(hello, authMagic)
	hello[len(authMagic)] = authVersion
	masterNonce := hello[len(authMagic)+1:]
	if _, err := rand.Read(masterNonce); err != nil {
		return fmt.Errorf("make a challenge: %w", err)
	}
	if _, err := c.Write(hello); err != nil {
		return fmt.Errorf("send the challenge: %w", err)
	}
	answer := make([]byte, nonceSize+macSize)
	if _, err := io.ReadFull(c, answer); err != nil {
		return fmt.Errorf("read the answer to the challenge: %w", err)
	}
	slaveNonce, mac := answer[:nonceSize], answer[nonceSize:]
	if !hmac.Equal(mac, authMAC(secret, "slave", masterNonce, slaveNonce)) {
		return fmt.Errorf("the peer's answer to the challenge is not made with the shared secret: %w", ErrAuth)
	}
	if _, err := c.Write(authMAC(secret, "master", masterNonce, slaveNonce)); err != nil {
		return fmt.Errorf("send the proof: %w", err)
	}
	return nil
}

// authenticateMaster runs the slave's side on c.
func authenticateMaster(c net.Conn, secret []byte) error {
	hello := make([]byte, authHelloLen)
	if _, err := io.ReadFull(c, hello); err != nil {
		return fmt.Errorf("read the master's challenge (does the master have a shared secret?): %w", err)
	}
	if string(hello[:len(authMagic)]) != authMagic || hello[len(authMagic)] != authVersion {
		return fmt.Errorf("the master sent %q, not a challenge (does it have a shared secret? is it an HA master?): %w",
			hello[:len(authMagic)+1], ErrProtocol)
	}
	masterNonce := hello[len(authMagic)+1:]
	answer := make([]byte, nonceSize, nonceSize+macSize)
	if _, err := rand.Read(answer); err != nil {
		return fmt.Errorf("make a nonce: %w", err)
	}
	answer = append(answer, authMAC(secret, "slave", masterNonce, answer[:nonceSize])...)
	if _, err := c.Write(answer); err != nil {
		return fmt.Errorf("answer the challenge: %w", err)
	}
	proof := make([]byte, macSize)
	if _, err := io.ReadFull(c, proof); err != nil {
		return fmt.Errorf("read the master's proof (it refused the secret?): %w", err)
	}
	if !hmac.Equal(proof, authMAC(secret, "master", masterNonce, answer[:nonceSize])) {
		return fmt.Errorf("the master's proof is not made with the shared secret: %w", ErrAuth)
	}
	return nil
}

// dialMaster connects to the master as a slave (or a repair probe) does:
// TCP, then TLS or the shared secret's challenge–response.
func dialMaster(ctx context.Context, o SlaveOptions) (net.Conn, error) {
	d := net.Dialer{Timeout: o.DialTimeout}
	c, err := d.DialContext(ctx, "tcp", o.MasterAddress)
	if err != nil {
		return nil, fmt.Errorf("connect to the master %s: %w", o.MasterAddress, err)
	}
	c.SetDeadline(time.Now().Add(o.DialTimeout))
	if o.TLS != nil {
		cfg := o.TLS
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(o.MasterAddress)
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("TLS with the master %s: %w: %w", o.MasterAddress, ErrAuth, err)
		}
		c = tc
	}
	if o.Secret != nil {
		if err := authenticateMaster(c, o.Secret); err != nil {
			c.Close()
			return nil, fmt.Errorf("authenticate with the master %s: %w", o.MasterAddress, err)
		}
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// IsLoopback reports whether a listen address (host:port) binds loopback
// only: a loopback IP or localhost; an empty host, a wildcard or any other
// address does not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// LoadTLS builds a master's (server) or a slave's TLS configuration from
// PEM files: its own certificate and key, and the CA that signs its
// peers' certificates. TLS 1.3 only; a master requires and verifies the
// slave's certificate, a slave verifies the master's (against the name or
// address it dials).
func LoadTLS(certFile, keyFile, caFile string, server bool) (*tls.Config, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, badOption("TLS needs a certificate, its key and a CA (all three of --tls-cert, --tls-key, --tls-ca)")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("ha: load the certificate %s and key %s: %w: %w", certFile, keyFile, ErrInvalidOption, err)
	}
	pemCA, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("ha: read the CA %s: %w: %w", caFile, ErrInvalidOption, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCA) {
		return nil, fmt.Errorf("ha: %s holds no PEM certificate: %w", caFile, ErrInvalidOption)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
	if server {
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	} else {
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// LoadSecret reads a shared secret from a file: its bytes without the
// trailing newline, at least MinSecretBytes; the file must not be
// readable by group or others.
func LoadSecret(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("ha: the secret file: %w: %w", ErrInvalidOption, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("ha: the secret file %s is readable by others (mode %v): chmod 600 it: %w", path, fi.Mode().Perm(), ErrInvalidOption)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ha: read the secret file: %w: %w", ErrInvalidOption, err)
	}
	b = []byte(strings.TrimRight(string(b), "\r\n"))
	if len(b) < MinSecretBytes {
		return nil, fmt.Errorf("ha: the secret in %s is %d bytes; at least %d are needed (e.g. head -c 32 /dev/urandom | base64 > %s): %w",
			path, len(b), MinSecretBytes, path, ErrInvalidOption)
	}
	return b, nil
}

// Certificates are the files GenerateCertificates writes in its directory.
var Certificates = struct{ CA, CAKey, Master, MasterKey, Slave, SlaveKey, Replica, ReplicaKey string }{
	"ca.pem", "ca-key.pem", "master.pem", "master-key.pem", "slave.pem", "slave-key.pem", "replica.pem", "replica-key.pem"}

// GenerateCertificates writes, in dir, a CA and a master, a slave and a
// replica certificate it signs (ECDSA P-256, valid for validFor from now),
// each with its key (mode 0600), for trying mutual TLS: the master's is
// valid for hosts (names or IP addresses; localhost, 127.0.0.1 and ::1
// are always included), and so is the replica's, which is both a server's
// and a client's (a replica of a broker set that follows the failover
// controller is master or slave in turn). It refuses to overwrite a file.
func GenerateCertificates(dir string, hosts []string, validFor time.Duration) error {
	names := Certificates
	for _, f := range []string{names.CA, names.CAKey, names.Master, names.MasterKey, names.Slave, names.SlaveKey, names.Replica, names.ReplicaKey} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return fmt.Errorf("gen-certs: %s exists; choose an empty directory: %w", filepath.Join(dir, f), os.ErrExist)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("gen-certs: %w", err)
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("gen-certs: %w", err)
	}
	caTmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "mqstore HA CA"}, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(validFor),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	if caTmpl.SerialNumber, err = serial(); err != nil {
		return err
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("gen-certs: the CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return fmt.Errorf("gen-certs: %w", err)
	}
	if err := writePEM(filepath.Join(dir, names.CA), "CERTIFICATE", caDER, 0o644); err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, names.CAKey), caKey); err != nil {
		return err
	}
	leaf := func(cn string, usage []x509.ExtKeyUsage, hosts []string, certFile, keyFile string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return fmt.Errorf("gen-certs: %w", err)
		}
		tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: cn}, NotBefore: now.Add(-time.Minute), NotAfter: now.Add(validFor),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage}
		if tmpl.SerialNumber, err = serial(); err != nil {
			return err
		}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else if h != "" {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("gen-certs: %s: %w", cn, err)
		}
		if err := writePEM(filepath.Join(dir, certFile), "CERTIFICATE", der, 0o644); err != nil {
			return err
		}
		return writeKey(filepath.Join(dir, keyFile), key)
	}
	masterHosts := append([]string{"localhost", "127.0.0.1", "::1"}, hosts...)
	server, client := x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth
	if err := leaf("mqstore HA master", []x509.ExtKeyUsage{server}, masterHosts, names.Master, names.MasterKey); err != nil {
		return err
	}
	if err := leaf("mqstore HA slave", []x509.ExtKeyUsage{client}, nil, names.Slave, names.SlaveKey); err != nil {
		return err
	}
	return leaf("mqstore HA replica", []x509.ExtKeyUsage{server, client}, masterHosts, names.Replica, names.ReplicaKey)
}

func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("gen-certs: a serial number: %w", err)
	}
	return n, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("gen-certs: %w", err)
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("gen-certs: %w", err)
	}
	if err := pem.Encode(f, &pem.Block{Type: typ, Bytes: der}); err != nil {
		f.Close()
		return fmt.Errorf("gen-certs: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("gen-certs: write %s: %w", path, err)
	}
	return nil
}
