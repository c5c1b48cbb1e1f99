package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
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
