package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/mqstore/mqstore/controller"
	"github.com/mqstore/mqstore/internal/cli"
)

// controllerPeers parses --peers and finds this controller among them:
// --id, or the peer whose address is --raft-listen (set in *id). It
// returns the address raft binds: --raft-listen when given, else this
// controller's entry in --peers (which is what the others dial, and may
// differ: a proxy, a translated address).
func controllerPeers(fs *flag.FlagSet, peers string, id *string, raftListen string, listenSet bool) ([]controller.Peer, string, error) {
	ps, err := controller.ParsePeers(peers)
	if err != nil {
		return nil, "", cli.BadFlag(fs, "--peers: %v", err)
	}
	if *id == "" {
		for _, p := range ps {
			if p.RaftAddr == raftListen {
				*id = p.ID
			}
		}
		if *id == "" {
			return nil, "", cli.BadFlag(fs, "--raft-listen %s is not the address of any of --peers (give --id)", raftListen)
		}
	}
	for _, p := range ps {
		if p.ID == *id {
			if !listenSet {
				raftListen = p.RaftAddr
			}
			if _, _, err := net.SplitHostPort(raftListen); err != nil {
				return nil, "", cli.BadFlag(fs, "--raft-listen %q: %v", raftListen, err)
			}
			return ps, raftListen, nil
		}
	}
	return nil, "", cli.BadFlag(fs, "--id %q is not among --peers", *id)
}

// runController runs one member of a controller group until ctx ends.
func runController(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	listen := fs.String("listen", controller.DefaultListenAddr, "address brokers and tools reach this controller on (host:port; loopback by default; a bare :PORT binds loopback)")
	advertise := fs.String("advertise", "", "the RPC address followers name to clients (default: the address --listen bound; set it when --listen is a wildcard)")
	raftListen := fs.String("raft-listen", controller.DefaultRaftAddr, "address this controller's raft transport binds (host:port); without --id, "+
		"its entry in --peers; with --id, default that entry (what the others dial)")
	peers := fs.String("peers", "", "the whole controller group, this one included: id=raftaddr,id=raftaddr,…")
	id := fs.String("id", "", "this controller's id in --peers (default: the peer whose address is --raft-listen)")
	dir := fs.String("dir", "", "directory of the raft log, stable store and snapshots")
	expiry := fs.Duration("broker-expiry", controller.DefaultBrokerExpiry, "a broker with no heartbeat for this long is dead (its master role is given to an in-sync replica)")
	scan := fs.Duration("scan-interval", controller.DefaultScanInterval, "how often the leader looks for dead masters")
	raftHeartbeat := fs.Duration("raft-heartbeat", time.Second, "raft heartbeat and election timeout")
	unclean := fs.Bool("unclean-election", false, "new broker sets allow electing a replica outside the in-sync set when none in it is alive (loses the records only the lost members held)")
	minISR := fs.Int("min-in-sync-replicas", 1, "new broker sets' minimum in-sync set size (master included) for the master to accept a put")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mqstore controller --peers ID=ADDR,... --dir DIR [--listen ADDR] [--raft-listen ADDR] [flags]\n\n"+
			"Runs one member of a controller group until SIGINT or SIGTERM: the group keeps each broker set's master,\n"+
			"epochs and in-sync set (raft), and its leader elects an in-sync replica when a master's heartbeats stop.")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, 0); err != nil {
		return err
	}
	if err := cli.Required(fs, "peers", "dir"); err != nil {
		return err
	}
	listenSet := false
	fs.Visit(func(f *flag.Flag) { listenSet = listenSet || f.Name == "raft-listen" })
	ps, bind, err := controllerPeers(fs, *peers, id, *raftListen, listenSet)
	if err != nil {
		return err
	}
	switch {
	case *expiry < 100*time.Millisecond:
		return cli.BadFlag(fs, "--broker-expiry must be at least 100ms")
	case *scan <= 0 || *scan > *expiry:
		return cli.BadFlag(fs, "--scan-interval must be positive and at most --broker-expiry")
	case *raftHeartbeat < 10*time.Millisecond:
		return cli.BadFlag(fs, "--raft-heartbeat must be at least 10ms")
	case *minISR < 1:
		return cli.BadFlag(fs, "--min-in-sync-replicas must be at least 1")
	}
	log := textLogger(stderr)
	c, err := controller.Start(ctx, controller.Options{ID: *id, Peers: ps, RaftBind: bind, Dir: *dir, ListenAddr: loopbackIfBare(*listen), AdvertiseAddr: *advertise,
		HeartbeatTimeout: *raftHeartbeat, ElectionTimeout: *raftHeartbeat, LeaderLeaseTimeout: *raftHeartbeat / 2,
		BrokerExpiry: *expiry, ScanInterval: *scan, Logger: log,
		DefaultSetConfig: controller.SetConfig{UncleanElection: *unclean, MinInSyncReplicas: *minISR}})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "controller %s listening on %s (raft on %s)\n", *id, c.Addr(), bind)
	<-ctx.Done()
	return c.Close()
}
