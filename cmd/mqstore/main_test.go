package main

import (
	"context"
	"os"
	"testing"
)

// TestMain lets the test binary act as the mqstore command when
// MQSTORE_AS_CLI=1, so tests can run it as a real process (and kill it).
func TestMain(m *testing.M) {
	if os.Getenv("MQSTORE_AS_CLI") == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
