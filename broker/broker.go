// Package broker serves a store over RocketMQ's remoting protocol, so
// RocketMQ's own clients (rocketmq-client-go, the Java client) produce to
// and consume from it: sends (single and batch), pulls with long polling
// woken by dispatch whose body is the stored CommitLog records byte for
// byte, consumer offsets, heartbeats and the consumer registry rebalancing
// reads, retry and dead-letter topics, queries by key and by message id.
// It registers with name servers (package namesrv) and, on a slave, copies
// its master's topics and consumer offsets.
package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/namesrv"
	"github.com/mqstore/mqstore/remoting"
)

// Defaults of Options.
const (
	DefaultListenAddr          = "127.0.0.1:10911"
	DefaultCluster             = "DefaultCluster"
	DefaultBrokerName          = "broker-a"
	DefaultQueueNums           = 4
	DefaultMaxReconsumeTimes   = 16
	DefaultSendTimeout         = 2500 * time.Millisecond
	DefaultMaxPullSuspend      = 25 * time.Second
	DefaultOffsetFlushInterval = 5 * time.Second
	DefaultSlaveSyncInterval   = 3 * time.Second
	DefaultClientExpiry        = 120 * time.Second
)

// Options configure a Broker; zero fields take the defaults.
type Options struct {
	// AdvertisedAddr is the address clients dial, registered with the name
	// servers and written into offset message ids (default: the listener's
	// address). It must be the store's StoreHost.
	AdvertisedAddr string
	// Namesrv lists the name servers to register with (none: the broker
	// serves only clients that know its address).
	Namesrv []string
	// ClientTLS, when set, is the TLS of the broker's own connections:
	// to the name servers and, a slave's, to its master's broker.
	ClientTLS *tls.Config
	// Credentials, when set, sign a slave's requests to its master's
	// broker (one whose remoting port has an ACL).
	Credentials      *remoting.Credentials
	RegisterInterval time.Duration // namesrv.DefaultRegisterInterval
	Cluster          string        // DefaultCluster
	BrokerName       string        // DefaultBrokerName
	// BrokerID is 0 for a master; a slave's default is 1.
	BrokerID int64
	// HAAddr is a master's HA address, registered for its slaves.
	HAAddr string
	// NoAutoCreateTopic refuses sends to unknown topics (TOPIC_NOT_EXIST)
	// instead of creating them from the TBW102 template.
	NoAutoCreateTopic bool
	// DefaultQueueNums is the template's queue count (4).
	DefaultQueueNums int
	// MaxReconsumeTimes: a message sent back more often goes to the group's
	// DLQ (16), unless the request names its own maximum.
	MaxReconsumeTimes int
	// SendTimeout bounds how long a send waits for the store (sync flush,
	// SYNC_MASTER), under the clients' 3 s (2.5 s); past it the send
	// answers FLUSH_DISK_TIMEOUT or FLUSH_SLAVE_TIMEOUT.
	SendTimeout time.Duration
	// MaxPullSuspend caps a long poll's hold, under the clients' 30 s pull
	// timeout (25 s).
	MaxPullSuspend      time.Duration
	OffsetFlushInterval time.Duration // 5 s
	SlaveSyncInterval   time.Duration // 3 s: how often a slave copies the master's topics and offsets
	ClientExpiry        time.Duration // 120 s: a client silent this long leaves the registry
	// ConfigDir holds topics.json and consumerOffset.json (default: the
	// store's directory/config).
	ConfigDir string
	Server    remoting.ServerOptions
	Logger    *slog.Logger
	// DelayLevels is the delay of each level a message's DELAY property or
	// a send-back names, level 1 first (nil: DefaultDelayLevels, RocketMQ's
	// 18 levels from 1 s to 2 h).
	DelayLevels []time.Duration
	// Put, when set, stores what the broker's clients send in place of the
	// store's own Put (a broker that follows the failover controller puts
	// through its ack rule); a refusal's status and error go back to the
	// client.
	Put func(context.Context, *engine.Message) (engine.PutResult, error)
	// MasterAddr, when set, names the master a slave copies its topics and
	// consumer offsets from (default: the master the name servers name).
	MasterAddr func() string
	// ReadLimit, when set, is the CommitLog offset reads stop at: a pull
	// returns only records that end at or below it (a long poll waits for
	// it to pass the next one), and a look-up finds none beyond it. A
	// master that follows the failover controller sets it to what every
	// member of the in-sync set holds, so no consumer reads a record a
	// failover could cut.
	ReadLimit func() int64
	// NoSlaveReads makes a slave refuse pulls and message look-ups
	// (SERVICE_NOT_AVAILABLE): a replica that follows the failover
	// controller may hold records a failover cuts.
	NoSlaveReads bool
	// OnRequest, when set, is called for every request served, with its
	// code and the response code (metrics).
	OnRequest func(code, responseCode int16, took time.Duration)
}

// Broker is a running broker.
type Broker struct {
	store     *engine.Store
	opts      Options
	log       *slog.Logger
	slave     bool
	storeHost netip.AddrPort

	srv       *remoting.Server
	topics    *topicTable
	offsets   *offsetTable
	delays    *delayOffsets
	clients   *registry
	locks     *lockTable
	registrar *namesrv.Registrar

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	uniq      uniqIDs
	heldPulls atomic.Int64
}

// Listen opens the broker's listener (before the store, whose StoreHost
// is the listener's address).
func Listen(addr string) (net.Listener, error) {
	if addr == "" {
		addr = DefaultListenAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("broker: listen on %s: %w", addr, err)
	}
	return ln, nil
}

// StoreHost is the address to open the store with for a broker advertised
// at addr: it must be an IP literal and a port.
func StoreHost(addr string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("broker address %q must be an IP address and a port (clients dial it as given): %w", addr, err)
	}
	if ap.Addr().IsUnspecified() {
		return netip.AddrPort{}, fmt.Errorf("broker address %q is a wildcard: advertise the address clients dial", addr)
	}
	return ap, nil
}

// New serves store on ln until Close, and registers with the name servers.
// The broker owns ln; the caller keeps the store (close it after the
// broker).
func New(store *engine.Store, ln net.Listener, opts Options) (*Broker, error) {
	if opts.AdvertisedAddr == "" {
		opts.AdvertisedAddr = ln.Addr().String()
	}
	host, err := StoreHost(opts.AdvertisedAddr)
	if err != nil {
		ln.Close()
		return nil, err
	}
	slave := store.Options().Role == engine.Slave
	opts = opts.withDefaults(slave)
	if opts.ConfigDir == "" {
		opts.ConfigDir = filepath.Join(store.Dir(), "config")
	}
	topics, err := loadTopics(filepath.Join(opts.ConfigDir, "topics.json"))
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("broker: %w", err)
	}
	offsets, err := loadOffsets(filepath.Join(opts.ConfigDir, "consumerOffset.json"))
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("broker: %w", err)
	}
	delays, err := openDelayOffsets(opts.ConfigDir)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("broker: %w", err)
	}
	if err := adoptStoredTopics(store, topics, slave, opts.Logger); err != nil {
		ln.Close()
		return nil, fmt.Errorf("broker: %w", err)
	}
	b := &Broker{store: store, opts: opts, log: opts.Logger, slave: slave, storeHost: host, topics: topics, offsets: offsets,
		delays: delays, clients: newRegistry(), locks: newLockTable()}
	b.uniq.init(host)
	if !slave && !opts.NoAutoCreateTopic {
		if _, ok := topics.get(DefaultTopic); !ok {
			if _, err := topics.put(namesrv.TopicConfig{TopicName: DefaultTopic, ReadQueueNums: opts.DefaultQueueNums,
				WriteQueueNums: opts.DefaultQueueNums, Perm: namesrv.PermRead | namesrv.PermWrite | namesrv.PermInherit}); err != nil {
				ln.Close()
				return nil, fmt.Errorf("broker: %w", err)
			}
		}
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	so := opts.Server
	so.Conn.Logger = opts.Logger
	so.OnClose = b.connClosed
	b.srv = remoting.Serve(ln, b, so)
	if len(opts.Namesrv) > 0 {
		b.registrar = namesrv.NewRegistrar(namesrv.Registration{Cluster: opts.Cluster, BrokerName: opts.BrokerName,
			BrokerID: opts.BrokerID, BrokerAddr: opts.AdvertisedAddr, HAAddr: opts.HAAddr, Topics: b.registeredTopics},
			namesrv.RegistrarOptions{Addrs: opts.Namesrv, Interval: opts.RegisterInterval, Logger: opts.Logger, TLS: opts.ClientTLS})
		b.registrar.RegisterAll(b.ctx)
		b.goLoop(func() { b.registrar.Run(b.ctx) })
	}
	b.goLoop(b.housekeeping)
	if slave {
		b.goLoop(b.slaveSync)
	} else {
		for level := range len(opts.DelayLevels) {
			b.goLoop(func() { b.deliverDelayed(level + 1) })
		}
	}
	b.log.Info("broker serving", slog.String("addr", opts.AdvertisedAddr), slog.String("broker", opts.BrokerName),
		slog.Int64("id", opts.BrokerID), slog.Any("namesrv", opts.Namesrv))
	return b, nil
}

// adoptStoredTopics adds to a master's topic table each topic the store
// holds messages of but the table lacks — a master elected before its
// copy of the old master's table caught up with a new topic, a table lost
// — with as many queues as the store has, so the name servers route it
// again. A slave copies its master's table instead.
func adoptStoredTopics(store *engine.Store, topics *topicTable, slave bool, log *slog.Logger) error {
	if slave {
		return nil
	}
	for topic, n := range store.QueueCounts() {
		if _, ok := topics.get(topic); ok {
			continue
		}
		if _, err := topics.put(namesrv.TopicConfig{TopicName: topic, ReadQueueNums: int(n), WriteQueueNums: int(n),
			Perm: namesrv.PermRead | namesrv.PermWrite}); err != nil {
			return err
		}
		log.Info("broker: topic adopted from the store", slog.String("topic", topic), slog.Int("queues", int(n)))
	}
	return nil
}

func (o Options) withDefaults(slave bool) Options {
	if o.Cluster == "" {
		o.Cluster = DefaultCluster
	}
	if o.BrokerName == "" {
		o.BrokerName = DefaultBrokerName
	}
	if slave && o.BrokerID == 0 {
		o.BrokerID = 1
	}
	if o.DefaultQueueNums <= 0 {
		o.DefaultQueueNums = DefaultQueueNums
	}
	if o.MaxReconsumeTimes <= 0 {
		o.MaxReconsumeTimes = DefaultMaxReconsumeTimes
	}
	if o.SendTimeout <= 0 {
		o.SendTimeout = DefaultSendTimeout
	}
	if o.MaxPullSuspend <= 0 {
		o.MaxPullSuspend = DefaultMaxPullSuspend
	}
	if o.OffsetFlushInterval <= 0 {
		o.OffsetFlushInterval = DefaultOffsetFlushInterval
	}
	if o.SlaveSyncInterval <= 0 {
		o.SlaveSyncInterval = DefaultSlaveSyncInterval
	}
	if o.ClientExpiry <= 0 {
		o.ClientExpiry = DefaultClientExpiry
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if len(o.DelayLevels) == 0 {
		o.DelayLevels, _ = ParseDelayLevels(DefaultDelayLevels)
	}
	return o
}

// Addr is the address the broker advertises.
func (b *Broker) Addr() string { return b.opts.AdvertisedAddr }

// Close unregisters from the name servers, closes every connection (held
// pulls end), stops delayed delivery, and persists the consumer offsets
// and the delivery's progress. The store stays open.
func (b *Broker) Close() error {
	b.cancel()
	err := b.srv.Close()
	b.wg.Wait()
	return errors.Join(err, b.offsets.flush(), b.delays.flush())
}

func (b *Broker) goLoop(f func()) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
}

// housekeeping persists offsets and expires silent clients.
func (b *Broker) housekeeping() {
	t := time.NewTicker(b.opts.OffsetFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		if err := b.offsets.flush(); err != nil {
			b.log.Error("broker: persist consumer offsets", slog.Any("err", err))
		}
		if err := b.delays.flush(); err != nil {
			b.log.Error("broker: persist delay offsets", slog.Any("err", err))
		}
		b.notifyChanged(b.clients.drop(nil, time.Now().Add(-b.opts.ClientExpiry)), nil)
	}
}

// registeredTopics is what the broker registers: a master's topics (a
// slave's queues come from its master's registration).
func (b *Broker) registeredTopics() map[string]namesrv.TopicConfig {
	if b.slave {
		return nil
	}
	return b.topics.snapshot()
}

// topicCreated registers a new topic with the name servers at once, so a
// consumer started right after the first send finds its route.
func (b *Broker) topicCreated(ctx context.Context) {
	if b.registrar == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	b.registrar.RegisterAll(ctx)
}

func (b *Broker) connClosed(c *remoting.Conn) {
	b.notifyChanged(b.clients.drop(c, time.Time{}), nil)
	b.locks.dropConn(c)
}

// notifyChanged tells the members of each group that its membership
// changed, so they rebalance now rather than at their next 20 s round —
// all but except, the client whose heartbeat changed it (it rebalances
// after its heartbeat anyway).
func (b *Broker) notifyChanged(groups []string, except *remoting.Conn) {
	for _, g := range groups {
		var conns []*remoting.Conn
		for _, c := range b.clients.conns(g) {
			if c != except {
				conns = append(conns, c)
			}
		}
		if len(conns) == 0 {
			continue
		}
		go remoting.Broadcast(b.ctx, b.log, conns, func() *remoting.Command {
			return remoting.NewRequest(remoting.NotifyConsumerIDsChanged, map[string]string{"consumerGroup": g}, nil)
		})
	}
}

// ServeRemoting implements remoting.Handler.
func (b *Broker) ServeRemoting(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	start := time.Now()
	resp := b.serve(ctx, c, req)
	code := int16(-1)
	if resp != nil {
		code = resp.Code
	}
	took := time.Since(start)
	if b.opts.OnRequest != nil {
		b.opts.OnRequest(req.Code, code, took)
	}
	if b.log.Enabled(ctx, slog.LevelDebug) {
		b.log.Debug("broker: request", slog.Int("code", int(req.Code)), slog.Int("response", int(code)), slog.Duration("took", took),
			slog.String("remote", c.RemoteAddr().String()), slog.Any("ext", req.ExtFields))
	}
	return resp
}

func (b *Broker) serve(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	if b.slave && b.opts.NoSlaveReads {
		switch req.Code {
		case remoting.PullMessage, remoting.QueryMessage, remoting.ViewMessageByID:
			return remoting.NewResponse(req, remoting.ServiceNotAvailable,
				"this slave serves no reads (its log may hold records a failover cuts): read from its master")
		}
	}
	switch req.Code {
	case remoting.SendMessage:
		return b.send(ctx, c, req, false)
	case remoting.SendMessageV2:
		return b.send(ctx, c, req, true)
	case remoting.SendBatchMessage:
		return b.sendBatch(ctx, c, req)
	case remoting.PullMessage:
		return b.pull(ctx, req)
	case remoting.QueryConsumerOffset:
		return b.queryConsumerOffset(ctx, req)
	case remoting.UpdateConsumerOffset:
		return b.updateConsumerOffset(req)
	case remoting.GetMaxOffset, remoting.GetMinOffset:
		return b.queueOffset(ctx, req)
	case remoting.SearchOffsetByTimestamp:
		return b.searchOffset(ctx, req)
	case remoting.HeartBeat:
		return b.heartbeat(ctx, c, req)
	case remoting.UnregisterClient:
		b.notifyChanged(b.clients.unregister(req.Field("clientID"), req.Field("producerGroup"), req.Field("consumerGroup")), c)
		return remoting.NewResponse(req, remoting.Success, "")
	case remoting.GetConsumerListByGroup:
		return b.consumerList(req)
	case remoting.ConsumerSendMsgBack:
		return b.sendBack(ctx, req)
	case remoting.QueryMessage:
		return b.queryMessage(ctx, req)
	case remoting.ViewMessageByID:
		return b.viewMessage(ctx, req)
	case remoting.UpdateAndCreateTopic:
		return b.createTopic(ctx, req)
	case remoting.GetAllTopicConfig:
		resp := remoting.NewResponse(req, remoting.Success, "")
		resp.Body = encodeJSON(topicFile{TopicConfigTable: b.topics.snapshot()})
		return resp
	case remoting.GetAllConsumerOffset:
		resp := remoting.NewResponse(req, remoting.Success, "")
		resp.Body = b.offsets.encode()
		return resp
	case remoting.LockBatchMQ:
		return b.lockBatch(c, req)
	case remoting.UnlockBatchMQ:
		return b.unlockBatch(req)
	}
	return remoting.NewResponse(req, remoting.RequestCodeNotSupported, "the broker does not serve request code "+strconv.Itoa(int(req.Code)))
}

// badRequest answers a request whose header is wrong.
func badRequest(req *remoting.Command, err error) *remoting.Command {
	return remoting.NewResponse(req, remoting.SystemError, err.Error())
}

// ConsumerOffset is a group's committed offset of a queue (the next to
// consume); ok is false when it has none.
func (b *Broker) ConsumerOffset(topic, group string, queueID int32) (offset int64, ok bool) {
	return b.offsets.get(topic, group, queueID)
}

// HeldPulls is how many long-polled pulls are held now.
func (b *Broker) HeldPulls() int64 { return b.heldPulls.Load() }
