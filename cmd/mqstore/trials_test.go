//go:build linux

package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/internal/testenv"
)

var replTrials = flag.Int("repl.trials", 1, "process trials in TestReplicationTrials: a SYNC_MASTER with --min-in-sync-replicas 2 and two slaves, "+
	"slaves and the master killed with SIGKILL at random times, a third slave and a raw client connecting")

// TestReplicationTrials: a SYNC_MASTER producer process with
// --min-in-sync-replicas 2 and two slave processes (random disk backends
// and flush modes); during the run, at random times, a raw TCP client
// connects and reports the master's end, a third (empty) slave connects,
// and one of the two slaves is killed with SIGKILL and restarted; at the
// end the master is killed with SIGKILL. Every message the producer
// printed as acknowledged must be, with its body, on at least two of the
// slaves (each was in the in-sync set, whose every member acknowledged it,
// and an acknowledgement survives a kill -9 of the slave), and every
// slave must verify.
//
//	go test ./cmd/mqstore -run ReplicationTrials -repl.trials 100
func TestReplicationTrials(t *testing.T) {
	failed := 0
	acked := 0
	for trial := 0; trial < *replTrials; trial++ {
		var n int
		if !t.Run(fmt.Sprint(trial), func(t *testing.T) { n = replicationTrial(t, uint64(trial+1)) }) {
			failed++
		}
		acked += n
	}
	t.Logf("%d trials, %d acknowledged messages, %d trials with an acknowledged message missing or wrong", *replTrials, acked, failed)
}

func replicationTrial(t *testing.T, seed uint64) int {
	rng := rand.New(rand.NewPCG(seed, 21))
	backends := diskBackends()
	base := t.TempDir()
	dirs := []string{filepath.Join(base, "A"), filepath.Join(base, "B"), filepath.Join(base, "C")}
	size := 1 + rng.IntN(1500)
	const queues = 3
	common := []string{"--ha-heartbeat", "100ms", "--ha-housekeeping", "1s", "--segment-size", "262144"}
	producer := startProcess(t, true, append([]string{"produce", "--dir", filepath.Join(base, "M"), "--topic", "HA",
		"--queues", fmt.Sprint(queues), "--count", "100000000", "--size", fmt.Sprint(size), "--keys", "--role", "sync-master",
		"--min-in-sync-replicas", "2", "--slave-timeout", "500ms", "--ha-listen", "127.0.0.1:0", "--wait-slaves", "2",
		"--keep-going", "--print-acks", "--backend", backends[rng.IntN(len(backends))]}, common...)...)
	addr := producer.waitLine(t, listeningRE)[1]
	slaveArgs := make([][]string, 3)
	for i := range slaveArgs {
		slaveArgs[i] = append([]string{"slave", "--dir", dirs[i], "--master", addr, "--status-interval", "0",
			"--backend", backends[rng.IntN(len(backends))], "--flush", []string{"async", "sync"}[rng.IntN(2)]}, common...)
	}
	// A slave is waited for until it says it serves: a SIGTERM that came
	// before its handler would end it as a signal does (exit -1), and its
	// store would never have been shut down — a race of the test's, not a
	// failure of the slave.
	startSlave := func(i int) *process {
		p := startProcess(t, false, slaveArgs[i]...)
		p.waitLine(t, regexp.MustCompile(`^ha slave of \S+ serving `))
		return p
	}
	slaves := []*process{startSlave(0), startSlave(1), nil}

	var mu sync.Mutex
	var acks, notAcked []ack
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(producer.stdout)
		for sc.Scan() {
			var a ack
			if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
				continue // a line cut by the kill
			}
			mu.Lock()
			if a.Status != "" {
				notAcked = append(notAcked, a)
			} else {
				acks = append(acks, a)
			}
			mu.Unlock()
		}
	}()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acks)
	}
	deadline := time.Now().Add(30 * time.Second)
	for count() < 50 {
		if time.Now().After(deadline) {
			if strings.Contains(producer.stderr(), "unsupported on this system") {
				testenv.Skip(t, testenv.Uring, "%s", producer.stderr())
			}
			t.Fatalf("no acknowledgements with two slaves:\n%s\nA:\n%s\nB:\n%s", producer.stderr(), slaves[0].stderr(), slaves[1].stderr())
		}
		time.Sleep(5 * time.Millisecond) // the acks come from another process
	}
	pause := func() { time.Sleep(time.Duration(20+rng.IntN(300)) * time.Millisecond) }
	// The events, in a random order.
	events := []func(){
		func() { // a raw client reports the end of what was acknowledged so far
			mu.Lock()
			last := acks[len(acks)-1]
			mu.Unlock()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return // the master may be gone
			}
			t.Cleanup(func() { c.Close() })
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], uint64(last.PhysicalOffset+int64(last.Size)))
			c.Write(b[:])
		},
		func() { slaves[2] = startSlave(2) },
		func() { // kill -9 a slave; restart it a moment later
			k := rng.IntN(2)
			slaves[k].cmd.Process.Signal(syscall.SIGKILL)
			<-slaves[k].done
			pause()
			slaves[k] = startSlave(k)
		},
	}
	rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	for _, e := range events {
		pause()
		e()
	}
	pause()
	producer.cmd.Process.Signal(syscall.SIGKILL)
	<-producer.done
	<-readDone
	for i, s := range slaves {
		if s == nil {
			continue
		}
		if code := s.stop(t, syscall.SIGTERM); code != 0 && code != 1 {
			t.Fatalf("slave %d exited %d:\n%s", i, code, s.stderr())
		}
	}
	held := make([]map[[2]int64]recordLine, 0, 3)
	for i, s := range slaves {
		if s == nil {
			continue
		}
		verifyStore(t, dirs[i])
		held = append(held, consumeAll(t, dirs[i], "HA", queues))
	}
	for _, a := range acks {
		on := 0
		for _, h := range held {
			if l, ok := h[[2]int64{int64(a.QueueID), a.QueueOffset}]; ok &&
				l.PhysicalOffset == a.PhysicalOffset && l.UniqKey == a.UniqKey && l.BodyCRC == record.BodyCRC(Body(a.I, size)) {
				on++
			}
		}
		if on < 2 {
			t.Fatalf("acknowledged message %d (queue %d offset %d at %d) is on %d of %d slaves; --min-in-sync-replicas 2",
				a.I, a.QueueID, a.QueueOffset, a.PhysicalOffset, on, len(held))
		}
	}
	statuses := map[string]int{}
	for _, n := range notAcked {
		statuses[n.Status]++
	}
	t.Logf("%d acks (size %d), each on ≥ 2 of %d slaves; not acknowledged: %v", len(acks), size, len(held), statuses)
	return len(acks)
}
