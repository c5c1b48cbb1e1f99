// Package peers runs other stores through the same load.Spec as mqstore, in
// this separate module so that the store's go.mod stays small. The peers are
// run as their maintainers would run them, and each says exactly what runs
// (Info: label, version from the build info, options, durability):
//
//   - pebble-wal: pebble's WAL alone — record.LogWriter on a preallocated
//     file, concurrent producers group-committed as pebble's commit pipeline
//     does it (sync), or WriteRecord without a sync (async); on a new file,
//     or on a recycled one (WithRecycledWAL) as a running pebble reuses its
//     obsolete WAL files;
//   - pebble: a pebble DB tuned for an append workload;
//   - nats: an embedded NATS server with JetStream file storage, published to
//     with PublishAsync over loopback TCP, as a broker is used;
//   - nats-inproc: the same over the in-process connection.
//
// Every peer also reports what it has made durable (Positions) and can be
// drained (Drain), the durable-throughput contract of the harness. The mqpeer
// command wraps the package: flags in, one JSON Output on stdout.
package peers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench/load"
)

// Durability is the harness's durable-throughput contract (load.Durability in
// bench/load has exactly these methods). Byte counts are the peer's own
// stored bytes — its log or file records, framing included — as mqstore's
// are CommitLog record bytes.
type Durability interface {
	// Positions returns monotonic byte counts since open: written (accepted)
	// and durable (synced). durable <= written.
	Positions() (writtenBytes, durableBytes int64)
	// Drain makes every written byte durable and returns when it is.
	Drain(ctx context.Context) error
}

// Peer is an opened peer store.
type Peer interface {
	Durability
	// NewOp returns worker's append of one message of sizeBytes: one call is
	// one message acknowledged, as one mqstore Put.
	NewOp(worker, sizeBytes int) load.Op
	// Info says exactly what runs.
	Info() Info
	Close() error
}

// DurabilityInfo says what an acknowledgement means: when it is sent, what a
// process crash and a power loss lose, and how data is synced.
type DurabilityInfo = load.Ack

// Info describes a peer in one flush mode.
type Info struct {
	Name  string
	Flush string
	// Label is exactly what runs, with the dependency's version.
	Label string
	// Version is the dependency's module version, from the build info.
	Version string
	// Options are every setting that matters.
	Options    map[string]string
	Durability DurabilityInfo
}

// Flush modes.
const (
	FlushAsync = "async"
	FlushSync  = "sync"
)

// Peer names.
const (
	PebbleWAL  = "pebble-wal"
	Pebble     = "pebble"
	NATS       = "nats"
	NATSInProc = "nats-inproc"
)

var (
	// ErrUnknownPeer: the peer name is not one of Names().
	ErrUnknownPeer = errors.New("unknown peer")
	// ErrBadFlush: the flush mode is neither async nor sync.
	ErrBadFlush = errors.New("bad flush mode")
	// ErrBadRecycledWAL: a recycled WAL was asked of a peer other than
	// pebble-wal, or with a negative size.
	ErrBadRecycledWAL = errors.New("bad recycled WAL")
)

// Names lists the peers.
func Names() []string { return []string{PebbleWAL, Pebble, NATS, NATSInProc} }

// DefaultSyncInterval is mqstore's default async flush interval
// (engine.DefaultFlushInterval; a test keeps the two equal without this
// module's build importing the engine).
const DefaultSyncInterval = 500 * time.Millisecond

// Config is what a peer is matched to.
type Config struct {
	// SyncInterval is the async flush interval matched to mqstore's
	// (engine.Options.FlushInterval): NATS's sync_interval.
	SyncInterval time.Duration
	// Outstanding is the harness's requests in flight (its producers or
	// open-loop workers, each with one outstanding message as an mqstore
	// Put): NATS's PublishAsync pending window. 0: nats.go's default window.
	Outstanding int
	// RecycledWALBytes > 0 runs pebble-wal on a recycled WAL file of at
	// least that many bytes (WithRecycledWAL); 0: a new file.
	RecycledWALBytes int64

	outstandingSet bool
}

// Option changes the Config.
type Option func(*Config)

// WithSyncInterval matches the async sync interval to mqstore's flush interval.
func WithSyncInterval(d time.Duration) Option { return func(c *Config) { c.SyncInterval = d } }

// WithOutstanding matches the in-flight window to the harness's outstanding
// requests.
func WithOutstanding(n int) Option {
	return func(c *Config) { c.Outstanding, c.outstandingSet = n, true }
}

// WithRecycledWAL runs pebble-wal on a recycled WAL file: before the
// warm-up the peer fills a log of at least bytes with its own writer
// (records, synced), closes it, and reuses the file for the window's log
// as pebble's WAL manager reuses an obsolete WAL — renamed to the next log
// number and written over. Not timed or counted. Only pebble-wal takes it
// (Describe and Open refuse it for the others with ErrBadRecycledWAL);
// 0 keeps the new file.
func WithRecycledWAL(bytes int64) Option { return func(c *Config) { c.RecycledWALBytes = bytes } }

func newConfig(opts []Option) (Config, error) {
	c := Config{SyncInterval: DefaultSyncInterval}
	for _, o := range opts {
		o(&c)
	}
	if c.SyncInterval <= 0 {
		return c, fmt.Errorf("peers: sync interval %v: want > 0", c.SyncInterval)
	}
	if c.outstandingSet && c.Outstanding <= 0 {
		return c, fmt.Errorf("peers: %d outstanding requests: want > 0", c.Outstanding)
	}
	if c.RecycledWALBytes < 0 {
		return c, fmt.Errorf("peers: %w of %d bytes: want ≥ 0 (0: a new file)", ErrBadRecycledWAL, c.RecycledWALBytes)
	}
	return c, nil
}

// Describe says what peer name runs in flush mode without opening it. When
// the binary's build info lacks a dependency's version (test binaries), the
// Info says "(version unknown)" and the error wraps ErrNoBuildInfo.
func Describe(name, flush string, opts ...Option) (Info, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return Info{}, err
	}
	sync, err := parseFlush(flush)
	if err != nil {
		return Info{}, err
	}
	switch name {
	case PebbleWAL:
		return describePebbleWAL(sync, cfg.RecycledWALBytes)
	case Pebble, NATS, NATSInProc:
		if cfg.RecycledWALBytes > 0 {
			return Info{}, fmt.Errorf("peers: %w: %s takes none, only %s runs on a recycled WAL file", ErrBadRecycledWAL, name, PebbleWAL)
		}
		if name == Pebble {
			return describePebble(sync)
		}
		return describeNATS(name == NATSInProc, sync, cfg)
	}
	return Info{}, unknownPeer(name)
}

// Open opens peer name in dir (an empty directory) with the flush mode
// "async" or "sync".
func Open(ctx context.Context, name, dir, flush string, opts ...Option) (Peer, error) {
	info, err := Describe(name, flush, opts...)
	if err != nil && !errors.Is(err, ErrNoBuildInfo) {
		return nil, err
	}
	cfg, _ := newConfig(opts) // checked by Describe
	switch name {
	case PebbleWAL:
		return openPebbleWAL(ctx, dir, info, cfg.RecycledWALBytes)
	case Pebble:
		return openPebble(dir, info)
	default:
		return openNATS(ctx, dir, info, cfg)
	}
}

// Listing is one line of `mqpeer --list`.
type Listing struct {
	Name  string `json:"name"`
	Label string `json:"label"`
}

// List describes every peer (the label of both flush modes); it fails
// without the dependencies' versions.
func List() ([]Listing, error) {
	var out []Listing
	for _, name := range Names() {
		var labels []string
		for _, flush := range []string{FlushSync, FlushAsync} {
			info, err := Describe(name, flush)
			if err != nil {
				return nil, err
			}
			labels = append(labels, flush+": "+info.Label)
		}
		out = append(out, Listing{Name: name, Label: strings.Join(labels, "; ")})
	}
	return out, nil
}

func parseFlush(flush string) (sync bool, err error) {
	switch flush {
	case FlushSync:
		return true, nil
	case FlushAsync:
		return false, nil
	}
	return false, fmt.Errorf("%w %q: want %s or %s", ErrBadFlush, flush, FlushAsync, FlushSync)
}

func unknownPeer(name string) error {
	return fmt.Errorf("%w %q: want one of %s", ErrUnknownPeer, name, strings.Join(Names(), ", "))
}

// Output is what mqpeer prints (the peer protocol, load.PeerOutput).
type Output = load.PeerOutput

// DescribeOutput fills an output's description of what runs.
func DescribeOutput(o *Output, info Info) {
	d := info.Durability
	o.Label, o.Version, o.Options, o.Durability = info.Label, info.Version, info.Options, &d
}

// failingOp is the Op of a worker that could not be prepared.
func failingOp(err error) load.Op {
	return func(context.Context) error { return err }
}
