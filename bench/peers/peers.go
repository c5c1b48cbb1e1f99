// Package peers runs other message stores through the same load.Spec as
// mqstore, in this separate module so that the store's go.mod stays small:
// NATS JetStream's file store (an in-process server, a client over an
// in-process connection) and pebble's group-committed WAL. The mqpeer
// command wraps it: flags in, one JSON Output on stdout.
package peers

import (
	"context"
	"fmt"
	"strings"

	"github.com/mqstore/mqstore/bench/load"
)

// Peer is an opened peer store.
type Peer interface {
	// NewOp returns worker's append of one message of sizeBytes.
	NewOp(worker, sizeBytes int) load.Op
	// Params are the peer's durability settings, recorded in run.json.
	Params() map[string]string
	Close() error
}

// Names lists the peers.
func Names() []string { return []string{"nats", "pebble"} }

// Open opens peer name in dir with the flush mode "async" or "sync".
func Open(ctx context.Context, name, dir, flush string) (Peer, error) {
	if flush != "async" && flush != "sync" {
		return nil, fmt.Errorf("peer %s: flush %q: want async or sync", name, flush)
	}
	switch name {
	case "nats":
		return openNATS(ctx, dir, flush == "sync")
	case "pebble":
		return openPebble(dir, flush == "sync")
	}
	return nil, fmt.Errorf("peer %q: want one of %s", name, strings.Join(Names(), ", "))
}

// Output is what mqpeer prints: one JSON object.
type Output struct {
	Peer      string            `json:"peer"`
	Flush     string            `json:"flush"`
	Params    map[string]string `json:"params,omitempty"`
	Result    load.Result       `json:"result"`
	GoVersion string            `json:"goVersion"`
	Error     string            `json:"error,omitempty"`
}

// body returns a deterministic message body (an xorshift stream: not
// compressible, not all zeros).
func body(worker, sizeBytes int) []byte {
	b := make([]byte, sizeBytes)
	x := uint64(worker)*0x9E3779B97F4A7C15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}
