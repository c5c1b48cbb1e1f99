// Package cli is the command-line frame the mqstore and mqbench commands
// share: subcommand dispatch, usage, flag parsing with the project's exit
// codes (0 ok, 1 error, 2 bad command line).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
)

// ErrUsage marks a bad command line (exit 2); the usage was already printed.
var ErrUsage = errors.New("usage")

// Command is one subcommand.
type Command struct {
	Summary string
	Run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// Tool is a command with subcommands.
type Tool struct {
	Name     string
	Commands map[string]Command
	// ExitCode maps errors that need another exit code than 1 (mqbench's
	// 130 after Ctrl-C); ok false means "not mine".
	ExitCode func(err error) (code int, ok bool)
}

// Run runs the subcommand named by args[0] and returns the exit code.
func (t Tool) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		t.Usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := t.Commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n\n", t.Name, args[0])
		t.Usage(stderr)
		return 2
	}
	err := cmd.Run(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	}
	fmt.Fprintf(stderr, "%s %s: %v\n", t.Name, args[0], err)
	if t.ExitCode != nil {
		if code, ok := t.ExitCode(err); ok {
			return code
		}
	}
	return 1
}

// Usage lists the subcommands.
func (t Tool) Usage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s <command> [flags]\n\ncommands:\n", t.Name)
	names := make([]string, 0, len(t.Commands))
	for n := range t.Commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, t.Commands[n].Summary)
	}
	fmt.Fprintf(w, "\nRun '%s <command> -h' for the flags of a command.\n", t.Name)
}

// Parse parses args into fs, which must take exactly positional arguments;
// a bad flag or argument prints the usage and returns ErrUsage.
func Parse(fs *flag.FlagSet, args []string, stderr io.Writer, positional int) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return ErrUsage
	}
	if fs.NArg() != positional {
		fmt.Fprintf(stderr, "%s: want %d argument(s), got %d: %q\n", fs.Name(), positional, fs.NArg(), fs.Args())
		fs.Usage()
		return ErrUsage
	}
	return nil
}

// BadFlag reports an invalid flag value: the message, the usage, ErrUsage.
func BadFlag(fs *flag.FlagSet, format string, args ...any) error {
	fmt.Fprintf(fs.Output(), "%s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	fs.Usage()
	return ErrUsage
}

// Required reports the first of the named string flags left empty as a
// usage error ("--dir is required").
func Required(fs *flag.FlagSet, names ...string) error {
	for _, n := range names {
		if f := fs.Lookup(n); f != nil && f.Value.String() == "" {
			return BadFlag(fs, "--%s is required", n)
		}
	}
	return nil
}
