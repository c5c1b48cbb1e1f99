package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/bench"
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
		{[]string{"run", "--rates", "10k,fast"}, 2, `rate "fast"`},
		{[]string{"run", "--producers", "4,0"}, 2, `producers "0"`},
		{[]string{"run", "--duration", "soon"}, 2, `duration "soon"`},
		{[]string{"run", "--lock-segments"}, 2, "add --warm-segments"},
		{[]string{"run", "--workloads", "latency", "--rates", ""}, 2, "need a --rates ladder"},
		{[]string{"run", "--replication", "semi"}, 2, `replication "semi"`},
		{[]string{"run", "--peers", "none,pebble-wal"}, 2, `peers "none,pebble-wal": none runs no peer`},
		{[]string{"run", "--ha-delay", "1ms"}, 2, "--ha-delay 1ms needs a slave"},
		{[]string{"run", "--replication", "none", "--slave-dir", "/tmp"}, 2, "--slave-dir /tmp needs a slave"},
		{[]string{"run", "--replication", "sync", "--slave-dir", "/nonexistent/dir"}, 2, "not a directory"},
		{[]string{"run", "--replication", "sync", "--backends", "mem"}, 2, "mem backend"},
		{[]string{"run", "--backend-options", "uring-direct"}, 2, "want NAME=JSON"},
		{[]string{"run", "--backend-options", `uring-direct={"Bogus":1}`}, 2, "Bogus"},
		{[]string{"run", "--backend-options", `floppy={}`}, 2, "floppy"},
		{[]string{"sweep", "--vary", "nope=1"}, 2, "unknown option"},
		{[]string{"run", "--sweep-from", "/nonexistent/run"}, 2, "--sweep-from /nonexistent/run"},
		{[]string{"sweep", "--sweep-from", "x"}, 2, "sweep-from"},
		{[]string{"sweep", "-h"}, 0, "--vary"},
		{[]string{"cleanup", "extra"}, 2, "want 0 argument"},
		{[]string{"run", "extra"}, 2, "want 0 argument"},
		{[]string{"run", "-h"}, 0, "-producers"},
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
		// A bad flag's error is the last line, after a short usage.
		if c.code == 2 && len(c.args) > 1 && c.args[0] != "bogus" {
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if last := lines[len(lines)-1]; !strings.Contains(last, c.stderrIn) || len(lines) > 6 {
				t.Errorf("mqbench %q: the error is not last after a short usage (%d lines, last %q)", c.args, len(lines), last)
			}
		}
	}
}

func TestReportRefusesSchema1(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "run.json"), []byte(`{"schema": 1, "cells": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"report", dir}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "schema 1") ||
		!strings.Contains(stderr.String(), "run the benchmark again") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

func TestParseBytesAndRates(t *testing.T) {
	for in, want := range map[string]int64{"1024": 1024, "4k": 4096, "4KiB": 4096, "1MiB": 1 << 20, "2g": 2 << 30, "16m": 16 << 20} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "-5", "k", "1.5k", "17179869184g", "8589934592g"} {
		if _, err := parseBytes(bad); err == nil {
			t.Errorf("parseBytes(%q) accepted", bad)
		}
	}
	var rates []float64
	err := ratesFlag(&rates).Set("1000, 50k,1.5M")
	if err != nil || len(rates) != 3 || rates[0] != 1000 || rates[1] != 50000 || rates[2] != 1.5e6 {
		t.Errorf("rates = %v, %v", rates, err)
	}
}

func TestCleanupCommandOnEmptyState(t *testing.T) {
	var stdout, stderr bytes.Buffer
	dir := t.TempDir()
	if code := run(context.Background(), []string{"cleanup", "--state-dir", dir}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "nothing to clean up") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

// TestRunConfigFile: --config reads the configuration as JSON (the
// "config" object of a run.json); flags beside it override it; a field it
// does not know, or a bad value, is a clear error before anything runs.
func TestRunConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := write("bad-backend.json", `{"backends": ["floppy"], "sizes": [512]}`)
	zero := write("zero-repeat.json", `{"backends": ["mmap"], "repeat": 0}`)
	typo := write("typo.json", `{"backend": ["mmap"]}`)
	// Scalars that have their own flag too: the flag's registration must
	// not reset them. Each is an error when it is kept, checked before the
	// repeat 0 beside it (the error when it was reset: nothing runs).
	slave := write("slave-dir.json", `{"backends": ["mmap"], "slaveDir": "/nonexistent-slave-dir", "repeat": 0}`)
	delay := write("ha-delay.json", `{"backends": ["mmap"], "haDelayNs": 1000000, "repeat": 0}`)
	for _, c := range []struct {
		args     []string
		stderrIn string
	}{
		{[]string{"run", "--config", bad}, `backend "floppy"`},                            // the file's list is used
		{[]string{"run", "--config=" + zero}, "repeat 0"},                                 // and its scalars
		{[]string{"run", "--config", zero, "--backends", "floppy2"}, `backend "floppy2"`}, // a flag overrides the file
		{[]string{"run", "--config", typo}, `unknown field "backend"`},
		{[]string{"run", "--config", slave}, "--slave-dir /nonexistent-slave-dir needs a slave"},
		{[]string{"run", "--config", delay}, "--ha-delay 1ms needs a slave"},
		{[]string{"run", "--config", filepath.Join(dir, "missing.json")}, "missing.json"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), c.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), c.stderrIn) {
			t.Errorf("mqbench %q: exit %d, stderr lacks %q:\n%s", c.args, code, c.stderrIn, stderr.String())
		}
	}
}

// TestRecycleSegmentsFlag: --recycle-segments sets the store cells'
// RecycleSegments (from the flag or a --config file), is listed by -h, and
// a negative count or the in-memory backend is refused with an error that
// names the flag.
func TestRecycleSegmentsFlag(t *testing.T) {
	cfg := bench.DefaultConfig()
	var m matrixFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	m.register(fs, &cfg, false)
	if err := fs.Parse([]string{"--recycle-segments", "3", "--backends", "uring-direct"}); err != nil {
		t.Fatal(err)
	}
	if err := m.apply(&cfg, false); err != nil || cfg.Store.RecycleSegments != 3 {
		t.Fatalf("apply: %v; RecycleSegments %d, want 3", err, cfg.Store.RecycleSegments)
	}
	if d := bench.DefaultConfig(); d.Store.RecycleSegments != 0 {
		t.Errorf("the default recycles %d segments", d.Store.RecycleSegments)
	}
	negative := filepath.Join(t.TempDir(), "negative.json")
	if err := os.WriteFile(negative, []byte(`{"store": {"segmentSizeBytes": 1048576, "recycleSegments": -2}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args     []string
		code     int
		stderrIn string
	}{
		{[]string{"run", "--recycle-segments", "-1"}, 2, "--recycle-segments -1: want ≥ 0"},
		{[]string{"run", "--recycle-segments", "many"}, 2, "-recycle-segments"},
		{[]string{"run", "--config", negative}, 2, "--recycle-segments -2: want ≥ 0"},
		{[]string{"run", "--recycle-segments", "2", "--backends", "mem"}, 2, "--recycle-segments 2 with the mem backend"},
		{[]string{"run", "--recycle-segments", "2", "--backends", "uring-direct,mmap"}, 2, "--recycle-segments 2 with the mmap backend"},
		{[]string{"run", "--recycle-segments", "2", "--backends", "transient"}, 2, "--recycle-segments 2 with the transient backend"},
		{[]string{"sweep", "--recycle-segments", "-1"}, 2, "--recycle-segments -1: want ≥ 0"},
		{[]string{"run", "-h"}, 0, "-recycle-segments"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), c.args, &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.stderrIn) {
			t.Errorf("mqbench %q: exit %d, want %d; stderr lacks %q:\n%s", c.args, code, c.code, c.stderrIn, stderr.String())
		}
	}
}

// TestPeersNone: --peers none runs no peer, as an empty list does (the
// default config has peers, so the flag must clear them), and a list
// naming peers keeps them.
func TestPeersNone(t *testing.T) {
	for _, c := range []struct {
		arg  string
		want []string
	}{
		{"none", nil},
		{"", nil},
		{" none ", nil},
		{"pebble-wal,nats", []string{"pebble-wal", "nats"}},
	} {
		cfg := bench.DefaultConfig()
		if len(cfg.Peers) == 0 {
			t.Fatal("the default config runs no peer: the test cannot tell none from the default")
		}
		var m matrixFlags
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		m.register(fs, &cfg, false)
		if err := fs.Parse([]string{"--peers", c.arg}); err != nil {
			t.Fatalf("--peers %q: %v", c.arg, err)
		}
		if !slices.Equal(cfg.Peers, c.want) {
			t.Errorf("--peers %q: peers %q, want %q", c.arg, cfg.Peers, c.want)
		}
	}
}
