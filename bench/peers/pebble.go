package peers

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/cockroachdb/pebble"
	"github.com/mqstore/mqstore/bench/load"
)

// pebblePeer appends to pebble with unique increasing keys: every Set goes
// through pebble's WAL, whose LogWriter group-commits concurrent Sync writes
// into one fsync (flush=sync: pebble.Sync; flush=async: pebble.NoSync, the
// WAL written but not synced). Memtable flushes and compactions run as they
// would in production: they are pebble's cost of being an LSM.
type pebblePeer struct {
	db   *pebble.DB
	sync bool
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{})  {}
func (quietLogger) Errorf(string, ...interface{}) {}
func (quietLogger) Fatalf(format string, args ...interface{}) {
	panic(fmt.Sprintf(format, args...))
}

func openPebble(dir string, syncWrites bool) (*pebblePeer, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return nil, fmt.Errorf("pebble: open %s: %w", dir, err)
	}
	return &pebblePeer{db: db, sync: syncWrites}, nil
}

func (p *pebblePeer) NewOp(worker, sizeBytes int) load.Op {
	msg := body(worker, sizeBytes)
	key := make([]byte, 16)
	binary.BigEndian.PutUint64(key, uint64(worker))
	var seq uint64
	opts := pebble.NoSync
	if p.sync {
		opts = pebble.Sync
	}
	return func(context.Context) error {
		seq++
		binary.BigEndian.PutUint64(key[8:], seq)
		if err := p.db.Set(key, msg, opts); err != nil {
			return fmt.Errorf("pebble: set: %w", err)
		}
		return nil
	}
}

func (p *pebblePeer) Params() map[string]string {
	return map[string]string{"version": "v1.1.5", "writeOptions": map[bool]string{true: "pebble.Sync", false: "pebble.NoSync"}[p.sync],
		"wal": "on (group-committed LogWriter)", "syncWrites": strconv.FormatBool(p.sync)}
}

func (p *pebblePeer) Close() error {
	if err := p.db.Close(); err != nil {
		return fmt.Errorf("pebble: close: %w", err)
	}
	return nil
}
