package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mqstore/mqstore/internal/cli"
	"github.com/mqstore/mqstore/namesrv"
)

// runNamesrv runs a RocketMQ name server until ctx ends.
func runNamesrv(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("namesrv", flag.ContinueOnError)
	listen := fs.String("listen", namesrv.DefaultListenAddr, "address to listen on (host:port; loopback by default; a bare :PORT binds loopback)")
	expiry := fs.Duration("broker-expiry", namesrv.DefaultBrokerExpiry, "a broker that has not registered for this long leaves the routes")
	cert := fs.String("tls-cert", "", "serve over TLS with this certificate (PEM): RocketMQ clients that use TLS speak it to the name server too")
	key := fs.String("tls-key", "", "the private key of --tls-cert (PEM)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mqstore namesrv [--listen ADDR] [--broker-expiry DURATION] [--tls-cert FILE --tls-key FILE]\n\n"+
			"Runs a RocketMQ name server until SIGINT or SIGTERM: brokers (mqstore serve --namesrv) register with it,\n"+
			"RocketMQ clients ask it for topic routes.")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, 0); err != nil {
		return err
	}
	if *expiry < time.Second {
		return cli.BadFlag(fs, "--broker-expiry must be at least 1s")
	}
	o := namesrv.Options{ListenAddr: loopbackIfBare(*listen), BrokerExpiry: *expiry, Logger: textLogger(stderr)}
	if (*cert == "") != (*key == "") {
		return cli.BadFlag(fs, "--tls-cert and --tls-key go together")
	}
	if *cert != "" {
		var err error
		if o.Server.TLS, err = remotingServerTLS(*cert, *key); err != nil {
			return cli.BadFlag(fs, "--tls-cert %s, --tls-key %s: %v", *cert, *key, err)
		}
	}
	s, err := namesrv.Start(o)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "name server listening on %s\n", s.Addr())
	<-ctx.Done()
	return s.Close()
}

// loopbackIfBare makes a bare :PORT listen address a loopback one, as
// every listening flag of mqstore reads it: binding every interface takes
// a host that says so (0.0.0.0:PORT, [::]:PORT).
func loopbackIfBare(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "127.0.0.1" + addr
	}
	return addr
}
