package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mqstore/mqstore/bench/runfile"
)

// progress prints where a run is, counted in runs (one repeat of a cell, a
// floor, a search probe or a limit): on a terminal one line rewritten in
// place (refreshed every 250 ms) with the time left by the estimate;
// otherwise one line per finished cell and per failure.
type progress struct {
	w        io.Writer
	terminal bool
	started  time.Time

	mu        sync.Mutex
	total     int
	done      int
	estimate  float64 // seconds
	label     string
	stepStart time.Time
	stop      chan struct{}
	stopped   sync.WaitGroup
}

// IsTerminal reports whether f is a character device (a terminal).
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newProgress(w io.Writer, terminal bool, total int, estimate float64) *progress {
	p := &progress{w: w, terminal: terminal, total: total, estimate: estimate, started: time.Now(), stop: make(chan struct{})}
	if w == nil {
		p.w = io.Discard
	}
	if terminal {
		p.stopped.Add(1)
		go p.tick()
	}
	return p
}

func (p *progress) tick() {
	defer p.stopped.Done()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			p.redraw()
			p.mu.Unlock()
		}
	}
}

// replan sets the total and the estimate once the window is known.
func (p *progress) replan(total int, estimate float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total, p.estimate = max(total, p.done), estimate
}

// redraw rewrites the terminal line; p.mu held.
func (p *progress) redraw() {
	if p.label == "" {
		return
	}
	elapsed := time.Since(p.started)
	left := ""
	if rest := time.Duration(p.estimate*float64(time.Second)) - elapsed; rest > 0 {
		left = fmt.Sprintf(", ~%s left", rest.Round(time.Second))
	}
	fmt.Fprintf(p.w, "\r\033[K[%d/%d runs, %s%s] %s (%.1fs)", p.done, p.total, elapsed.Round(time.Second), left, p.label, time.Since(p.stepStart).Seconds())
}

// step says what runs now: round i (0 = warm) of n of label.
func (p *progress) step(label string, i, n int, rate float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i == 0 {
		p.label = label + " warm repeat"
	} else {
		p.label = fmt.Sprintf("%s repeat %d/%d", label, i, n)
	}
	if rate > 0 {
		p.label += fmt.Sprintf(" at %.0f/s", rate)
	}
	p.stepStart = time.Now()
	if p.terminal {
		p.redraw()
	}
}

func (p *progress) advance(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	p.total = max(p.total, p.done)
}

// finish sets the count to its total (what the plan counted but the run
// skipped: rungs above a sustained rate, probes a search did not need).
func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = p.total
}

// cellDone records a finished cell, floor, search or limit.
func (p *progress) cellDone(name, status, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label = ""
	if status == runfile.StatusOK {
		if !p.terminal {
			fmt.Fprintf(p.w, "[%d/%d] %s ok\n", p.done, p.total, name)
		}
		return
	}
	if p.terminal {
		fmt.Fprint(p.w, "\r\033[K")
	}
	reason = strings.ReplaceAll(reason, "\n", " ")
	if len(reason) > 200 {
		reason = reason[:200] + "…"
	}
	fmt.Fprintf(p.w, "[%d/%d] %s %s: %s\n", p.done, p.total, name, strings.ToUpper(status), reason)
}

// roundDone says a round of repeats finished (one line; on a terminal the
// rewritten line shows it already).
func (p *progress) roundDone(round, rounds, cells int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal {
		return
	}
	what := fmt.Sprintf("measured round %d/%d", round, rounds)
	if round == 0 {
		what = "warm round"
	}
	fmt.Fprintf(p.w, "[%d/%d] %s of %d cells done (%s)\n", p.done, p.total, what, cells, time.Since(p.started).Round(time.Second))
}

func (p *progress) note(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.terminal {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

func (p *progress) close() {
	if p.terminal {
		close(p.stop)
		p.stopped.Wait()
		fmt.Fprint(p.w, "\r\033[K")
	}
}
