package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/storefs"
)

// servedRoleFile records, in a store directory, the replication role the
// mqstore command last served the store as (serve, slave, produce, and a
// failover broker's every settled role): "ASYNC_MASTER", "SYNC_MASTER" or
// "SLAVE" and a newline. repair-slave reads it before it cuts anything: a
// master's CommitLog holds records it may have acknowledged, so cutting it
// takes --force. The engine neither writes nor reads it; a store that only
// a program embedding the engine opened has none.
const servedRoleFile = "served-role"

// recordServedRole replaces the record durably.
func recordServedRole(dir string, role engine.BrokerRole) error {
	if err := storefs.WriteFileAtomic(storefs.OS(), filepath.Join(dir, servedRoleFile), []byte(role.String()+"\n")); err != nil {
		return fmt.Errorf("record the role served in %s: %w", dir, err)
	}
	return nil
}

// servedRole reads the record: the role and true, or false when there is
// none. A record that names no role is an error naming the file.
func servedRole(dir string) (engine.BrokerRole, bool, error) {
	path := filepath.Join(dir, servedRoleFile)
	b, err := storefs.OS().ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read the role served: %w", err)
	}
	s := strings.TrimSpace(string(b))
	r, err := engine.ParseBrokerRole(s)
	if err != nil || s == "" {
		return 0, false, fmt.Errorf("%s holds %q, not a role (ASYNC_MASTER, SYNC_MASTER or SLAVE); remove it if no master served this store", path, s)
	}
	return r, true, nil
}

// openServed opens the store in dir to serve it as o.Role, and records
// that role.
func openServed(ctx context.Context, dir string, o engine.Options) (*engine.Store, error) {
	store, err := engine.Open(ctx, dir, o)
	if err != nil {
		return nil, err
	}
	if err := recordServedRole(dir, o.Role); err != nil {
		return nil, errors.Join(err, store.Close())
	}
	return store, nil
}
