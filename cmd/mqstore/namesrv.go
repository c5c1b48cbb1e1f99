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
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mqstore namesrv [--listen ADDR] [--broker-expiry DURATION]\n\n"+
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
	log := textLogger(stderr)
	s, err := namesrv.Start(namesrv.Options{ListenAddr: loopbackIfBare(*listen), BrokerExpiry: *expiry, Logger: log})
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
