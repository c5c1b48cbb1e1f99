package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestToolExitCodes(t *testing.T) {
	errSpecial := errors.New("special")
	tool := Tool{Name: "x", Commands: map[string]Command{
		"ok":   {Summary: "works", Run: func(context.Context, []string, io.Writer, io.Writer) error { return nil }},
		"fail": {Summary: "fails", Run: func(context.Context, []string, io.Writer, io.Writer) error { return errors.New("boom") }},
		"spec": {Summary: "special", Run: func(context.Context, []string, io.Writer, io.Writer) error { return errSpecial }},
		"flags": {Summary: "flags", Run: func(_ context.Context, args []string, _, stderr io.Writer) error {
			fs := flag.NewFlagSet("flags", flag.ContinueOnError)
			fs.String("dir", "", "")
			if err := Parse(fs, args, stderr, 0); err != nil {
				return err
			}
			return Required(fs, "dir")
		}},
	}, ExitCode: func(err error) (int, bool) { return 130, errors.Is(err, errSpecial) }}
	for _, c := range []struct {
		args []string
		code int
		text string
	}{
		{nil, 2, "usage: x"},
		{[]string{"help"}, 0, "commands:"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"ok"}, 0, ""},
		{[]string{"fail"}, 1, "x fail: boom"},
		{[]string{"spec"}, 130, "special"},
		{[]string{"flags"}, 2, "--dir is required"},
		{[]string{"flags", "--dir", "d", "extra"}, 2, "want 0 argument(s)"},
		{[]string{"flags", "--bogus"}, 2, "bogus"},
		{[]string{"flags", "--dir", "d"}, 0, ""},
		{[]string{"flags", "-h"}, 0, ""},
	} {
		var out, errOut bytes.Buffer
		if code := tool.Run(context.Background(), c.args, &out, &errOut); code != c.code || !strings.Contains(errOut.String(), c.text) {
			t.Errorf("x %v: exit %d, stderr %q; want %d and %q", c.args, code, errOut.String(), c.code, c.text)
		}
	}
}

// TestVersion: every tool has a version subcommand (listed in its usage)
// printing the build's module version and VCS commit.
func TestVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/mqstore/mqstore", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-12-01T00:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	want := "mq github.com/mqstore/mqstore v1.2.3 commit 0123abcd 2026-12-01T00:00:00Z (modified) go1.26.0"
	if got := Version("mq", bi); got != want {
		t.Fatalf("Version:\n got %q\nwant %q", got, want)
	}
	if got := Version("mq", &debug.BuildInfo{GoVersion: "go1.26.0"}); !strings.Contains(got, "(devel) commit unknown") {
		t.Fatalf("Version without VCS information: %q", got)
	}
	tool := Tool{Name: "x", Commands: map[string]Command{}}
	var stdout, stderr bytes.Buffer
	if code := tool.Run(context.Background(), []string{"version"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), runtime.Version()) {
		t.Fatalf("x version: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	if code := tool.Run(context.Background(), []string{"version", "extra"}, io.Discard, io.Discard); code != 2 {
		t.Fatalf("x version extra: exit %d, want 2", code)
	}
	var usage bytes.Buffer
	tool.Usage(&usage)
	if !strings.Contains(usage.String(), "version") {
		t.Fatalf("usage does not list version:\n%s", usage.String())
	}
}
