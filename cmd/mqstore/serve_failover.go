package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/mqstore/mqstore/broker"
	"github.com/mqstore/mqstore/controller"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/failover"
	"github.com/mqstore/mqstore/ha"
	"github.com/mqstore/mqstore/internal/cli"
	"github.com/mqstore/mqstore/internal/handoff"
)

// failoverFlags are serve's flags for a broker that follows the failover
// controller (and, with --controller, runs a member of its group).
type failoverFlags struct {
	set        *string
	peers      *string
	heartbeat  *time.Duration
	embed      *string
	ctrlID     *string
	ctrlListen *string
	ctrlDir    *string
	expiry     *time.Duration
	raftBeat   *time.Duration
	haAdv      *string
	lease      *time.Duration
}

func addFailoverFlags(fs *flag.FlagSet) *failoverFlags {
	return &failoverFlags{
		set: fs.String("broker-set", "", "follow the failover controller as a replica of this broker set: the controller "+
			"elects the master (no --role); --broker-id is the replica's id in the set (default: assigned at the first start)"),
		peers: fs.String("controller-peers", "", "the controllers' RPC addresses, host:port comma-separated (default with --controller: "+
			"--controller-listen)"),
		heartbeat: fs.Duration("controller-heartbeat", failover.DefaultHeartbeatInterval, "how often the broker heartbeats the controller leader "+
			"(the controllers' --broker-expiry must be several of these)"),
		embed: fs.String("controller", "", "also run a member of the controller group in this process: the whole group, "+
			"id=raftaddr,id=raftaddr,… (as mqstore controller --peers)"),
		ctrlID:     fs.String("controller-id", "", "this process's controller id in --controller"),
		ctrlListen: fs.String("controller-listen", controller.DefaultListenAddr, "the embedded controller's RPC address"),
		ctrlDir:    fs.String("controller-dir", "", "the embedded controller's raft directory (default: DIR-controller)"),
		expiry: fs.Duration("broker-expiry", controller.DefaultBrokerExpiry, "the embedded controller: a broker with no heartbeat "+
			"for this long is dead"),
		raftBeat: fs.Duration("raft-heartbeat", time.Second, "the embedded controller's raft heartbeat and election timeout"),
		lease: fs.Duration("master-lease", 0, "with --broker-set: a master whose heartbeats the controller leader has not answered "+
			"for this long refuses sends until one is (below the controllers' --broker-expiry; at least two --controller-heartbeat; 0: no lease)"),
		haAdv: fs.String("ha-advertise", "", "with --broker-set: the HA address registered with the controller, where slaves dial "+
			"(default: the --ha-listen address)"),
	}
}

// on reports whether serve runs a broker that follows the controller.
func (f *failoverFlags) on() bool {
	return *f.set != "" || *f.peers != "" || *f.embed != "" || *f.haAdv != ""
}

// serveFailover runs a broker of a broker set that follows the failover
// controller until ctx ends.
func serveFailover(ctx context.Context, fs *flag.FlagSet, f *failoverFlags, h *haFlags, bf *brokerFlags, rf *retentionFlags, dir, backend, flush string,
	segmentSize int64, recycle int, every time.Duration, stderr io.Writer) error {
	if err := checkFailoverFlags(fs, f, h, bf); err != nil {
		return err
	}
	if recycle < 0 {
		return cli.BadFlag(fs, "--recycle-segments must not be negative, got %d", recycle)
	}
	if err := rf.check(fs); err != nil {
		return err
	}
	mode, err := engine.ParseFlushMode(flush)
	if err != nil {
		return cli.BadFlag(fs, "--flush: %v", err)
	}
	if err := bf.check(fs); err != nil {
		return err
	}
	var addrs []string
	for _, a := range strings.Split(*f.peers, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	log := textLogger(stderr)
	var ctrl *controller.Controller
	if *f.embed != "" {
		if ctrl, err = startEmbeddedController(ctx, fs, f, dir, *h.minInSync, log); err != nil {
			return err
		}
		defer ctrl.Close()
		fmt.Fprintf(stderr, "controller %s listening on %s\n", *f.ctrlID, ctrl.Addr())
		if len(addrs) == 0 {
			addrs = []string{ctrl.Addr()}
		}
	}
	if len(addrs) == 0 {
		return cli.BadFlag(fs, "--controller-peers is required (or --controller to run one here)")
	}
	o, err := failoverOptions(fs, f, h, bf, dir, backend, mode, segmentSize, recycle, addrs, log)
	if err != nil {
		return err
	}
	rf.set(&o.Store)
	var front *remotingFront
	var storeHost netip.AddrPort
	if *bf.listen != "" {
		ln, host, err := bf.listenRemoting(fs)
		if err != nil {
			return err
		}
		storeHost = host
		front = &remotingFront{sock: handoff.New(ln, nil, log), opts: bf.brokerOptions(log), log: log, stderr: stderr}
		defer front.close()
	}
	// Every settled role is recorded in the store directory (for
	// repair-slave), then served to clients when there is a front.
	o.OnRole = func(fb *failover.Broker, r failover.Role, s *engine.Store) {
		if r != failover.Fenced && s != nil {
			if err := recordServedRole(s.Dir(), s.Options().Role); err != nil {
				log.Warn("record the role served", "role", r, "err", err)
			}
		}
		if front != nil {
			front.onRole(fb, r, s)
		}
	}
	if front != nil {
		o.Addr, o.Store.StoreHost = *bf.advertise, storeHost
	}
	fmt.Fprintf(stderr, "broker of set %s: registering with the controllers at %s\n", *f.set, strings.Join(addrs, ","))
	b, err := failover.Start(ctx, o)
	if err != nil {
		return err
	}
	if front != nil {
		fmt.Fprintf(stderr, "broker %d of set %s: remoting on %s, served while master or slave\n", b.ID(), *f.set, *bf.advertise)
	}
	fmt.Fprintf(stderr, "broker %d of set %s: ha on %s, fenced until the controller gives it a role\n", b.ID(), *f.set, b.HAAddr())
	stop := logStatus(every, func() { logFailover(log, b) })
	reportRoles(ctx, b, stderr)
	stop()
	logFailover(log, b)
	return errors.Join(b.Close())
}

// failoverOptions are the failover broker's options from the flags.
func failoverOptions(fs *flag.FlagSet, f *failoverFlags, h *haFlags, bf *brokerFlags, dir, backend string, mode engine.FlushMode,
	segmentSize int64, recycle int, addrs []string, log *slog.Logger) (failover.Options, error) {
	haListen := *h.listen
	if haListen == "" {
		haListen = ha.DefaultListenAddr
	}
	serverTLS, clientTLS, secret, err := haSecurity(fs, h, haListen)
	if err != nil {
		return failover.Options{}, err
	}
	if *f.haAdv != "" {
		if _, _, err := net.SplitHostPort(*f.haAdv); err != nil {
			return failover.Options{}, cli.BadFlag(fs, "--ha-advertise %q: %v", *f.haAdv, err)
		}
	}
	o := failover.Options{Set: *f.set, ID: max(*bf.id, 0), Dir: dir, Controllers: addrs, HAListen: haListen, HAAdvertise: *f.haAdv,
		LeaseTimeout: *f.lease, HeartbeatInterval: *f.heartbeat, MinInSyncReplicas: *h.minInSync, AckTimeout: *h.slaveTimeout,
		Store: engine.Options{Backend: backend, FlushMode: mode, SegmentSizeBytes: segmentSize, RecycleSegments: recycle, SlaveTimeout: *h.slaveTimeout,
			HASlaveFallbehindMax: *h.fallbehind, Logger: log},
		Master: ha.MasterOptions{SendHeartbeatInterval: *h.heartbeat, HousekeepingInterval: *h.housekeeping, TransferBatchSize: *h.batch,
			TLS: serverTLS, Secret: secret, Logger: log},
		Slave: ha.SlaveOptions{SendHeartbeatInterval: *h.heartbeat, HousekeepingInterval: *h.housekeeping, TLS: clientTLS, Secret: secret,
			Logger: log},
		Logger: log}
	if o.AckTimeout <= 0 {
		o.AckTimeout = failover.DefaultAckTimeout
	}
	return o, nil
}

// checkFailoverFlags refuses the serve flags that do not fit a broker of
// a broker set.
func checkFailoverFlags(fs *flag.FlagSet, f *failoverFlags, h *haFlags, bf *brokerFlags) error {
	switch {
	case *f.set == "":
		return cli.BadFlag(fs, "--broker-set is required with --controller-peers or --controller")
	case h.role != nil && *h.role != "":
		return cli.BadFlag(fs, "--role is the controller's to give with --broker-set")
	case h.master != nil && *h.master != "":
		return cli.BadFlag(fs, "--master is the controller's to name with --broker-set")
	case *bf.metrics != "":
		return cli.BadFlag(fs, "--metrics-listen is not supported with --broker-set yet")
	case *bf.id == 0 || *bf.id < -1:
		return cli.BadFlag(fs, "--broker-id %d: a replica's id in its set is 1 or more", *bf.id)
	case *f.heartbeat < 10*time.Millisecond:
		return cli.BadFlag(fs, "--controller-heartbeat must be at least 10ms")
	case *f.lease < 0 || (*f.lease > 0 && *f.lease < 2**f.heartbeat):
		return cli.BadFlag(fs, "--master-lease %v: 0 (none), or at least two --controller-heartbeat (%v)", *f.lease, *f.heartbeat)
	case *f.embed != "" && *f.lease > 0 && *f.lease >= *f.expiry:
		return cli.BadFlag(fs, "--master-lease %v must be below --broker-expiry %v", *f.lease, *f.expiry)
	case *h.minInSync == 1:
		return cli.BadFlag(fs, "--min-in-sync-replicas counts the master with --broker-set: at least 2")
	case *h.minInSync < 0:
		return cli.BadFlag(fs, "--min-in-sync-replicas must not be negative")
	}
	return nil
}

// haSecurity loads the HA port's TLS (the server side as master, the
// client side as slave) and secret, and refuses an HA address beyond
// loopback with neither.
func haSecurity(fs *flag.FlagSet, h *haFlags, haListen string) (serverTLS, clientTLS *tls.Config, secret []byte, err error) {
	if serverTLS, secret, err = h.sec.load(fs, true); err != nil {
		return nil, nil, nil, err
	}
	if clientTLS, _, err = h.sec.load(fs, false); err != nil {
		return nil, nil, nil, err
	}
	host, _, err := net.SplitHostPort(haListen)
	if err != nil {
		return nil, nil, nil, cli.BadFlag(fs, "--ha-listen %q: %v", haListen, err)
	}
	if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && host != "localhost" && serverTLS == nil && secret == nil {
		return nil, nil, nil, cli.BadFlag(fs, "--ha-listen %s is reachable beyond this machine: it streams the whole CommitLog, so it needs TLS "+
			"(--tls-cert, --tls-key, --tls-ca; mqstore gen-certs makes a replica certificate) or --ha-secret-file", haListen)
	}
	return serverTLS, clientTLS, secret, nil
}

// reportRoles prints each change of the broker's role until ctx ends.
func reportRoles(ctx context.Context, b *failover.Broker, stderr io.Writer) {
	last := failover.Status{Role: -1}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		st := b.Status()
		if st.Role != last.Role || st.Epoch != last.Epoch || st.Writable != last.Writable {
			fmt.Fprintf(stderr, "broker %d: role %v, epoch %d, writable %v\n", b.ID(), st.Role, st.Epoch, st.Writable)
			last = st
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func startEmbeddedController(ctx context.Context, fs *flag.FlagSet, f *failoverFlags, dir string, minISR int,
	log *slog.Logger) (*controller.Controller, error) {
	ps, err := controller.ParsePeers(*f.embed)
	if err != nil {
		return nil, cli.BadFlag(fs, "--controller: %v", err)
	}
	found := false
	for _, p := range ps {
		found = found || p.ID == *f.ctrlID
	}
	switch {
	case *f.ctrlID == "":
		return nil, cli.BadFlag(fs, "--controller-id is required with --controller")
	case !found:
		return nil, cli.BadFlag(fs, "--controller-id %q is not among --controller", *f.ctrlID)
	case *f.expiry < 100*time.Millisecond:
		return nil, cli.BadFlag(fs, "--broker-expiry must be at least 100ms")
	case *f.expiry < 2**f.heartbeat:
		return nil, cli.BadFlag(fs, "--broker-expiry %v must be at least two --controller-heartbeat (%v)", *f.expiry, *f.heartbeat)
	case *f.raftBeat < 10*time.Millisecond:
		return nil, cli.BadFlag(fs, "--raft-heartbeat must be at least 10ms")
	}
	cdir := *f.ctrlDir
	if cdir == "" {
		cdir = strings.TrimRight(dir, "/") + "-controller"
	}
	if minISR == 0 {
		minISR = failover.DefaultMinInSyncReplicas
	}
	return controller.Start(ctx, controller.Options{ID: *f.ctrlID, Peers: ps, Dir: cdir, ListenAddr: *f.ctrlListen,
		HeartbeatTimeout: *f.raftBeat, ElectionTimeout: *f.raftBeat, LeaderLeaseTimeout: *f.raftBeat / 2,
		BrokerExpiry: *f.expiry, ScanInterval: min(*f.expiry/4, 500*time.Millisecond), Logger: log,
		DefaultSetConfig: controller.SetConfig{MinInSyncReplicas: minISR}})
}

func logFailover(log *slog.Logger, b *failover.Broker) {
	st := b.Status()
	attrs := []any{slog.Int64("broker", st.ID), slog.String("role", st.Role.String()), slog.Int("epoch", int(st.Epoch)),
		slog.Int64("master", st.MasterID), slog.Bool("writable", st.Writable)}
	if st.Role == failover.Master {
		attrs = append(attrs, slog.Any("inSync", st.SyncStateSet))
	}
	if st.SlaveError != "" {
		attrs = append(attrs, slog.String("slaveError", st.SlaveError))
	}
	var stats *engine.Stats
	b.WithStore(func(s *engine.Store) error {
		attrs = append(attrs, slog.Int64("maxOffset", s.MaxOffset()))
		st := s.Stats()
		stats = &st
		return nil
	})
	log.Info("failover", attrs...)
	if stats != nil {
		logStats(log, *stats)
	}
}

// remotingFront serves a failover broker's store to RocketMQ clients on
// one socket: a remoting broker per settled role, started with the role
// and closed before the store it reads is. The master's registers with
// the name servers as broker 0 and puts through the failover broker's ack
// rule; a slave's copies the master's topics and consumer offsets and
// serves no reads.
type remotingFront struct {
	sock   *handoff.Socket
	opts   broker.Options
	log    *slog.Logger
	stderr io.Writer

	mu  sync.Mutex
	cur *broker.Broker
}

func (f *remotingFront) onRole(fb *failover.Broker, r failover.Role, s *engine.Store) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur != nil {
		if err := f.cur.Close(); err != nil {
			f.log.Warn("close the remoting broker of the last role", "err", err)
		}
		f.cur = nil
	}
	if r == failover.Fenced || s == nil {
		return
	}
	o := f.opts
	if r == failover.Master {
		o.BrokerID = 0
		o.Put, o.HAAddr, o.ReadLimit = fb.Put, fb.HAAddr(), fb.ConfirmedOffset
	} else {
		o.Namesrv = nil // clients find the master; a slave only keeps up with its topics and offsets
		o.BrokerID = fb.ID()
		o.MasterAddr = func() string { return fb.Status().MasterAddr }
		o.NoSlaveReads = true
	}
	b, err := broker.New(s, f.sock.StartTerm(), o)
	if err != nil {
		f.log.Error("start the remoting broker", "role", r, "err", err)
		return
	}
	f.cur = b
	fmt.Fprintf(f.stderr, "remoting broker on %s serving as %v\n", b.Addr(), r)
}

func (f *remotingFront) close() {
	f.onRole(nil, failover.Fenced, nil)
	f.sock.Close()
}
