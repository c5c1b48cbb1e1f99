package interop

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/namesrv"
)

// syncBuffer is a bytes.Buffer a process writes while the test reads.
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

// TestBrokerSetFailover: the unmodified Go client produces to and
// consumes from a broker set of three `mqstore serve --broker-set`
// processes (each with a member of the controller group) registered with
// a name server. kill -9 of the master: the controller elects another,
// which registers as broker 0 of the same broker name; the producer's
// sends reach it after its next route refresh, and the push consumer
// receives every message that was answered SEND_OK, before and after.
// About 45 s, most of it the client's wait for its route refresh.
func TestBrokerSetFailover(t *testing.T) {
	ns, err := namesrv.Start(namesrv.Options{ListenAddr: "127.0.0.1:0", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	// mqstore is built in its own module (the replace's target): its
	// controller's dependencies are not this module's.
	bin := filepath.Join(binDir, "mqstore")
	if out, err := exec.Command("go", "build", "-C", "..", "-o", bin, "./cmd/mqstore").CombinedOutput(); err != nil {
		t.Fatalf("build mqstore: %v\n%s", err, out)
	}
	const n = 3
	var raftAddrs, rpc, peers []string // rpc: the embedded controllers' addresses
	for i := 0; i < n; i++ {
		raftAddrs = append(raftAddrs, testenv.FreeLoopbackAddr(t))
		rpc = append(rpc, testenv.FreeLoopbackAddr(t))
		peers = append(peers, fmt.Sprintf("c%d=%s", i+1, raftAddrs[i]))
	}
	root := t.TempDir()
	procs := make([]*exec.Cmd, n)
	logs := make([]*syncBuffer, n)
	for i := range procs {
		logs[i] = &syncBuffer{}
		cmd := exec.Command(bin, "serve", "--dir", fmt.Sprintf("%s/b%d", root, i+1), "--broker-set", "orders",
			"--broker-id", fmt.Sprint(i+1), "--controller", strings.Join(peers, ","), "--controller-id", fmt.Sprintf("c%d", i+1),
			"--controller-listen", rpc[i], "--controller-peers", strings.Join(rpc, ","), "--ha-listen", testenv.FreeLoopbackAddr(t),
			"--remoting-listen", testenv.FreeLoopbackAddr(t), "--namesrv", ns.Addr(), "--segment-size", fmt.Sprint(16<<20),
			"--controller-heartbeat", "200ms", "--broker-expiry", "1s", "--raft-heartbeat", "300ms", "--ha-heartbeat", "200ms",
			"--status-interval", "0")
		cmd.Stderr = logs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[i] = cmd
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	dump := func() {
		for i, l := range logs {
			t.Logf("broker %d:\n%s", i+1, l.String())
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			dump()
			rd, ok := ns.Route("orders-topic")
			t.Logf("the name server's route of orders-topic (%v): %+v", ok, rd)
		}
	})
	// master is the process that last said it is the writable master at
	// the highest epoch, and that epoch; in sync counts the slaves that
	// said they follow it.
	roleLine := regexp.MustCompile(`broker \d+: role (\w+), epoch (\d+), writable (\w+)`)
	master := func() (idx, epoch int, followers int) {
		idx = -1
		last := make([][]string, n)
		for i, l := range logs {
			if m := roleLine.FindAllStringSubmatch(l.String(), -1); len(m) > 0 {
				last[i] = m[len(m)-1]
			}
		}
		for i, m := range last {
			if m != nil && m[1] == "master" && m[3] == "true" {
				if e, _ := strconv.Atoi(m[2]); e > epoch {
					idx, epoch = i, e
				}
			}
		}
		for i, m := range last {
			if m != nil && m[1] == "slave" && m[2] == strconv.Itoa(epoch) && i != idx {
				followers++
			}
		}
		return idx, epoch, followers
	}
	var first, firstEpoch int
	waitFor(t, 60*time.Second, "a master and two slaves following it", func() bool {
		var f int
		first, firstEpoch, f = master()
		return first >= 0 && f == n-1
	})
	waitFor(t, 60*time.Second, "the master's in-sync set holding all three", func() bool {
		return strings.Contains(logs[first].String(), `to="[1 2 3]"`)
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if rd, ok := ns.Route("TBW102"); ok && len(rd.BrokerDatas) == 1 && rd.BrokerDatas[0].BrokerAddrs[0] != "" {
			break
		}
		if time.Now().After(deadline) {
			dump()
			t.Fatal("the master never registered TBW102 with the name server")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c := &cluster{ns: ns}
	p := newProducer(t, c)
	sent := map[string]string{}
	// The first sends of a new master's term are stored but refused
	// (IN_SYNC_REPLICAS_NOT_ENOUGH) until a slave has acknowledged bytes it
	// wrote: the in-sync set counts only slaves that did.
	before := sendUntilOK(t, p, "orders-topic", 20, 30*time.Second, sent)
	got := newReceived()
	newPushConsumer(t, c, "orders-group", "orders-topic", "", got)
	waitFor(t, 60*time.Second, "the first 20 consumed", func() bool { return got.hasAll(sent) })

	old := procs[first]
	old.Process.Signal(syscall.SIGKILL)
	old.Wait()
	killed := time.Now()
	var next, nextEpoch int
	waitFor(t, 60*time.Second, "a new master", func() bool {
		next, nextEpoch, _ = master()
		return nextEpoch > firstEpoch && next != first
	})
	t.Logf("broker %d killed; broker %d writable master at epoch %d after %v", first+1, next+1, nextEpoch,
		time.Since(killed).Round(time.Millisecond))
	// Sends until 20 more are SEND_OK: the client learns the new master's
	// address at its next route refresh (every 30 s).
	refused := sendUntilOK(t, p, "orders-topic", 20, 90*time.Second, sent)
	t.Logf("the producer's 20th SEND_OK from the new master %v after the kill (%d sends refused meanwhile; %d before it)",
		time.Since(killed).Round(time.Millisecond), refused, before)
	waitFor(t, 90*time.Second, "every SEND_OK message consumed", func() bool { return got.hasAll(sent) })
	have, dups := got.snapshot()
	for id, body := range sent {
		if have[id] != body {
			t.Fatalf("message %s: consumed %q, sent %q", id, have[id], body)
		}
	}
	t.Logf("%d messages SEND_OK, all consumed (%d received in all, %d again)", len(sent), len(have), dups)
}

// sendUntilOK sends until n sends are SEND_OK (recorded in sent), within
// limit, and returns how many were not.
func sendUntilOK(t *testing.T, p rocketmq.Producer, topic string, n int, limit time.Duration, sent map[string]string) (refused int) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last string
	for ok := 0; ok < n; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d sends SEND_OK within %v (%d refused; the last: %s)", ok, n, limit, refused, last)
		}
		m := primitive.NewMessage(topic, []byte(fmt.Sprintf("%s-%d-%d", topic, len(sent), refused)))
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		res, err := p.SendSync(ctx, m)
		cancel()
		if err != nil || res.Status != primitive.SendOK {
			refused++
			last = fmt.Sprint(res, err)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		sent[res.MsgID] = string(m.Body)
		ok++
	}
	return refused
}

// hasAll reports whether every message of sent (by id) was received.
func (r *received) hasAll(sent map[string]string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range sent {
		if _, ok := r.byID[id]; !ok {
			return false
		}
	}
	return true
}
