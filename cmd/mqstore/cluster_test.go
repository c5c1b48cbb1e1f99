//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/controller"
	"github.com/mqstore/mqstore/internal/testenv"
)

// clusterLogBuffer is a bytes.Buffer safe to write from a running command.
type clusterLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *clusterLogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *clusterLogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestControllerGroupAndClusterStatus runs three `mqstore controller`
// commands on 127.0.0.1, registers a broker set through the client, and
// asks `mqstore cluster status` for it.
func TestControllerGroupAndClusterStatus(t *testing.T) {
	var rpc, raftAddrs []string
	var peers []string
	for i := 0; i < 3; i++ {
		rpc = append(rpc, testenv.FreeLoopbackAddr(t))
		raftAddrs = append(raftAddrs, testenv.FreeLoopbackAddr(t))
		peers = append(peers, fmt.Sprintf("c%d=%s", i+1, raftAddrs[i]))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, 3)
	logs := make([]*clusterLogBuffer, 3)
	for i := 0; i < 3; i++ {
		logs[i] = &clusterLogBuffer{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code := run(ctx, []string{"controller", "--listen", rpc[i], "--raft-listen", raftAddrs[i],
				"--peers", strings.Join(peers, ","), "--dir", t.TempDir(), "--raft-heartbeat", "150ms",
				"--broker-expiry", "500ms", "--scan-interval", "50ms", "--min-in-sync-replicas", "2"}, &bytes.Buffer{}, logs[i]); code != 0 {
				errs[i] = fmt.Errorf("controller %d exited %d: %s", i+1, code, logs[i].String())
			}
		}()
	}
	defer func() {
		cancel()
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	}()
	callCtx, callCancel := context.WithTimeout(ctx, 20*time.Second)
	defer callCancel()
	client, err := controller.NewClient(rpc, controller.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for _, code := range []string{"p", "q"} {
		if _, err := client.Register(callCtx, controller.RegisterRequest{Set: "orders", Addr: "127.0.0.1:10911", HAAddr: "127.0.0.1:10912", RegisterCode: code}); err != nil {
			t.Fatalf("register: %v", err)
		}
	}
	if _, err := client.Heartbeat(callCtx, controller.Heartbeat{Set: "orders", ID: 2, LastEpoch: 0, MaxOffset: 4096}); err != nil {
		t.Fatal(err)
	}
	// Ask a single controller, whichever it is: a follower's answer names
	// the leader.
	for _, addr := range rpc {
		var stdout, stderr bytes.Buffer
		if code := run(ctx, []string{"cluster", "status", "--controller", addr, "--timeout", "10s"}, &stdout, &stderr); code != 0 {
			t.Fatalf("cluster status via %s: exit %d: %s", addr, code, stderr.String())
		}
		out := stdout.String()
		t.Logf("cluster status via %s:\n%s", addr, out)
		for _, want := range []string{"controller leader: c", "broker set orders: master none, master epoch 0", "min in-sync replicas 2",
			"MAX-OFFSET", "4096", "never"} {
			if !strings.Contains(out, want) {
				t.Fatalf("cluster status via %s lacks %q:\n%s", addr, want, out)
			}
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"cluster", "status", "--controller", rpc[0], "--json"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), `"maxOffset": 4096`) {
		t.Fatalf("cluster status --json: exit %d: %s %s", code, stdout.String(), stderr.String())
	}
}

func TestControllerBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"controller"},
		{"controller", "--dir", "x"},
		{"controller", "--dir", "x", "--peers", "c1"},
		{"controller", "--dir", "x", "--peers", "c1=127.0.0.1:1", "--raft-listen", "127.0.0.1:2"},
		{"controller", "--dir", "x", "--peers", "c1=127.0.0.1:1", "--id", "c9"},
		{"controller", "--dir", "x", "--peers", "c1=127.0.0.1:1,c1=127.0.0.1:2"},
		{"controller", "--dir", "x", "--peers", "c1=127.0.0.1:1", "--raft-listen", "127.0.0.1:1", "--min-in-sync-replicas", "0"},
		{"cluster"},
		{"cluster", "stats"},
		{"cluster", "status"},
		{"cluster", "status", "--controller", "127.0.0.1:1", "--timeout", "0s"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "usage") {
			t.Errorf("mqstore %v: exit %d, stderr %q; want 2 and the usage", args, code, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"cluster", "status", "--controller", testenv.FreeLoopbackAddr(t), "--timeout", "300ms"}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "no leader answered") {
		t.Errorf("status of a dead controller: exit %d, stderr %q", code, stderr.String())
	}
}

// TestControllerProcessesSurviveKill runs three `mqstore controller`
// processes, kills the raft leader with SIGKILL, restarts it on its
// directory, then kills another: the group made of the restarted one and
// the third still holds the set's state (from the restarted one's log on
// disk), and fails the set over when the master's heartbeats stop.
func TestControllerProcessesSurviveKill(t *testing.T) {
	const n = 3
	var rpc, raftAddrs, peers, dirs []string
	for i := 0; i < n; i++ {
		rpc = append(rpc, testenv.FreeLoopbackAddr(t))
		raftAddrs = append(raftAddrs, testenv.FreeLoopbackAddr(t))
		peers = append(peers, fmt.Sprintf("c%d=%s", i+1, raftAddrs[i]))
		dirs = append(dirs, t.TempDir())
	}
	listening := regexp.MustCompile(`^controller c\d listening on`)
	start := func(i int) *process {
		p := startProcess(t, false, "controller", "--listen", rpc[i], "--raft-listen", raftAddrs[i], "--peers", strings.Join(peers, ","),
			"--dir", dirs[i], "--raft-heartbeat", "200ms", "--broker-expiry", "1s", "--scan-interval", "100ms")
		p.waitLine(t, listening)
		return p
	}
	procs := make([]*process, n)
	for i := range procs {
		procs[i] = start(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client, err := controller.NewClient(rpc, controller.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for _, code := range []string{"p", "q"} {
		if _, err := client.Register(ctx, controller.RegisterRequest{Set: "orders", Addr: "127.0.0.1:10911", RegisterCode: code}); err != nil {
			t.Fatalf("register: %v", err)
		}
	}
	masterAlive := true
	beat := func() {
		for _, hb := range []controller.Heartbeat{{Set: "orders", ID: 1, MaxOffset: 100}, {Set: "orders", ID: 2, MaxOffset: 50}} {
			if hb.ID == 1 && !masterAlive {
				continue
			}
			c, stop := context.WithTimeout(ctx, time.Second)
			client.Heartbeat(c, hb) // a leader change fails some: the next round sends them again
			stop()
		}
	}
	// state beats and asks until cond holds.
	state := func(what string, cond func(b *controller.BrokerSet) bool) *controller.BrokerSet {
		t.Helper()
		for {
			beat()
			c, stop := context.WithTimeout(ctx, time.Second)
			b, err := client.ReplicaInfo(c, "orders")
			stop()
			if err == nil && cond(b) {
				return b
			}
			if ctx.Err() != nil {
				t.Fatalf("waiting for %s: last answer %+v, %v", what, b, err)
			}
		}
	}
	state("the first election", func(b *controller.BrokerSet) bool { return b.MasterEpoch == 1 })
	for {
		beat()
		_, err := client.AlterSyncStateSet(ctx, controller.AlterSyncStateSetCmd{Set: "orders", MasterID: 1, MasterEpoch: 1, SyncStateSetEpoch: 1, NewSyncStateSet: []int64{1, 2}})
		if err == nil {
			break
		}
		if !errors.Is(err, controller.ErrBrokerNotAlive) || ctx.Err() != nil {
			t.Fatalf("alter: %v", err)
		}
	}
	want := state("the in-sync set {1, 2}", func(b *controller.BrokerSet) bool { return b.SyncStateSetEpoch == 2 })

	leader := slices.Index(rpc, client.Leader())
	if leader < 0 {
		t.Fatalf("the client's leader %q is none of %v", client.Leader(), rpc)
	}
	procs[leader].stop(t, syscall.SIGKILL)
	b := state("an answer from the two left", func(*controller.BrokerSet) bool { return true })
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("after the leader's kill: %+v, want %+v", b, want)
	}
	procs[leader] = start(leader)
	other := (leader + 1) % n
	procs[other].stop(t, syscall.SIGKILL)
	b = state("an answer from the restarted one and the third", func(*controller.BrokerSet) bool { return true })
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("with the restarted controller in the majority: %+v, want %+v", b, want)
	}
	masterAlive = false
	b = state("the failover", func(b *controller.BrokerSet) bool { return b.MasterEpoch == 2 })
	if b.MasterID != 2 || !slices.Equal(b.SyncStateSet, []int64{2}) {
		t.Fatalf("after the master's heartbeats stopped: %+v", b)
	}
	for i, p := range procs {
		if i != other {
			if code := p.stop(t, syscall.SIGTERM); code != 0 {
				t.Errorf("controller %d exited %d after SIGTERM:\n%s", i+1, code, p.stderr())
			}
		}
	}
}
