package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
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
	switch err := c.fs.Parse(args); {
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

// value is a flag that sets a configuration field in place, so its
// default is whatever the field holds when it is registered (the
// defaults, or a --config file's value). The zero value's String is "",
// which flag.PrintDefaults takes for "no default to show".
type value[T any] struct {
	v      *T
	parse  func(string) (T, error)
	format func(T) string
}

func (f value[T]) String() string {
	if f.v == nil {
		return ""
	}
	return f.format(*f.v)
}

func (f value[T]) Set(s string) error {
	x, err := f.parse(s)
	if err == nil {
		*f.v = x
	}
	return err
}

// listFlag is a comma-separated list flag of elements parse reads; empty
// elements are skipped.
func listFlag[T any](v *[]T, parse func(string) (T, error)) value[[]T] {
	return value[[]T]{v, func(s string) ([]T, error) {
		var out []T
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			x, err := parse(p)
			if err != nil {
				return nil, err
			}
			out = append(out, x)
		}
		return out, nil
	}, func(xs []T) string {
		var s []string
		for _, x := range xs {
			s = append(s, fmt.Sprint(x))
		}
		return strings.Join(s, ",")
	}}
}

func strsFlag(v *[]string) value[[]string] {
	return listFlag(v, func(s string) (string, error) { return s, nil })
}

// peersFlag is --peers: peer names, or none (no peer, as the other axes
// spell it; the same as an empty list).
func peersFlag(v *[]string) value[[]string] {
	f := strsFlag(v)
	parse := f.parse
	f.parse = func(s string) ([]string, error) {
		names, err := parse(s)
		if err != nil || !slices.Contains(names, "none") {
			return names, err
		}
		if len(names) > 1 {
			return nil, fmt.Errorf("peers %q: none runs no peer, so it cannot be listed with others", s)
		}
		return nil, nil
	}
	return f
}

func sizesFlag(v *[]int) value[[]int] {
	return listFlag(v, func(s string) (int, error) { n, err := parseBytes(s); return int(n), err })
}

func intsFlag(v *[]int, what string) value[[]int] {
	return listFlag(v, func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%s %q: want positive integers, comma-separated", what, s)
		}
		return n, nil
	})
}

// ratesFlag reads msgs/s rates: 1000, 50k, 1.5M.
func ratesFlag(v *[]float64) value[[]float64] {
	return listFlag(v, func(p string) (float64, error) {
		t, mult := cutUnit(strings.ToLower(p), "km", 1e3, 1e6)
		v, err := strconv.ParseFloat(t, 64)
		if err != nil || !(v > 0) {
			return 0, fmt.Errorf("rate %q: want a positive msgs/s (1000, 50k, 1.5M)", p)
		}
		return v * mult, nil
	})
}

// cutUnit splits t into its number and the multiplier of its unit: the
// i-th letter of units multiplies by mults[i]; no unit, by 1.
func cutUnit[N int64 | float64](t, units string, mults ...N) (string, N) {
	for i := range len(units) {
		if n, ok := strings.CutSuffix(t, units[i:i+1]); ok {
			return n, mults[i]
		}
	}
	return t, 1
}

// parseBytes reads 1024, 4k/4KiB, 1m/1MiB, 1g/1GiB.
func parseBytes(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToLower(s), "ib"), "b")
	t, mult := cutUnit[int64](t, "kmg", 1<<10, 1<<20, 1<<30)
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes (1024, 4k, 1MiB)", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q: more bytes than a 64-bit count holds", s)
	}
	return n * mult, nil
}

// bytesFlag is a byte count.
func bytesFlag(v *int64) value[int64] {
	return value[int64]{v, parseBytes, func(n int64) string { return strconv.FormatInt(n, 10) }}
}

// windowFlag is --duration: a duration, or "auto" (0, shown as no default).
func windowFlag(v *time.Duration) value[time.Duration] {
	return value[time.Duration]{v, func(s string) (time.Duration, error) {
		if s == "auto" {
			return 0, nil
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("duration %q: want a positive duration (1500ms, 3s) or auto", s)
		}
		return d, nil
	}, func(d time.Duration) string {
		if d == 0 {
			return ""
		}
		return d.String()
	}}
}

// multiFlag is a repeatable string flag.
func multiFlag(v *[]string) value[[]string] {
	return value[[]string]{v, func(s string) ([]string, error) {
		return append(*v, s), nil
	}, func(xs []string) string { return strings.Join(xs, " ") }}
}

// leastPagesFlag is --flush-least-pages and --commit-least-pages: a page
// count, 0 for whatever is pending (engine.LeastPagesAny); unset, the
// engine's default (4).
func leastPagesFlag(v *int) value[int] {
	return value[int]{v, func(s string) (int, error) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q: want a page count ≥ 0 (0: whatever is pending)", s)
		}
		if n == 0 {
			n = engine.LeastPagesAny
		}
		return n, nil
	}, func(n int) string {
		switch n {
		case 0:
			return ""
		case engine.LeastPagesAny:
			return "0"
		}
		return strconv.Itoa(n)
	}}
}
