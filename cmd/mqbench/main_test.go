package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestCommandLine(t *testing.T) {
	cases := []struct {
		args     []string
		code     int
		stderrIn string
	}{
		{nil, 2, "usage: mqbench"},
		{[]string{"bogus"}, 2, "unknown command"},
		{[]string{"help"}, 0, "commands:"},
		{[]string{"run", "--nope"}, 2, "flag provided but not defined"},
		{[]string{"run", "--backends", "floppy"}, 2, `backend "floppy"`},
		{[]string{"run", "--sizes", "abc"}, 2, `size "abc"`},
		{[]string{"run", "--repeat", "0"}, 2, "repeat 0"},
		{[]string{"run", "--workloads", "bogus"}, 2, `workload "bogus"`},
		{[]string{"run", "--pressure", "heavy"}, 2, `pressure "heavy"`},
		{[]string{"run", "--emulate", "tape"}, 2, `emulate "tape"`},
		{[]string{"sweep", "--vary", "nope=1"}, 2, "unknown option"},
		{[]string{"sweep", "-h"}, 0, "--vary"},
		{[]string{"cleanup", "extra"}, 2, "want 0 argument"},
		{[]string{"run", "extra"}, 2, "want 0 argument"},
		{[]string{"run", "-h"}, 0, "--producers"},
		{[]string{"device"}, 2, "--dir is required"},
		{[]string{"report"}, 2, "want 1 argument"},
		{[]string{"compare", "a"}, 2, "want 2 argument"},
		{[]string{"report", "/nonexistent/run"}, 1, "read run"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), c.args, &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.stderrIn) {
			t.Errorf("mqbench %q: exit %d, want %d; stderr lacks %q:\n%s", c.args, code, c.code, c.stderrIn, stderr.String())
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"1024": 1024, "4k": 4096, "4KiB": 4096, "1MiB": 1 << 20, "2g": 2 << 30, "16m": 16 << 20} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "-5", "k", "1.5k"} {
		if _, err := parseBytes(bad); err == nil {
			t.Errorf("parseBytes(%q) accepted", bad)
		}
	}
}

func TestCleanupCommandOnEmptyState(t *testing.T) {
	var stdout, stderr bytes.Buffer
	dir := t.TempDir()
	if code := run(context.Background(), []string{"cleanup", "--state-dir", dir}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "nothing to clean up") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}
