package interop

import (
	"bufio"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/namesrv"
)

// The client's own examples, built unmodified from the module cache, run
// against a name server on 127.0.0.1:9876 (the address they hard-code) and
// a broker: the producer sends 10 messages to topic "test", the consumer
// (started after it, as a user would) receives the 10.
func TestClientExamples(t *testing.T) {
	producer := build(t, "github.com/apache/rocketmq-client-go/v2/examples/producer/simple")
	consumer := build(t, "github.com/apache/rocketmq-client-go/v2/examples/consumer/simple")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns, err := namesrv.Start(namesrv.Options{ListenAddr: namesrv.DefaultListenAddr, Logger: quiet()})
	if err != nil {
		t.Fatalf("the examples hard-code the name server 127.0.0.1:9876, which must be free: %v", err)
	}
	defer ns.Close()
	startNode(t, t.TempDir(), "127.0.0.1:0", ns.Addr())

	out, err := exec.CommandContext(ctx, producer).CombinedOutput()
	if err != nil {
		t.Fatalf("producer example: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "send message success"); n != 10 {
		t.Fatalf("the producer example sent %d of 10:\n%s", n, out)
	}

	// The consumer example never exits by itself (it waits on a channel
	// nothing signals): read its output until the 10 arrive, then kill it.
	cmd := exec.CommandContext(ctx, consumer)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	received := 0
	deadline := time.After(60 * time.Second)
	var seen []string
	for received < 10 {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the consumer example exited after %d of 10:\n%s", received, strings.Join(seen, "\n"))
			}
			seen = append(seen, line)
			if strings.Contains(line, "subscribe callback") && strings.Contains(line, "Hello RocketMQ Go Client!") {
				received++
			}
		case <-deadline:
			t.Fatalf("the consumer example received %d of 10 in 60 s:\n%s", received, strings.Join(seen, "\n"))
		}
	}
	t.Logf("client examples: 10 sent, %d received", received)
}
