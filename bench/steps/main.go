// Command stepbench measures what each step of the engine's history buys.
// run.sh builds it inside a worktree of each commit it is given and runs
// one closed-loop cell per process: N producers Put bare bodies through the
// public API (engine.Open, Store.Put) for a window after a warm-up, and it
// prints msgs/s and the process's CPU per message. It uses only API that
// every commit since the store's first release has, so the same source
// builds against all of them. With -summarize it reads the lines run.sh
// collected and prints each build's median [min–max] per cell.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mqstore/mqstore/engine"
)

func main() {
	dir := flag.String("dir", "", "the store's directory (a new one)")
	backend := flag.String("backend", "uring-direct", "the backend")
	flush := flag.String("flush", "sync", "async or sync")
	producers := flag.Int("producers", 16, "closed-loop producers")
	window := flag.Duration("duration", 2*time.Second, "the measured window")
	size := flag.Int("size", 1024, "body bytes")
	summarize := flag.String("summarize", "", "summarize this file of run.sh's lines instead of running a cell")
	order := flag.String("order", "", "with -summarize: the builds' rows in this order (comma-separated; default: as they first appear)")
	flag.Parse()
	if *summarize != "" {
		f, err := os.Open(*summarize)
		if err == nil {
			err = summary(os.Stdout, f, strings.FieldsFunc(*order, func(r rune) bool { return r == ',' }))
			f.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "stepbench:", err)
			os.Exit(1)
		}
		return
	}
	if *dir == "" || *producers <= 0 || *window <= 0 || *size < 0 {
		fmt.Fprintln(os.Stderr, "stepbench: want -dir, producers > 0, a positive -duration and -size ≥ 0")
		os.Exit(2)
	}
	rate, user, sys, err := cell(*dir, *backend, *flush, *producers, *window, *size)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stepbench:", err)
		os.Exit(1)
	}
	fmt.Printf("%.0f %.3f %.3f\n", rate, user, sys)
}

// cell runs one closed loop and returns msgs/s and the user and system CPU
// µs per message of the window.
func cell(dir, backend, flush string, producers int, window time.Duration, size int) (rate, user, sys float64, err error) {
	mode, err := engine.ParseFlushMode(flush)
	if err != nil {
		return 0, 0, 0, err
	}
	ctx, cancel := context.WithCancel(context.Background()) // one cancellable ctx, as mqbench's producers share
	defer cancel()
	s, err := engine.Open(ctx, dir, engine.Options{Backend: backend, FlushMode: mode, SegmentSizeBytes: 64 << 20})
	if err != nil {
		return 0, 0, 0, err
	}
	body := make([]byte, size)
	var measuring, stop atomic.Bool
	var total atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for w := 0; w < producers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			m := &engine.Message{Topic: "StepTopic", QueueID: int32(w % 8), Body: body}
			n := int64(0)
			for !stop.Load() {
				if _, err := s.Put(ctx, m); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				if measuring.Load() {
					n++
				}
			}
			total.Add(n)
		}(w)
	}
	time.Sleep(300 * time.Millisecond)
	u0, s0, err := cpu()
	if err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	measuring.Store(true)
	time.Sleep(window)
	measuring.Store(false)
	elapsed := time.Since(start)
	u1, s1, cpuErr := cpu()
	stop.Store(true)
	wg.Wait()
	if err := s.Close(); err != nil {
		return 0, 0, 0, fmt.Errorf("close: %w", err)
	}
	if p := failed.Load(); p != nil {
		return 0, 0, 0, fmt.Errorf("put: %w", *p)
	}
	if cpuErr != nil {
		return 0, 0, 0, cpuErr
	}
	n := float64(total.Load())
	if n == 0 {
		return 0, 0, 0, errors.New("no Put completed in the window")
	}
	return n / elapsed.Seconds(), float64(u1-u0) / 1e3 / n, float64(s1-s0) / 1e3 / n, nil
}

// cpu is the process's user and system CPU so far.
func cpu() (user, sys time.Duration, err error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano()), nil
}

// summary reads run.sh's lines — round, build, flush, producers, msgs/s,
// user and system µs per message — and prints, per build (in order, then
// the others in the order they first appear), each cell's median msgs/s
// [min–max] and the median CPU µs per message.
func summary(w io.Writer, r io.Reader, order []string) error {
	type key struct{ build, cell string }
	rates, cpus := map[key][]float64{}, map[key][]float64{}
	var builds, cells []string
	for _, b := range order {
		builds = appendNew(builds, b)
	}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 7 {
			return fmt.Errorf("line %d: %q: want round, build, flush, producers, msgs/s, user and system µs per message", line, sc.Text())
		}
		var v [3]float64
		for i := range v {
			x, err := strconv.ParseFloat(f[4+i], 64)
			if err != nil {
				return fmt.Errorf("line %d: %w", line, err)
			}
			v[i] = x
		}
		k := key{f[1], f[2] + " " + f[3]}
		builds, cells = appendNew(builds, k.build), appendNew(cells, k.cell)
		rates[k] = append(rates[k], v[0])
		cpus[k] = append(cpus[k], v[1]+v[2])
	}
	if err := sc.Err(); err != nil {
		return err
	}
	fmt.Fprintf(w, "| build | %s |\n|---|%s\n", strings.Join(cells, " | "), strings.Repeat("---:|", len(cells)))
	for _, b := range builds {
		row := []string{b}
		for _, c := range cells {
			rs := rates[key{b, c}]
			if len(rs) == 0 {
				row = append(row, "—")
				continue
			}
			row = append(row, fmt.Sprintf("%s [%s–%s], %.3g µs", si(median(rs)), si(slices.Min(rs)), si(slices.Max(rs)), median(cpus[key{b, c}])))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	return nil
}

// appendNew appends s to list unless list has it.
func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// si writes a rate with three significant digits and k or M.
func si(x float64) string {
	switch {
	case x >= 1e6:
		return strconv.FormatFloat(x/1e6, 'g', 3, 64) + "M"
	case x >= 1e3:
		return strconv.FormatFloat(x/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}
