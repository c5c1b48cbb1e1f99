package main

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/cli"
)

// TestFlagDefaultsAreTheEngines: the store flags left alone give the
// engine's effective defaults (engine.DefaultOptions), so a flag's default
// and the engine's cannot drift apart.
func TestFlagDefaultsAreTheEngines(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	h := addHAFlags(fs, "async-master", true)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	role, err := h.parseRole(fs)
	if err != nil {
		t.Fatal(err)
	}
	got, want := h.storeOptions(engine.Options{}, role), engine.DefaultOptions()
	if got.Role != want.Role || got.SlaveTimeout != want.SlaveTimeout ||
		got.HASlaveFallbehindMax != want.HASlaveFallbehindMax || got.MinInSyncReplicas != want.MinInSyncReplicas {
		t.Errorf("flag defaults: role %v, slave timeout %v, fallbehind %d, min in-sync %d; engine: %v, %v, %d, %d",
			got.Role, got.SlaveTimeout, got.HASlaveFallbehindMax, got.MinInSyncReplicas,
			want.Role, want.SlaveTimeout, want.HASlaveFallbehindMax, want.MinInSyncReplicas)
	}
	// --backend defaults to the engine's default backend; --segment-size 0
	// is unset (the store's recorded size, or the default the usage names).
	if want.Backend == "" {
		t.Fatal("the engine has no default backend")
	}
	if engine.DefaultSegmentSizeBytes != 1<<30 {
		t.Errorf("--segment-size's usage says 1 GiB, the engine's default is %d", engine.DefaultSegmentSizeBytes)
	}
}

// TestZeroFlagsRefused: a zero that the engine would read as unset is a
// bad flag, not a silent default.
func TestZeroFlagsRefused(t *testing.T) {
	for _, args := range [][]string{{"--slave-timeout", "0"}, {"--fallbehind-max", "0"}, {"--slave-timeout", "-1s"}} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var out strings.Builder
		fs.SetOutput(&out)
		h := addHAFlags(fs, "sync-master", true)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		_, err := h.parseRole(fs)
		if !errors.Is(err, cli.ErrUsage) || !strings.Contains(out.String(), args[0]+" must be positive") {
			t.Errorf("%v: error %v, output %q; want a usage error naming %s", args, err, out.String(), args[0])
		}
	}
}

// TestRetentionFlags: left alone the retention flags give the engine's
// defaults; set, they reach the options; a bad one is a usage error naming
// it.
func TestRetentionFlags(t *testing.T) {
	parse := func(args ...string) (engine.Options, string, error) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var out strings.Builder
		fs.SetOutput(&out)
		rf := addRetentionFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		var o engine.Options
		err := rf.apply(fs, &o)
		return o, out.String(), err
	}
	o, _, err := parse()
	want := engine.DefaultOptions()
	if err != nil || o.FileReservedTime != want.FileReservedTime || o.DeleteWhen != want.DeleteWhen ||
		o.DiskMaxUsedRatio != want.DiskMaxUsedRatio || o.CleanInterval != want.CleanInterval {
		t.Errorf("defaults: %v, %q, %d, %v (%v); engine: %v, %q, %d, %v", o.FileReservedTime, o.DeleteWhen, o.DiskMaxUsedRatio, o.CleanInterval, err,
			want.FileReservedTime, want.DeleteWhen, want.DiskMaxUsedRatio, want.CleanInterval)
	}
	o, _, err = parse("--file-reserved-time", "48h", "--delete-when", "04;16", "--disk-max-used-ratio", "90", "--clean-interval", "1s")
	if err != nil || o.FileReservedTime != 48*time.Hour || o.DeleteWhen != "04;16" || o.DiskMaxUsedRatio != 90 || o.CleanInterval != time.Second {
		t.Errorf("set: %v, %q, %d, %v (%v)", o.FileReservedTime, o.DeleteWhen, o.DiskMaxUsedRatio, o.CleanInterval, err)
	}
	for _, args := range [][]string{
		{"--file-reserved-time", "0s"}, {"--file-reserved-time", "-1h"}, {"--clean-interval", "0s"},
		{"--disk-max-used-ratio", "0"}, {"--disk-max-used-ratio", "101"}, {"--delete-when", "24"}, {"--delete-when", ""},
	} {
		_, out, err := parse(args...)
		if !errors.Is(err, cli.ErrUsage) || !strings.Contains(out, args[0]) {
			t.Errorf("%v: error %v, output %q; want a usage error naming %s", args, err, out, args[0])
		}
	}
}
