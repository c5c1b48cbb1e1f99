package main

import (
	"flag"
	"log/slog"
	"net"
	"strings"

	"github.com/mqstore/mqstore/broker"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/cli"
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
	ln          net.Listener
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
	}
}

// open checks the flags and, when remoting is on, opens the listener and
// sets the store's StoreHost to the advertised address (records and
// message ids carry it).
func (bf *brokerFlags) open(fs *flag.FlagSet, o *engine.Options) error {
	if *bf.listen == "" {
		if *bf.namesrv != "" || *bf.advertise != "" {
			return cli.BadFlag(fs, "--namesrv and --remoting-advertise go with --remoting-listen")
		}
		return nil
	}
	addr := *bf.listen
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr
	}
	switch {
	case o.Role == engine.Slave && *bf.id == 0:
		return cli.BadFlag(fs, "--broker-id 0 is a master's; a slave's is above 0")
	case o.Role != engine.Slave && *bf.id > 0:
		return cli.BadFlag(fs, "--broker-id %d is a slave's; a %v's is 0", *bf.id, o.Role)
	}
	for _, ns := range bf.namesrvs() {
		if _, _, err := net.SplitHostPort(ns); err != nil {
			return cli.BadFlag(fs, "--namesrv %q: %v", ns, err)
		}
	}
	if *bf.advertise != "" {
		if _, err := broker.StoreHost(*bf.advertise); err != nil {
			return cli.BadFlag(fs, "--remoting-advertise: %v", err)
		}
	}
	ln, err := broker.Listen(addr)
	if err != nil {
		return err
	}
	adv := *bf.advertise
	if adv == "" {
		adv = ln.Addr().String()
	}
	host, err := broker.StoreHost(adv)
	if err != nil {
		ln.Close()
		return cli.BadFlag(fs, "--remoting-listen: %v", err)
	}
	*bf.advertise = adv
	o.StoreHost = host
	bf.ln = ln
	return nil
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

// start serves the store to RocketMQ clients (nil when remoting is off).
func (bf *brokerFlags) start(store *engine.Store, haAddr string, log *slog.Logger) (*broker.Broker, error) {
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
	b, err := broker.New(store, bf.ln, broker.Options{AdvertisedAddr: *bf.advertise, Namesrv: bf.namesrvs(), Cluster: *bf.cluster,
		BrokerName: *bf.name, BrokerID: id, HAAddr: haAddr, NoAutoCreateTopic: *bf.noAutoTopic, Logger: log})
	bf.ln = nil
	return b, err
}

// close stops the broker (before the store closes) or releases an unused
// listener.
func (bf *brokerFlags) close(b *broker.Broker) error {
	if bf.ln != nil {
		bf.ln.Close()
		bf.ln = nil
	}
	if b == nil {
		return nil
	}
	return b.Close()
}
