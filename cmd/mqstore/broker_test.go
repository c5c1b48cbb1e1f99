//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/ha"
	"github.com/mqstore/mqstore/namesrv"
	"github.com/mqstore/mqstore/remoting"
)

// TestBrokerFlags: bad broker flags print the usage and exit 2, before any
// store is touched.
func TestBrokerFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "never")
	certs := t.TempDir()
	if err := ha.GenerateCertificates(certs, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(certs, ha.Certificates.Master), filepath.Join(certs, ha.Certificates.MasterKey)
	acl := filepath.Join(certs, "acl")
	if err := os.WriteFile(acl, []byte("ak secretkey1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badACL := filepath.Join(certs, "bad-acl")
	if err := os.WriteFile(badACL, []byte("ak short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		// Beyond loopback the port serves the log: TLS and an ACL, both. (Refused before
		// anything listens.)
		{[]string{"serve", "--dir", dir, "--role", "async-master", "--remoting-listen", "0.0.0.0:0"}, "beyond loopback"},
		{[]string{"serve", "--dir", dir, "--role", "async-master", "--remoting-listen", "0.0.0.0:0", "--remoting-acl", acl}, "beyond loopback"},
		{[]string{"serve", "--dir", dir, "--role", "async-master", "--remoting-listen", "[::]:0",
			"--remoting-tls-cert", cert, "--remoting-tls-key", key}, "beyond loopback"},
		{[]string{"serve", "--dir", dir, "--role", "async-master", "--remoting-listen", "127.0.0.1:0", "--remoting-tls-cert", cert}, "go together"},
		{[]string{"serve", "--dir", dir, "--role", "async-master", "--remoting-listen", "127.0.0.1:0", "--remoting-tls-cert", cert,
			"--remoting-tls-key", cert}, "--remoting-tls-key"},
		{[]string{"serve", "--dir", dir, "--role", "async-master", "--remoting-listen", "127.0.0.1:0", "--remoting-acl", badACL}, "line 1"},
		{[]string{"serve", "--dir", dir, "--role", "async-master", "--remoting-listen", "127.0.0.1:0", "--remoting-tls-ca", acl}, "no PEM certificate"},
		{[]string{"serve", "--dir", dir, "--role", "async-master", "--remoting-acl", acl}, "go with --remoting-listen"},
		{[]string{"namesrv", "--tls-cert", cert}, "go together"},
	} {
		_, stderr, code := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(stderr, "usage") || !strings.Contains(stderr, c.want) {
			t.Errorf("mqstore %v: exit %d, stderr %q; want 2, the usage and %q", c.args, code, stderr, c.want)
		}
	}
	for _, args := range [][]string{
		{"serve", "--dir", dir, "--role", "async-master", "--namesrv", "127.0.0.1:9876"},
		{"serve", "--dir", dir, "--role", "async-master", "--remoting-listen", "127.0.0.1:0", "--namesrv", "nowhere"},
		{"serve", "--dir", dir, "--role", "async-master", "--remoting-listen", "127.0.0.1:0", "--broker-id", "1"},
		{"serve", "--dir", dir, "--role", "async-master", "--remoting-listen", "127.0.0.1:0", "--remoting-advertise", "host:1"},
		{"serve", "--dir", dir, "--role", "slave", "--master", "127.0.0.1:1", "--remoting-listen", "127.0.0.1:0", "--broker-id", "0"},
		{"serve", "--dir", dir, "--role", "async-master", "--metrics-listen", "nowhere"},
		{"namesrv", "--broker-expiry", "1ms"},
		{"namesrv", "extra"},
	} {
		_, stderr, code := runCLI(t, args...)
		if code != 2 || !strings.Contains(stderr, "usage") {
			t.Errorf("mqstore %v: exit %d, stderr %q; want 2 and the usage", args, code, stderr)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a refused command created %s", dir)
	}
}

func invoke(t *testing.T, addr string, req *remoting.Command) *remoting.Command {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := remoting.Dial(ctx, addr, nil, remoting.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.Invoke(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestServeBrokerWithSlave runs a name server, a master and a slave as
// mqstore processes: a message sent to the master is routed, replicated and
// pulled from the slave.
func TestServeBrokerWithSlave(t *testing.T) {
	ns := startProcess(t, false, "namesrv", "--listen", "127.0.0.1:0")
	nsAddr := ns.waitLine(t, regexp.MustCompile(`name server listening on (\S+)`))[1]
	m := filepath.Join(t.TempDir(), "master")
	master := startProcess(t, false, "serve", "--dir", m, "--role", "async-master", "--ha-listen", "127.0.0.1:0",
		"--remoting-listen", "127.0.0.1:0", "--namesrv", nsAddr, "--segment-size", "4194304", "--status-interval", "0",
		"--metrics-listen", "127.0.0.1:0")
	metricsAddr := master.waitLine(t, regexp.MustCompile(`metrics at http://(\S+)/metrics`))[1]
	haAddr := master.waitLine(t, regexp.MustCompile(`ha master listening on (\S+)`))[1]
	masterAddr := master.waitLine(t, regexp.MustCompile(`broker listening on (\S+)`))[1]
	s := filepath.Join(t.TempDir(), "slave")
	slave := startProcess(t, false, "serve", "--dir", s, "--role", "slave", "--master", haAddr,
		"--remoting-listen", "127.0.0.1:0", "--namesrv", nsAddr, "--segment-size", "4194304", "--status-interval", "0")
	slaveAddr := slave.waitLine(t, regexp.MustCompile(`broker listening on (\S+)`))[1]

	send := remoting.NewRequest(remoting.SendMessage, map[string]string{"producerGroup": "pg", "topic": "cli", "queueId": "0",
		"defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "properties": "TAGS\x01t\x02"}, []byte("through the CLI"))
	if resp := invoke(t, masterAddr, send); resp.Code != remoting.Success {
		t.Fatalf("send to the master: %d %s", resp.Code, resp.Remark)
	}
	route := invoke(t, nsAddr, remoting.NewRequest(remoting.GetRouteInfoByTopic, map[string]string{"topic": "cli"}, nil))
	var rd namesrv.TopicRouteData
	if route.Code != remoting.Success || json.Unmarshal(route.Body, &rd) != nil || len(rd.BrokerDatas) != 1 {
		t.Fatalf("route: %d %s %s", route.Code, route.Remark, route.Body)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(rd.BrokerDatas[0].BrokerAddrs) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the slave never appeared in the route: %s", route.Body)
		}
		time.Sleep(20 * time.Millisecond)
		route = invoke(t, nsAddr, remoting.NewRequest(remoting.GetRouteInfoByTopic, map[string]string{"topic": "cli"}, nil))
		json.Unmarshal(route.Body, &rd)
	}
	if got := rd.BrokerDatas[0].BrokerAddrs; got[0] != masterAddr || got[1] != slaveAddr {
		t.Fatalf("route addresses %v, want 0=%s 1=%s", got, masterAddr, slaveAddr)
	}
	pull := remoting.NewRequest(remoting.PullMessage, map[string]string{"consumerGroup": "g", "topic": "cli", "queueId": "0",
		"queueOffset": "0", "maxMsgNums": "32", "sysFlag": "2", "suspendTimeoutMillis": "15000"}, nil)
	resp := invoke(t, slaveAddr, pull) // held until replication and dispatch bring the message
	if resp.Code != remoting.Success {
		t.Fatalf("pull from the slave: %d %s", resp.Code, resp.Remark)
	}
	r, err := record.Decode(resp.Body, 0, true)
	if err != nil || !bytes.Equal(r.Body, []byte("through the CLI")) || r.StoreHost.String() != masterAddr {
		t.Fatalf("pulled from the slave %+v %v", r, err)
	}
	scrape, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(scrape.Body)
	scrape.Body.Close()
	for _, want := range []string{`mqstore_puts_total{status="PUT_OK"} 1`, `mqstore_remoting_requests_total{code="10",response="0"} 1`,
		`mqstore_ha_lag_bytes{slave=`} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("the master's metrics lack %s:\n%s", want, body)
		}
	}
	for _, p := range []*process{slave, master, ns} {
		if code := p.stop(t, syscall.SIGTERM); code != 0 {
			t.Fatalf("%v exited %d:\n%s", p.cmd.Args[1:], code, p.stderr())
		}
	}
}
