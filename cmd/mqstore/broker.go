package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/mqstore/mqstore/broker"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/ha"
	"github.com/mqstore/mqstore/internal/cli"
	"github.com/mqstore/mqstore/metrics"
	"github.com/mqstore/mqstore/remoting"
	"github.com/prometheus/client_golang/prometheus"
)

// brokerFlags are serve's RocketMQ broker flags: with --remoting-listen the
// store is also served to RocketMQ clients.
type brokerFlags struct {
	listen      *string
	advertise   *string
	namesrv     *string
	cluster     *string
	name        *string
	id          *int64
	noAutoTopic *bool
	metrics     *string
	delayLevels *string
	delays      []time.Duration
	ln          net.Listener

	tlsCert, tlsKey, tlsCA *string
	aclFile, credsFile     *string
	serverTLS, clientTLS   *tls.Config
	acl                    *remoting.ACL
	creds                  *remoting.Credentials

	metricsServer *metrics.Server
	remoting      *metrics.Remoting
}

func addBrokerFlags(fs *flag.FlagSet) *brokerFlags {
	return &brokerFlags{
		listen: fs.String("remoting-listen", "", "serve RocketMQ clients (remoting protocol) on this address, e.g. 127.0.0.1:10911; "+
			"a bare :PORT binds loopback (off by default)"),
		advertise: fs.String("remoting-advertise", "", "the broker address clients dial and message ids carry (default: the listen address; "+
			"required with a wildcard listen address)"),
		namesrv:     fs.String("namesrv", "", "name servers to register with, host:port separated by ';' or ','"),
		cluster:     fs.String("cluster", broker.DefaultCluster, "the broker's cluster name"),
		name:        fs.String("broker-name", broker.DefaultBrokerName, "the broker group's name (a master and its slaves share it)"),
		id:          fs.Int64("broker-id", -1, "0 for a master, above 0 for a slave (default: by --role)"),
		noAutoTopic: fs.Bool("no-auto-create-topic", false, "refuse sends to unknown topics instead of creating them from TBW102"),
		metrics:     fs.String("metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics (off by default; a bare :PORT binds loopback)"),
		delayLevels: fs.String("delay-levels", broker.DefaultDelayLevels, "the delay of each level a message's DELAY property names, level 1 first"),
		tlsCert: fs.String("remoting-tls-cert", "", "serve RocketMQ clients over TLS with this certificate (PEM; mqstore gen-certs makes one); "+
			"an address beyond loopback needs it and --remoting-acl"),
		tlsKey: fs.String("remoting-tls-key", "", "the private key of --remoting-tls-cert (PEM)"),
		tlsCA:  fs.String("remoting-tls-ca", "", "dial the name servers (and a slave its master's broker) over TLS, verifying their certificates against this CA (PEM)"),
		aclFile: fs.String("remoting-acl", "", "authenticate every client request by RocketMQ's ACL signature: a file of ACCESS_KEY SECRET_KEY lines "+
			"(clients set the same credentials)"),
		credsFile: fs.String("remoting-credentials", "", "a slave's credentials for its master's broker, whose port has an ACL: a file with one ACCESS_KEY SECRET_KEY line"),
	}
}

// open checks the flags and, when remoting is on, opens the listener and
// sets the store's StoreHost to the advertised address (records and
// message ids carry it).
func (bf *brokerFlags) open(fs *flag.FlagSet, o *engine.Options) error {
	if err := bf.check(fs); err != nil || *bf.listen == "" {
		return err
	}
	switch {
	case o.Role == engine.Slave && *bf.id == 0:
		return cli.BadFlag(fs, "--broker-id 0 is a master's; a slave's is above 0")
	case o.Role != engine.Slave && *bf.id > 0:
		return cli.BadFlag(fs, "--broker-id %d is a slave's; a %v's is 0", *bf.id, o.Role)
	}
	ln, host, err := bf.listenRemoting(fs)
	if err != nil {
		return err
	}
	o.StoreHost = host
	bf.ln = ln
	return nil
}

// check checks the flags that need no listener.
func (bf *brokerFlags) check(fs *flag.FlagSet) error {
	if *bf.metrics != "" {
		if _, _, err := net.SplitHostPort(*bf.metrics); err != nil {
			return cli.BadFlag(fs, "--metrics-listen %q: %v", *bf.metrics, err)
		}
	}
	levels, err := broker.ParseDelayLevels(*bf.delayLevels)
	if err != nil {
		return cli.BadFlag(fs, "--delay-levels %q: %v", *bf.delayLevels, err)
	}
	bf.delays = levels
	if *bf.listen == "" {
		if *bf.namesrv != "" || *bf.advertise != "" {
			return cli.BadFlag(fs, "--namesrv and --remoting-advertise go with --remoting-listen")
		}
		if *bf.tlsCert != "" || *bf.tlsKey != "" || *bf.tlsCA != "" || *bf.aclFile != "" || *bf.credsFile != "" {
			return cli.BadFlag(fs, "--remoting-tls-*, --remoting-acl and --remoting-credentials go with --remoting-listen")
		}
		return nil
	}
	for _, ns := range bf.namesrvs() {
		if _, _, err := net.SplitHostPort(ns); err != nil {
			return cli.BadFlag(fs, "--namesrv %q: %v", ns, err)
		}
	}
	if err := bf.loadSecurity(fs); err != nil {
		return err
	}
	if *bf.advertise != "" {
		if _, err := broker.StoreHost(*bf.advertise); err != nil {
			return cli.BadFlag(fs, "--remoting-advertise: %v", err)
		}
	}
	return nil
}

// loadSecurity reads the remoting port's TLS and ACL files and checks that
// a port beyond loopback has both: it serves the log.
func (bf *brokerFlags) loadSecurity(fs *flag.FlagSet) error {
	if (*bf.tlsCert == "") != (*bf.tlsKey == "") {
		return cli.BadFlag(fs, "--remoting-tls-cert and --remoting-tls-key go together")
	}
	if *bf.tlsCert != "" {
		var err error
		if bf.serverTLS, err = remotingServerTLS(*bf.tlsCert, *bf.tlsKey); err != nil {
			return cli.BadFlag(fs, "--remoting-tls-cert %s, --remoting-tls-key %s: %v", *bf.tlsCert, *bf.tlsKey, err)
		}
	}
	if *bf.tlsCA != "" {
		pemCA, err := os.ReadFile(*bf.tlsCA)
		if err != nil {
			return cli.BadFlag(fs, "--remoting-tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemCA) {
			return cli.BadFlag(fs, "--remoting-tls-ca %s holds no PEM certificate", *bf.tlsCA)
		}
		bf.clientTLS = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	}
	if *bf.aclFile != "" {
		acl, err := remoting.LoadACL(*bf.aclFile)
		if err != nil {
			return cli.BadFlag(fs, "--remoting-acl: %v", err)
		}
		bf.acl = acl
	}
	if *bf.credsFile != "" {
		acl, err := remoting.LoadACL(*bf.credsFile)
		if err == nil {
			bf.creds, err = acl.Single()
		}
		if err != nil {
			return cli.BadFlag(fs, "--remoting-credentials: %v", err)
		}
	}
	if addr := loopbackIfBare(*bf.listen); !ha.IsLoopback(addr) && (bf.serverTLS == nil || bf.acl == nil) {
		return cli.BadFlag(fs, "--remoting-listen %s is beyond loopback, and the port serves the log: it needs TLS (--remoting-tls-cert, --remoting-tls-key) "+
			"and authenticated clients (--remoting-acl)", *bf.listen)
	}
	return nil
}

// remotingServerTLS is the TLS of a remoting port (the broker's, the name
// server's) from a certificate and key: TLS 1.2 and up, since RocketMQ's
// Java clients may not offer 1.3, and no client certificate, since the Go
// client cannot present one (the broker's ACL authenticates clients).
func remotingServerTLS(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
}

// listenRemoting opens --remoting-listen (a bare :PORT on loopback) and
// settles the advertised address; host is the StoreHost records carry.
func (bf *brokerFlags) listenRemoting(fs *flag.FlagSet) (ln net.Listener, host netip.AddrPort, err error) {
	if ln, err = broker.Listen(loopbackIfBare(*bf.listen)); err != nil {
		return nil, host, err
	}
	adv := *bf.advertise
	if adv == "" {
		adv = ln.Addr().String()
	}
	if host, err = broker.StoreHost(adv); err != nil {
		ln.Close()
		return nil, host, cli.BadFlag(fs, "--remoting-listen: %v", err)
	}
	*bf.advertise = adv
	return ln, host, nil
}

func (bf *brokerFlags) namesrvs() []string {
	var out []string
	for _, s := range strings.FieldsFunc(*bf.namesrv, func(r rune) bool { return r == ';' || r == ',' }) {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// start serves the store's metrics (with --metrics-listen) and the store
// to RocketMQ clients (with --remoting-listen; the broker is nil without).
// slaveLags (nil for none) gives a master's slaves' lag.
func (bf *brokerFlags) start(store *engine.Store, haAddr string, slaveLags func() map[string]int64, log *slog.Logger,
	stderr io.Writer) (*broker.Broker, error) {
	if *bf.metrics != "" {
		reg := prometheus.NewRegistry()
		if err := reg.Register(metrics.NewCollector(store, slaveLags)); err != nil {
			return nil, err
		}
		if bf.ln != nil {
			rm, err := metrics.NewRemoting(reg)
			if err != nil {
				return nil, err
			}
			bf.remoting = rm
		}
		srv, err := metrics.Listen(*bf.metrics, reg, log)
		if err != nil {
			return nil, err
		}
		bf.metricsServer = srv
		fmt.Fprintf(stderr, "metrics at http://%s/metrics\n", srv.Addr())
	}
	if bf.ln == nil {
		return nil, nil
	}
	id := *bf.id
	if id < 0 {
		id = 0
		if store.Options().Role == engine.Slave {
			id = 1
		}
	}
	o := bf.brokerOptions(log)
	o.BrokerID, o.HAAddr = id, haAddr
	b, err := broker.New(store, bf.ln, o)
	bf.ln = nil
	if err == nil {
		fmt.Fprintf(stderr, "broker listening on %s\n", b.Addr())
	}
	return b, err
}

// brokerOptions are the remoting broker's options from the flags.
func (bf *brokerFlags) brokerOptions(log *slog.Logger) broker.Options {
	o := broker.Options{AdvertisedAddr: *bf.advertise, Namesrv: bf.namesrvs(), Cluster: *bf.cluster, BrokerName: *bf.name,
		NoAutoCreateTopic: *bf.noAutoTopic, DelayLevels: bf.delays, Logger: log,
		ClientTLS: bf.clientTLS, Credentials: bf.creds}
	o.Server.TLS, o.Server.ACL = bf.serverTLS, bf.acl
	if bf.remoting != nil {
		o.OnRequest = bf.remoting.Observe
	}
	return o
}

// close stops the broker and the metrics (before the store closes), or
// releases an unused listener.
func (bf *brokerFlags) close(b *broker.Broker) error {
	var errs []error
	if bf.ln != nil {
		bf.ln.Close()
		bf.ln = nil
	}
	if b != nil {
		errs = append(errs, b.Close())
	}
	if bf.metricsServer != nil {
		errs = append(errs, bf.metricsServer.Close())
		bf.metricsServer = nil
	}
	return errors.Join(errs...)
}

// masterSlaveLags is a master's slaves' lag in bytes, by address.
func masterSlaveLags(m *ha.Master) func() map[string]int64 {
	return func() map[string]int64 {
		out := map[string]int64{}
		for _, s := range m.Slaves() {
			out[s.Addr] = s.LagBytes
		}
		return out
	}
}
