package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/internal/cli"
)

// command is a subcommand's flags with a short usage (the synopsis) and
// the full one (-h). A bad flag prints the short usage and then the error,
// so the error is the last thing on the screen, not buried above a page of
// flag descriptions.
type command struct {
	fs       *flag.FlagSet
	synopsis string
	about    string
}

func newCommand(name, synopsis, about string) *command {
	return &command{fs: flag.NewFlagSet(name, flag.ContinueOnError), synopsis: synopsis, about: about}
}

// parse parses args (which must leave exactly positional arguments).
func (c *command) parse(args []string, stderr io.Writer, positional int) error {
	c.fs.SetOutput(io.Discard)
	c.fs.Usage = func() {}
	err := c.fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.fullUsage(stderr)
		return err
	case err != nil:
		return c.bad(stderr, "%v", err)
	case c.fs.NArg() != positional:
		return c.bad(stderr, "want %d argument(s), got %d: %q", positional, c.fs.NArg(), c.fs.Args())
	}
	return nil
}

// bad reports a bad command line: the short usage, then the error.
func (c *command) bad(stderr io.Writer, format string, args ...any) error {
	fmt.Fprintf(stderr, "usage: %s\nRun 'mqbench %s -h' for every flag.\n\nmqbench %s: %s\n", c.synopsis, c.fs.Name(), c.fs.Name(), fmt.Sprintf(format, args...))
	return cli.ErrUsage
}

func (c *command) fullUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s\n", c.synopsis)
	if c.about != "" {
		fmt.Fprintf(w, "\n%s\n", c.about)
	}
	fmt.Fprintln(w)
	c.fs.SetOutput(w)
	c.fs.PrintDefaults()
	c.fs.SetOutput(io.Discard)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// listFlag is a comma-separated list flag that sets a configuration field
// in place, so its default is whatever the field holds when it is
// registered (the defaults, or a --config file's value).
type listFlag[T any] struct {
	v     *[]T
	parse func(string) (T, error)
}

func (f listFlag[T]) String() string {
	if f.v == nil {
		return ""
	}
	var s []string
	for _, x := range *f.v {
		s = append(s, fmt.Sprint(x))
	}
	return strings.Join(s, ",")
}

func (f listFlag[T]) Set(s string) error {
	var out []T
	for _, p := range splitList(s) {
		x, err := f.parse(p)
		if err != nil {
			return err
		}
		out = append(out, x)
	}
	*f.v = out
	return nil
}

func strsFlag(v *[]string) listFlag[string] {
	return listFlag[string]{v, func(s string) (string, error) { return s, nil }}
}

func sizesFlag(v *[]int) listFlag[int] {
	return listFlag[int]{v, func(s string) (int, error) { n, err := parseBytes(s); return int(n), err }}
}

func intsFlag(v *[]int, what string) listFlag[int] {
	return listFlag[int]{v, func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%s %q: want positive integers, comma-separated", what, s)
		}
		return n, nil
	}}
}

// ratesFlag reads msgs/s rates: 1000, 50k, 1.5M.
func ratesFlag(v *[]float64) listFlag[float64] {
	return listFlag[float64]{v, func(p string) (float64, error) {
		t, mult := strings.ToLower(p), 1.0
		switch {
		case strings.HasSuffix(t, "k"):
			t, mult = strings.TrimSuffix(t, "k"), 1e3
		case strings.HasSuffix(t, "m"):
			t, mult = strings.TrimSuffix(t, "m"), 1e6
		}
		v, err := strconv.ParseFloat(t, 64)
		if err != nil || !(v > 0) {
			return 0, fmt.Errorf("rate %q: want a positive msgs/s (1000, 50k, 1.5M)", p)
		}
		return v * mult, nil
	}}
}

// parseBytes reads 1024, 4k/4KiB, 1m/1MiB, 1g/1GiB.
func parseBytes(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToLower(s), "ib"), "b")
	mult := int64(1)
	switch {
	case strings.HasSuffix(t, "k"):
		mult, t = 1<<10, strings.TrimSuffix(t, "k")
	case strings.HasSuffix(t, "m"):
		mult, t = 1<<20, strings.TrimSuffix(t, "m")
	case strings.HasSuffix(t, "g"):
		mult, t = 1<<30, strings.TrimSuffix(t, "g")
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes (1024, 4k, 1MiB)", s)
	}
	return n * mult, nil
}

// bytesFlag is a flag.Value of a byte count.
type bytesFlag struct{ v *int64 }

func (b bytesFlag) String() string {
	if b.v == nil {
		return ""
	}
	return strconv.FormatInt(*b.v, 10)
}

func (b bytesFlag) Set(s string) error {
	n, err := parseBytes(s)
	if err == nil {
		*b.v = n
	}
	return err
}

// windowFlag is --duration: a duration, or "auto" (0).
type windowFlag struct{ v *time.Duration }

func (w windowFlag) String() string {
	if w.v == nil || *w.v == 0 {
		return "auto"
	}
	return w.v.String()
}

func (w windowFlag) Set(s string) error {
	if s == "auto" {
		*w.v = 0
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return fmt.Errorf("duration %q: want a positive duration (1500ms, 3s) or auto", s)
	}
	*w.v = d
	return nil
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string { return strings.Join(*m, " ") }

func (m *multiFlag) Set(s string) error {
	*m = append(*m, s)
	return nil
}

// leastPagesFlag is --flush-least-pages and --commit-least-pages: a page
// count, 0 for whatever is pending (engine.LeastPagesAny); unset, the
// engine's default (4).
type leastPagesFlag struct{ v *int }

func (f leastPagesFlag) String() string {
	switch {
	case f.v == nil || *f.v == 0:
		return ""
	case *f.v == engine.LeastPagesAny:
		return "0"
	}
	return strconv.Itoa(*f.v)
}

func (f leastPagesFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("%q: want a page count ≥ 0 (0: whatever is pending)", s)
	}
	if n == 0 {
		n = engine.LeastPagesAny
	}
	*f.v = n
	return nil
}
