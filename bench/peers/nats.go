package peers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

const (
	natsStream          = "BENCH"
	natsSubjectPrefix   = "bench."
	natsAckTimeout      = 30 * time.Second
	natsReadyTimeout    = 10 * time.Second
	natsMaxMemoryBytes  = 256 << 20
	natsMaxStoreBytes   = 64 << 30
	natsStoreSubdir     = "jetstream"
	natsRecordFixedSize = 22 + 8 // filestore record: length 4, seq 8, ts 8, subject length 2, …, hash 8
)

// natsRecordBytes is the size of the record NATS's file store writes for a
// message without headers (server/filestore.go fileStoreMsgSize); a test
// checks it against the stream's byte count.
func natsRecordBytes(subject string, msg []byte) int64 {
	return int64(natsRecordFixedSize + len(subject) + len(msg))
}

// natsPeer is an embedded NATS server with a JetStream file-storage stream
// (one replica), published to as a broker is used: one client connection
// (loopback TCP, or the in-process pipe for nats-inproc) shared by the
// producers, each producer publishing with PublishAsync and waiting for its
// PubAck before the next message — one op is one message acknowledged, and
// the messages in flight are the producers, as mqstore's Puts in flight.
//
// A one-replica stream writes each message into its block file (write(2),
// "flush in place") before the PubAck. flush=sync sets SyncAlways: the block
// file is fsynced after every message, before its PubAck, with no group
// commit. flush=async sets sync_interval to mqstore's flush interval: a
// timer fsyncs the blocks with unsynced writes.
//
// Durable bytes: with SyncAlways every acknowledged message. With the
// interval nothing outside the server can see when a periodic sync ran or
// finished (and a server shutdown does not fsync blocks), so durable counts
// only what Drain made durable: Drain fsyncs the stream's files itself.
type natsPeer struct {
	positions
	info   Info
	dir    string
	server *server.Server
	conn   *nats.Conn
	js     jetstream.JetStream
	sync   bool
	failed stickyError
	// window is the pending window (0: nats.go's default); producers
	// counts NewOp calls: more producers than the window would stall.
	window    int
	producers atomic.Int64
}

func describeNATS(inProcess, sync bool, cfg Config) (Info, error) {
	version, versionErr := moduleVersion(natsServerModule)
	client, clientErr := moduleVersion(natsClientModule)
	name, transport := NATS, "loopback TCP"
	if inProcess {
		name, transport = NATSInProc, "in-process connection"
	}
	info := Info{Name: name, Flush: flushName(sync), Version: version, Options: map[string]string{
		"server":        "nats-server " + version + " embedded (server.VERSION " + server.VERSION + "), JetStream on",
		"client":        "nats.go " + client + ", jetstream.PublishAsync, then wait for that message's PubAck",
		"connection":    "one connection shared by every producer over " + transport,
		"pendingWindow": natsWindow(cfg),
		"ackTimeout":    natsAckTimeout.String() + " (PublishAsyncTimeout: a PubAck later than this fails the run)",
		"stream":        natsStream + ": subjects " + natsSubjectPrefix + ">, file storage, 1 replica, limits retention, no limits (server default block size)",
		"subjects":      natsSubjectPrefix + "<worker>: one per producer",
		"flushInPlace":  "true (a one-replica stream writes each message to its block file before the PubAck)",
	}}
	label := "NATS " + version + " embedded server, PublishAsync, " + transport
	if sync {
		info.Label = label + ", SyncAlways"
		info.Options["syncAlways"] = "true"
		info.Durability = DurabilityInfo{
			Ack:          "after the message is written to its block file and the file fsynced, one fsync per message (no group commit)",
			ProcessCrash: "nothing acknowledged",
			PowerLoss:    "nothing acknowledged",
			Mechanism:    "fsync (os.File.Sync) of the message block after every message, under the stream's locks",
		}
	} else {
		info.Label = label + ", sync_interval " + cfg.SyncInterval.String()
		info.Options["syncAlways"] = "false"
		info.Options["syncInterval"] = cfg.SyncInterval.String() + " (mqstore's async flush interval; the server's default is 2m0s)"
		info.Durability = DurabilityInfo{
			Ack:          "after the message is written (write(2)) to its block file, before any sync",
			ProcessCrash: "nothing acknowledged (it is in the page cache)",
			PowerLoss:    "up to sync_interval (" + cfg.SyncInterval.String() + ") of acknowledged messages, plus the duration of the sync in progress",
			Mechanism: "a timer fsyncs every block with unsynced writes each sync_interval (fileStore.syncBlocks); " +
				"durable is counted only at Drain, which fsyncs the stream's files itself (NATS has no sync call and its shutdown does not fsync blocks)",
		}
	}
	return info, errors.Join(versionErr, clientErr)
}

func natsWindow(cfg Config) string {
	if cfg.Outstanding == 0 {
		return "nats.go's default PublishAsyncMaxPending; one message in flight per producer, as an mqstore Put"
	}
	return strconv.Itoa(cfg.Outstanding) + " (PublishAsyncMaxPending = the harness's outstanding requests: one message in flight per producer, as an mqstore Put)"
}

func openNATS(ctx context.Context, dir string, info Info, cfg Config) (*natsPeer, error) {
	inProcess := info.Name == NATSInProc
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, DontListen: inProcess,
		JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true,
		SyncAlways: info.Flush == FlushSync, SyncInterval: cfg.SyncInterval,
		JetStreamMaxMemory: natsMaxMemoryBytes, JetStreamMaxStore: natsMaxStoreBytes}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats: new server: %w", err)
	}
	ns.Start()
	p := &natsPeer{info: info, dir: dir, server: ns, sync: opts.SyncAlways, window: cfg.Outstanding}
	if !ns.ReadyForConnections(natsReadyTimeout) {
		p.Close()
		return nil, fmt.Errorf("nats: server not ready after %v", natsReadyTimeout)
	}
	connOpts := []nats.Option{nats.Name("mqpeer")}
	url := ns.ClientURL()
	if inProcess {
		connOpts = append(connOpts, nats.InProcessServer(ns))
	}
	if p.conn, err = nats.Connect(url, connOpts...); err != nil {
		p.Close()
		return nil, fmt.Errorf("nats: connect to %s: %w", url, err)
	}
	jsOpts := []jetstream.JetStreamOpt{jetstream.WithPublishAsyncTimeout(natsAckTimeout)}
	if cfg.Outstanding > 0 {
		jsOpts = append(jsOpts, jetstream.WithPublishAsyncMaxPending(cfg.Outstanding))
	}
	p.js, err = jetstream.New(p.conn, jsOpts...)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("nats: jetstream: %w", err)
	}
	if _, err := p.js.CreateStream(ctx, jetstream.StreamConfig{Name: natsStream, Subjects: []string{natsSubjectPrefix + ">"},
		Storage: jetstream.FileStorage, Replicas: 1}); err != nil {
		p.Close()
		return nil, fmt.Errorf("nats: create stream: %w", err)
	}
	return p, nil
}

func (p *natsPeer) Info() Info { return p.info }

func (p *natsPeer) NewOp(worker, sizeBytes int) load.Op {
	if n := p.producers.Add(1); p.window > 0 && n > int64(p.window) {
		return failingOp(fmt.Errorf("nats: %d producers but a pending window of %d: pass the harness's outstanding requests (WithOutstanding)", n, p.window))
	}
	subject := natsSubjectPrefix + strconv.Itoa(worker)
	msg := load.Body(worker, sizeBytes)
	recordBytes := natsRecordBytes(subject, msg)
	return func(ctx context.Context) error {
		if err := p.failed.get(); err != nil {
			return err
		}
		future, err := p.js.PublishAsync(subject, msg)
		if err != nil {
			return p.failed.set(fmt.Errorf("nats: publish: %w", err))
		}
		select {
		case ack := <-future.Ok():
			if ack.Stream != natsStream {
				return p.failed.set(fmt.Errorf("nats: PubAck from stream %q, want %q", ack.Stream, natsStream))
			}
		case err := <-future.Err():
			return p.failed.set(fmt.Errorf("nats: PubAck: %w", err))
		case <-ctx.Done():
			return ctx.Err()
		}
		p.written.Add(recordBytes)
		if p.sync {
			p.durable.Add(recordBytes)
		}
		return nil
	}
}

// Drain: with SyncAlways every acknowledged message is already synced.
// With the interval it fsyncs every file and directory of the JetStream
// store: a one-replica stream wrote each acknowledged message to its block
// file before the PubAck, so the fsync makes it durable.
func (p *natsPeer) Drain(ctx context.Context) error {
	if err := p.failed.get(); err != nil {
		return err
	}
	if p.sync {
		return nil
	}
	written := p.written.Load()
	if err := fsyncTree(ctx, filepath.Join(p.dir, natsStoreSubdir)); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr // stopped, not failed: the data is as it was
		}
		return p.failed.set(fmt.Errorf("nats: drain: %w", err))
	}
	raise(&p.durable, written)
	return nil
}

// fsyncTree fsyncs every regular file and directory under root. Files the
// server removes meanwhile (compacted blocks, renamed temporaries) are
// skipped: they hold nothing the stream still needs.
func fsyncTree(ctx context.Context, root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != root {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("fsync %s: %w", path, err)
		}
		return nil
	})
}

func (p *natsPeer) Close() error {
	if p.conn != nil {
		p.conn.Close()
	}
	p.server.Shutdown()
	p.server.WaitForShutdown()
	return nil
}
