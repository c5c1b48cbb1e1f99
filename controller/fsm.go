package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"

	"github.com/hashicorp/raft"
)

// Replica is one broker of a broker set, as registered.
type Replica struct {
	ID     int64  `json:"id"`
	Addr   string `json:"addr"`   // the broker's client address
	HAAddr string `json:"haAddr"` // where its slaves connect when it is master
	// RegisterCode identifies the broker process's store across restarts
	// (kept in its broker metadata): an id is given back only to the same
	// code.
	RegisterCode string `json:"registerCode"`
}

// SetConfig is the per-set configuration.
type SetConfig struct {
	// UncleanElection lets the controller elect a replica outside the
	// in-sync set when no in-sync one is alive: the set gets a master
	// again, and the records only the lost members held are gone.
	UncleanElection bool `json:"uncleanElection"`
	// MinInSyncReplicas is how many members (master included) the master's
	// in-sync set needs for it to accept a put; the controller stores it
	// for the brokers.
	MinInSyncReplicas int `json:"minInSyncReplicas"`
}

func (c SetConfig) validate() error {
	if c.MinInSyncReplicas < 1 {
		return fmt.Errorf("min in-sync replicas %d: must be at least 1: %w", c.MinInSyncReplicas, ErrInvalidRequest)
	}
	return nil
}

// BrokerSet is the replicated state of one broker set.
type BrokerSet struct {
	Name     string             `json:"name"`
	Replicas map[int64]*Replica `json:"replicas"`
	NextID   int64              `json:"nextId"`
	// MasterID is the master's id; 0 before the first election.
	MasterID    int64 `json:"masterId"`
	MasterEpoch int32 `json:"masterEpoch"`
	// SyncStateSet is the in-sync set, ascending: the replicas that hold
	// every acknowledged record. Only its members are electable.
	SyncStateSet      []int64   `json:"syncStateSet"`
	SyncStateSetEpoch int32     `json:"syncStateSetEpoch"`
	Config            SetConfig `json:"config"`
}

// Clone returns a deep copy.
func (b *BrokerSet) Clone() *BrokerSet {
	c := *b
	c.Replicas = make(map[int64]*Replica, len(b.Replicas))
	for id, r := range b.Replicas {
		rc := *r
		c.Replicas[id] = &rc
	}
	c.SyncStateSet = slices.Clone(b.SyncStateSet)
	return &c
}

// InSync reports whether id is in the in-sync set.
func (b *BrokerSet) InSync(id int64) bool { return slices.Contains(b.SyncStateSet, id) }

// Master returns the master's replica, nil when there is none.
func (b *BrokerSet) Master() *Replica {
	if b.MasterID == 0 {
		return nil
	}
	return b.Replicas[b.MasterID]
}

// Sentinel errors of the state machine and the controller; test with
// errors.Is. Each maps to a RocketMQ controller response code on the wire.
var (
	ErrFencedMasterEpoch       = errors.New("controller: master epoch is stale")
	ErrFencedSyncStateSetEpoch = errors.New("controller: in-sync set epoch is stale")
	ErrInvalidMaster           = errors.New("controller: not the current master")
	ErrInvalidReplicas         = errors.New("controller: replica not registered")
	ErrMasterNotAvailable      = errors.New("controller: no master")
	ErrInvalidRequest          = errors.New("controller: invalid request")
	ErrBrokerNotAlive          = errors.New("controller: broker not alive")
	ErrNotLeader               = errors.New("controller: not the leader")
	ErrBrokerSetNotExist       = errors.New("controller: no such broker set")
	ErrMasterStillExist        = errors.New("controller: the broker is the master")
	ErrElectMasterFailed       = errors.New("controller: no electable replica")
	ErrAlterSyncStateSetFailed = errors.New("controller: in-sync set change refused")
	ErrBrokerIDInvalid         = errors.New("controller: broker id taken by another register code")
)

// Command types (the first byte of a raft log entry's data; JSON follows).
const (
	cmdRegisterBroker    byte = 1
	cmdElectMaster       byte = 2
	cmdAlterSyncStateSet byte = 3
	cmdRemoveBroker      byte = 4
	cmdSetConfig         byte = 5
	cmdControllerAddr    byte = 6
)

// RegisterBrokerCmd registers a broker, or gives a known broker (same
// register code) its id back with its new addresses.
type RegisterBrokerCmd struct {
	Set          string `json:"set"`
	ID           int64  `json:"id,omitempty"` // 0: assign (or find by register code)
	Addr         string `json:"addr"`
	HAAddr       string `json:"haAddr"`
	RegisterCode string `json:"registerCode"`
	// Config is the configuration of a set the command creates.
	Config SetConfig `json:"config"`
}

// ElectMasterCmd makes NewMaster the master at MasterEpoch = ExpectEpoch+1.
type ElectMasterCmd struct {
	Set         string `json:"set"`
	ExpectEpoch int32  `json:"expectEpoch"`
	NewMaster   int64  `json:"newMaster"`
	// Unclean asks for a master outside the in-sync set; honoured only
	// when the set's config allows it.
	Unclean bool `json:"unclean,omitempty"`
}

// AlterSyncStateSetCmd is the master's change of the in-sync set.
type AlterSyncStateSetCmd struct {
	Set               string  `json:"set"`
	MasterID          int64   `json:"masterId"`
	MasterEpoch       int32   `json:"masterEpoch"`
	SyncStateSetEpoch int32   `json:"syncStateSetEpoch"`
	NewSyncStateSet   []int64 `json:"newSyncStateSet"`
}

// RemoveBrokerCmd drops a replica that is not the master.
type RemoveBrokerCmd struct {
	Set string `json:"set"`
	ID  int64  `json:"id"`
}

// SetConfigCmd replaces a set's configuration.
type SetConfigCmd struct {
	Set    string    `json:"set"`
	Config SetConfig `json:"config"`
}

// controllerAddrCmd records a controller's RPC address, so a follower can
// name the leader's to a client.
type controllerAddrCmd struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
}

// ApplyResult is what applying a command returns (raft's
// ApplyFuture.Response()).
type ApplyResult struct {
	Err error
	// Set is the broker set after the command (a copy); nil on error.
	Set *BrokerSet
	// Replica is the registered broker (RegisterBroker).
	Replica *Replica
	// Unclean: the election chose a replica outside the in-sync set.
	Unclean bool
}

func encodeCmd(typ byte, v any) []byte {
	return append([]byte{typ}, mustJSON(v)...)
}

// FSM is the controller's replicated state machine: every broker set's
// replicas, master, epochs and in-sync set, plus the controllers' RPC
// addresses. Apply is deterministic and validates every command against
// the state (each change is a compare-and-set on the epochs it names);
// liveness is never an input.
type FSM struct {
	log *slog.Logger

	mu          sync.RWMutex
	sets        map[string]*BrokerSet
	controllers map[string]string // raft server id → RPC address
}

// NewFSM returns an empty state machine.
func NewFSM(log *slog.Logger) *FSM {
	if log == nil {
		log = slog.Default()
	}
	return &FSM{log: log, sets: map[string]*BrokerSet{}, controllers: map[string]string{}}
}

// Set returns a copy of the named set, nil when unknown.
func (f *FSM) Set(name string) *BrokerSet {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if b := f.sets[name]; b != nil {
		return b.Clone()
	}
	return nil
}

// Sets returns copies of every set, by name.
func (f *FSM) Sets() []*BrokerSet {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]*BrokerSet, 0, len(f.sets))
	for _, b := range f.sets {
		out = append(out, b.Clone())
	}
	slices.SortFunc(out, func(a, b *BrokerSet) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// ControllerAddr returns the RPC address recorded for a controller id.
func (f *FSM) ControllerAddr(id string) string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.controllers[id]
}

// Apply implements raft.FSM.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	return f.ApplyCommand(l.Data)
}

// ApplyCommand applies one encoded command; it returns *ApplyResult.
func (f *FSM) ApplyCommand(data []byte) *ApplyResult {
	if len(data) == 0 {
		return &ApplyResult{Err: fmt.Errorf("empty command: %w", ErrInvalidRequest)}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var res *ApplyResult
	var err error
	switch typ, body := data[0], data[1:]; typ {
	case cmdRegisterBroker:
		var c RegisterBrokerCmd
		if err = json.Unmarshal(body, &c); err == nil {
			res = f.register(c)
		}
	case cmdElectMaster:
		var c ElectMasterCmd
		if err = json.Unmarshal(body, &c); err == nil {
			res = f.elect(c)
		}
	case cmdAlterSyncStateSet:
		var c AlterSyncStateSetCmd
		if err = json.Unmarshal(body, &c); err == nil {
			res = f.alter(c)
		}
	case cmdRemoveBroker:
		var c RemoveBrokerCmd
		if err = json.Unmarshal(body, &c); err == nil {
			res = f.remove(c)
		}
	case cmdSetConfig:
		var c SetConfigCmd
		if err = json.Unmarshal(body, &c); err == nil {
			res = f.setConfig(c)
		}
	case cmdControllerAddr:
		var c controllerAddrCmd
		if err = json.Unmarshal(body, &c); err == nil {
			if c.ID == "" || c.Addr == "" {
				return &ApplyResult{Err: fmt.Errorf("controller address %+v: empty id or address: %w", c, ErrInvalidRequest)}
			}
			f.controllers[c.ID] = c.Addr
			return &ApplyResult{}
		}
	default:
		return &ApplyResult{Err: fmt.Errorf("unknown command type %d: %w", typ, ErrInvalidRequest)}
	}
	if err != nil {
		return &ApplyResult{Err: fmt.Errorf("command type %d: %v: %w", data[0], err, ErrInvalidRequest)}
	}
	return res
}

func (f *FSM) setOf(name string) (*BrokerSet, error) {
	b := f.sets[name]
	if b == nil {
		return nil, fmt.Errorf("broker set %q: %w", name, ErrBrokerSetNotExist)
	}
	return b, nil
}

func fail(err error) *ApplyResult { return &ApplyResult{Err: err} }

func (f *FSM) register(c RegisterBrokerCmd) *ApplyResult {
	switch {
	case c.Set == "":
		return fail(fmt.Errorf("register: empty broker set name: %w", ErrInvalidRequest))
	case c.Addr == "":
		return fail(fmt.Errorf("register in %q: empty broker address: %w", c.Set, ErrInvalidRequest))
	case c.RegisterCode == "":
		return fail(fmt.Errorf("register in %q: empty register code: %w", c.Set, ErrInvalidRequest))
	case c.ID < 0:
		return fail(fmt.Errorf("register in %q: negative broker id %d: %w", c.Set, c.ID, ErrInvalidRequest))
	}
	b := f.sets[c.Set]
	if b == nil {
		if err := c.Config.validate(); err != nil {
			return fail(fmt.Errorf("register in new set %q: %w", c.Set, err))
		}
		b = &BrokerSet{Name: c.Set, Replicas: map[int64]*Replica{}, NextID: 1, Config: c.Config}
		f.sets[c.Set] = b
	}
	id := c.ID
	if id == 0 {
		for _, r := range b.Replicas {
			if r.RegisterCode == c.RegisterCode {
				id = r.ID
			}
		}
	}
	if id == 0 {
		id = b.NextID
	}
	if r := b.Replicas[id]; r != nil && r.RegisterCode != c.RegisterCode {
		return fail(fmt.Errorf("register broker %d in %q: %w", id, c.Set, ErrBrokerIDInvalid))
	}
	for _, r := range b.Replicas {
		if r.ID != id && r.RegisterCode == c.RegisterCode {
			return fail(fmt.Errorf("register broker %d in %q: its register code belongs to broker %d: %w", id, c.Set, r.ID, ErrBrokerIDInvalid))
		}
	}
	r := &Replica{ID: id, Addr: c.Addr, HAAddr: c.HAAddr, RegisterCode: c.RegisterCode}
	b.Replicas[id] = r
	b.NextID = max(b.NextID, id+1)
	rc := *r
	return &ApplyResult{Set: b.Clone(), Replica: &rc}
}

func (f *FSM) elect(c ElectMasterCmd) *ApplyResult {
	b, err := f.setOf(c.Set)
	if err != nil {
		return fail(fmt.Errorf("elect: %w", err))
	}
	if b.MasterEpoch != c.ExpectEpoch {
		return fail(fmt.Errorf("elect in %q: expected master epoch %d, the set is at %d: %w", c.Set, c.ExpectEpoch, b.MasterEpoch, ErrFencedMasterEpoch))
	}
	if b.Replicas[c.NewMaster] == nil {
		return fail(fmt.Errorf("elect broker %d in %q: %w", c.NewMaster, c.Set, ErrInvalidReplicas))
	}
	unclean := false
	// Before the first election there is no in-sync set: any replica may
	// be chosen (the leader waits for all of them to report first).
	if b.MasterEpoch > 0 && !b.InSync(c.NewMaster) {
		if !c.Unclean || !b.Config.UncleanElection {
			return fail(fmt.Errorf("elect broker %d in %q: not in the in-sync set %v (unclean election %s): %w",
				c.NewMaster, c.Set, b.SyncStateSet, map[bool]string{true: "allowed but not asked for", false: "not configured"}[b.Config.UncleanElection], ErrElectMasterFailed))
		}
		unclean = true
	}
	old := b.MasterID
	b.MasterID = c.NewMaster
	b.MasterEpoch++
	if unclean || len(b.SyncStateSet) == 0 {
		b.SyncStateSet = []int64{c.NewMaster}
	} else {
		// Inherit the set minus the old master: every remaining member
		// holds every acknowledged record (see doc.go).
		next := slices.DeleteFunc(slices.Clone(b.SyncStateSet), func(id int64) bool { return id == old && old != c.NewMaster })
		if !slices.Contains(next, c.NewMaster) {
			next = append(next, c.NewMaster)
		}
		slices.Sort(next)
		b.SyncStateSet = next
	}
	b.SyncStateSetEpoch++
	if unclean {
		f.log.Error("UNCLEAN ELECTION: a replica outside the in-sync set became master; records only the old in-sync members held are lost",
			"set", c.Set, "master", c.NewMaster, "epoch", b.MasterEpoch, "old master", old)
	} else {
		f.log.Info("master elected", "set", c.Set, "master", c.NewMaster, "epoch", b.MasterEpoch, "old master", old,
			"in-sync", b.SyncStateSet)
	}
	return &ApplyResult{Set: b.Clone(), Unclean: unclean}
}

func (f *FSM) alter(c AlterSyncStateSetCmd) *ApplyResult {
	b, err := f.setOf(c.Set)
	if err != nil {
		return fail(fmt.Errorf("alter in-sync set: %w", err))
	}
	switch {
	case b.MasterID == 0 || c.MasterID != b.MasterID:
		return fail(fmt.Errorf("alter in-sync set of %q from broker %d: the master is %d: %w", c.Set, c.MasterID, b.MasterID, ErrInvalidMaster))
	case c.MasterEpoch != b.MasterEpoch:
		return fail(fmt.Errorf("alter in-sync set of %q at master epoch %d: the set is at %d: %w", c.Set, c.MasterEpoch, b.MasterEpoch, ErrFencedMasterEpoch))
	case c.SyncStateSetEpoch != b.SyncStateSetEpoch:
		return fail(fmt.Errorf("alter in-sync set of %q at in-sync epoch %d: the set is at %d: %w", c.Set, c.SyncStateSetEpoch, b.SyncStateSetEpoch, ErrFencedSyncStateSetEpoch))
	}
	next := slices.Clone(c.NewSyncStateSet)
	slices.Sort(next)
	if len(slices.Compact(slices.Clone(next))) != len(next) {
		return fail(fmt.Errorf("alter in-sync set of %q to %v: a member appears twice: %w", c.Set, c.NewSyncStateSet, ErrInvalidRequest))
	}
	for _, id := range next {
		if b.Replicas[id] == nil {
			return fail(fmt.Errorf("alter in-sync set of %q to %v: broker %d: %w", c.Set, next, id, ErrInvalidReplicas))
		}
	}
	if !slices.Contains(next, b.MasterID) {
		return fail(fmt.Errorf("alter in-sync set of %q to %v: the master %d must be a member: %w", c.Set, next, b.MasterID, ErrAlterSyncStateSetFailed))
	}
	if slices.Equal(next, b.SyncStateSet) {
		return fail(fmt.Errorf("alter in-sync set of %q to %v: no change: %w", c.Set, next, ErrAlterSyncStateSetFailed))
	}
	b.SyncStateSet = next
	b.SyncStateSetEpoch++
	f.log.Info("in-sync set changed", "set", c.Set, "in-sync", next, "epoch", b.SyncStateSetEpoch)
	return &ApplyResult{Set: b.Clone()}
}

func (f *FSM) remove(c RemoveBrokerCmd) *ApplyResult {
	b, err := f.setOf(c.Set)
	if err != nil {
		return fail(fmt.Errorf("remove broker: %w", err))
	}
	if b.Replicas[c.ID] == nil {
		return fail(fmt.Errorf("remove broker %d from %q: %w", c.ID, c.Set, ErrInvalidReplicas))
	}
	if c.ID == b.MasterID {
		return fail(fmt.Errorf("remove broker %d from %q: %w", c.ID, c.Set, ErrMasterStillExist))
	}
	delete(b.Replicas, c.ID)
	if b.InSync(c.ID) {
		b.SyncStateSet = slices.DeleteFunc(b.SyncStateSet, func(id int64) bool { return id == c.ID })
		b.SyncStateSetEpoch++
	}
	return &ApplyResult{Set: b.Clone()}
}

func (f *FSM) setConfig(c SetConfigCmd) *ApplyResult {
	b, err := f.setOf(c.Set)
	if err != nil {
		return fail(fmt.Errorf("set config: %w", err))
	}
	if err := c.Config.validate(); err != nil {
		return fail(fmt.Errorf("set config of %q: %w", c.Set, err))
	}
	b.Config = c.Config
	return &ApplyResult{Set: b.Clone()}
}

// snapshotVersion is the version of the snapshot's JSON.
const snapshotVersion = 1

type fsmSnapshot struct {
	Version     int                   `json:"version"`
	Sets        map[string]*BrokerSet `json:"sets"`
	Controllers map[string]string     `json:"controllers"`
}

// Snapshot implements raft.FSM.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := fsmSnapshot{Version: snapshotVersion, Sets: map[string]*BrokerSet{}, Controllers: map[string]string{}}
	for n, b := range f.sets {
		s.Sets[n] = b.Clone()
	}
	for id, a := range f.controllers {
		s.Controllers[id] = a
	}
	return &snapshotData{data: mustJSON(s)}, nil
}

// Restore implements raft.FSM: it replaces the state with the snapshot's,
// after checking it.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("controller: restore snapshot: %w", err)
	}
	var s fsmSnapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("controller: restore snapshot: %v: %w", err, ErrSnapshotCorrupt)
	}
	if s.Version != snapshotVersion {
		return fmt.Errorf("controller: restore snapshot: version %d, want %d: %w", s.Version, snapshotVersion, ErrSnapshotCorrupt)
	}
	if s.Sets == nil {
		s.Sets = map[string]*BrokerSet{}
	}
	if s.Controllers == nil {
		s.Controllers = map[string]string{}
	}
	for n, b := range s.Sets {
		if err := checkSet(n, b); err != nil {
			return fmt.Errorf("controller: restore snapshot: %w: %w", err, ErrSnapshotCorrupt)
		}
	}
	f.mu.Lock()
	f.sets, f.controllers = s.Sets, s.Controllers
	f.mu.Unlock()
	return nil
}

func checkSet(name string, b *BrokerSet) error {
	if b == nil || b.Name != name {
		return fmt.Errorf("set %q: missing or misnamed", name)
	}
	if b.Replicas == nil {
		b.Replicas = map[int64]*Replica{}
	}
	for id, r := range b.Replicas {
		if r == nil || r.ID != id || id <= 0 || id >= b.NextID {
			return fmt.Errorf("set %q: replica %d inconsistent", name, id)
		}
	}
	if b.MasterID != 0 && b.Replicas[b.MasterID] == nil {
		return fmt.Errorf("set %q: master %d is not a replica", name, b.MasterID)
	}
	for _, id := range b.SyncStateSet {
		if b.Replicas[id] == nil {
			return fmt.Errorf("set %q: in-sync member %d is not a replica", name, id)
		}
	}
	if b.MasterEpoch < 0 || b.SyncStateSetEpoch < 0 {
		return fmt.Errorf("set %q: negative epoch", name)
	}
	return nil
}

type snapshotData struct{ data []byte }

func (s *snapshotData) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s.data); err != nil {
		sink.Cancel()
		return fmt.Errorf("controller: persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *snapshotData) Release() {}
