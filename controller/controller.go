package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/mqstore/mqstore/engine/storefs"
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/remoting"
)

// Defaults of Options.
const (
	DefaultBrokerExpiry  = 3 * time.Second
	DefaultScanInterval  = 500 * time.Millisecond
	DefaultApplyTimeout  = 5 * time.Second
	DefaultListenAddr    = "127.0.0.1:9880"
	DefaultRaftAddr      = "127.0.0.1:9890"
	defaultSnapRetain    = 2
	defaultTrailingLogs  = 1024
	defaultSnapThreshold = 1024
)

// Peer is one member of the controller group.
type Peer struct {
	ID       string // raft server id
	RaftAddr string // raft transport address
}

// ParsePeers parses "id=addr,id=addr,…".
func ParsePeers(s string) ([]Peer, error) {
	var out []Peer
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, addr, ok := strings.Cut(part, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("peer %q: want id=host:port", part)
		}
		if seen[id] {
			return nil, fmt.Errorf("peer id %q appears twice", id)
		}
		seen[id] = true
		out = append(out, Peer{ID: id, RaftAddr: addr})
	}
	if len(out) == 0 {
		return nil, errors.New("no peers: want id=host:port,…")
	}
	return out, nil
}

// Options configure a Controller.
type Options struct {
	// ID is this controller's raft server id; it must be one of Peers.
	ID string
	// Peers is the whole controller group (this one included). A group
	// with no state yet bootstraps with it.
	Peers []Peer
	// RaftBind is the address raft's TCP transport binds (default: this
	// peer's RaftAddr, which is what the other peers dial and this one
	// advertises).
	RaftBind string
	// Transport carries raft's traffic (nil: TCP on this peer's RaftAddr,
	// see NewTCPTransport). Tests pass raft.NewInmemTransport's.
	Transport raft.Transport
	// Dir holds the raft log, stable store and snapshots.
	Dir string
	// Backend opens the raft log's segment files (nil: mmap); its FS
	// (storefs.Of) holds the rest. MemFS in crash tests.
	Backend mappedfile.Backend
	// ListenAddr, when set, is where brokers and tools reach the controller
	// (its remoting RPC). Recorded in the replicated state so followers can
	// name the leader's.
	ListenAddr string
	// AdvertiseAddr is the RPC address recorded for clients (default: the
	// address ListenAddr bound; set it when that is a wildcard).
	AdvertiseAddr string

	// Raft timings (zero: raft's defaults, 1 s / 1 s / 500 ms / 50 ms).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// SnapshotThreshold and TrailingLogs (zero: 1024 each).
	SnapshotThreshold uint64
	TrailingLogs      uint64

	// BrokerExpiry: a broker with no heartbeat for this long is dead
	// (DefaultBrokerExpiry). A new leader waits this long before it
	// declares anyone dead.
	BrokerExpiry time.Duration
	// ScanInterval is how often the leader looks for dead masters
	// (DefaultScanInterval).
	ScanInterval time.Duration
	// DefaultSetConfig is the configuration of a set created by its
	// first registration (zero MinInSyncReplicas: 1).
	DefaultSetConfig SetConfig

	Logger *slog.Logger
}

// Heartbeat is what a broker reports to the leader.
type Heartbeat struct {
	Set           string `json:"set"`
	ID            int64  `json:"id"`
	LastEpoch     int32  `json:"lastEpoch"` // the last epoch of its epoch file
	MaxOffset     int64  `json:"maxOffset"`
	ConfirmOffset int64  `json:"confirmOffset"`
	// Priority orders otherwise equal candidates (lower first).
	Priority int `json:"priority"`
}

type liveInfo struct {
	hb   Heartbeat
	last time.Time // monotonic
}

// NotLeaderError is returned by a controller that is not the ready leader;
// it names the leader when known. errors.Is(err, ErrNotLeader) holds.
type NotLeaderError struct {
	LeaderID   string
	LeaderAddr string // the leader's RPC address ("" when unknown)
}

func (e *NotLeaderError) Error() string {
	if e.LeaderAddr == "" {
		return "controller: not the leader (leader unknown)"
	}
	return fmt.Sprintf("controller: not the leader; the leader is %s at %s", e.LeaderID, e.LeaderAddr)
}

// Is makes errors.Is(err, ErrNotLeader) true.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

// Controller is one member of the controller group: a raft node with the
// FSM, plus (on the leader) the broker liveness table and the election scan.
type Controller struct {
	opts Options
	log  *slog.Logger

	fsm    *FSM
	raft   *raft.Raft
	logs   *LogStore
	stable *StableStore
	trans  raft.Transport
	rpc    *remoting.Server

	mu         sync.Mutex
	leading    bool   // leader and past its barrier
	term       uint64 // the raft term leading began in
	graceUntil time.Time
	live       map[string]map[int64]*liveInfo
	noCand     map[string]int32 // set → epoch for which "no electable replica" was logged

	stop      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// NewTCPTransport returns raft's TCP transport bound to bind and
// advertising advertise ("": the bound address).
func NewTCPTransport(bind, advertise string, log *slog.Logger) (*raft.NetworkTransport, error) {
	var adv net.Addr
	if advertise != "" && advertise != bind {
		a, err := net.ResolveTCPAddr("tcp", advertise)
		if err != nil {
			return nil, fmt.Errorf("controller: raft address %s: %w", advertise, err)
		}
		adv = a
	}
	t, err := raft.NewTCPTransportWithLogger(bind, adv, 3, 2*time.Second, hclogFor(log))
	if err != nil {
		return nil, fmt.Errorf("controller: raft transport on %s: %w", bind, err)
	}
	return t, nil
}

// Start opens the stores, starts raft (bootstrapping a group with no
// state), the leader's scan, and the RPC listener when ListenAddr is set.
func Start(ctx context.Context, opts Options) (*Controller, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.BrokerExpiry <= 0 {
		opts.BrokerExpiry = DefaultBrokerExpiry
	}
	if opts.ScanInterval <= 0 {
		opts.ScanInterval = DefaultScanInterval
	}
	if opts.DefaultSetConfig.MinInSyncReplicas == 0 {
		opts.DefaultSetConfig.MinInSyncReplicas = 1
	}
	if err := opts.DefaultSetConfig.validate(); err != nil {
		return nil, fmt.Errorf("controller: default set config: %w", err)
	}
	if opts.Dir == "" {
		return nil, errors.New("controller: no directory")
	}
	var self *Peer
	seen := map[string]bool{}
	for i, p := range opts.Peers {
		if p.ID == "" || p.RaftAddr == "" {
			return nil, fmt.Errorf("controller: peer %d (%+v): empty id or raft address", i, p)
		}
		if seen[p.ID] || seen["addr:"+p.RaftAddr] {
			return nil, fmt.Errorf("controller: peer %+v: its id or raft address appears twice", p)
		}
		seen[p.ID], seen["addr:"+p.RaftAddr] = true, true
		if p.ID == opts.ID {
			self = &opts.Peers[i]
		}
	}
	if self == nil {
		return nil, fmt.Errorf("controller: id %q is not among the peers %v", opts.ID, opts.Peers)
	}
	log := opts.Logger.With("controller", opts.ID)
	c := &Controller{opts: opts, log: log, fsm: NewFSM(log), live: map[string]map[int64]*liveInfo{},
		noCand: map[string]int32{}, stop: make(chan struct{})}
	if opts.Backend == nil {
		opts.Backend = defaultBackend()
	}
	fsys := storefs.Of(opts.Backend)
	var err error
	if c.logs, err = OpenLogStore(ctx, filepath.Join(opts.Dir, "raft-log"), LogStoreOptions{Backend: opts.Backend}); err != nil {
		return nil, err
	}
	fail := func(err error) (*Controller, error) {
		c.closeParts()
		return nil, err
	}
	if c.stable, err = OpenStableStore(fsys, opts.Dir); err != nil {
		return fail(err)
	}
	snaps, err := OpenSnapshotStore(fsys, filepath.Join(opts.Dir, "raft-snapshots"), defaultSnapRetain)
	if err != nil {
		return fail(err)
	}
	c.trans = opts.Transport
	if c.trans == nil {
		bind := opts.RaftBind
		if bind == "" {
			bind = self.RaftAddr
		}
		t, err := NewTCPTransport(bind, self.RaftAddr, log)
		if err != nil {
			return fail(err)
		}
		c.trans = t
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(opts.ID)
	setDur := func(dst *time.Duration, v time.Duration) {
		if v > 0 {
			*dst = v
		}
	}
	setDur(&rc.HeartbeatTimeout, opts.HeartbeatTimeout)
	setDur(&rc.ElectionTimeout, opts.ElectionTimeout)
	setDur(&rc.LeaderLeaseTimeout, opts.LeaderLeaseTimeout)
	setDur(&rc.CommitTimeout, opts.CommitTimeout)
	rc.SnapshotThreshold = defaultSnapThreshold
	if opts.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = opts.SnapshotThreshold
	}
	rc.TrailingLogs = defaultTrailingLogs
	if opts.TrailingLogs > 0 {
		rc.TrailingLogs = opts.TrailingLogs
	}
	rc.Logger = hclogFor(log)
	existing, err := raft.HasExistingState(c.logs, c.stable, snaps)
	if err != nil {
		return fail(fmt.Errorf("controller: %w", err))
	}
	if !existing {
		var cfg raft.Configuration
		for _, p := range opts.Peers {
			addr := raft.ServerAddress(p.RaftAddr)
			if p.ID == opts.ID {
				addr = c.trans.LocalAddr()
			}
			cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: addr})
		}
		if err := raft.BootstrapCluster(rc, c.logs, c.stable, snaps, c.trans, cfg); err != nil {
			return fail(fmt.Errorf("controller: bootstrap: %w", err))
		}
	}
	if c.raft, err = raft.NewRaft(rc, c.fsm, c.logs, c.stable, snaps, c.trans); err != nil {
		return fail(fmt.Errorf("controller: start raft: %w", err))
	}
	if opts.ListenAddr != "" {
		if c.rpc, err = remoting.Listen(opts.ListenAddr, c.handler(), remoting.ServerOptions{Conn: remoting.ConnOptions{Logger: log}}); err != nil {
			return fail(fmt.Errorf("controller: %w", err))
		}
		c.opts.ListenAddr = c.rpc.Addr().String()
		if opts.AdvertiseAddr != "" {
			c.opts.ListenAddr = opts.AdvertiseAddr
		}
	}
	c.wg.Add(1)
	go c.monitor()
	return c, nil
}

func (c *Controller) closeParts() {
	c.stopRaft()
	c.closeStores()
}

// stopRaft closes the RPC listener and shuts raft down (which ends a
// barrier or proposal the monitor waits for).
func (c *Controller) stopRaft() {
	if c.rpc != nil {
		c.rpc.Close()
	}
	if c.raft != nil {
		if err := c.raft.Shutdown().Error(); err != nil {
			c.log.Warn("raft shutdown", "err", err)
		}
	}
}

func (c *Controller) closeStores() {
	if cl, ok := c.trans.(interface{ Close() error }); ok && c.opts.Transport == nil {
		cl.Close()
	}
	if c.logs != nil {
		c.logs.Close()
	}
}

// Close stops the controller: the scan, the RPC listener, raft, the stores.
func (c *Controller) Close() error {
	c.closeOnce.Do(func() {
		close(c.stop)
		c.stopRaft()
		c.wg.Wait()
		c.closeStores()
	})
	return nil
}

// ID is the controller's raft server id.
func (c *Controller) ID() string { return c.opts.ID }

// Addr is the RPC address clients are told ("" when there is no listener).
func (c *Controller) Addr() string { return c.opts.ListenAddr }

// Raft exposes the raft node (tests, the status command).
func (c *Controller) Raft() *raft.Raft { return c.raft }

// FSM exposes the replicated state (read it; it changes only through raft).
func (c *Controller) FSM() *FSM { return c.fsm }

// IsLeader reports whether this controller is the leader and ready to serve.
func (c *Controller) IsLeader() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading && c.raft.State() == raft.Leader && c.raft.CurrentTerm() == c.term
}

func (c *Controller) notLeader() error {
	_, id := c.raft.LeaderWithID()
	return &NotLeaderError{LeaderID: string(id), LeaderAddr: c.fsm.ControllerAddr(string(id))}
}

func (c *Controller) requireLeader() error {
	if !c.IsLeader() {
		return c.notLeader()
	}
	return nil
}

// monitor follows leadership: on gaining it, a barrier (every entry of
// earlier terms applied), the controller's address recorded, the liveness
// table reset and a grace of one expiry; while leading, the scan.
func (c *Controller) monitor() {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.ScanInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.raft.LeaderCh():
		case <-t.C:
		}
		isLeader := c.raft.State() == raft.Leader
		c.mu.Lock()
		// Leadership lost and won back between two looks is a new term:
		// it needs its own barrier and grace.
		leading := c.leading && c.term == c.raft.CurrentTerm()
		c.mu.Unlock()
		switch {
		case isLeader && !leading:
			c.becomeLeader()
		case !isLeader && c.leading:
			c.mu.Lock()
			c.leading = false
			c.live = map[string]map[int64]*liveInfo{}
			c.mu.Unlock()
			c.log.Info("lost controller leadership")
		case isLeader && leading:
			c.scan()
		}
	}
}

func (c *Controller) becomeLeader() {
	term := c.raft.CurrentTerm()
	c.mu.Lock()
	c.leading = false
	c.live = map[string]map[int64]*liveInfo{}
	c.mu.Unlock()
	if err := c.raft.Barrier(DefaultApplyTimeout).Error(); err != nil {
		c.log.Warn("leader barrier failed", "err", err)
		return
	}
	if a := c.opts.ListenAddr; a != "" && c.fsm.ControllerAddr(c.opts.ID) != a {
		f := c.raft.Apply(encodeCmd(cmdControllerAddr, controllerAddrCmd{ID: c.opts.ID, Addr: a}), DefaultApplyTimeout)
		if err := f.Error(); err != nil {
			c.log.Warn("record the controller address", "err", err)
			return
		}
	}
	c.mu.Lock()
	c.leading = true
	c.term = term
	c.graceUntil = time.Now().Add(c.opts.BrokerExpiry)
	c.mu.Unlock()
	c.log.Info("controller leader ready", "grace", c.opts.BrokerExpiry)
}

// alive reports the liveness entry of a broker when its heartbeat is fresh.
func (c *Controller) aliveLocked(set string, id int64, now time.Time) (*liveInfo, bool) {
	li := c.live[set][id]
	if li == nil || now.Sub(li.last) > c.opts.BrokerExpiry {
		return li, false
	}
	return li, true
}

// better orders election candidates: a higher last epoch, then a higher
// max offset, then a lower priority, then a lower id.
func better(a, b *liveInfo) bool {
	if a.hb.LastEpoch != b.hb.LastEpoch {
		return a.hb.LastEpoch > b.hb.LastEpoch
	}
	if a.hb.MaxOffset != b.hb.MaxOffset {
		return a.hb.MaxOffset > b.hb.MaxOffset
	}
	if a.hb.Priority != b.hb.Priority {
		return a.hb.Priority < b.hb.Priority
	}
	return a.hb.ID < b.hb.ID
}

// ahead reports whether a's log is ahead of b's: a higher last epoch, or
// the same and a higher max offset.
func ahead(a, b *liveInfo) bool {
	if a.hb.LastEpoch != b.hb.LastEpoch {
		return a.hb.LastEpoch > b.hb.LastEpoch
	}
	return a.hb.MaxOffset > b.hb.MaxOffset
}

// pickLocked returns the best alive replica among ids (0 when none).
func (c *Controller) pickLocked(set string, ids []int64, exclude int64, now time.Time) int64 {
	var best *liveInfo
	for _, id := range ids {
		if id == exclude {
			continue
		}
		if li, ok := c.aliveLocked(set, id, now); ok && (best == nil || better(li, best)) {
			best = li
		}
	}
	if best == nil {
		return 0
	}
	return best.hb.ID
}

func replicaIDs(b *BrokerSet) []int64 {
	ids := make([]int64, 0, len(b.Replicas))
	for id := range b.Replicas {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// electionFor decides the election a scan proposes for b, if any.
func (c *Controller) electionFor(b *BrokerSet, now time.Time) (ElectMasterCmd, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Before(c.graceUntil) || len(b.Replicas) == 0 {
		return ElectMasterCmd{}, false
	}
	ids := replicaIDs(b)
	if b.MasterEpoch == 0 {
		// The first election waits for every registered replica, so an
		// unaligned set is not led by whoever reported first.
		for _, id := range ids {
			if _, ok := c.aliveLocked(b.Name, id, now); !ok {
				return ElectMasterCmd{}, false
			}
		}
		return ElectMasterCmd{Set: b.Name, ExpectEpoch: 0, NewMaster: c.pickLocked(b.Name, ids, 0, now)}, true
	}
	if _, ok := c.aliveLocked(b.Name, b.MasterID, now); ok {
		return ElectMasterCmd{}, false
	}
	if id := c.pickLocked(b.Name, b.SyncStateSet, b.MasterID, now); id != 0 {
		return ElectMasterCmd{Set: b.Name, ExpectEpoch: b.MasterEpoch, NewMaster: id}, true
	}
	if b.Config.UncleanElection {
		if id := c.pickLocked(b.Name, ids, b.MasterID, now); id != 0 {
			return ElectMasterCmd{Set: b.Name, ExpectEpoch: b.MasterEpoch, NewMaster: id, Unclean: true}, true
		}
	}
	if c.noCand[b.Name] != b.MasterEpoch {
		c.noCand[b.Name] = b.MasterEpoch
		c.log.Warn("master is dead and no in-sync replica is alive; the set stays without a master",
			"set", b.Name, "master", b.MasterID, "epoch", b.MasterEpoch, "in-sync", b.SyncStateSet)
	}
	return ElectMasterCmd{}, false
}

func (c *Controller) scan() {
	now := time.Now()
	for _, b := range c.fsm.Sets() {
		cmd, ok := c.electionFor(b, now)
		if !ok {
			continue
		}
		c.log.Info("master heartbeat expired: electing", "set", b.Name, "old master", b.MasterID,
			"epoch", b.MasterEpoch, "candidate", cmd.NewMaster, "unclean", cmd.Unclean)
		ctx, cancel := context.WithTimeout(context.Background(), DefaultApplyTimeout)
		_, err := c.propose(ctx, cmdElectMaster, cmd)
		cancel()
		if err != nil {
			// A stale proposal fails its compare-and-set harmlessly; the
			// next scan looks again.
			c.log.Warn("election not applied", "set", b.Name, "err", err)
		}
	}
}

// propose replicates a command and returns its result.
func (c *Controller) propose(ctx context.Context, typ byte, cmd any) (*ApplyResult, error) {
	if err := c.requireLeader(); err != nil {
		return nil, err
	}
	timeout := DefaultApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	f := c.raft.Apply(encodeCmd(typ, cmd), timeout)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("controller: propose: %w (the command may still be applied)", ctx.Err())
	case err := <-done:
		if err != nil {
			if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
				errors.Is(err, raft.ErrLeadershipTransferInProgress) || errors.Is(err, raft.ErrRaftShutdown) {
				return nil, c.notLeader()
			}
			return nil, fmt.Errorf("controller: propose: %w", err)
		}
	}
	res, ok := f.Response().(*ApplyResult)
	if !ok || res == nil {
		return nil, fmt.Errorf("controller: propose: no result from the state machine")
	}
	if res.Err != nil {
		return res, res.Err
	}
	return res, nil
}

// RegisterRequest registers a broker.
type RegisterRequest struct {
	Set string `json:"set"`
	// ID asks for a given id (0: the id this register code already has,
	// else the set's next one).
	ID     int64  `json:"id,omitempty"`
	Addr   string `json:"addr"`
	HAAddr string `json:"haAddr"`
	// RegisterCode is a random string the broker keeps with its store
	// (written durably before its first registration): registering again
	// with it — after a restart, or when a reply was lost — gives the same
	// id back, and no other broker can take that id.
	RegisterCode string `json:"registerCode"`
}

// Register registers a broker (or re-registers it: same register code,
// same id, new addresses) and returns its replica record.
func (c *Controller) Register(ctx context.Context, req RegisterRequest) (*Replica, error) {
	res, err := c.propose(ctx, cmdRegisterBroker, RegisterBrokerCmd{Set: req.Set, ID: req.ID, Addr: req.Addr,
		HAAddr: req.HAAddr, RegisterCode: req.RegisterCode, Config: c.opts.DefaultSetConfig})
	if err != nil {
		return nil, err
	}
	return res.Replica, nil
}

// Heartbeat records a broker's liveness and progress (leader only, in
// memory only) and returns its set's state as this controller has applied
// it, so a broker learns of a new master epoch with its next heartbeat.
// A broker unknown to the set (removed, or a new leader still applying)
// gets ErrInvalidReplicas: it registers again.
func (c *Controller) Heartbeat(_ context.Context, hb Heartbeat) (*BrokerSet, error) {
	if c.raft.State() != raft.Leader {
		return nil, c.notLeader()
	}
	b := c.fsm.Set(hb.Set)
	if b == nil {
		return nil, fmt.Errorf("heartbeat from broker %d: set %q: %w", hb.ID, hb.Set, ErrBrokerSetNotExist)
	}
	if b.Replicas[hb.ID] == nil {
		return nil, fmt.Errorf("heartbeat from broker %d of %q: %w", hb.ID, hb.Set, ErrInvalidReplicas)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.live[hb.Set]
	if m == nil {
		m = map[int64]*liveInfo{}
		c.live[hb.Set] = m
	}
	m[hb.ID] = &liveInfo{hb: hb, last: time.Now()}
	return b, nil
}

// ReplicaInfo returns the named set's replicated state.
func (c *Controller) ReplicaInfo(_ context.Context, set string) (*BrokerSet, error) {
	if err := c.requireLeader(); err != nil {
		return nil, err
	}
	b := c.fsm.Set(set)
	if b == nil {
		return nil, fmt.Errorf("replica info of %q: %w", set, ErrBrokerSetNotExist)
	}
	return b, nil
}

// AlterSyncStateSet applies the master's change of the in-sync set; a
// member it adds must be alive.
func (c *Controller) AlterSyncStateSet(ctx context.Context, cmd AlterSyncStateSetCmd) (*BrokerSet, error) {
	if err := c.requireLeader(); err != nil {
		return nil, err
	}
	// Liveness is checked only for an alter that would pass the state
	// machine's compare-and-set; a stale one gets its refusal from there.
	if b := c.fsm.Set(cmd.Set); b != nil && b.MasterID == cmd.MasterID && b.MasterEpoch == cmd.MasterEpoch &&
		b.SyncStateSetEpoch == cmd.SyncStateSetEpoch {
		now := time.Now()
		c.mu.Lock()
		for _, id := range cmd.NewSyncStateSet {
			if _, ok := c.aliveLocked(cmd.Set, id, now); !ok && !b.InSync(id) {
				c.mu.Unlock()
				return nil, fmt.Errorf("alter in-sync set of %q: broker %d: %w", cmd.Set, id, ErrBrokerNotAlive)
			}
		}
		c.mu.Unlock()
	}
	res, err := c.propose(ctx, cmdAlterSyncStateSet, cmd)
	if err != nil {
		return nil, err
	}
	return res.Set, nil
}

// ElectRequest is an operator's election.
type ElectRequest struct {
	Set string `json:"set"`
	// BrokerID is the replica to make master (0: the best alive in-sync
	// member other than the current master).
	BrokerID int64 `json:"brokerId,omitempty"`
	// Unclean allows a replica outside the in-sync set when the set's
	// config does.
	Unclean bool `json:"unclean,omitempty"`
	// KeepIfBest (with BrokerID 0) keeps the current master, at its epoch,
	// unless an alive in-sync member is ahead of it (a higher last epoch,
	// or the same and a higher max offset): a master that restarts asks
	// this before it takes its role back, as its log may have lost a tail
	// its slaves hold.
	KeepIfBest bool `json:"keepIfBest,omitempty"`
}

// ElectMaster runs an operator's election at the set's current epoch.
func (c *Controller) ElectMaster(ctx context.Context, req ElectRequest) (*BrokerSet, error) {
	if err := c.requireLeader(); err != nil {
		return nil, err
	}
	b := c.fsm.Set(req.Set)
	if b == nil {
		return nil, fmt.Errorf("elect in %q: %w", req.Set, ErrBrokerSetNotExist)
	}
	now := time.Now()
	c.mu.Lock()
	id := req.BrokerID
	if id == 0 {
		pool := b.SyncStateSet
		if b.MasterEpoch == 0 || req.Unclean {
			pool = replicaIDs(b)
		}
		id = c.pickLocked(b.Name, pool, b.MasterID, now)
		if req.KeepIfBest && b.MasterID != 0 {
			cur, curAlive := c.aliveLocked(b.Name, b.MasterID, now)
			other, _ := c.aliveLocked(b.Name, id, now)
			if id == 0 || (curAlive && !ahead(other, cur)) {
				c.mu.Unlock()
				return b, nil
			}
		}
	} else if _, ok := c.aliveLocked(b.Name, id, now); !ok {
		c.mu.Unlock()
		return nil, fmt.Errorf("elect broker %d in %q: %w", id, req.Set, ErrBrokerNotAlive)
	}
	c.mu.Unlock()
	if id == 0 {
		return nil, fmt.Errorf("elect in %q: %w", req.Set, ErrElectMasterFailed)
	}
	res, err := c.propose(ctx, cmdElectMaster, ElectMasterCmd{Set: req.Set, ExpectEpoch: b.MasterEpoch, NewMaster: id,
		Unclean: req.Unclean && !b.InSync(id)})
	if err != nil {
		return nil, err
	}
	return res.Set, nil
}

// RemoveBroker drops a replica that is not the master.
func (c *Controller) RemoveBroker(ctx context.Context, set string, id int64) (*BrokerSet, error) {
	res, err := c.propose(ctx, cmdRemoveBroker, RemoveBrokerCmd{Set: set, ID: id})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	delete(c.live[set], id)
	c.mu.Unlock()
	return res.Set, nil
}

// SetConfig replaces a set's configuration.
func (c *Controller) SetConfig(ctx context.Context, set string, cfg SetConfig) (*BrokerSet, error) {
	res, err := c.propose(ctx, cmdSetConfig, SetConfigCmd{Set: set, Config: cfg})
	if err != nil {
		return nil, err
	}
	return res.Set, nil
}

// ReplicaStatus is one replica's row of the status.
type ReplicaStatus struct {
	Replica
	Master bool `json:"master"`
	InSync bool `json:"inSync"`
	Alive  bool `json:"alive"`
	// HeartbeatAgeMillis is how long ago its last heartbeat came (-1: none
	// since this controller became leader).
	HeartbeatAgeMillis int64 `json:"heartbeatAgeMillis"`
	LastEpoch          int32 `json:"lastEpoch"`
	MaxOffset          int64 `json:"maxOffset"`
	ConfirmOffset      int64 `json:"confirmOffset"`
	Priority           int   `json:"priority"`
	// Lag is the master's reported max offset minus this replica's (-1:
	// unknown).
	Lag int64 `json:"lag"`
}

// SetStatus is one broker set's status.
type SetStatus struct {
	Set      *BrokerSet      `json:"set"`
	Replicas []ReplicaStatus `json:"replicas"`
}

// ClusterStatus is what `mqstore cluster status` prints.
type ClusterStatus struct {
	LeaderID   string      `json:"leaderId"`
	LeaderAddr string      `json:"leaderAddr"`
	Sets       []SetStatus `json:"sets"`
}

// Status returns every set with the leader's liveness view.
func (c *Controller) Status(_ context.Context) (*ClusterStatus, error) {
	if err := c.requireLeader(); err != nil {
		return nil, err
	}
	out := &ClusterStatus{LeaderID: c.opts.ID, LeaderAddr: c.opts.ListenAddr}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.fsm.Sets() {
		ss := SetStatus{Set: b}
		masterMax := int64(-1)
		if li, ok := c.live[b.Name][b.MasterID]; ok && b.MasterID != 0 {
			masterMax = li.hb.MaxOffset
		}
		for _, id := range replicaIDs(b) {
			rs := ReplicaStatus{Replica: *b.Replicas[id], Master: id == b.MasterID, InSync: b.InSync(id),
				HeartbeatAgeMillis: -1, Lag: -1}
			if li, ok := c.aliveLocked(b.Name, id, now); li != nil {
				rs.Alive = ok
				rs.HeartbeatAgeMillis = now.Sub(li.last).Milliseconds()
				rs.LastEpoch, rs.MaxOffset, rs.ConfirmOffset, rs.Priority = li.hb.LastEpoch, li.hb.MaxOffset, li.hb.ConfirmOffset, li.hb.Priority
				if masterMax >= 0 {
					rs.Lag = max(masterMax-li.hb.MaxOffset, 0)
				}
			}
			ss.Replicas = append(ss.Replicas, rs)
		}
		out.Sets = append(out.Sets, ss)
	}
	return out, nil
}

// hclogFor adapts slog to the hclog.Logger raft wants: raft's lines go to
// log at warn level and above (its info lines are a per-heartbeat chatter).
func hclogFor(log *slog.Logger) hclog.Logger {
	if log == nil {
		log = slog.Default()
	}
	return hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: slogWriter{log}, DisableTime: true})
}

type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		if len(line) > 0 {
			w.log.Warn("raft", "line", string(line))
		}
	}
	return len(p), nil
}
