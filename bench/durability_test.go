package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/uring"
)

// TestDurabilityFromTheRegistry: every registered backend says what its
// acknowledgement means in both flush modes; the statement follows the
// options it runs with (uring-direct's SyncMethod and PreZero), refuses
// options of another type, and the harness adds the run's intervals and
// what a slave changes.
func TestDurabilityFromTheRegistry(t *testing.T) {
	for _, reg := range engine.Backends() {
		for _, sync := range []bool{false, true} {
			d, err := reg.Durability(mappedfile.Config{SyncFlush: sync}, nil)
			if err != nil || d.Ack == "" || d.ProcessCrash == "" || d.PowerLoss == "" || d.Mechanism == "" {
				t.Errorf("%s sync=%v: %+v, %v", reg.Name, sync, d, err)
			}
		}
		if _, err := reg.Durability(mappedfile.Config{}, struct{ X int }{}); err == nil {
			t.Errorf("%s accepts options of another type", reg.Name)
		}
	}
	statement := func(backend string, sync bool, opts any) string {
		t.Helper()
		for _, reg := range engine.Backends() {
			if reg.Name == backend {
				d, err := reg.Durability(mappedfile.Config{SyncFlush: sync}, opts)
				if err != nil {
					t.Fatal(err)
				}
				return d.Mechanism
			}
		}
		t.Fatalf("no backend %s", backend)
		return ""
	}
	for _, c := range []struct {
		backend   string
		sync      bool
		opts      any
		has, lack string
	}{
		{"uring-direct", true, nil, "pwritev2(2) with RWF_DSYNC", "io_uring O_DIRECT write"},
		{"uring-direct", true, &uring.Options{SyncMethod: uring.SyncDSync}, "io_uring O_DIRECT write of the whole blocks covering it with RWF_DSYNC", "pwritev2"},
		{"uring-direct", true, &uring.Options{PreZero: true}, "pre-zeroed", ""},
		{"uring-direct", false, nil, "io_uring FSYNC(DATASYNC)", "RWF_DSYNC"},
		{"uring", true, nil, "pwrite(2) from the staging ring then fdatasync(2)", "io_uring WRITE"},
		{"uring", true, &uring.Options{SyncMethod: uring.SyncLinkedFsync}, "io_uring WRITE", "pwrite(2)"},
		{"uring", false, nil, "commit: pwrite(2)", "WRITE_FIXED"},
		{"mmap", false, nil, "msync(MS_SYNC)", ""},
		{"transient", true, nil, "pwrite of the committed bytes", ""},
	} {
		m := statement(c.backend, c.sync, c.opts)
		if !strings.Contains(m, c.has) || (c.lack != "" && strings.Contains(m, c.lack)) {
			t.Errorf("%s sync=%v %+v: %q; want %q and not %q", c.backend, c.sync, c.opts, m, c.has, c.lack)
		}
	}
	for _, c := range []struct {
		backend, flush, repl string
		has                  []string
	}{
		{"mmap", "async", ReplicationNone, []string{"(here: flush interval 500ms, flush least pages 4 (16KiB), thorough flush interval 10s)", "everything: no other copy"}},
		{"transient", "async", ReplicationNone, []string{"flush interval 500ms, commit interval 200ms, flush least pages 4 (16KiB), thorough flush interval 10s"}},
		{"mmap", "async", ReplicationSync, []string{"SYNC_MASTER", "nothing acknowledged"}},
		{"mmap", "sync", ReplicationAsync, []string{"ASYNC_MASTER", "replication lag"}},
	} {
		o, err := storeOptions(StoreConfig{SegmentSizeBytes: 1 << 20}, c.backend, c.flush)
		if err != nil {
			t.Fatal(err)
		}
		d, err := storeDurabilitySemantics(o, c.repl)
		if err != nil {
			t.Fatal(err)
		}
		all := d.Ack + " | " + d.ProcessCrash + " | " + d.PowerLoss + " | " + d.MachineLoss + " | " + d.Mechanism
		for _, h := range c.has {
			if !strings.Contains(all, h) {
				t.Errorf("%s %s %s: %q lacks %q", c.backend, c.flush, c.repl, all, h)
			}
		}
	}
}

// TestTunedBackendOptions: every backend runs with its defaults unless
// --backend-options names it (uring-direct's sync cells say why the
// defaults are its best), and the engine pre-writes the sync segments.
func TestTunedBackendOptions(t *testing.T) {
	o, err := storeOptions(StoreConfig{SegmentSizeBytes: 1 << 20}, "uring-direct", "sync")
	if err != nil {
		t.Fatal(err)
	}
	if _, why, _ := backendOptions(StoreConfig{}, "uring-direct", "sync"); o.BackendOptions != nil || !strings.Contains(why, "PrewriteSegments") {
		t.Errorf("uring-direct sync: options %#v, why %q", o.BackendOptions, why)
	}
	given := StoreConfig{BackendOptions: map[string]string{"uring-direct": `{"PreZero": true}`}}
	o, err = storeOptions(given, "uring-direct", "sync")
	if u, ok := o.BackendOptions.(*uring.Options); err != nil || !ok || !u.PreZero || !u.Direct {
		t.Errorf("--backend-options uring-direct={PreZero}: %#v, %v", o.BackendOptions, err)
	}
	if _, why, _ := backendOptions(given, "uring-direct", "sync"); why != "given with --backend-options" {
		t.Errorf("tuning %q", why)
	}
	bad := DefaultConfig()
	bad.Store.BackendOptions = map[string]string{"uring-direct": `{"NoSuchOption": 1}`}
	if err := Validate(&bad); err == nil || !strings.Contains(err.Error(), "NoSuchOption") {
		t.Errorf("unknown backend option: %v", err)
	}
}

// TestPeerDurableOnlyAtDrain: a peer whose durable position never moved in
// its windows gets no sustained verdict (an accounting limit); one that
// moved it is judged by its backlog; mqstore cells are always judged.
func TestPeerDurableOnlyAtDrain(t *testing.T) {
	rep := func(durableEnd int64) runfile.Repeat {
		res := load.Result{Workload: load.Throughput, Messages: 1000, PayloadBytes: 1 << 20, ElapsedNs: 1e9,
			Durability: &load.DurabilityResult{WrittenEndBytes: 1 << 20, DurableEndBytes: durableEnd, WrittenAfterDrainBytes: 1 << 20, DurableAfterDrainBytes: 1 << 20}}
		return repeatOf(res, nil)
	}
	for _, c := range []struct {
		peer       bool
		durableEnd int64
		atDrain    bool
		sustained  string
	}{{true, 0, true, "nil"}, {true, 1 << 20, false, "true"}, {false, 0, false, "false"}} {
		cell := runfile.Cell{Name: "x", Peer: c.peer, Workload: "throughput", Repeats: []runfile.Repeat{{Warm: true, Status: runfile.StatusOK}, rep(c.durableEnd), rep(c.durableEnd)}}
		finishCell(&cell)
		got := "nil"
		if cell.Sustained != nil {
			got = map[bool]string{true: "true", false: "false"}[*cell.Sustained]
		}
		if cell.DurableAtDrainOnly != c.atDrain || got != c.sustained {
			t.Errorf("peer %v durable %d: at drain only %v, sustained %s; want %v, %s", c.peer, c.durableEnd, cell.DurableAtDrainOnly, got, c.atDrain, c.sustained)
		}
	}
}

// TestReplicatedCellSustainsOnlyWithItsSlave: a replicated cell whose
// master kept its writes durable but whose slave fell behind by more than
// the backlog bar is not sustained.
func TestReplicatedCellSustainsOnlyWithItsSlave(t *testing.T) {
	rep := func(replBacklog float64) runfile.Repeat {
		res := load.Result{Workload: load.Throughput, Messages: 1000, PayloadBytes: 1 << 20, ElapsedNs: 1e9,
			Durability: &load.DurabilityResult{WrittenEndBytes: 1 << 20, DurableEndBytes: 1 << 20, WrittenAfterDrainBytes: 1 << 20, DurableAfterDrainBytes: 1 << 20}}
		r := repeatOf(res, nil)
		r.Figures.ReplBacklogShare = replBacklog
		return r
	}
	for _, c := range []struct {
		repl      string
		backlog   float64
		sustained bool
	}{{"async", 0.4, false}, {"async", 0.01, true}, {"", 0.4, true}} {
		cell := runfile.Cell{Name: "x", Workload: "throughput", Replication: c.repl, Repeats: []runfile.Repeat{{Warm: true, Status: runfile.StatusOK}, rep(c.backlog), rep(c.backlog)}}
		finishCell(&cell)
		if cell.Sustained == nil || *cell.Sustained != c.sustained {
			t.Errorf("replication %q, slave behind by %v of the window: sustained %v, want %v", c.repl, c.backlog, cell.Sustained, c.sustained)
		}
	}
}

// TestValidateChecksStoreOptions: store options engine.Open would refuse
// are refused before a run measures anything, naming the backend and flush.
func TestValidateChecksStoreOptions(t *testing.T) {
	for _, bad := range []func(*Config){
		func(c *Config) { c.Store.SegmentSizeBytes = 1<<20 + 1000 },
		func(c *Config) { c.Store.FlushInterval = -time.Second },
		func(c *Config) { c.Store.SyncFlushTimeout = -time.Second },
	} {
		cfg := DefaultConfig()
		bad(&cfg)
		if err := Validate(&cfg); err == nil || !strings.Contains(err.Error(), "store options for") {
			t.Errorf("%+v: %v, want the store options refused", cfg.Store, err)
		}
	}
	cfg := DefaultConfig()
	if err := Validate(&cfg); err != nil {
		t.Fatalf("the default config: %v", err)
	}
}
