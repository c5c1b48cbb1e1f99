package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress prints where a run is: on a terminal one line rewritten in place
// (with the elapsed time of the current step, refreshed every 250 ms);
// otherwise one line per finished cell.
type progress struct {
	w        io.Writer
	terminal bool
	total    int // cells and limits planned
	finished int
	started  time.Time

	mu        sync.Mutex
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

func newProgress(w io.Writer, terminal bool, total int) *progress {
	p := &progress{w: w, terminal: terminal, total: total, started: time.Now(), stop: make(chan struct{})}
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

// redraw rewrites the terminal line; p.mu held.
func (p *progress) redraw() {
	if p.label == "" {
		return
	}
	line := fmt.Sprintf("[%d/%d %s] %s (%.1fs)", p.finished+1, p.total, time.Since(p.started).Round(time.Second),
		p.label, time.Since(p.stepStart).Seconds())
	fmt.Fprintf(p.w, "\r\033[K%s", line)
}

// step says what runs now: repeat i of n of label.
func (p *progress) step(label string, i, n int, rate float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label = fmt.Sprintf("%s repeat %d/%d", label, i+1, n)
	if rate > 0 {
		p.label += fmt.Sprintf(" at %.0f/s", rate)
	}
	p.stepStart = time.Now()
	if p.terminal {
		p.redraw()
	}
}

// done records a finished cell or limit.
func (p *progress) done(name, status, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finished++
	p.label = ""
	if status == StatusOK {
		if !p.terminal {
			fmt.Fprintf(p.w, "[%d/%d] %s ok\n", p.finished, p.total, name)
		}
		return
	}
	if p.terminal {
		fmt.Fprint(p.w, "\r\033[K")
	}
	reason = strings.ReplaceAll(reason, "\n", " ")
	if len(reason) > 160 {
		reason = reason[:160] + "…"
	}
	fmt.Fprintf(p.w, "[%d/%d] %s %s: %s\n", p.finished, p.total, name, strings.ToUpper(status), reason)
}

// note prints a message on its own line.
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
