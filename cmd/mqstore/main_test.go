//go:build linux

package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/mqstore/mqstore/internal/crashfs"
)

// TestMain lets the test binary act as the mqstore command when
// MQSTORE_AS_CLI=1, so tests can run it as a real process (and kill it);
// it handles SIGINT and SIGTERM as main does (a clean close). It also runs
// as the crashfs daemon (crashfs.EnvDaemon) and as the flush-reporting
// producer of the power-loss trials (MQSTORE_AS_REPORTER).
func TestMain(m *testing.M) {
	if os.Getenv(crashfs.EnvDaemon) == "1" {
		os.Exit(crashfs.Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	if os.Getenv(envReporter) == "1" {
		os.Exit(runReporter(os.Args[1:], os.Stdout, os.Stderr))
	}
	if os.Getenv("MQSTORE_AS_CLI") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}
