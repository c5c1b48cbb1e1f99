package engine

import (
	"context"
	"fmt"
)

// Flush makes every record whose Put returned before the call durable, now,
// whatever the flush policy: it commits what a buffered backend still holds
// (without waiting for the commit service) and flushes the CommitLog up to
// the write position it read at the call. It returns the flushed offset,
// at least that position. Records appended while it runs may or may not be
// covered.
//
// It is safe concurrently with Puts and with the store's own flush and
// commit services, and a Close waits for it. It flushes the CommitLog only:
// ConsumeQueues and the index are rebuilt from the CommitLog after a crash,
// and Close flushes them. After Close it returns an error wrapping
// ErrClosed; on a store whose writes stopped after an I/O error, that error.
// An I/O error of the flush itself stops the store's writes as a failed
// background flush does (the error is sticky) and is returned wrapped.
//
// A benchmark uses it to time how long a store takes to make its backlog
// durable, without the rest of Close.
func (s *Store) Flush(ctx context.Context) (flushedOffset int64, err error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return s.FlushedOffset(), fmt.Errorf("flush %s: %w", s.dir, ErrClosed)
	}
	if p := s.writeErr.Load(); p != nil {
		return s.FlushedOffset(), fmt.Errorf("flush %s: the store stopped writing: %w", s.dir, *p)
	}
	if err := ctx.Err(); err != nil {
		return s.FlushedOffset(), fmt.Errorf("flush %s: %w", s.dir, err)
	}
	target := s.log.queue.WroteOffset()
	flushed := s.FlushedOffset()
	// Twice at most, as the group commit does: a flush whose pass began in
	// a segment that filled up meanwhile may need a second one.
	for pass := 0; pass < 2 && flushed < target; pass++ {
		if flushed, err = s.flushOnce(ctx, 0, true); err != nil {
			return flushed, fmt.Errorf("flush %s to offset %d: %w", s.dir, target, err)
		}
	}
	if flushed < target {
		return flushed, fmt.Errorf("flush %s: flushed to %d of %d: %w", s.dir, flushed, target, errFlushBehind)
	}
	return flushed, nil
}
