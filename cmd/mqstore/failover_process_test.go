//go:build linux

package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/controller"
	"github.com/mqstore/mqstore/internal/testenv"
)

var failoverKills = flag.Int("failover.kills", 1, "kill -9 rounds of the master in TestFailoverProcesses")

// TestFailoverProcesses runs three `mqstore serve --broker-set`
// processes on 127.0.0.1, each with a member of the controller group
// embedded: the first election names a master and the in-sync set grows
// to all three; kill -9 of the master's process (which may hold the raft
// leader too) makes another broker master, and `mqstore cluster status`
// shows it; the killed broker restarts as a slave of the new master
// (-failover.kills rounds). Then the master is stopped (SIGSTOP) past the
// expiry: another is elected, and the resumed one steps down to follow it.
func TestFailoverProcesses(t *testing.T) {
	const n = 3
	args, rpc := embeddedSet(t, n)
	procs := make([]*process, n)
	for i := range procs {
		procs[i] = startProcess(t, false, args(i)...)
	}
	client, err := controller.NewClient(rpc, controller.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	info := func() *controller.BrokerSet {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := client.ReplicaInfo(ctx, "orders")
		if err != nil {
			return nil
		}
		return s
	}
	waitFor := func(what string, d time.Duration, cond func(*controller.BrokerSet) bool) *controller.BrokerSet {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			if s := info(); s != nil && cond(s) {
				return s
			}
			if time.Now().After(deadline) {
				for i, p := range procs {
					t.Logf("process %d:\n%s", i+1, p.stderr())
				}
				t.Fatalf("timed out after %v waiting for %s (last: %+v)", d, what, info())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := waitFor("the first master and every replica in sync", 30*time.Second, func(s *controller.BrokerSet) bool {
		return s.MasterID != 0 && len(s.SyncStateSet) == n
	})
	if first.MasterEpoch != 1 {
		t.Fatalf("the first master has epoch %d", first.MasterEpoch)
	}
	var times []time.Duration
	cur := first
	for round := 0; round < *failoverKills; round++ {
		old := int(cur.MasterID) - 1 // broker i+1 runs in process i
		procs[old].waitLine(t, regexp.MustCompile(fmt.Sprintf(`role master, epoch %d, writable true`, cur.MasterEpoch)))
		procs[old].cmd.Process.Signal(syscall.SIGKILL)
		killed := time.Now()
		<-procs[old].done
		next := waitFor("a new master", 30*time.Second, func(s *controller.BrokerSet) bool {
			return s.MasterEpoch > cur.MasterEpoch && s.MasterID != cur.MasterID
		})
		elected := time.Since(killed)
		newIdx := int(next.MasterID) - 1
		procs[newIdx].waitLine(t, regexp.MustCompile(fmt.Sprintf(`role master, epoch %d, writable true`, next.MasterEpoch)))
		writable := time.Since(killed)
		times = append(times, writable)
		t.Logf("kill -9 of master %d: broker %d elected after %v, writable after %v", cur.MasterID, next.MasterID,
			elected.Round(time.Millisecond), writable.Round(time.Millisecond))

		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{"cluster", "status", "--controller", strings.Join(rpc, ","), "--timeout", "10s"},
			&stdout, &stderr); code != 0 {
			t.Fatalf("cluster status: exit %d: %s", code, stderr.String())
		}
		if round == 0 {
			t.Logf("cluster status:\n%s", stdout.String())
		}
		if want := fmt.Sprintf("broker set orders: master %d, master epoch %d", next.MasterID, next.MasterEpoch); !strings.Contains(stdout.String(), want) {
			t.Fatalf("cluster status lacks %q:\n%s", want, stdout.String())
		}

		// Each broker records the role it serves as (repair-slave reads it).
		waitServedRole(t, args(newIdx), "SYNC_MASTER", "ASYNC_MASTER")
		waitServedRole(t, args(old), "SYNC_MASTER", "ASYNC_MASTER")

		// The killed broker returns as a slave of the new master.
		procs[old] = startProcess(t, false, args(old)...)
		procs[old].waitLine(t, regexp.MustCompile(fmt.Sprintf(`role slave, epoch %d`, next.MasterEpoch)))
		waitServedRole(t, args(old), "SLAVE")
		cur = waitFor("the returned broker back in the in-sync set", 30*time.Second, func(s *controller.BrokerSet) bool {
			return s.InSync(cur.MasterID) && len(s.SyncStateSet) == n
		})
	}
	// SIGSTOP of the master past the expiry: another is elected; on
	// SIGCONT the old one learns the new epoch and steps down to follow.
	old := int(cur.MasterID) - 1
	procs[old].cmd.Process.Signal(syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			procs[old].cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	next := waitFor("a master in place of the stopped one", 30*time.Second, func(s *controller.BrokerSet) bool {
		return s.MasterEpoch > cur.MasterEpoch && s.MasterID != cur.MasterID
	})
	procs[old].cmd.Process.Signal(syscall.SIGCONT)
	stopped = false
	procs[old].waitLine(t, regexp.MustCompile(fmt.Sprintf(`role slave, epoch %d`, next.MasterEpoch)))
	waitFor("the resumed broker back in the in-sync set", 30*time.Second, func(s *controller.BrokerSet) bool {
		return s.MasterEpoch == next.MasterEpoch && len(s.SyncStateSet) == n
	})
	t.Logf("SIGSTOP of master %d: broker %d took over at epoch %d; resumed, the old master follows it", cur.MasterID, next.MasterID,
		next.MasterEpoch)
	slices.Sort(times)
	t.Logf("%d kills of the master: writable again after p50 %v, max %v (broker expiry 1s, raft heartbeat 300ms)", len(times),
		times[len(times)/2].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond))
	for i, p := range procs {
		if code := p.stop(t, syscall.SIGTERM); code != 0 {
			t.Fatalf("process %d exited %d:\n%s", i+1, code, p.stderr())
		}
	}
}

// waitServedRole waits until the store of the replica started with args
// records one of the roles in want (the broker records a role after it
// reports it) and returns it, or fails with the last record read.
func waitServedRole(t *testing.T, args []string, want ...string) string {
	t.Helper()
	path := filepath.Join(args[slices.Index(args, "--dir")+1], servedRoleFile)
	var got string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if got = strings.TrimSpace(string(b)); err == nil && slices.Contains(want, got) {
			return got
		}
	}
	t.Fatalf("%s records %q, want one of %q", path, got, want)
	return ""
}

// embeddedSet returns the serve arguments of n replicas of a broker set
// "orders" on 127.0.0.1, each running a member of the controller group
// (expiry 1 s, heartbeats 200 ms, raft 300 ms), and the controllers' RPC
// addresses.
func embeddedSet(t *testing.T, n int) (args func(i int) []string, rpc []string) {
	var raftAddrs, haAddrs, peers []string
	for i := 0; i < n; i++ {
		raftAddrs = append(raftAddrs, testenv.FreeLoopbackAddr(t))
		rpc = append(rpc, testenv.FreeLoopbackAddr(t))
		haAddrs = append(haAddrs, testenv.FreeLoopbackAddr(t))
		peers = append(peers, fmt.Sprintf("c%d=%s", i+1, raftAddrs[i]))
	}
	root := t.TempDir()
	return func(i int) []string {
		return []string{"serve", "--dir", filepath.Join(root, fmt.Sprintf("b%d", i+1)), "--broker-set", "orders",
			"--broker-id", fmt.Sprint(i + 1), "--controller", strings.Join(peers, ","), "--controller-id", fmt.Sprintf("c%d", i+1),
			"--controller-listen", rpc[i], "--controller-peers", strings.Join(rpc, ","), "--ha-listen", haAddrs[i],
			"--controller-heartbeat", "200ms", "--broker-expiry", "1s", "--raft-heartbeat", "300ms",
			"--ha-heartbeat", "200ms", "--ha-housekeeping", "2s", "--segment-size", "1048576", "--status-interval", "0"}
	}, rpc
}

// TestServeFailoverBadFlags: a broker-set flag that does not fit is a
// usage error before anything is opened.
func TestServeFailoverBadFlags(t *testing.T) {
	dir := t.TempDir()
	for _, extra := range [][]string{
		{"--controller-peers", "127.0.0.1:1"}, // no --broker-set
		{"--broker-set", "a"},                 // no controller
		{"--broker-set", "a", "--controller-peers", "127.0.0.1:1", "--role", "slave"},
		{"--broker-set", "a", "--controller-peers", "127.0.0.1:1", "--master", "127.0.0.1:2"},
		{"--broker-set", "a", "--controller-peers", "127.0.0.1:1", "--broker-id", "0"},
		{"--broker-set", "a", "--controller-peers", "127.0.0.1:1", "--min-in-sync-replicas", "1"},
		{"--broker-set", "a", "--controller-peers", "127.0.0.1:1", "--metrics-listen", "127.0.0.1:3"},
		{"--broker-set", "a", "--controller-peers", "127.0.0.1:1", "--ha-advertise", "nowhere"},
		{"--broker-set", "a", "--controller-peers", "127.0.0.1:1", "--namesrv", "127.0.0.1:4"}, // no --remoting-listen
		{"--ha-advertise", "127.0.0.1:5"}, // no --broker-set
		{"--broker-set", "a", "--controller-peers", "127.0.0.1:1", "--ha-listen", "0.0.0.0:6"}, // beyond loopback, no TLS or secret
		{"--broker-set", "a", "--controller-peers", "127.0.0.1:1", "--controller-heartbeat", "1ms"},
		{"--broker-set", "a", "--controller", "c1=127.0.0.1:1"}, // no --controller-id
		{"--broker-set", "a", "--controller", "c1=127.0.0.1:1", "--controller-id", "c2"},
		{"--broker-set", "a", "--controller", "c1", "--controller-id", "c1"},
		{"--broker-set", "a", "--controller", "c1=127.0.0.1:1", "--controller-id", "c1", "--broker-expiry", "100ms"},
	} {
		args := append([]string{"serve", "--dir", dir}, extra...)
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "usage") {
			t.Errorf("mqstore %v: exit %d, stderr %q; want 2 and the usage", args, code, stderr.String())
		}
	}
}

// TestFailoverTLS: three replicas of a broker set with mutual TLS on the
// HA port (gen-certs' replica certificate, server and client): the
// slaves join the in-sync set over TLS, and after kill -9 of the master
// they follow the new one over TLS too; a replica without a certificate
// never joins.
func TestFailoverTLS(t *testing.T) {
	certs := t.TempDir()
	if _, stderr, code := runCLI(t, "gen-certs", certs); code != 0 {
		t.Fatalf("gen-certs: exit %d: %s", code, stderr)
	}
	const n = 3
	set, rpc := embeddedSet(t, n)
	args := func(i int, tls bool) []string {
		a := set(i)
		if tls {
			a = append(a, "--tls-cert", filepath.Join(certs, "replica.pem"), "--tls-key", filepath.Join(certs, "replica-key.pem"),
				"--tls-ca", filepath.Join(certs, "ca.pem"))
		}
		return a
	}
	procs := make([]*process, n)
	for i := range procs {
		procs[i] = startProcess(t, false, args(i, true)...)
	}
	client, err := controller.NewClient(rpc, controller.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	waitFor := func(what string, cond func(*controller.BrokerSet) bool) *controller.BrokerSet {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s, err := client.ReplicaInfo(ctx, "orders")
			cancel()
			if err == nil && cond(s) {
				return s
			}
			if time.Now().After(deadline) {
				for i, p := range procs {
					t.Logf("process %d:\n%s", i+1, p.stderr())
				}
				t.Fatalf("timed out waiting for %s (last: %+v, %v)", what, s, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := waitFor("a master and every replica in sync over TLS", func(s *controller.BrokerSet) bool {
		return s.MasterID != 0 && len(s.SyncStateSet) == n
	})
	old := int(first.MasterID) - 1
	procs[old].waitLine(t, regexp.MustCompile(`ha master listening.*tls=true`))
	procs[old].cmd.Process.Signal(syscall.SIGKILL)
	<-procs[old].done
	next := waitFor("a new master with the other survivor in sync", func(s *controller.BrokerSet) bool {
		return s.MasterEpoch > first.MasterEpoch && s.MasterID != first.MasterID && len(s.SyncStateSet) == n-1
	})
	// Started again without a certificate, the old master cannot follow:
	// the new master refuses its HA connection.
	procs[old] = startProcess(t, false, args(old, false)...)
	procs[old].waitLine(t, regexp.MustCompile(fmt.Sprintf(`role slave, epoch %d`, next.MasterEpoch)))
	time.Sleep(2 * time.Second)
	if s := waitFor("the set's state", func(*controller.BrokerSet) bool { return true }); s.InSync(first.MasterID) {
		t.Fatalf("a replica without a certificate joined the in-sync set: %+v", s)
	}
	procs[old].stop(t, syscall.SIGTERM)
	procs[old] = startProcess(t, false, args(old, true)...)
	waitFor("the returned replica back in sync over TLS", func(s *controller.BrokerSet) bool {
		return s.MasterEpoch == next.MasterEpoch && len(s.SyncStateSet) == n
	})
	for i, p := range procs {
		if code := p.stop(t, syscall.SIGTERM); code != 0 {
			t.Fatalf("process %d exited %d:\n%s", i+1, code, p.stderr())
		}
	}
}
