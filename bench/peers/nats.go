package peers

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsPeer is an in-process NATS server with JetStream file storage. Each
// worker publishes through its own in-process client connection and waits
// for the stream's PubAck (the equivalent of a Put returning). flush=sync
// sets the server's SyncAlways (fsync on every write before the ack);
// flush=async keeps the default periodic sync (SyncInterval, 2 min).
type natsPeer struct {
	server *server.Server
	sync   bool
	mu     sync.Mutex
	conns  []*nats.Conn
}

const natsStream, natsSubject = "BENCH", "bench.>"

func openNATS(ctx context.Context, dir string, syncAlways bool) (*natsPeer, error) {
	opts := &server.Options{JetStream: true, StoreDir: dir, DontListen: true, NoLog: true, NoSigs: true,
		SyncAlways: syncAlways, JetStreamMaxMemory: 256 << 20, JetStreamMaxStore: 64 << 30}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats: new server: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("nats: server not ready after 10 s")
	}
	p := &natsPeer{server: ns, sync: syncAlways}
	nc, err := p.connect()
	if err != nil {
		p.Close()
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: natsStream, Subjects: []string{natsSubject},
		Storage: jetstream.FileStorage, Replicas: 1}); err != nil {
		p.Close()
		return nil, fmt.Errorf("nats: create stream: %w", err)
	}
	return p, nil
}

func (p *natsPeer) connect() (*nats.Conn, error) {
	nc, err := nats.Connect(nats.DefaultURL, nats.InProcessServer(p.server))
	if err != nil {
		return nil, fmt.Errorf("nats: connect in process: %w", err)
	}
	p.mu.Lock()
	p.conns = append(p.conns, nc)
	p.mu.Unlock()
	return nc, nil
}

func (p *natsPeer) NewOp(worker, sizeBytes int) load.Op {
	nc, err := p.connect()
	if err != nil {
		return func(context.Context) error { return err }
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return func(context.Context) error { return fmt.Errorf("nats: jetstream: %w", err) }
	}
	subject := "bench." + strconv.Itoa(worker)
	msg := body(worker, sizeBytes)
	return func(ctx context.Context) error {
		if _, err := js.Publish(ctx, subject, msg); err != nil {
			return fmt.Errorf("nats: publish: %w", err)
		}
		return nil
	}
}

func (p *natsPeer) Params() map[string]string {
	return map[string]string{"version": server.VERSION, "storage": "file", "syncAlways": strconv.FormatBool(p.sync),
		"syncInterval": "2m0s (server default)", "publish": "jetstream.Publish, waits for PubAck", "connections": "one in-process connection per worker"}
}

func (p *natsPeer) Close() error {
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.server.Shutdown()
	p.server.WaitForShutdown()
	return nil
}
