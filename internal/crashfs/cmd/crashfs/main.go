//go:build linux

// Command crashfs runs the power-loss file system of internal/crashfs: a
// pass-through FUSE mount whose backing directory holds only what was
// synced. See docs/crashfs.md.
//
//	crashfs --backing DIR --mount MNT --state STATE [--names strict] [--writeback --seed N]
//	        [--dio-align 4096] [--crash-after-fsync N --crash-path REGEXP]
//
// SIGUSR1 cuts the power (the report goes to STATE/report.json); SIGTERM
// unmounts.
package main

import (
	"os"

	"github.com/mqstore/mqstore/internal/crashfs"
)

func main() {
	os.Exit(crashfs.Main(os.Args[1:], os.Stdout, os.Stderr))
}
