package ha

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// logLimiter bounds the log lines about misbehaving peers: a flood of
// connections that are not slaves (a port scan, a misdirected client, an
// attack) must not flood the log. A few lines pass at once, then one per
// interval, each saying how many were held back since the last.
type logLimiter struct {
	log      *slog.Logger
	burst    int
	interval time.Duration

	mu         sync.Mutex
	tokens     float64
	last       time.Time
	suppressed int
}

func newLogLimiter(log *slog.Logger, burst int, interval time.Duration) *logLimiter {
	return &logLimiter{log: log, burst: burst, interval: interval, tokens: float64(burst)}
}

// Log logs the line unless the limit holds it back.
func (l *logLimiter) Log(level slog.Level, msg string, attrs ...any) {
	l.mu.Lock()
	now := time.Now()
	if !l.last.IsZero() {
		l.tokens = min(float64(l.burst), l.tokens+float64(now.Sub(l.last))/float64(l.interval))
	}
	l.last = now
	if l.tokens < 1 {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	l.tokens--
	held := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	if held > 0 {
		attrs = append(attrs, slog.Int("heldBack", held))
	}
	l.log.Log(context.Background(), level, msg, attrs...)
}
