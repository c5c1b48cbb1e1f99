package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/ha"
	"github.com/mqstore/mqstore/internal/cli"
)

// haFlags are the replication flags serve, slave and produce share.
type haFlags struct {
	role         *string
	listen       *string
	master       *string
	emptyStart   *string
	heartbeat    *time.Duration
	housekeeping *time.Duration
	batch        *int
	slaveTimeout *time.Duration
	fallbehind   *int64
	minInSync    *int
	sec          *securityFlags
}

// securityFlags are TLS and the shared secret, on every command that runs
// a master or a slave (or probes a master).
type securityFlags struct {
	cert, key, ca *string
	secretFile    *string
}

func addSecurityFlags(fs *flag.FlagSet) *securityFlags {
	return &securityFlags{
		cert: fs.String("tls-cert", "", "mutual TLS 1.3 on the HA connection: this side's certificate (PEM; mqstore gen-certs makes a set)"),
		key:  fs.String("tls-key", "", "mutual TLS: this side's private key (PEM)"),
		ca:   fs.String("tls-ca", "", "mutual TLS: the CA that signs the other side's certificate (PEM)"),
		secretFile: fs.String("ha-secret-file", "",
			"without TLS: a file holding a shared secret (at least 16 bytes, mode 0600); peers prove they hold it, it never crosses the wire"),
	}
}

// load reads the TLS files and the secret; server is the master's side.
func (f *securityFlags) load(fs *flag.FlagSet, server bool) (*tls.Config, []byte, error) {
	var cfg *tls.Config
	if *f.cert != "" || *f.key != "" || *f.ca != "" {
		var err error
		if cfg, err = ha.LoadTLS(*f.cert, *f.key, *f.ca, server); err != nil {
			return nil, nil, cli.BadFlag(fs, "%v", err)
		}
	}
	var secret []byte
	if *f.secretFile != "" {
		var err error
		if secret, err = ha.LoadSecret(*f.secretFile); err != nil {
			return nil, nil, cli.BadFlag(fs, "--ha-secret-file: %v", err)
		}
	}
	return cfg, secret, nil
}

// addHAFlags registers the replication flags; role is the --role flag's
// default ("" for none), master whether --master (a slave's) is offered.
func addHAFlags(fs *flag.FlagSet, role string, master bool) *haFlags {
	h := &haFlags{
		listen: fs.String("ha-listen", "", "a master's HA address, where slaves connect (RocketMQ's haListenPort; default "+ha.DefaultListenAddr+
			"; an address beyond loopback needs --tls-* or --ha-secret-file)"),
		emptyStart: fs.String("empty-slave-start", "min-offset",
			"where a master starts a slave with an empty CommitLog: min-offset (a full copy) or last-segment (RocketMQ's)"),
		heartbeat:    fs.Duration("ha-heartbeat", ha.DefaultSendHeartbeatInterval, "haSendHeartbeatInterval: heartbeat and report interval"),
		housekeeping: fs.Duration("ha-housekeeping", ha.DefaultHousekeepingInterval, "haHousekeepingInterval: a connection silent this long is dropped"),
		batch:        fs.Int("ha-batch", ha.DefaultTransferBatchSize, "haTransferBatchSize: the most CommitLog bytes in one frame"),
		slaveTimeout: fs.Duration("slave-timeout", engine.DefaultSlaveTimeout, "slaveTimeout: how long a SYNC_MASTER put waits for a slave"),
		fallbehind: fs.Int64("fallbehind-max", engine.DefaultHASlaveFallbehindMax,
			"haSlaveFallbehindMax: a SYNC_MASTER put gets SLAVE_NOT_AVAILABLE at once when the best slave is this many bytes behind"),
		minInSync: fs.Int("min-in-sync-replicas", 0, "sync-master: wait for every slave of the in-sync set, and answer IN_SYNC_REPLICAS_NOT_ENOUGH "+
			"when it has fewer than this many (0: RocketMQ's classic mode, the best slave)"),
		sec: addSecurityFlags(fs),
	}
	if role != "-" {
		h.role = fs.String("role", role, "async-master, sync-master or slave")
	}
	if master {
		h.master = fs.String("master", "", "a slave's master: its HA address host:port")
	}
	return h
}

func (h *haFlags) parseRole(fs *flag.FlagSet) (engine.BrokerRole, error) {
	r := engine.Slave
	if h.role != nil {
		var err error
		if r, err = engine.ParseBrokerRole(*h.role); err != nil {
			return 0, cli.BadFlag(fs, "--role: %v", err)
		}
	}
	switch {
	case *h.slaveTimeout <= 0:
		return 0, cli.BadFlag(fs, "--slave-timeout must be positive, got %v", *h.slaveTimeout)
	case *h.fallbehind <= 0:
		return 0, cli.BadFlag(fs, "--fallbehind-max must be positive, got %d", *h.fallbehind)
	case *h.minInSync < 0:
		return 0, cli.BadFlag(fs, "--min-in-sync-replicas must not be negative")
	case *h.minInSync > 0 && r != engine.SyncMaster:
		return 0, cli.BadFlag(fs, "--min-in-sync-replicas is for a sync-master")
	}
	return r, nil
}

// storeOptions applies the role's engine options.
func (h *haFlags) storeOptions(o engine.Options, role engine.BrokerRole) engine.Options {
	o.Role = role
	o.SlaveTimeout = *h.slaveTimeout
	o.HASlaveFallbehindMax = *h.fallbehind
	o.MinInSyncReplicas = *h.minInSync
	return o
}

// masterOptions builds and checks the HA master's options (a bad value
// is a usage error, before any store is opened).
func (h *haFlags) masterOptions(fs *flag.FlagSet, log *slog.Logger) (ha.MasterOptions, error) {
	start, err := ha.ParseEmptySlaveStart(*h.emptyStart)
	if err != nil {
		return ha.MasterOptions{}, cli.BadFlag(fs, "--empty-slave-start: %v", err)
	}
	tlsCfg, secret, err := h.sec.load(fs, true)
	if err != nil {
		return ha.MasterOptions{}, err
	}
	o := ha.MasterOptions{ListenAddr: *h.listen, SendHeartbeatInterval: *h.heartbeat, HousekeepingInterval: *h.housekeeping,
		TransferBatchSize: *h.batch, EmptySlaveStart: start, TLS: tlsCfg, Secret: secret, Logger: log}
	if err := o.Validate(); err != nil {
		return o, cli.BadFlag(fs, "%v", err)
	}
	return o, nil
}

// slaveOptions builds and checks the HA slave's options.
func (h *haFlags) slaveOptions(fs *flag.FlagSet, log *slog.Logger) (ha.SlaveOptions, error) {
	tlsCfg, secret, err := h.sec.load(fs, false)
	if err != nil {
		return ha.SlaveOptions{}, err
	}
	o := ha.SlaveOptions{MasterAddress: *h.master, SendHeartbeatInterval: *h.heartbeat, HousekeepingInterval: *h.housekeeping,
		TLS: tlsCfg, Secret: secret, Logger: log}
	if err := o.Validate(); err != nil {
		return o, cli.BadFlag(fs, "%v", err)
	}
	return o, nil
}

// textLogger logs to stderr for the commands that run a while.
func textLogger(stderr io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return serve(ctx, "serve", args, stderr)
}

func runSlave(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return serve(ctx, "slave", args, stderr)
}

// serveFlags are the flags of serve and slave.
type serveFlags struct {
	dir, backend, flush *string
	segmentSize         *int64
	recycle             *int
	statusEvery         *time.Duration
	rf                  *retentionFlags
	h                   *haFlags
	bf                  *brokerFlags
	fo                  *failoverFlags
}

// addServeFlags registers the flags of serve, or of slave (name "slave":
// no --role).
func addServeFlags(fs *flag.FlagSet, name string) *serveFlags {
	f := &serveFlags{
		dir:         fs.String("dir", "", "store directory (required)"),
		backend:     fs.String("backend", engine.DefaultOptions().Backend, "I/O backend: "+backendList()),
		flush:       fs.String("flush", "async", "flush mode: async or sync"),
		segmentSize: fs.Int64("segment-size", 0, "CommitLog segment size in bytes for a new store (default 1 GiB); a slave's must be its master's"),
		statusEvery: fs.Duration("status-interval", 5*time.Second, "how often to log the replication state (0: never)"),
		recycle: fs.Int("recycle-segments", 0, "keep up to N CommitLog segments retention deletes and reuse them as new segments "+
			"(engine.Options.RecycleSegments; once used, records carry a whole-record checksum; a slave reuses segments once its master does)"),
	}
	f.rf = addRetentionFlags(fs)
	role := ""
	if name == "slave" {
		role = "-"
	}
	f.h = addHAFlags(fs, role, true)
	f.bf = addBrokerFlags(fs)
	f.fo = addFailoverFlags(fs)
	fs.Usage = func() {
		if name == "slave" {
			fmt.Fprintln(fs.Output(), "usage: mqstore slave --dir DIR --master HOST:PORT [--backend NAME] [--flush async|sync] [--segment-size BYTES]\n\n"+
				"Runs a slave store (serve --role slave) until SIGINT or SIGTERM: it replicates the master's CommitLog\nand serves reads.")
		} else {
			fmt.Fprintln(fs.Output(), "usage: mqstore serve --dir DIR --role async-master|sync-master|slave [--ha-listen ADDR] [--master HOST:PORT]\n"+
				"       [--backend NAME] [--flush async|sync] [--segment-size BYTES] [--recycle-segments N] [--file-reserved-time D --delete-when HOURS]\n"+
				"       [--remoting-listen ADDR --namesrv ADDR]\n\n"+
				"Runs a store until SIGINT or SIGTERM, then closes it cleanly. A master listens for slaves on --ha-listen;\n"+
				"a slave replicates the master at --master. The replication state is logged every --status-interval.\n"+
				"With --remoting-listen the store is also a RocketMQ broker: RocketMQ clients produce and consume through it,\n"+
				"and it registers with the name servers at --namesrv (mqstore namesrv).\n\n"+
				"       mqstore serve --dir DIR --broker-set NAME --broker-id N --controller-peers ADDR,... [--controller ID=ADDR,... --controller-id ID]\n"+
				"       [--ha-listen ADDR] [--remoting-listen ADDR --namesrv ADDR]\n\n"+
				"With --broker-set the broker follows the failover controller, which gives it its role; it serves RocketMQ\n"+
				"clients on --remoting-listen while it is master (a slave's broker only keeps up with the master's topics).")
		}
		fs.PrintDefaults()
	}
	return f
}

// options checks the parsed flags and returns the store's options.
func (f *serveFlags) options(fs *flag.FlagSet, log *slog.Logger) (engine.Options, error) {
	h := f.h
	if h.role != nil && *h.role == "" {
		return engine.Options{}, cli.BadFlag(fs, "--role is required")
	}
	r, err := h.parseRole(fs)
	if err != nil {
		return engine.Options{}, err
	}
	mode, err := engine.ParseFlushMode(*f.flush)
	if err != nil {
		return engine.Options{}, cli.BadFlag(fs, "--flush: %v", err)
	}
	switch {
	case r == engine.Slave && *h.master == "":
		return engine.Options{}, cli.BadFlag(fs, "--master is required for a slave")
	case r == engine.Slave && *h.listen != "":
		return engine.Options{}, cli.BadFlag(fs, "--ha-listen is for a master; a slave connects to --master")
	case r != engine.Slave && *h.master != "":
		return engine.Options{}, cli.BadFlag(fs, "--master is for a slave; a %v listens on --ha-listen", r)
	case *f.statusEvery < 0:
		return engine.Options{}, cli.BadFlag(fs, "--status-interval must not be negative")
	case *f.recycle < 0:
		return engine.Options{}, cli.BadFlag(fs, "--recycle-segments must not be negative, got %d", *f.recycle)
	}
	o := engine.Options{Backend: *f.backend, FlushMode: mode, SegmentSizeBytes: *f.segmentSize, RecycleSegments: *f.recycle, Logger: log}
	if err := f.rf.apply(fs, &o); err != nil {
		return engine.Options{}, err
	}
	return h.storeOptions(o, r), nil
}

// serve runs a master or a slave until ctx ends (SIGINT, SIGTERM), then
// closes cleanly; it logs the replication state every --status-interval.
func serve(ctx context.Context, name string, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	f := addServeFlags(fs, name)
	if err := cli.Parse(fs, args, stderr, 0); err != nil {
		return err
	}
	if err := cli.Required(fs, "dir"); err != nil {
		return err
	}
	if f.fo.on() {
		return serveFailover(ctx, fs, f.fo, f.h, f.bf, f.rf, *f.dir, *f.backend, *f.flush, *f.segmentSize, *f.recycle, *f.statusEvery, stderr)
	}
	log := textLogger(stderr)
	o, err := f.options(fs, log)
	if err != nil {
		return err
	}
	h, bf := f.h, f.bf
	if o.Role == engine.Slave {
		so, err := h.slaveOptions(fs, log)
		if err != nil {
			return err
		}
		if err := bf.open(fs, &o); err != nil {
			return err
		}
		defer bf.close(nil)
		return serveSlave(ctx, *f.dir, o, so, *f.statusEvery, log, stderr, bf)
	}
	mo, err := h.masterOptions(fs, log)
	if err != nil {
		return err
	}
	if err := bf.open(fs, &o); err != nil {
		return err
	}
	defer bf.close(nil)
	return serveMaster(ctx, *f.dir, o, mo, *f.statusEvery, log, stderr, bf)
}

func serveMaster(ctx context.Context, dir string, o engine.Options, mo ha.MasterOptions, every time.Duration, log *slog.Logger, stderr io.Writer,
	bf *brokerFlags) error {
	store, err := openServed(ctx, dir, o)
	if err != nil {
		return err
	}
	m, err := ha.NewMaster(store, mo)
	if err != nil {
		store.Close()
		return err
	}
	fmt.Fprintf(stderr, "ha master listening on %s\n", m.Addr())
	b, err := bf.start(store, m.Addr().String(), masterSlaveLags(m), log, stderr)
	if err != nil {
		return errors.Join(err, bf.close(nil), m.Close(), store.Close())
	}
	stop := logStatus(every, func() { logMaster(log, store, m); logStore(log, store) })
	<-ctx.Done()
	stop()
	logMaster(log, store, m)
	logStore(log, store)
	return errors.Join(bf.close(b), m.Close(), store.Close())
}

func serveSlave(ctx context.Context, dir string, o engine.Options, so ha.SlaveOptions, every time.Duration, log *slog.Logger,
	stderr io.Writer, bf *brokerFlags) error {
	store, err := openServed(ctx, dir, o)
	if err != nil {
		return err
	}
	s, err := ha.NewSlave(store, so)
	if err != nil {
		store.Close()
		return err
	}
	b, err := bf.start(store, "", nil, log, stderr)
	if err != nil {
		return errors.Join(err, bf.close(nil), store.Close())
	}
	// One line once the store is open (and SIGTERM handled: main set that
	// up first), as the master says where it listens.
	fmt.Fprintf(stderr, "ha slave of %s serving %s\n", so.MasterAddress, dir)
	stop := logStatus(every, func() { logSlave(log, s); logStore(log, store) })
	err = s.Run(ctx)
	stop()
	logSlave(log, s)
	logStore(log, store)
	return errors.Join(err, bf.close(b), store.Close())
}

// logStore logs the store's extent and its segments: retention and reuse
// show here (segmentsRetired went into the pool, segmentsRecycled came out
// of it as new segments).
func logStore(log *slog.Logger, store *engine.Store) { logStats(log, store.Stats()) }

func logStats(log *slog.Logger, st engine.Stats) {
	log.Info("store", slog.Int64("minOffset", st.MinOffset), slog.Int64("flushedOffset", st.FlushedOffset), slog.Int("segments", st.Segments),
		slog.Uint64("segmentsRetired", st.SegmentsRetired), slog.Uint64("segmentsRecycled", st.SegmentsRecycled), slog.Int("segmentsPooled", st.SegmentsPooled))
}

// logStatus calls f every interval until the returned stop is called.
func logStatus(every time.Duration, f func()) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

func logMaster(log *slog.Logger, store *engine.Store, m *ha.Master) {
	slaves := m.Slaves()
	st := store.ReplicationStats()
	log.Info("replication", slog.String("role", st.Role), slog.Int("slaves", len(slaves)), slog.Int64("maxOffset", store.MaxOffset()),
		slog.Int64("replicatedOffset", st.ReplicatedOffset), slog.Uint64("flushSlaveTimeouts", st.FlushSlaveTimeouts),
		slog.Uint64("slaveNotAvailable", st.SlaveNotAvailable), slog.Uint64("refused", m.Refused()),
		slog.Any("inSync", st.InSync), slog.Int64("inSyncOffset", st.InSyncOffset), slog.Uint64("inSyncNotEnough", st.InSyncReplicasNotEnough))
	for _, s := range slaves {
		log.Info("replication slave", slog.String("addr", s.Addr), slog.Bool("verified", s.Verified), slog.Bool("inSync", s.InSync),
			slog.Int64("ackedOffset", s.AckedOffset), slog.Int64("lagBytes", s.LagBytes),
			slog.Int64("requestedOffset", s.RequestedOffset), slog.Duration("connectedFor", time.Since(s.ConnectedAt).Round(time.Millisecond)))
	}
}

func logSlave(log *slog.Logger, s *ha.Slave) {
	st := s.Status()
	lag := int64(-1)
	if st.MasterOffset >= 0 {
		lag = max(st.MasterOffset-st.Offset, 0)
	}
	log.Info("replication", slog.String("role", "SLAVE"), slog.String("master", st.MasterAddress), slog.Bool("connected", st.Connected),
		slog.Int64("offset", st.Offset), slog.Int64("flushedOffset", st.FlushedOffset), slog.Int64("ackedOffset", st.AckedOffset),
		slog.Int64("masterOffset", st.MasterOffset),
		slog.Int64("lagBytes", lag), slog.Int("connects", st.Connects), slog.String("lastError", st.LastError))
}

// runRepairSlave is the explicit repair of a diverged slave: it finds
// where the slave's CommitLog parts from the master's (or takes --offset)
// and cuts it there, keeping the cut bytes in DIR/diverged/.
func runRepairSlave(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("repair-slave", flag.ContinueOnError)
	dir := fs.String("dir", "", "the slave's store directory (required; the slave must be stopped)")
	master := fs.String("master", "", "the master's HA address: find where the slave parts from it")
	offset := fs.Int64("offset", -1, "cut here instead (a record boundary)")
	dryRun := fs.Bool("dry-run", false, "with --master: only say where the slave would be cut")
	force := fs.Bool("force", false, "cut a store the mqstore command last served as a master (one that is to rejoin as a slave)")
	sec := addSecurityFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mqstore repair-slave --dir DIR (--master HOST:PORT [--dry-run] | --offset OFFSET)\n\n"+
			"Cuts a diverged slave's CommitLog where it parts from its master's (found by comparing records with the\n"+
			"master over the HA port) or at --offset, keeping the cut bytes in DIR/diverged/, and truncates its\n"+
			"ConsumeQueues and index to match. A slave refuses a diverged master and never does this by itself. A store\n"+
			"last served as a master (DIR/served-role) may hold records it acknowledged: cutting it takes --force.")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, 0); err != nil {
		return err
	}
	if err := cli.Required(fs, "dir"); err != nil {
		return err
	}
	switch {
	case (*master == "") == (*offset < 0):
		return cli.BadFlag(fs, "give exactly one of --master and --offset")
	case *dryRun && *master == "":
		return cli.BadFlag(fs, "--dry-run goes with --master")
	}
	tlsCfg, secret, err := sec.load(fs, false)
	if err != nil {
		return err
	}
	served, known, err := servedRole(*dir)
	if err != nil {
		return err
	}
	needsForce := known && served != engine.Slave && !*force
	if needsForce && !*dryRun {
		return fmt.Errorf("%s was last served as %v (%s): a master's CommitLog may hold records it acknowledged, and repair-slave "+
			"cuts a slave's; if this store is to rejoin as a slave of another master, run again with --force (the cut bytes are kept in %s)",
			*dir, served, filepath.Join(*dir, servedRoleFile), filepath.Join(*dir, "diverged"))
	}
	o := engine.Options{Role: engine.Slave, NoPreallocate: true, NoRetention: true, Logger: textLogger(stderr)}
	cut := *offset
	if *master != "" {
		store, err := openExistingWith(ctx, *dir, o)
		if err != nil {
			return err
		}
		d, err := ha.FindDivergence(ctx, store, *master, ha.SlaveOptions{TLS: tlsCfg, Secret: secret, Logger: o.Logger})
		if cerr := store.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if !d.Diverged {
			fmt.Fprintf(stdout, "not diverged: the slave's CommitLog (up to %d) is the master's (%d probes); nothing to do\n", d.SlaveEnd, d.Probes)
			return nil
		}
		fmt.Fprintf(stdout, "the slave's CommitLog parts from the master's at %d; it holds up to %d: %d bytes to cut (%d probes)\n",
			d.Offset, d.SlaveEnd, d.SlaveEnd-d.Offset, d.Probes)
		if *dryRun {
			if needsForce {
				fmt.Fprintf(stdout, "this store was last served as %v: the cut takes --force\n", served)
			}
			return nil
		}
		cut = d.Offset
	}
	res, err := engine.TruncateCommitLog(ctx, *dir, cut, o)
	if err != nil {
		return err
	}
	if res.CutBytes == 0 {
		fmt.Fprintf(stdout, "the CommitLog already ends at %d: nothing cut\n", res.Offset)
		return nil
	}
	fmt.Fprintf(stdout, "cut the CommitLog at %d (it ended at %d): %d bytes kept in %v\n", res.Offset, res.OldEnd, res.CutBytes, res.SavedTo)
	return nil
}

// runGenCerts writes a CA and a master, a slave and a replica certificate it signs,
// for trying mutual TLS on the HA port.
func runGenCerts(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gen-certs", flag.ContinueOnError)
	hosts := fs.String("host", "", "comma-separated names and addresses the master's certificate is valid for, besides localhost, 127.0.0.1 and ::1")
	validFor := fs.Duration("valid-for", 365*24*time.Hour, "how long the certificates are valid")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: mqstore gen-certs [--host NAME,...] [--valid-for DURATION] DIR\n\n"+
			"Writes in DIR a CA (ca.pem, ca-key.pem) and a master, a slave and a replica certificate it signs (master.pem,\n"+
			"master-key.pem, slave.pem, slave-key.pem, replica.pem, replica-key.pem; ECDSA P-256), for mutual TLS on the HA port\n"+
			"(a replica of a --broker-set is master and slave in turn: it takes replica.pem):\n"+
			"  mqstore serve --role sync-master --dir M --tls-cert DIR/master.pem --tls-key DIR/master-key.pem --tls-ca DIR/ca.pem\n"+
			"  mqstore slave --dir S --master 127.0.0.1:10912 --tls-cert DIR/slave.pem --tls-key DIR/slave-key.pem --tls-ca DIR/ca.pem\n"+
			"Keep ca-key.pem away from the brokers; it signs certificates the master trusts.")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stderr, 1); err != nil {
		return err
	}
	if *validFor <= 0 {
		return cli.BadFlag(fs, "--valid-for must be positive")
	}
	var extra []string
	for _, h := range strings.Split(*hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			extra = append(extra, h)
		}
	}
	dir := fs.Arg(0)
	if err := ha.GenerateCertificates(dir, extra, *validFor); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s/{%s,%s,%s,%s,%s,%s,%s,%s}\n", dir, ha.Certificates.CA, ha.Certificates.CAKey, ha.Certificates.Master,
		ha.Certificates.MasterKey, ha.Certificates.Slave, ha.Certificates.SlaveKey, ha.Certificates.Replica, ha.Certificates.ReplicaKey)
	return nil
}
