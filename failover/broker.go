package failover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mqstore/mqstore/controller"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/storefs"
	"github.com/mqstore/mqstore/ha"
	"github.com/mqstore/mqstore/internal/handoff"
)

// Defaults of Options.
const (
	DefaultHeartbeatInterval = time.Second
	DefaultMinInSyncReplicas = 2
	DefaultHAListen          = "127.0.0.1:0"
	DefaultAckTimeout        = 3 * time.Second
	DefaultShrinkAfter       = 2 * time.Second
)

// Options configure a Broker.
type Options struct {
	// Set is the broker set's name (required).
	Set string
	// ID is the broker's id in the set (0: the one broker.meta names, or a
	// new one the controller gives at the first registration).
	ID int64
	// Dir is the store directory.
	Dir string
	// Store are the store's options; the broker sets Role (a slave store
	// while fenced or following, a SyncMaster with MinInSyncReplicas−1
	// in-sync slaves while master) and MinInSyncReplicas.
	Store engine.Options
	// Controllers are the controllers' RPC addresses (required).
	Controllers []string
	// Addr is the address clients reach this broker at, as registered
	// with the controller and named in NotMasterError (default: the HA
	// address).
	Addr string
	// HAListen is this broker's HA address, the same in both roles
	// (DefaultHAListen).
	HAListen string
	// HAAdvertise is the HA address registered with the controller, where
	// the slaves dial (default: HAListen's address; set it when they reach
	// this broker through a proxy or a translated address).
	HAAdvertise string
	// HeartbeatInterval is how often the broker heartbeats the controller
	// leader and asks it for the set's state (DefaultHeartbeatInterval; the
	// controller's broker expiry must be several of these).
	HeartbeatInterval time.Duration
	// MinInSyncReplicas is how many replicas, the master included, must
	// hold a record before a Put is acknowledged (DefaultMinInSyncReplicas;
	// at least 2: a master that acknowledges alone gives the controller no
	// replica to elect that holds its records).
	MinInSyncReplicas int
	// AckTimeout bounds how long an acknowledgement waits for members of
	// the controller's in-sync set the engine's own set no longer counts
	// (until the controller confirms their removal) (DefaultAckTimeout).
	AckTimeout time.Duration
	// ShrinkAfter: the master asks the controller to drop a member of the
	// in-sync set once it has been out of the engine's set this long (a
	// new master counts from its election, so the inherited members have
	// time to reconnect) (DefaultShrinkAfter, at most half AckTimeout;
	// keep it below AckTimeout, or Puts time out before the shrink frees
	// them).
	ShrinkAfter time.Duration
	// LeaseTimeout, when positive, is the master's lease: a master whose
	// heartbeats the controller leader has not answered for this long
	// refuses Puts (a *NotMasterError naming no master) until one is
	// answered — cut off from the controllers, it stops taking writes
	// before they can elect another (keep it below the controllers' broker
	// expiry). The price: a change of controller leader that takes longer
	// stops writes too. 0: no lease (a cut-off master's Puts wait for
	// acknowledgements that stop once another is master).
	LeaseTimeout time.Duration
	// Priority orders otherwise equal election candidates (lower first).
	Priority int
	// Master and Slave are the HA options of the two roles (their
	// listener and master address are the broker's).
	Master ha.MasterOptions
	Slave  ha.SlaveOptions
	// Controller are the controller client's options.
	Controller controller.ClientOptions
	// OnRole, when set, is told of every settled role with the store that
	// serves it — Master once the broker accepts writes, Slave once it
	// follows — and with Fenced and a nil store before a change of role or
	// Close closes that store: a server of the store's clients (a remoting
	// broker) starts and stops with it. It runs on the broker's own
	// goroutine and must return promptly; it may call Status and Put but
	// must not keep the store past the next call.
	OnRole func(*Broker, Role, *engine.Store)
	Logger *slog.Logger
}

// Role is what a broker currently is.
type Role int

const (
	// Fenced: no role confirmed by the controller yet (or a change of role
	// in progress): no writes, no reads.
	Fenced Role = iota
	Master
	Slave
)

func (r Role) String() string {
	switch r {
	case Fenced:
		return "fenced"
	case Master:
		return "master"
	case Slave:
		return "slave"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// ErrNotMaster is what a Put to a broker that is not the writable master
// wraps (a *NotMasterError says where the master is).
var ErrNotMaster = errors.New("failover: not the master")

// NotMasterError is a Put's refusal by a broker that is fenced or not the
// master: it names the master the broker knows, and its epoch, as a hint
// where to send the Put instead. errors.Is(err, ErrNotMaster) holds.
type NotMasterError struct {
	Role     Role
	MasterID int64  // 0: no master known
	Addr     string // the master's client address ("" when unknown)
	Epoch    int32  // the master epoch the broker knows
}

func (e *NotMasterError) Error() string {
	if e.MasterID == 0 || e.Addr == "" {
		return fmt.Sprintf("failover: this broker is %v, not the master; no master known (epoch %d)", e.Role, e.Epoch)
	}
	return fmt.Sprintf("failover: this broker is %v, not the master; the master is broker %d at %s (epoch %d)",
		e.Role, e.MasterID, e.Addr, e.Epoch)
}

// Is makes errors.Is(err, ErrNotMaster) true.
func (e *NotMasterError) Is(target error) bool { return target == ErrNotMaster }

// ErrNotAcknowledged: the record was appended but a member of the
// controller's in-sync set did not acknowledge it within AckTimeout; like
// FlushSlaveTimeout it is not acknowledged (and may be cut after a
// failover).
var ErrNotAcknowledged = errors.New("failover: not acknowledged by every in-sync replica")

// Status is a snapshot of a broker's state.
type Status struct {
	ID                int64
	Role              Role
	Epoch             int32 // the master epoch of the role it holds
	MasterID          int64
	Writable          bool
	SyncStateSet      []int64 // the controller's in-sync set as the master knows it
	SyncStateSetEpoch int32
	// MasterAddr is the client address of the master the broker knows
	// ("" when none).
	MasterAddr string
	// SlaveError is why the HA client stopped (a slave whose log cannot
	// follow the master's), "" while it runs.
	SlaveError string
}

// Broker is a store that follows the controller (RocketMQ 5's
// ReplicasManager); see the package documentation.
type Broker struct {
	opts   Options
	log    *slog.Logger
	client *controller.Client
	fsys   storefs.FS
	id     int64
	hal    *handoff.Socket

	mu         sync.Mutex
	role       Role
	epoch      int32 // the master epoch of the role held (or last held)
	masterID   int64
	masterAddr string
	writable   bool
	termCtx    context.Context
	termCancel context.CancelFunc
	sss        []int64
	sssEpoch   int32
	sssChanged chan struct{}
	slaveErr   string
	badEpoch   int32 // the controller epoch already reported as behind the local one
	resumed    int32 // the master epoch the controller let this broker take back after a restart
	started    time.Time
	termStart  time.Time
	absent     map[int64]time.Time // in-sync members out of the engine's set, since when

	// storeMu is held for reading by every user of store, master and
	// slave, and for writing by a change of role.
	storeMu     sync.RWMutex
	store       *engine.Store
	master      *ha.Master
	term        *handoff.Term
	slave       *ha.Slave
	slaveCancel context.CancelFunc
	slaveDone   chan struct{}
	fwd         *forwarder

	hbLastEpoch atomic.Int32
	hbMaxOffset atomic.Int64
	hbConfirm   atomic.Int64
	// leaseFrom is when the controller leader last answered a heartbeat
	// (unix nanoseconds).
	leaseFrom atomic.Int64

	infoCh    chan *controller.BrokerSet // capacity 1: the newest answer of a heartbeat
	stop      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// Start registers the broker with the controller (or finds its id in
// broker.meta), opens its store fenced, and starts heartbeating and
// following the role the controller gives it.
func Start(ctx context.Context, opts Options) (*Broker, error) {
	switch {
	case opts.Set == "":
		return nil, errors.New("failover: no broker set name")
	case opts.Dir == "":
		return nil, errors.New("failover: no store directory")
	case len(opts.Controllers) == 0:
		return nil, errors.New("failover: no controller addresses")
	case opts.ID < 0:
		return nil, fmt.Errorf("failover: broker id %d: ids start at 1 (0: assigned)", opts.ID)
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if opts.MinInSyncReplicas == 0 {
		opts.MinInSyncReplicas = DefaultMinInSyncReplicas
	}
	if opts.MinInSyncReplicas < 2 {
		return nil, fmt.Errorf("failover: min in-sync replicas %d: at least 2 (the master and one slave)", opts.MinInSyncReplicas)
	}
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = DefaultAckTimeout
	}
	if opts.LeaseTimeout < 0 {
		return nil, fmt.Errorf("failover: lease timeout %v is negative", opts.LeaseTimeout)
	}
	if opts.ShrinkAfter <= 0 {
		opts.ShrinkAfter = min(DefaultShrinkAfter, opts.AckTimeout/2)
	}
	if opts.HAListen == "" {
		opts.HAListen = DefaultHAListen
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Store.Logger == nil {
		opts.Store.Logger = opts.Logger
	}
	b := &Broker{opts: opts, started: time.Now(), fsys: storefs.Of(opts.Store.BackendImpl), sssChanged: make(chan struct{}), stop: make(chan struct{}),
		infoCh: make(chan *controller.BrokerSet, 1)}
	b.termCtx, b.termCancel = context.WithCancel(context.Background())
	b.termCancel()
	if err := b.fsys.MkdirAll(opts.Dir); err != nil {
		return nil, fmt.Errorf("failover: store directory: %w", err)
	}
	meta, found, err := loadMeta(b.fsys, opts.Dir)
	if err != nil {
		return nil, err
	}
	switch {
	case found && meta.Set != opts.Set:
		return nil, fmt.Errorf("%w: the store in %s belongs to broker set %q, not %q", ErrMeta, opts.Dir, meta.Set, opts.Set)
	case found && opts.ID != 0 && meta.ID != 0 && meta.ID != opts.ID:
		return nil, fmt.Errorf("%w: the store in %s is broker %d's, not %d's", ErrMeta, opts.Dir, meta.ID, opts.ID)
	case !found:
		code, err := newRegisterCode()
		if err != nil {
			return nil, err
		}
		// The code is durable before the first registration: one that
		// succeeded but whose answer was lost gets its id back next time.
		meta = Meta{Set: opts.Set, ID: opts.ID, RegisterCode: code}
		if err := saveMeta(b.fsys, opts.Dir, meta); err != nil {
			return nil, err
		}
	}
	if b.hal, err = listenHA(opts.HAListen, opts.Logger); err != nil {
		return nil, err
	}
	fail := func(err error) (*Broker, error) {
		b.hal.Close()
		if b.client != nil {
			b.client.Close()
		}
		return nil, err
	}
	haAddr := b.HAAddr()
	if b.opts.Addr == "" {
		b.opts.Addr = haAddr
	}
	if b.client, err = controller.NewClient(opts.Controllers, opts.Controller); err != nil {
		return fail(fmt.Errorf("failover: %w", err))
	}
	rep, err := b.client.Register(ctx, controller.RegisterRequest{Set: opts.Set, ID: meta.ID, Addr: b.opts.Addr, HAAddr: haAddr,
		RegisterCode: meta.RegisterCode})
	if err != nil {
		return fail(fmt.Errorf("failover: register with the controller: %w", err))
	}
	if meta.ID != rep.ID {
		meta.ID = rep.ID
		if err := saveMeta(b.fsys, opts.Dir, meta); err != nil {
			return fail(err)
		}
	}
	b.id = rep.ID
	b.log = opts.Logger.With("set", opts.Set, "broker", b.id)
	if b.store, err = b.openStore(ctx, engine.Slave); err != nil {
		return fail(err)
	}
	b.noteProgress()
	b.log.Info("broker started fenced; waiting for a role from the controller", "ha", haAddr, "addr", b.opts.Addr,
		"lastEpoch", b.hbLastEpoch.Load(), "maxOffset", b.hbMaxOffset.Load())
	b.wg.Add(2)
	go b.heartbeats()
	go b.follow()
	return b, nil
}

func (b *Broker) openStore(ctx context.Context, role engine.BrokerRole) (*engine.Store, error) {
	o := b.opts.Store
	o.Role = role
	o.MinInSyncReplicas = 0
	if role == engine.SyncMaster {
		o.MinInSyncReplicas = b.opts.MinInSyncReplicas - 1
	}
	s, err := engine.Open(ctx, b.opts.Dir, o)
	if err != nil {
		return nil, fmt.Errorf("failover: open the store as %v: %w", role, err)
	}
	return s, nil
}

// ID is the broker's id in its set.
func (b *Broker) ID() int64 { return b.id }

// HAAddr is the broker's HA address, as registered with the controller.
func (b *Broker) HAAddr() string {
	if b.opts.HAAdvertise != "" {
		return b.opts.HAAdvertise
	}
	return b.hal.Addr().String()
}

// Addr is the client address the broker registered.
func (b *Broker) Addr() string { return b.opts.Addr }

// Status returns a snapshot of the broker's state.
func (b *Broker) Status() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Status{ID: b.id, Role: b.role, Epoch: b.epoch, MasterID: b.masterID, Writable: b.writable,
		SyncStateSet: slices.Clone(b.sss), SyncStateSetEpoch: b.sssEpoch, MasterAddr: b.masterAddr, SlaveError: b.slaveErr}
}

// leaseExpired reports whether the master has a lease and the controller
// leader has not answered a heartbeat for LeaseTimeout.
func (b *Broker) leaseExpired() bool {
	return b.opts.LeaseTimeout > 0 && time.Since(time.Unix(0, b.leaseFrom.Load())) > b.opts.LeaseTimeout
}

func (b *Broker) notMasterLocked() error {
	role, id, addr := b.role, b.masterID, b.masterAddr
	if role == Master && (!b.writable || b.leaseExpired()) {
		// Not writable as the master it was: it knows no other.
		role = Fenced
		if id == b.id {
			id, addr = 0, ""
		}
	}
	return &NotMasterError{Role: role, MasterID: id, Addr: addr, Epoch: b.epoch}
}

// Put appends a message when the broker is the writable master and
// acknowledges it (nil error, PutOK) once every member of the in-sync set
// holds it — the engine's set, and the controller's as the master knows
// it. A broker that is not the master, or is fenced, or that is demoted
// while the Put waits, answers ServiceNotAvailable with a *NotMasterError.
func (b *Broker) Put(ctx context.Context, m *engine.Message) (engine.PutResult, error) {
	a, err := b.PutAck(ctx, m)
	return a.PutResult, err
}

// Ack is an acknowledged Put: the engine's result, and the broker and
// master epoch that acknowledged it.
type Ack struct {
	engine.PutResult
	Broker int64
	Epoch  int32
}

// PutAck is Put, also naming the broker and epoch of the acknowledgement
// (one broker acknowledges in a given epoch).
func (b *Broker) PutAck(ctx context.Context, m *engine.Message) (Ack, error) {
	b.mu.Lock()
	if !b.writable || b.leaseExpired() {
		err := b.notMasterLocked()
		b.mu.Unlock()
		return Ack{PutResult: engine.PutResult{Status: engine.ServiceNotAvailable}}, err
	}
	tctx, epoch := b.termCtx, b.epoch
	b.mu.Unlock()
	a := Ack{Broker: b.id, Epoch: epoch}
	b.storeMu.RLock()
	defer b.storeMu.RUnlock()
	if tctx.Err() != nil {
		a.Status = engine.ServiceNotAvailable
		return a, b.notMaster()
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(tctx, cancel)()
	res, err := b.store.Put(pctx, m)
	a.PutResult = res
	if tctx.Err() != nil {
		a.Status = engine.ServiceNotAvailable
		return a, b.notMaster()
	}
	if err != nil {
		return a, err
	}
	if err := b.waitCovered(pctx, tctx, res.PhysicalOffset+int64(res.Size)); err != nil {
		if tctx.Err() != nil {
			a.Status = engine.ServiceNotAvailable
			return a, b.notMaster()
		}
		a.Status = engine.FlushSlaveTimeout
		return a, err
	}
	return a, nil
}

func (b *Broker) notMaster() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.notMasterLocked()
}

// ackedByID is what each slave broker acknowledged on its verified
// connections (storeMu held for reading, a master).
func (b *Broker) ackedByID() map[int64]int64 {
	out := map[int64]int64{}
	if b.master == nil {
		return out
	}
	for _, s := range b.master.Slaves() {
		if id, ok := idOfAddr(s.Addr); ok && s.Verified {
			out[id] = max(out[id], s.AckedOffset)
		}
	}
	return out
}

// coveredByEngine reports whether every slave of the controller's in-sync
// set is in the engine's set now: then the engine's acknowledgement
// covered it — it was in the set when the engine acknowledged, or it
// joined after, which needs everything the set had acknowledged (storeMu
// held for reading).
func (b *Broker) coveredByEngine() bool {
	b.mu.Lock()
	sss := b.sss
	b.mu.Unlock()
	members := b.store.InSyncSlaves()
	for _, id := range sss {
		if id == b.id {
			continue
		}
		found := false
		for _, a := range members {
			if got, ok := idOfAddr(a); ok && got == id {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// waitCovered waits until every slave of the controller's in-sync set
// acknowledged end: the engine waited for its own set, which drops a slave
// at once, while the controller may still count it (and could elect it)
// until it confirms the shrink.
func (b *Broker) waitCovered(ctx, tctx context.Context, end int64) error {
	if b.coveredByEngine() {
		return nil
	}
	var deadline *time.Timer
	for {
		b.mu.Lock()
		sss, ch := b.sss, b.sssChanged
		b.mu.Unlock()
		acked := b.ackedByID()
		missing := int64(0)
		for _, id := range sss {
			if id != b.id && acked[id] < end {
				missing = id
				break
			}
		}
		if missing == 0 {
			return nil
		}
		if deadline == nil {
			deadline = time.NewTimer(b.opts.AckTimeout)
			defer deadline.Stop()
		}
		poll := time.NewTimer(2 * time.Millisecond)
		select {
		case <-ch:
		case <-poll.C:
		case <-tctx.Done():
			poll.Stop()
			return tctx.Err()
		case <-ctx.Done():
			poll.Stop()
			return fmt.Errorf("failover: wait for broker %d to acknowledge %d: %w", missing, end, ctx.Err())
		case <-deadline.C:
			poll.Stop()
			return fmt.Errorf("broker %d of the in-sync set %v did not acknowledge %d within %v: %w",
				missing, sss, end, b.opts.AckTimeout, ErrNotAcknowledged)
		}
		poll.Stop()
	}
}

// ConfirmedOffset is the CommitLog offset every member of the in-sync set
// holds — the engine's set, as it acknowledged while it had enough
// members, and the controller's slaves, as each acknowledged on a
// verified connection — on the writable master; 0 on any other broker.
// No failover cuts a record below it: every replica the controller may
// elect holds it.
func (b *Broker) ConfirmedOffset() int64 {
	b.mu.Lock()
	writable, sss := b.writable, b.sss
	b.mu.Unlock()
	if !writable {
		return 0
	}
	b.storeMu.RLock()
	defer b.storeMu.RUnlock()
	return b.confirmedLocked(sss)
}

// confirmedLocked is ConfirmedOffset for the controller's in-sync set sss
// (storeMu held for reading, the broker writable).
func (b *Broker) confirmedLocked(sss []int64) int64 {
	if b.store == nil {
		return 0
	}
	confirmed := b.store.InSyncOffset()
	acked := b.ackedByID()
	for _, id := range sss {
		if id != b.id {
			confirmed = min(confirmed, acked[id])
		}
	}
	return confirmed
}

// Get reads from a queue of the writable master up to its confirmed
// offset (a fenced broker or a slave answers a *NotMasterError: its log
// may hold records a failover cuts; so may the master's past that offset,
// which Get answers as not there yet, OffsetOverflowOne).
func (b *Broker) Get(ctx context.Context, group, topic string, queueID int32, offset int64, maxMsgs int,
	filter engine.MessageFilter) (*engine.GetResult, error) {
	if err := b.readable(); err != nil {
		return nil, err
	}
	b.storeMu.RLock()
	defer b.storeMu.RUnlock()
	res, err := b.store.Get(ctx, group, topic, queueID, offset, maxMsgs, filter)
	if err == nil && res.Status == engine.Found {
		b.mu.Lock()
		sss := b.sss
		b.mu.Unlock()
		res.KeepBelow(b.confirmedLocked(sss))
	}
	return res, err
}

func (b *Broker) readable() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.writable {
		return b.notMasterLocked()
	}
	return nil
}

// WithStore runs f with the broker's current store (it is not closed or
// replaced while f runs; f must not keep it).
func (b *Broker) WithStore(f func(*engine.Store) error) error {
	b.storeMu.RLock()
	defer b.storeMu.RUnlock()
	if b.store == nil {
		return fmt.Errorf("failover: the store is not open: %w", engine.ErrClosed)
	}
	return f(b.store)
}

// noteProgress records the store's epoch and offsets for the heartbeats
// (storeMu held, or no other user yet).
func (b *Broker) noteProgress() {
	if b.store == nil {
		return
	}
	if e, ok := b.store.LastEpoch(); ok {
		b.hbLastEpoch.Store(e.Epoch)
	} else {
		b.hbLastEpoch.Store(0)
	}
	b.hbMaxOffset.Store(b.store.MaxOffset())
	if b.master != nil {
		b.hbConfirm.Store(b.store.ReplicationStats().InSyncOffset)
	} else {
		b.hbConfirm.Store(b.store.FlushedOffset())
	}
}

// heartbeats reports the broker's liveness and progress to the controller
// leader every HeartbeatInterval; the answer, the set's state, goes to
// follow (the newest one: a role change in progress does not delay the
// heartbeats, or the controller would count the broker dead).
func (b *Broker) heartbeats() {
	defer b.wg.Done()
	t := time.NewTicker(b.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		// A change of role holds the store; the heartbeat then reports
		// what it last saw rather than wait.
		if b.storeMu.TryRLock() {
			b.noteProgress()
			b.storeMu.RUnlock()
		}
		ctx, cancel := context.WithTimeout(context.Background(), b.opts.HeartbeatInterval)
		sent := time.Now()
		set, err := b.client.Heartbeat(ctx, controller.Heartbeat{Set: b.opts.Set, ID: b.id, LastEpoch: b.hbLastEpoch.Load(),
			MaxOffset: b.hbMaxOffset.Load(), ConfirmOffset: b.hbConfirm.Load(), Priority: b.opts.Priority})
		cancel()
		if err == nil {
			// The lease counts from the send: the leader heard the broker
			// no earlier than that.
			b.leaseFrom.Store(sent.UnixNano())
		}
		if err != nil {
			b.log.Debug("heartbeat not delivered", "err", err)
		} else {
			select {
			case <-b.infoCh:
			default:
			}
			b.infoCh <- set
		}
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
	}
}

// follow acts on the set's state the heartbeats bring: a new master epoch
// changes the role; as master it keeps the controller's in-sync set in
// step with the engine's.
func (b *Broker) follow() {
	defer b.wg.Done()
	for {
		select {
		case <-b.stop:
			return
		case info := <-b.infoCh:
			ctx, cancel := context.WithTimeout(context.Background(), 2*b.opts.HeartbeatInterval)
			b.apply(ctx, info)
			cancel()
		}
	}
}

func (b *Broker) apply(ctx context.Context, info *controller.BrokerSet) {
	b.mu.Lock()
	role, epoch := b.role, b.epoch
	b.mu.Unlock()
	local := b.hbLastEpoch.Load()
	switch {
	case info.MasterID == 0:
		return
	case role == Fenced && info.MasterEpoch < local:
		b.mu.Lock()
		report := b.badEpoch != info.MasterEpoch
		b.badEpoch = info.MasterEpoch
		b.mu.Unlock()
		if report {
			b.log.Error("the controller's master epoch is behind this store's epoch file; staying fenced",
				"controllerEpoch", info.MasterEpoch, "localEpoch", local, "master", info.MasterID)
		}
	case role == Fenced && info.MasterEpoch >= epoch, info.MasterEpoch > epoch:
		if info.MasterID == b.id {
			if role == Fenced && info.MasterEpoch == local && !b.mayResume(ctx, info) {
				return
			}
			b.becomeMaster(ctx, info)
		} else {
			b.becomeSlave(ctx, info)
		}
	case role == Master && info.MasterEpoch == epoch:
		b.syncInSync(ctx, info)
	}
}

// mayResume asks the controller, once per epoch, whether this broker —
// fenced, and named master at the epoch its own epoch file ends with: it
// was master at that epoch and restarted — takes its role back: not when
// an alive in-sync slave's log is ahead of its own (an asynchronously
// flushed master may have lost a tail its slaves hold, acknowledged
// records among it); the controller then elects that slave, at a new
// epoch, and this broker follows it.
func (b *Broker) mayResume(ctx context.Context, info *controller.BrokerSet) bool {
	b.mu.Lock()
	asked, started := b.resumed == info.MasterEpoch, b.started
	b.mu.Unlock()
	if asked {
		return true
	}
	if time.Since(started) < 2*b.opts.HeartbeatInterval {
		// The slaves' logs stopped growing when this broker's last run
		// ended; a heartbeat they sent after this one started carries
		// their final offsets. Ask once the controller has one.
		return false
	}
	set, err := b.client.ElectMaster(ctx, controller.ElectRequest{Set: b.opts.Set, KeepIfBest: true})
	if err != nil {
		b.log.Warn("restarted as master: asking the controller whether a slave is ahead failed; will ask again", "epoch", info.MasterEpoch,
			"err", err)
		return false
	}
	if set.MasterEpoch != info.MasterEpoch || set.MasterID != b.id {
		b.log.Info("restarted as master: an in-sync slave is ahead of this log; it is master now", "epoch", set.MasterEpoch,
			"master", set.MasterID)
		return false
	}
	b.mu.Lock()
	b.resumed = info.MasterEpoch
	b.mu.Unlock()
	return true
}

// fence stops writes at once: a Put in flight gets a *NotMasterError
// naming the master of info.
func (b *Broker) fence(info *controller.BrokerSet) {
	b.mu.Lock()
	b.writable = false
	b.role = Fenced
	b.termCancel()
	b.masterID = info.MasterID
	b.masterAddr = ""
	if r := info.Master(); r != nil {
		b.masterAddr = r.Addr
	}
	b.mu.Unlock()
	b.tellRole(Fenced, nil)
}

// tellRole calls Options.OnRole.
func (b *Broker) tellRole(r Role, s *engine.Store) {
	if b.opts.OnRole != nil {
		b.opts.OnRole(b, r, s)
	}
}

// stopReplicationLocked ends the HA master or client (storeMu held).
func (b *Broker) stopReplicationLocked() {
	if b.master != nil {
		b.term.Close()
		if err := b.master.Close(); err != nil && !errors.Is(err, ha.ErrClosed) {
			b.log.Warn("close the HA master", "err", err)
		}
		b.master, b.term = nil, nil
	}
	if b.slave != nil {
		b.slaveCancel()
		<-b.slaveDone
		b.fwd.Close()
		b.slave, b.fwd = nil, nil
	}
}

// reopenLocked makes the store one of role: flushed, dispatched to its
// end, closed and opened again (storeMu held).
func (b *Broker) reopenLocked(ctx context.Context, role engine.BrokerRole) error {
	if b.store != nil && b.store.Options().Role == role {
		return nil
	}
	t0 := time.Now()
	var flushed, closed time.Duration
	if b.store != nil {
		if _, err := b.store.Flush(ctx); err != nil {
			return fmt.Errorf("failover: flush before the role change: %w", err)
		}
		if err := b.store.WaitDispatched(ctx, b.store.MaxOffset()); err != nil {
			return fmt.Errorf("failover: dispatch before the role change: %w", err)
		}
		flushed = time.Since(t0)
		err := b.store.Close()
		b.store = nil
		closed = time.Since(t0)
		if err != nil {
			return fmt.Errorf("failover: close the store for the role change: %w", err)
		}
	}
	s, err := b.openStore(ctx, role)
	if err != nil {
		return err
	}
	b.store = s
	b.log.Info("store reopened", "role", role, "flushed", flushed.Round(time.Millisecond), "closed", closed.Round(time.Millisecond),
		"opened", time.Since(t0).Round(time.Millisecond))
	return nil
}

// becomeMaster: stop following, flush, record the epoch durably at the
// log's end, finish dispatch, reopen as a SyncMaster, start the HA master
// on the broker's HA socket, then accept writes.
func (b *Broker) becomeMaster(ctx context.Context, info *controller.BrokerSet) {
	start := time.Now()
	e := info.MasterEpoch
	b.log.Info("elected master: switching", "epoch", e, "inSync", info.SyncStateSet)
	b.fence(info)
	b.storeMu.Lock()
	defer b.storeMu.Unlock()
	b.stopReplicationLocked()
	stopped := time.Since(start)
	// The poll's timeout bounds nothing here: a role change runs to its
	// end or fails and is tried again at the next poll.
	ctx = context.WithoutCancel(ctx)
	fail := func(what string, err error) {
		b.log.Error("becoming master failed; fenced, will try again", "epoch", e, "step", what, "err", err)
	}
	if err := b.reopenLocked(ctx, engine.SyncMaster); err != nil {
		fail("reopen", err)
		return
	}
	reopened := time.Since(start)
	var end int64
	if last, ok := b.store.LastEpoch(); ok && last.Epoch >= e {
		// A restart at its own epoch: the epoch is recorded already.
		end = b.store.MaxOffset()
		if err := b.store.WaitDispatched(ctx, end); err != nil {
			fail("dispatch", err)
			return
		}
	} else {
		entry, err := b.store.StartEpoch(ctx, e)
		if err != nil {
			fail("start the epoch", err)
			return
		}
		end = entry.StartOffset
	}
	mo := b.opts.Master
	if mo.Logger == nil {
		mo.Logger = b.log
	}
	term := b.hal.StartTerm()
	mo.Listener = term
	m, err := ha.NewMaster(b.store, mo)
	if err != nil {
		term.Close()
		fail("start the HA master", err)
		return
	}
	b.master, b.term = m, term
	b.noteProgress()
	b.mu.Lock()
	b.role, b.epoch, b.masterID, b.masterAddr = Master, e, b.id, b.opts.Addr
	b.sss, b.sssEpoch = slices.Clone(info.SyncStateSet), info.SyncStateSetEpoch
	close(b.sssChanged)
	b.sssChanged = make(chan struct{})
	b.termCtx, b.termCancel = context.WithCancel(context.Background())
	b.termStart, b.absent = time.Now(), map[int64]time.Time{}
	b.writable = true
	b.slaveErr = ""
	b.mu.Unlock()
	b.tellRole(Master, b.store)
	b.log.Info("master: accepting writes", "epoch", e, "startOffset", end, "switch", time.Since(start).Round(time.Millisecond),
		"replicationStopped", stopped.Round(time.Millisecond), "reopened", reopened.Round(time.Millisecond))
}

// becomeSlave: fence writes, stop the HA master, reopen as a slave and
// follow the new master with the fork-point handshake (which cuts an
// unacknowledged tail of this log).
func (b *Broker) becomeSlave(ctx context.Context, info *controller.BrokerSet) {
	e := info.MasterEpoch
	mr := info.Master()
	if mr == nil || mr.HAAddr == "" {
		b.log.Warn("the controller names a master with no HA address", "master", info.MasterID, "epoch", e)
		return
	}
	b.log.Info("following a new master", "master", info.MasterID, "ha", mr.HAAddr, "epoch", e)
	b.fence(info)
	b.storeMu.Lock()
	defer b.storeMu.Unlock()
	b.stopReplicationLocked()
	ctx = context.WithoutCancel(ctx)
	if err := b.reopenLocked(ctx, engine.Slave); err != nil {
		b.log.Error("becoming slave failed; fenced, will try again", "epoch", e, "err", err)
		return
	}
	if err := b.dropEmptyEpochsLocked(ctx); err != nil {
		b.log.Error("becoming slave failed; fenced, will try again", "epoch", e, "err", err)
		return
	}
	fwd, err := newForwarder(mr.HAAddr, b.id, b.log)
	if err != nil {
		b.log.Error("becoming slave failed; fenced, will try again", "epoch", e, "err", err)
		return
	}
	so := b.opts.Slave
	so.MasterAddress = fwd.Addr()
	if so.TLS != nil {
		// The HA client dials the forwarder; the master's certificate must
		// name the master's address.
		so.TLS = so.TLS.Clone()
		so.TLS.ServerName, _, _ = net.SplitHostPort(mr.HAAddr)
	}
	so.EpochHandshake = true
	if so.Logger == nil {
		so.Logger = b.log
	}
	s, err := ha.NewSlave(b.store, so)
	if err != nil {
		fwd.Close()
		b.log.Error("becoming slave failed; fenced, will try again", "epoch", e, "err", err)
		return
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.slave, b.slaveCancel, b.slaveDone, b.fwd = s, cancel, done, fwd
	go func() {
		defer close(done)
		if err := s.Run(sctx); err != nil {
			b.log.Error("replication from the master stopped", "master", info.MasterID, "epoch", e, "err", err)
			b.mu.Lock()
			b.slaveErr = err.Error()
			b.mu.Unlock()
		}
	}()
	b.noteProgress()
	b.mu.Lock()
	b.role, b.epoch, b.slaveErr = Slave, e, ""
	b.sss, b.sssEpoch = nil, 0
	b.mu.Unlock()
	b.tellRole(Slave, b.store)
}

// dropEmptyEpochsLocked drops the newest entries of the epoch file that
// hold no record of this log (they start at or past its end: an epoch in
// which this broker was master and took nothing): they say nothing about
// its bytes, and a master whose history dropped the same record-less
// epoch (AppendEpoch does) would otherwise share no epoch with it — a
// slave with an empty log refused as "another history" (storeMu held).
func (b *Broker) dropEmptyEpochsLocked(ctx context.Context) error {
	all := b.store.Epochs()
	end := b.store.MaxOffset()
	kept := all
	for len(kept) > 0 && kept[len(kept)-1].StartOffset >= end {
		kept = kept[:len(kept)-1]
	}
	if len(kept) == len(all) {
		return nil
	}
	keep := int32(0)
	if len(kept) > 0 {
		keep = kept[len(kept)-1].Epoch
	}
	if err := b.store.DropEpochsAfter(ctx, keep); err != nil {
		return fmt.Errorf("failover: drop the record-less epochs %v: %w", all[len(kept):], err)
	}
	b.log.Info("dropped epochs that hold no record", "epochs", all[len(kept):], "end", end)
	return nil
}

// syncInSync keeps the controller's in-sync set in step with the engine's:
// it takes a newer set from info, and proposes {master} ∪ the engine's
// members when they differ (a shrink when a slave left, an expansion when
// one caught up).
func (b *Broker) syncInSync(ctx context.Context, info *controller.BrokerSet) {
	b.mu.Lock()
	if info.SyncStateSetEpoch > b.sssEpoch {
		b.sss, b.sssEpoch = slices.Clone(info.SyncStateSet), info.SyncStateSetEpoch
		close(b.sssChanged)
		b.sssChanged = make(chan struct{})
	}
	cur, curEpoch, e := slices.Clone(b.sss), b.sssEpoch, b.epoch
	b.mu.Unlock()
	engineSet := map[int64]bool{}
	b.storeMu.RLock()
	if b.store == nil || b.master == nil {
		b.storeMu.RUnlock()
		return
	}
	for _, a := range b.store.InSyncSlaves() {
		if id, ok := idOfAddr(a); ok {
			engineSet[id] = true
		}
	}
	if b.store.MaxOffset() == 0 {
		// An empty log: a connected empty slave holds all of it, though
		// with no byte to acknowledge the engine cannot verify it yet.
		for _, sl := range b.master.Slaves() {
			if id, ok := idOfAddr(sl.Addr); ok && sl.RequestedOffset == 0 {
				engineSet[id] = true
			}
		}
	}
	b.storeMu.RUnlock()
	// Expand at once (the engine already waits for the member); shrink a
	// member only once it has been out of the engine's set for
	// ShrinkAfter (the acknowledgements wait for it meanwhile).
	now := time.Now()
	want := []int64{b.id}
	b.mu.Lock()
	for _, id := range cur {
		if id == b.id {
			continue
		}
		if engineSet[id] {
			delete(b.absent, id)
			want = append(want, id)
			continue
		}
		since, ok := b.absent[id]
		if !ok {
			since = now
			b.absent[id] = now
		}
		if now.Sub(since) < b.opts.ShrinkAfter || now.Sub(b.termStart) < b.opts.ShrinkAfter {
			want = append(want, id)
		}
	}
	b.mu.Unlock()
	for id := range engineSet {
		if !slices.Contains(want, id) {
			want = append(want, id)
		}
	}
	slices.Sort(want)
	if slices.Equal(want, cur) {
		return
	}
	set, err := b.client.AlterSyncStateSet(ctx, controller.AlterSyncStateSetCmd{Set: b.opts.Set, MasterID: b.id, MasterEpoch: e,
		SyncStateSetEpoch: curEpoch, NewSyncStateSet: want})
	if err != nil {
		b.log.Warn("in-sync set change not applied", "from", cur, "to", want, "err", err)
		return
	}
	b.mu.Lock()
	if b.role == Master && b.epoch == e && set.SyncStateSetEpoch > b.sssEpoch {
		b.sss, b.sssEpoch = slices.Clone(set.SyncStateSet), set.SyncStateSetEpoch
		close(b.sssChanged)
		b.sssChanged = make(chan struct{})
	}
	b.mu.Unlock()
	b.log.Info("in-sync set changed", "from", cur, "to", set.SyncStateSet, "epoch", set.SyncStateSetEpoch)
}

// Close stops following the controller, fences the broker, stops
// replication and closes the store.
func (b *Broker) Close() error {
	var err error
	b.closeOnce.Do(func() {
		close(b.stop)
		b.wg.Wait()
		b.mu.Lock()
		b.writable = false
		b.role = Fenced
		b.termCancel()
		b.mu.Unlock()
		b.tellRole(Fenced, nil)
		b.storeMu.Lock()
		b.stopReplicationLocked()
		if b.store != nil {
			err = b.store.Close()
			b.store = nil
		}
		b.storeMu.Unlock()
		err = errors.Join(err, b.hal.Close(), b.client.Close())
	})
	return err
}
