//go:build linux

package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// startTCP starts n controllers with raft on TCP and their RPC on
// 127.0.0.1, in t.TempDir(), on the mmap backend.
func startTCP(t *testing.T, n int) []*Controller {
	t.Helper()
	var trans []*raft.NetworkTransport
	var peers []Peer
	for i := 0; i < n; i++ {
		tr, err := NewTCPTransport("127.0.0.1:0", "", quietLog())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		trans = append(trans, tr)
		peers = append(peers, Peer{ID: fmt.Sprintf("c%d", i+1), RaftAddr: string(tr.LocalAddr())})
	}
	var ctrls []*Controller
	for i := 0; i < n; i++ {
		opts := Options{ID: peers[i].ID, Peers: peers, Transport: trans[i], Dir: t.TempDir(), ListenAddr: "127.0.0.1:0",
			HeartbeatTimeout: 150 * time.Millisecond, ElectionTimeout: 150 * time.Millisecond,
			LeaderLeaseTimeout: 75 * time.Millisecond, CommitTimeout: 5 * time.Millisecond,
			BrokerExpiry: 500 * time.Millisecond, ScanInterval: 50 * time.Millisecond, Logger: quietLog()}
		c, err := Start(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		ctrls = append(ctrls, c)
	}
	return ctrls
}

func TestClientOverTCP(t *testing.T) {
	ctrls := startTCP(t, 3)
	var addrs []string
	for _, c := range ctrls {
		addrs = append(addrs, c.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client, err := NewClient(addrs, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	for i, code := range []string{"x", "y"} {
		r, err := client.Register(ctx, RegisterRequest{Set: "s", Addr: "127.0.0.1:1" + fmt.Sprint(i), HAAddr: "127.0.0.1:2" + fmt.Sprint(i), RegisterCode: code})
		if err != nil || r.ID != int64(i+1) {
			t.Fatalf("register %s: %+v %v", code, r, err)
		}
	}
	var leader *Controller
	for _, c := range ctrls {
		if c.Addr() == client.Leader() && c.IsLeader() {
			leader = c
		}
	}
	if leader == nil {
		t.Fatalf("the client's leader %s is not the leader", client.Leader())
	}
	// A client that knows only a follower follows its hint.
	var follower string
	for _, c := range ctrls {
		if c != leader {
			follower = c.Addr()
		}
	}
	fc, err := NewClient([]string{follower}, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		hbCtx, hbCancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := fc.Heartbeat(hbCtx, Heartbeat{Set: "s", ID: 1, MaxOffset: 10})
		hbCancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("heartbeat through a follower's hint: %v", err)
		}
	}
	if fc.Leader() != leader.Addr() {
		t.Fatalf("the follower's client answered from %s, the leader is %s", fc.Leader(), leader.Addr())
	}
	beat := func() {
		t.Helper()
		for _, hb := range []Heartbeat{{Set: "s", ID: 1, MaxOffset: 10}, {Set: "s", ID: 2, MaxOffset: 5}} {
			if _, err := client.Heartbeat(ctx, hb); err != nil {
				t.Fatal(err)
			}
		}
	}
	var b *BrokerSet
	deadline = time.Now().Add(10 * time.Second)
	for {
		beat()
		if b, err = client.ReplicaInfo(ctx, "s"); err != nil {
			t.Fatal(err)
		}
		if b.MasterEpoch == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b.MasterID != 1 || b.MasterEpoch != 1 || b.Replicas[2].HAAddr != "127.0.0.1:21" {
		t.Fatalf("replica info: %+v", b)
	}
	// A heartbeat's answer carries the set's state.
	if hb, err := client.Heartbeat(ctx, Heartbeat{Set: "s", ID: 2, MaxOffset: 5}); err != nil || hb.MasterID != 1 || hb.MasterEpoch != 1 {
		t.Fatalf("heartbeat answer: %+v %v", hb, err)
	}
	// Refusals keep their meaning across the wire.
	_, err = client.AlterSyncStateSet(ctx, AlterSyncStateSetCmd{Set: "s", MasterID: 1, MasterEpoch: 0, SyncStateSetEpoch: 1, NewSyncStateSet: []int64{1, 2}})
	if !errors.Is(err, ErrFencedMasterEpoch) {
		t.Fatalf("stale alter over the wire: %v", err)
	}
	if _, err := client.ReplicaInfo(ctx, "nope"); !errors.Is(err, ErrBrokerSetNotExist) {
		t.Fatalf("unknown set over the wire: %v", err)
	}
	// A member the alter adds must be alive (a leader change forgets the
	// heartbeats: beat again then).
	for {
		beat()
		b, err = client.AlterSyncStateSet(ctx, AlterSyncStateSetCmd{Set: "s", MasterID: 1, MasterEpoch: 1, SyncStateSetEpoch: 1, NewSyncStateSet: []int64{1, 2}})
		if !errors.Is(err, ErrBrokerNotAlive) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || b.SyncStateSetEpoch != 2 {
		t.Fatalf("alter: %+v %v", b, err)
	}
	var st *ClusterStatus
	for {
		beat()
		st, err = client.Status(ctx)
		if err != nil || len(st.Sets) != 1 || len(st.Sets[0].Replicas) != 2 {
			t.Fatalf("status: %+v %v", st, err)
		}
		if r := st.Sets[0].Replicas[1]; r.InSync && r.Lag == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status of broker 2: %+v", st.Sets[0].Replicas[1])
		}
	}
	if st.LeaderAddr != client.Leader() {
		t.Fatalf("status names leader %s, the client got it from %s", st.LeaderAddr, client.Leader())
	}
	// A dead context ends a call at once.
	dead, stop := context.WithCancel(ctx)
	stop()
	if _, err := client.ReplicaInfo(dead, "s"); !errors.Is(err, context.Canceled) {
		t.Fatalf("call with a canceled context: %v", err)
	}
}

// TestClientSkipsAControllerThatDoesNotAnswer puts a listener that accepts
// and never answers (a stopped process) first: calls go on to the group
// within the attempt timeout, also once it was the leader the client knew.
func TestClientSkipsAControllerThatDoesNotAnswer(t *testing.T) {
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	ctrls := startTCP(t, 3)
	addrs := []string{hung.Addr().String()}
	for _, c := range ctrls {
		addrs = append(addrs, c.Addr())
	}
	client, err := NewClient(addrs, ClientOptions{AttemptTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := client.Register(ctx, RegisterRequest{Set: "s", Addr: "a", RegisterCode: "a"}); err != nil {
		t.Fatalf("register past a controller that does not answer: %v", err)
	}
	// Pretend the hung one was the leader: the next call leaves it too.
	client.mu.Lock()
	client.leader = hung.Addr().String()
	client.mu.Unlock()
	if _, err := client.ReplicaInfo(ctx, "s"); err != nil {
		t.Fatalf("replica info with a hung leader hint: %v", err)
	}
	if client.Leader() == hung.Addr().String() {
		t.Fatal("the client still takes the hung controller for the leader")
	}
}
