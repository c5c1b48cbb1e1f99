package controller

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fsmWith returns an FSM holding set "s" with replicas 1, 2, 3; when
// elected, 1 is master at epoch 1 with in-sync set {1, 2} at epoch 2.
func fsmWith(t *testing.T, elected bool, cfg SetConfig) *FSM {
	t.Helper()
	f := NewFSM(quietLog())
	if cfg.MinInSyncReplicas == 0 {
		cfg.MinInSyncReplicas = 1
	}
	for _, code := range []string{"a", "b", "c"} {
		if r := f.ApplyCommand(encodeCmd(cmdRegisterBroker, RegisterBrokerCmd{Set: "s", Addr: "h:" + code, HAAddr: "ha:" + code, RegisterCode: code, Config: cfg})); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if elected {
		mustApply(t, f, cmdElectMaster, ElectMasterCmd{Set: "s", ExpectEpoch: 0, NewMaster: 1})
		mustApply(t, f, cmdAlterSyncStateSet, AlterSyncStateSetCmd{Set: "s", MasterID: 1, MasterEpoch: 1, SyncStateSetEpoch: 1, NewSyncStateSet: []int64{1, 2}})
	}
	return f
}

func mustApply(t *testing.T, f *FSM, typ byte, cmd any) *ApplyResult {
	t.Helper()
	r := f.ApplyCommand(encodeCmd(typ, cmd))
	if r.Err != nil {
		t.Fatalf("apply %T %+v: %v", cmd, cmd, r.Err)
	}
	return r
}

func TestFSMRegister(t *testing.T) {
	f := fsmWith(t, false, SetConfig{})
	b := f.Set("s")
	if len(b.Replicas) != 3 || b.Replicas[1].RegisterCode != "a" || b.Replicas[3].RegisterCode != "c" || b.NextID != 4 {
		t.Fatalf("set after three registrations: %+v", b)
	}
	cases := []struct {
		name    string
		cmd     RegisterBrokerCmd
		want    error
		wantID  int64
		wantAdr string
	}{
		{"same code gets its id back with the new address", RegisterBrokerCmd{Set: "s", Addr: "new:b", RegisterCode: "b"}, nil, 2, "new:b"},
		{"explicit id with its own code", RegisterBrokerCmd{Set: "s", ID: 3, Addr: "new:c", RegisterCode: "c"}, nil, 3, "new:c"},
		{"explicit id held by another code", RegisterBrokerCmd{Set: "s", ID: 1, Addr: "x", RegisterCode: "zz"}, ErrBrokerIDInvalid, 0, ""},
		{"known code asking for another id", RegisterBrokerCmd{Set: "s", ID: 9, Addr: "x", RegisterCode: "a"}, ErrBrokerIDInvalid, 0, ""},
		{"explicit new id", RegisterBrokerCmd{Set: "s", ID: 7, Addr: "h:7", RegisterCode: "g"}, nil, 7, "h:7"},
		{"empty set", RegisterBrokerCmd{Addr: "x", RegisterCode: "q"}, ErrInvalidRequest, 0, ""},
		{"empty address", RegisterBrokerCmd{Set: "s", RegisterCode: "q"}, ErrInvalidRequest, 0, ""},
		{"empty code", RegisterBrokerCmd{Set: "s", Addr: "x"}, ErrInvalidRequest, 0, ""},
		{"negative id", RegisterBrokerCmd{Set: "s", ID: -1, Addr: "x", RegisterCode: "q"}, ErrInvalidRequest, 0, ""},
		{"new set with a bad config", RegisterBrokerCmd{Set: "t", Addr: "x", RegisterCode: "q"}, ErrInvalidRequest, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := f.Set("s")
			r := f.ApplyCommand(encodeCmd(cmdRegisterBroker, c.cmd))
			if !errors.Is(r.Err, c.want) || (c.want == nil) != (r.Err == nil) {
				t.Fatalf("err = %v, want %v", r.Err, c.want)
			}
			if c.want != nil {
				if after := f.Set("s"); !reflect.DeepEqual(before, after) {
					t.Fatalf("a refused registration changed the set: %+v → %+v", before, after)
				}
				return
			}
			if r.Replica.ID != c.wantID || r.Replica.Addr != c.wantAdr {
				t.Fatalf("replica %+v, want id %d addr %s", r.Replica, c.wantID, c.wantAdr)
			}
		})
	}
	if b := f.Set("s"); b.NextID != 8 {
		t.Fatalf("next id after registering 7: %d", b.NextID)
	}
}

func TestFSMElect(t *testing.T) {
	cases := []struct {
		name     string
		elected  bool
		cfg      SetConfig
		cmd      ElectMasterCmd
		want     error
		master   int64
		epoch    int32
		sss      []int64
		sssEpoch int32
	}{
		{name: "first election: any registered replica", cmd: ElectMasterCmd{Set: "s", ExpectEpoch: 0, NewMaster: 3},
			master: 3, epoch: 1, sss: []int64{3}, sssEpoch: 1},
		{name: "first election: unregistered", cmd: ElectMasterCmd{Set: "s", NewMaster: 9}, want: ErrInvalidReplicas},
		{name: "first election: stale epoch", cmd: ElectMasterCmd{Set: "s", ExpectEpoch: 1, NewMaster: 1}, want: ErrFencedMasterEpoch},
		{name: "in-sync member inherits the set minus the old master", elected: true,
			cmd: ElectMasterCmd{Set: "s", ExpectEpoch: 1, NewMaster: 2}, master: 2, epoch: 2, sss: []int64{2}, sssEpoch: 3},
		{name: "stale expected epoch", elected: true, cmd: ElectMasterCmd{Set: "s", ExpectEpoch: 0, NewMaster: 2}, want: ErrFencedMasterEpoch},
		{name: "future expected epoch", elected: true, cmd: ElectMasterCmd{Set: "s", ExpectEpoch: 2, NewMaster: 2}, want: ErrFencedMasterEpoch},
		{name: "not in sync", elected: true, cmd: ElectMasterCmd{Set: "s", ExpectEpoch: 1, NewMaster: 3}, want: ErrElectMasterFailed},
		{name: "unclean asked but not configured", elected: true, cmd: ElectMasterCmd{Set: "s", ExpectEpoch: 1, NewMaster: 3, Unclean: true}, want: ErrElectMasterFailed},
		{name: "unclean configured but not asked", elected: true, cfg: SetConfig{UncleanElection: true},
			cmd: ElectMasterCmd{Set: "s", ExpectEpoch: 1, NewMaster: 3}, want: ErrElectMasterFailed},
		{name: "unclean configured and asked: the set restarts at the new master", elected: true, cfg: SetConfig{UncleanElection: true},
			cmd: ElectMasterCmd{Set: "s", ExpectEpoch: 1, NewMaster: 3, Unclean: true}, master: 3, epoch: 2, sss: []int64{3}, sssEpoch: 3},
		{name: "unknown set", cmd: ElectMasterCmd{Set: "nope", NewMaster: 1}, want: ErrBrokerSetNotExist},
		{name: "no master id", elected: true, cmd: ElectMasterCmd{Set: "s", ExpectEpoch: 1, NewMaster: 0}, want: ErrInvalidReplicas},
		{name: "re-electing the master keeps the set", elected: true, cmd: ElectMasterCmd{Set: "s", ExpectEpoch: 1, NewMaster: 1},
			master: 1, epoch: 2, sss: []int64{1, 2}, sssEpoch: 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := fsmWith(t, c.elected, c.cfg)
			before := f.Set("s")
			r := f.ApplyCommand(encodeCmd(cmdElectMaster, c.cmd))
			if !errors.Is(r.Err, c.want) || (c.want == nil) != (r.Err == nil) {
				t.Fatalf("err = %v, want %v", r.Err, c.want)
			}
			after := f.Set("s")
			if c.want != nil {
				if !reflect.DeepEqual(before, after) {
					t.Fatalf("a refused election changed the set: %+v → %+v", before, after)
				}
				return
			}
			if after.MasterID != c.master || after.MasterEpoch != c.epoch || !slices.Equal(after.SyncStateSet, c.sss) || after.SyncStateSetEpoch != c.sssEpoch {
				t.Fatalf("after: master %d epoch %d in-sync %v epoch %d; want %d %d %v %d", after.MasterID, after.MasterEpoch,
					after.SyncStateSet, after.SyncStateSetEpoch, c.master, c.epoch, c.sss, c.sssEpoch)
			}
			if r.Unclean != c.cmd.Unclean {
				t.Fatalf("result unclean = %v", r.Unclean)
			}
		})
	}
}

func TestFSMAlterSyncStateSet(t *testing.T) {
	ok := AlterSyncStateSetCmd{Set: "s", MasterID: 1, MasterEpoch: 1, SyncStateSetEpoch: 2, NewSyncStateSet: []int64{3, 1, 2}}
	with := func(mod func(*AlterSyncStateSetCmd)) AlterSyncStateSetCmd {
		c := ok
		c.NewSyncStateSet = slices.Clone(ok.NewSyncStateSet)
		mod(&c)
		return c
	}
	cases := []struct {
		name    string
		elected bool
		cmd     AlterSyncStateSetCmd
		want    error
	}{
		{"grow to all three", true, ok, nil},
		{"shrink to the master", true, with(func(c *AlterSyncStateSetCmd) { c.NewSyncStateSet = []int64{1} }), nil},
		{"not the master", true, with(func(c *AlterSyncStateSetCmd) { c.MasterID = 2 }), ErrInvalidMaster},
		{"no master yet", false, with(func(c *AlterSyncStateSetCmd) { c.MasterID = 0; c.MasterEpoch = 0; c.SyncStateSetEpoch = 0 }), ErrInvalidMaster},
		{"stale master epoch", true, with(func(c *AlterSyncStateSetCmd) { c.MasterEpoch = 0 }), ErrFencedMasterEpoch},
		{"stale in-sync epoch", true, with(func(c *AlterSyncStateSetCmd) { c.SyncStateSetEpoch = 1 }), ErrFencedSyncStateSetEpoch},
		{"future in-sync epoch", true, with(func(c *AlterSyncStateSetCmd) { c.SyncStateSetEpoch = 3 }), ErrFencedSyncStateSetEpoch},
		{"unregistered member", true, with(func(c *AlterSyncStateSetCmd) { c.NewSyncStateSet = []int64{1, 4} }), ErrInvalidReplicas},
		{"without the master", true, with(func(c *AlterSyncStateSetCmd) { c.NewSyncStateSet = []int64{2, 3} }), ErrAlterSyncStateSetFailed},
		{"no change", true, with(func(c *AlterSyncStateSetCmd) { c.NewSyncStateSet = []int64{2, 1} }), ErrAlterSyncStateSetFailed},
		{"duplicate member", true, with(func(c *AlterSyncStateSetCmd) { c.NewSyncStateSet = []int64{1, 3, 3} }), ErrInvalidRequest},
		{"unknown set", true, with(func(c *AlterSyncStateSetCmd) { c.Set = "x" }), ErrBrokerSetNotExist},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := fsmWith(t, c.elected, SetConfig{})
			before := f.Set("s")
			r := f.ApplyCommand(encodeCmd(cmdAlterSyncStateSet, c.cmd))
			if !errors.Is(r.Err, c.want) || (c.want == nil) != (r.Err == nil) {
				t.Fatalf("err = %v, want %v", r.Err, c.want)
			}
			after := f.Set("s")
			if c.want != nil {
				if !reflect.DeepEqual(before, after) {
					t.Fatalf("a refused alter changed the set: %+v → %+v", before, after)
				}
				return
			}
			want := slices.Sorted(slices.Values(c.cmd.NewSyncStateSet))
			if !slices.Equal(after.SyncStateSet, want) || after.SyncStateSetEpoch != before.SyncStateSetEpoch+1 || after.MasterEpoch != before.MasterEpoch {
				t.Fatalf("after: %+v", after)
			}
		})
	}
}

func TestFSMRemoveAndConfig(t *testing.T) {
	f := fsmWith(t, true, SetConfig{})
	if r := f.ApplyCommand(encodeCmd(cmdRemoveBroker, RemoveBrokerCmd{Set: "s", ID: 1})); !errors.Is(r.Err, ErrMasterStillExist) {
		t.Fatalf("removing the master: %v", r.Err)
	}
	if r := f.ApplyCommand(encodeCmd(cmdRemoveBroker, RemoveBrokerCmd{Set: "s", ID: 9})); !errors.Is(r.Err, ErrInvalidReplicas) {
		t.Fatalf("removing an unknown broker: %v", r.Err)
	}
	r := mustApply(t, f, cmdRemoveBroker, RemoveBrokerCmd{Set: "s", ID: 2})
	if r.Set.Replicas[2] != nil || !slices.Equal(r.Set.SyncStateSet, []int64{1}) || r.Set.SyncStateSetEpoch != 3 {
		t.Fatalf("after removing in-sync member 2: %+v", r.Set)
	}
	r = mustApply(t, f, cmdRemoveBroker, RemoveBrokerCmd{Set: "s", ID: 3})
	if r.Set.SyncStateSetEpoch != 3 {
		t.Fatalf("removing a member outside the in-sync set moved its epoch: %+v", r.Set)
	}
	// The old in-sync epoch is now stale for the master.
	if r := f.ApplyCommand(encodeCmd(cmdAlterSyncStateSet, AlterSyncStateSetCmd{Set: "s", MasterID: 1, MasterEpoch: 1, SyncStateSetEpoch: 2, NewSyncStateSet: []int64{1}})); !errors.Is(r.Err, ErrFencedSyncStateSetEpoch) {
		t.Fatalf("alter at the epoch before the removal: %v", r.Err)
	}
	if r := f.ApplyCommand(encodeCmd(cmdSetConfig, SetConfigCmd{Set: "s", Config: SetConfig{MinInSyncReplicas: 0}})); !errors.Is(r.Err, ErrInvalidRequest) {
		t.Fatalf("min in-sync 0: %v", r.Err)
	}
	r = mustApply(t, f, cmdSetConfig, SetConfigCmd{Set: "s", Config: SetConfig{UncleanElection: true, MinInSyncReplicas: 2}})
	if !r.Set.Config.UncleanElection || r.Set.Config.MinInSyncReplicas != 2 {
		t.Fatalf("config: %+v", r.Set.Config)
	}
	for _, bad := range [][]byte{nil, {99}, {cmdElectMaster, '{'}} {
		if r := f.ApplyCommand(bad); !errors.Is(r.Err, ErrInvalidRequest) {
			t.Fatalf("command %q: %v", bad, r.Err)
		}
	}
	// Raft's own entries are not commands.
	if got := f.Apply(&raft.Log{Type: raft.LogNoop}); got != nil {
		t.Fatalf("noop entry: %v", got)
	}
}

type bufSink struct {
	bytes.Buffer
	closed, canceled bool
}

func (s *bufSink) ID() string    { return "test" }
func (s *bufSink) Cancel() error { s.canceled = true; return nil }
func (s *bufSink) Close() error  { s.closed = true; return nil }

func TestFSMSnapshotRoundTrip(t *testing.T) {
	f := fsmWith(t, true, SetConfig{UncleanElection: true, MinInSyncReplicas: 2})
	mustApply(t, f, cmdControllerAddr, controllerAddrCmd{ID: "c1", Addr: "127.0.0.1:1"})
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink bufSink
	if err := snap.Persist(&sink); err != nil || !sink.closed {
		t.Fatalf("persist: %v closed %v", err, sink.closed)
	}
	data := slices.Clone(sink.Bytes())
	g := NewFSM(quietLog())
	if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.Sets(), g.Sets()) || g.ControllerAddr("c1") != "127.0.0.1:1" {
		t.Fatalf("restored state differs:\n%+v\n%+v", f.Sets()[0], g.Sets()[0])
	}
	// The restored state machine goes on the same way.
	for _, m := range []*FSM{f, g} {
		mustApply(t, m, cmdElectMaster, ElectMasterCmd{Set: "s", ExpectEpoch: 1, NewMaster: 2})
	}
	if !reflect.DeepEqual(f.Sets(), g.Sets()) {
		t.Fatal("the state machines diverged after the same command")
	}
	bad := map[string][]byte{
		"not JSON":       []byte("{"),
		"wrong version":  []byte(`{"version":9,"sets":{}}`),
		"master missing": []byte(`{"version":1,"sets":{"s":{"name":"s","replicas":{},"nextId":1,"masterId":3}}}`),
		"misnamed set":   []byte(`{"version":1,"sets":{"s":{"name":"t","replicas":{},"nextId":1}}}`),
		"in-sync stray":  []byte(`{"version":1,"sets":{"s":{"name":"s","replicas":{},"nextId":1,"syncStateSet":[4]}}}`),
	}
	for name, b := range bad {
		h := NewFSM(quietLog())
		mustApply(t, h, cmdRegisterBroker, RegisterBrokerCmd{Set: "keep", Addr: "a", RegisterCode: "a", Config: SetConfig{MinInSyncReplicas: 1}})
		if err := h.Restore(io.NopCloser(bytes.NewReader(b))); !errors.Is(err, ErrSnapshotCorrupt) {
			t.Fatalf("%s: %v", name, err)
		}
		if h.Set("keep") == nil {
			t.Fatalf("%s: a refused snapshot replaced the state", name)
		}
	}
}

// checkInvariants is what every reachable state satisfies.
func checkInvariants(t *testing.T, step int, b *BrokerSet, prev *BrokerSet) {
	t.Helper()
	if b.MasterID != 0 && !b.InSync(b.MasterID) {
		t.Fatalf("step %d: master %d outside the in-sync set %v", step, b.MasterID, b.SyncStateSet)
	}
	if b.MasterID != 0 && b.Replicas[b.MasterID] == nil {
		t.Fatalf("step %d: master %d not a replica", step, b.MasterID)
	}
	for i, id := range b.SyncStateSet {
		if b.Replicas[id] == nil || (i > 0 && b.SyncStateSet[i-1] >= id) {
			t.Fatalf("step %d: in-sync set %v: not sorted, unique registered replicas", step, b.SyncStateSet)
		}
	}
	if prev != nil {
		if b.MasterEpoch < prev.MasterEpoch || b.SyncStateSetEpoch < prev.SyncStateSetEpoch {
			t.Fatalf("step %d: an epoch went back: %+v → %+v", step, prev, b)
		}
		if b.MasterEpoch == prev.MasterEpoch && b.MasterID != prev.MasterID {
			t.Fatalf("step %d: the master changed within epoch %d", step, b.MasterEpoch)
		}
		if !slices.Equal(b.SyncStateSet, prev.SyncStateSet) && b.SyncStateSetEpoch == prev.SyncStateSetEpoch {
			t.Fatalf("step %d: the in-sync set changed within its epoch %d", step, b.SyncStateSetEpoch)
		}
	}
}

// TestFSMRandomCommands applies random (mostly stale or invalid) commands:
// every state keeps the invariants, and a state machine restored from a
// snapshot taken midway ends in the same state.
func TestFSMRandomCommands(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		f := NewFSM(quietLog())
		var cmds [][]byte
		for i := 0; i < 400; i++ {
			var b *BrokerSet
			if b = f.Set("s"); b == nil {
				b = &BrokerSet{}
			}
			epoch := b.MasterEpoch + int32(rng.IntN(3)) - 1
			sssEpoch := b.SyncStateSetEpoch + int32(rng.IntN(3)) - 1
			id := int64(rng.IntN(6))
			var cmd []byte
			switch rng.IntN(6) {
			case 0:
				cmd = encodeCmd(cmdRegisterBroker, RegisterBrokerCmd{Set: "s", ID: int64(rng.IntN(2)) * id, Addr: "a", RegisterCode: fmt.Sprint(rng.IntN(6)), Config: SetConfig{MinInSyncReplicas: 1}})
			case 1:
				cmd = encodeCmd(cmdElectMaster, ElectMasterCmd{Set: "s", ExpectEpoch: epoch, NewMaster: id, Unclean: rng.IntN(4) == 0})
			case 2, 3:
				var next []int64
				for r := int64(0); r < 6; r++ {
					if rng.IntN(2) == 0 {
						next = append(next, r)
					}
				}
				master := b.MasterID
				if rng.IntN(4) == 0 {
					master = id
				}
				cmd = encodeCmd(cmdAlterSyncStateSet, AlterSyncStateSetCmd{Set: "s", MasterID: master, MasterEpoch: epoch, SyncStateSetEpoch: sssEpoch, NewSyncStateSet: next})
			case 4:
				cmd = encodeCmd(cmdRemoveBroker, RemoveBrokerCmd{Set: "s", ID: id})
			case 5:
				cmd = encodeCmd(cmdSetConfig, SetConfigCmd{Set: "s", Config: SetConfig{UncleanElection: rng.IntN(2) == 0, MinInSyncReplicas: rng.IntN(3)}})
			}
			cmds = append(cmds, cmd)
			prev := f.Set("s")
			f.ApplyCommand(cmd)
			if now := f.Set("s"); now != nil {
				checkInvariants(t, i, now, prev)
			}
		}
		// Replay: the first half, a snapshot, a restore, the second half.
		g := NewFSM(quietLog())
		half := len(cmds) / 2
		for _, c := range cmds[:half] {
			g.ApplyCommand(c)
		}
		snap, _ := g.Snapshot()
		var sink bufSink
		if err := snap.Persist(&sink); err != nil {
			t.Fatal(err)
		}
		h := NewFSM(quietLog())
		if err := h.Restore(io.NopCloser(&sink.Buffer)); err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds[half:] {
			h.ApplyCommand(c)
		}
		if !reflect.DeepEqual(f.Sets(), h.Sets()) {
			t.Fatalf("seed %d: replay through a snapshot differs", seed)
		}
		if b := f.Set("s"); seed == 1 && (b == nil || b.MasterEpoch < 2) {
			t.Fatalf("seed %d: the random commands hardly moved the state: %+v", seed, b)
		}
	}
}
