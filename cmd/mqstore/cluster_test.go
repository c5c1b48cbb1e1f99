//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqstore/mqstore/controller"
)

// freeAddr returns a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncBuffer is a bytes.Buffer safe to write from a running command.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
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
		rpc = append(rpc, freeAddr(t))
		raftAddrs = append(raftAddrs, freeAddr(t))
		peers = append(peers, fmt.Sprintf("c%d=%s", i+1, raftAddrs[i]))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, 3)
	logs := make([]*syncBuffer, 3)
	for i := 0; i < 3; i++ {
		logs[i] = &syncBuffer{}
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
	if err := client.Heartbeat(callCtx, controller.Heartbeat{Set: "orders", ID: 2, LastEpoch: 0, MaxOffset: 4096}); err != nil {
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
	if code := run(context.Background(), []string{"cluster", "status", "--controller", freeAddr(t), "--timeout", "300ms"}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "no leader answered") {
		t.Errorf("status of a dead controller: exit %d, stderr %q", code, stderr.String())
	}
}
