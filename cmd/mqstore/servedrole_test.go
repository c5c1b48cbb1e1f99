package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/engine"
)

// TestServedRoleRecord: the record reads back as written, a directory
// without one has none, and one that names no role is an error naming the
// file, which repair-slave stops on before it opens the store.
func TestServedRoleRecord(t *testing.T) {
	dir := t.TempDir()
	if _, known, err := servedRole(dir); known || err != nil {
		t.Fatalf("no record: known %v, %v", known, err)
	}
	for _, r := range []engine.BrokerRole{engine.SyncMaster, engine.Slave, engine.AsyncMaster} {
		if err := recordServedRole(dir, r); err != nil {
			t.Fatal(err)
		}
		if got, known, err := servedRole(dir); !known || err != nil || got != r {
			t.Fatalf("recorded %v, read %v (known %v, %v)", r, got, known, err)
		}
	}
	path := filepath.Join(dir, servedRoleFile)
	if err := os.WriteFile(path, []byte("PRIMARY\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := servedRole(dir); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `"PRIMARY"`) {
		t.Fatalf("a record of no role: %v", err)
	}
	var stdout, stderr bytes.Buffer
	err := runRepairSlave(context.Background(), []string{"--dir", dir, "--offset", "0", "--force"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("repair-slave over a record of no role: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "commitlog")); !os.IsNotExist(err) {
		t.Fatalf("repair-slave opened the store before it read the record: %v", err)
	}
}
