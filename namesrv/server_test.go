package namesrv

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mqstore/mqstore/remoting"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func start(t *testing.T, now func() time.Time) *Server {
	t.Helper()
	s, err := Start(Options{ListenAddr: "127.0.0.1:0", Logger: quiet(), now: now, ScanInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func registrar(t *testing.T, s *Server, name string, id int64, addr string, topics map[string]TopicConfig) *Registrar {
	t.Helper()
	r := NewRegistrar(Registration{Cluster: "DefaultCluster", BrokerName: name, BrokerID: id, BrokerAddr: addr, HAAddr: "127.0.0.1:10912",
		Topics: func() map[string]TopicConfig { return topics }}, RegistrarOptions{Addrs: []string{s.Addr()}, Logger: quiet()})
	if err := r.RegisterAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
}

func queryRoute(t *testing.T, s *Server, topic string) (*remoting.Command, TopicRouteData) {
	t.Helper()
	c, err := remoting.Dial(context.Background(), s.Addr(), nil, remoting.ConnOptions{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Invoke(ctx, remoting.NewRequest(remoting.GetRouteInfoByTopic, map[string]string{"topic": topic}, nil))
	if err != nil {
		t.Fatal(err)
	}
	var rd TopicRouteData
	if resp.Code == remoting.Success {
		if err := json.Unmarshal(resp.Body, &rd); err != nil {
			t.Fatalf("route body %s: %v", resp.Body, err)
		}
	}
	return resp, rd
}

func TestRouteWithMasterAndSlave(t *testing.T) {
	s := start(t, nil)
	topics := map[string]TopicConfig{"test": {TopicName: "test", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6}}
	registrar(t, s, "broker-a", 0, "127.0.0.1:10911", topics)
	slave := registrar(t, s, "broker-a", 1, "127.0.0.1:10921", nil)
	if got := slave.MasterAddr(); got != "127.0.0.1:10911" {
		t.Fatalf("the slave's registration answered master %q", got)
	}
	resp, rd := queryRoute(t, s, "test")
	if resp.Code != remoting.Success {
		t.Fatalf("route: %d %s", resp.Code, resp.Remark)
	}
	// Compact, with the ids as quoted keys: the form the Go client's
	// hand-written brokerAddrs split reads.
	if !bytes.Contains(resp.Body, []byte(`"brokerAddrs":{"0":"127.0.0.1:10911","1":"127.0.0.1:10921"}`)) ||
		bytes.ContainsAny(resp.Body, " \n") || !bytes.Contains(resp.Body, []byte(`"queueDatas":[{`)) {
		t.Fatalf("route body %s", resp.Body)
	}
	if len(rd.QueueDatas) != 1 || rd.QueueDatas[0] != (QueueData{BrokerName: "broker-a", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6}) {
		t.Fatalf("queue data %+v", rd.QueueDatas)
	}
	if resp, _ := queryRoute(t, s, "nope"); resp.Code != remoting.TopicNotExist {
		t.Fatalf("unknown topic answered %d", resp.Code)
	}
}

func TestBrokerLeavesWhenItsConnectionCloses(t *testing.T) {
	s := start(t, nil)
	topics := map[string]TopicConfig{"test": {TopicName: "test", ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6}}
	ctx, cancel := context.WithCancel(context.Background())
	master := registrar(t, s, "broker-a", 0, "127.0.0.1:10911", topics)
	registrar(t, s, "broker-a", 1, "127.0.0.1:10921", nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); master.Run(ctx) }()
	cancel() // Run unregisters and closes its connection
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, rd := queryRoute(t, s, "test")
		if len(rd.BrokerDatas) == 1 && len(rd.BrokerDatas[0].BrokerAddrs) == 1 {
			// The group keeps its queues while its slave lives: consumers
			// go on pulling from it.
			if rd.BrokerDatas[0].BrokerAddrs[1] != "127.0.0.1:10921" || len(rd.QueueDatas) != 1 {
				t.Fatalf("route after the master left: %+v", rd)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the master is still routed: %+v", rd)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCloseWithoutUnregisterDropsTheBroker(t *testing.T) {
	s := start(t, nil)
	r := registrar(t, s, "broker-b", 0, "127.0.0.1:10931", map[string]TopicConfig{"t2": {TopicName: "t2", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}})
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close() // the broker process died: no UNREGISTER_BROKER
	}
	r.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for slices.Contains(s.Topics(), "t2") {
		if time.Now().After(deadline) {
			t.Fatal("topic still routed after its only broker's connection closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSilentBrokerExpires(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := start(t, clock)
	registrar(t, s, "broker-a", 0, "127.0.0.1:10911", map[string]TopicConfig{"test": {TopicName: "test", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}})
	s.expire()
	if len(s.Brokers()) != 1 {
		t.Fatalf("brokers %v", s.Brokers())
	}
	mu.Lock()
	now = now.Add(DefaultBrokerExpiry + time.Second)
	mu.Unlock()
	s.expire()
	if b := s.Brokers(); len(b) != 0 || len(s.Topics()) != 0 {
		t.Fatalf("after the expiry: brokers %v topics %v", b, s.Topics())
	}
}

func TestBadRegistration(t *testing.T) {
	s := start(t, nil)
	c, err := remoting.Dial(context.Background(), s.Addr(), nil, remoting.ConnOptions{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, req := range []*remoting.Command{
		remoting.NewRequest(remoting.RegisterBroker, map[string]string{"brokerName": "a", "brokerAddr": "x:1", "brokerId": "zero"}, nil),
		remoting.NewRequest(remoting.RegisterBroker, map[string]string{"brokerName": "a", "brokerAddr": "x:1", "brokerId": "0"}, []byte("{")),
		remoting.NewRequest(remoting.RegisterBroker, map[string]string{"brokerAddr": "x:1", "brokerId": "0"}, nil),
	} {
		resp, err := c.Invoke(ctx, req)
		if err != nil || resp.Code != remoting.SystemError || resp.Remark == "" {
			t.Fatalf("%v %+v", err, resp)
		}
	}
	if len(s.Brokers()) != 0 {
		t.Fatalf("a bad registration registered %v", s.Brokers())
	}
}

// TestRegistrationsLandInTheOrderOfTheirSnapshots: a registration whose
// topic table was read before a topic was created never lands after the
// registration that carries it (the name server replaces a broker's
// topics with each registration's). The first registration's snapshot is
// held while a second, with the new topic, is made; the second must wait,
// so the route of the new topic is there once both have returned.
func TestRegistrationsLandInTheOrderOfTheirSnapshots(t *testing.T) {
	s := start(t, nil)
	old := map[string]TopicConfig{"old": {TopicName: "old", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}}
	both := map[string]TopicConfig{"old": old["old"], "fresh": {TopicName: "fresh", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}}
	var mu sync.Mutex
	calls := 0
	snapshotTaken, release := make(chan struct{}), make(chan struct{})
	r := NewRegistrar(Registration{Cluster: "DefaultCluster", BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911",
		Topics: func() map[string]TopicConfig {
			mu.Lock()
			calls++
			first := calls == 1
			mu.Unlock()
			if first {
				close(snapshotTaken)
				<-release // the periodic registration, slow to send what it read
				return old
			}
			return both
		}}, RegistrarOptions{Addrs: []string{s.Addr()}, Logger: quiet()})
	ctx := context.Background()
	firstDone := make(chan error, 1)
	go func() { firstDone <- r.RegisterAll(ctx) }()
	<-snapshotTaken
	secondDone := make(chan error, 1)
	go func() { secondDone <- r.RegisterAll(ctx) }() // a topic was created: register at once
	select {
	case err := <-secondDone:
		// Without the ordering it lands first; the stale one then drops
		// "fresh" below.
		close(release)
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(200 * time.Millisecond):
		close(release) // it waits, as it should (no deadline is a figure here: either order is checked below)
		if err := <-secondDone; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if resp, rd := queryRoute(t, s, "fresh"); resp.Code != remoting.Success || len(rd.QueueDatas) != 1 {
		t.Fatalf("the new topic's route after both registrations: code %d, %+v", resp.Code, rd)
	}
}
