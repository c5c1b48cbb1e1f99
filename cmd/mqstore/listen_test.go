package main

import "testing"

// TestLoopbackIfBare: a bare :PORT listens on loopback, as every listening
// flag of mqstore reads it; a host, any host, is kept.
func TestLoopbackIfBare(t *testing.T) {
	for in, want := range map[string]string{":0": "127.0.0.1:0", ":9876": "127.0.0.1:9876", "0.0.0.0:1": "0.0.0.0:1", "[::]:1": "[::]:1", "10.0.0.1:5": "10.0.0.1:5"} {
		if got := loopbackIfBare(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}
