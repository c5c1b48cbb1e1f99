// Package cli is the command-line frame the mqstore and mqbench commands
// share: subcommand dispatch, usage, flag parsing with the project's exit
// codes (0 ok, 1 error, 2 bad command line), and the version subcommand
// every tool has.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
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
	if !ok && args[0] == versionCommand {
		cmd, ok = t.versionCommand(), true
	}
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
	if _, own := t.Commands[versionCommand]; !own {
		names = append(names, versionCommand)
	}
	sort.Strings(names)
	for _, n := range names {
		summary := t.Commands[n].Summary
		if n == versionCommand && summary == "" {
			summary = t.versionCommand().Summary
		}
		fmt.Fprintf(w, "  %-8s %s\n", n, summary)
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

// versionCommand is the subcommand every Tool has unless it defines its own.
const versionCommand = "version"

func (t Tool) versionCommand() Command {
	return Command{Summary: "print the module version and the VCS commit it was built from", Run: func(_ context.Context, args []string, stdout, stderr io.Writer) error {
		fs := flag.NewFlagSet(t.Name+" version", flag.ContinueOnError)
		if err := Parse(fs, args, stderr, 0); err != nil {
			return err
		}
		bi, ok := debug.ReadBuildInfo()
		if !ok {
			return errors.New("the binary carries no build information (built without module support)")
		}
		fmt.Fprintln(stdout, Version(t.Name, bi))
		return nil
	}}
}

// Version is the line the version subcommand prints: the tool, its main
// module's path and version ("(devel)" for a build from a work tree), the
// VCS commit, its time and whether the tree had local changes, and the Go
// version — from the build information Go embeds.
func Version(name string, bi *debug.BuildInfo) string {
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	commit := settings["vcs.revision"]
	if commit == "" {
		commit = "unknown (built without VCS information)"
	} else {
		if t := settings["vcs.time"]; t != "" {
			commit += " " + t
		}
		if settings["vcs.modified"] == "true" {
			commit += " (modified)"
		}
	}
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	return fmt.Sprintf("%s %s %s commit %s %s", name, bi.Main.Path, version, commit, bi.GoVersion)
}
