package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// TestMain lets the test binary act as the mqstore command when
// MQSTORE_AS_CLI=1, so tests can run it as a real process (and kill it);
// it handles SIGINT and SIGTERM as main does (a clean close).
func TestMain(m *testing.M) {
	if os.Getenv("MQSTORE_AS_CLI") == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}
