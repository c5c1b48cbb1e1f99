package engine

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/mqstore/mqstore/mappedfile"
)

// CommitLogReader reads the CommitLog by physical offset, the way the HA
// master streams it to its slaves: how many bytes are readable from an
// offset (never past the end of the segment holding it, so a range is always
// one segment's bytes), a copy of them, a zero-copy send of them to a socket,
// and a wait until bytes at an offset become readable.
//
// It reads only committed bytes: those handed to the file, which a process
// crash does not lose (readable bytes of a buffered backend may still sit in the
// process's staging buffer). So a slave never holds more than its master
// recovers after a kill -9 — only a power loss (or an OS crash) before the
// master's flush can leave the slave ahead, and the slave then refuses
// the master rather than follow it (see package ha). Committed bytes never
// change, and end at a record boundary: an append publishes a whole record
// (or blank) and a commit moves up to the write position.
type CommitLogReader struct{ s *Store }

// CommitLogReader returns a reader of the store's CommitLog. It is cheap;
// every method is safe for concurrent use.
func (s *Store) CommitLogReader() *CommitLogReader { return &CommitLogReader{s: s} }

// SegmentSizeBytes is the CommitLog segment size.
func (r *CommitLogReader) SegmentSizeBytes() int64 { return r.s.log.segmentSizeBytes }

// Available returns how many bytes from offset are readable now in the
// segment holding offset, at most max: 0 at the readable end (the caller
// waits with Wait). Below the first stored offset it returns an error
// wrapping ErrOffsetDeleted; past the readable end one wrapping
// ErrOffsetBeyondEnd.
func (r *CommitLogReader) Available(offset int64, max int) (int, error) {
	q := r.s.log.queue
	last := q.Last()
	if last == nil {
		if offset == 0 {
			return 0, nil
		}
		return 0, fmt.Errorf("commit log offset %d: the CommitLog is empty: %w", offset, ErrOffsetBeyondEnd)
	}
	if first := q.MinOffset(); offset < first {
		return 0, fmt.Errorf("commit log offset %d: the CommitLog starts at %d: %w", offset, first, ErrOffsetDeleted)
	}
	mf := q.Find(offset)
	if mf == nil {
		if offset == last.FromOffset()+last.SizeBytes() && scanBound(last) == last.SizeBytes() {
			return 0, nil // the next segment is not created yet
		}
		return 0, r.beyond(offset)
	}
	pos := offset - mf.FromOffset()
	readable := scanBound(mf)
	switch {
	case pos < readable:
		return int(min(readable-pos, int64(max))), nil
	case pos == readable || mf != last:
		// At the end, or in an older segment a buffered backend has not
		// finished committing.
		return 0, nil
	}
	return 0, r.beyond(offset)
}

func (r *CommitLogReader) beyond(offset int64) error {
	return fmt.Errorf("commit log offset %d: committed only up to %d: %w", offset, r.End(), ErrOffsetBeyondEnd)
}

// End is where the CommitLog's committed bytes end (Store.MaxOffset, or
// less for a backend whose readable bytes are not all committed).
func (r *CommitLogReader) End() int64 {
	if last := r.s.log.queue.Last(); last != nil {
		return last.FromOffset() + scanBound(last)
	}
	return 0
}

// Start is the first offset still stored (Store.MinOffset).
func (r *CommitLogReader) Start() int64 { return r.s.MinOffset() }

// ReadAt copies readable CommitLog bytes at offset into dst, across segment
// ends. Like io.ReaderAt it returns io.EOF with n < len(dst) when it reaches
// the readable end.
func (r *CommitLogReader) ReadAt(dst []byte, offset int64) (int, error) {
	n := 0
	for n < len(dst) {
		k, err := r.Available(offset+int64(n), len(dst)-n)
		if err != nil {
			return n, err
		}
		if k == 0 {
			return n, io.EOF
		}
		mf := r.s.log.queue.Find(offset + int64(n))
		if mf == nil {
			return n, io.EOF
		}
		m, err := mf.ReadAt(dst[n:n+k], offset+int64(n)-mf.FromOffset())
		n += m
		if m < k {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return n, fmt.Errorf("read commit log at %d: %w", offset+int64(n), err)
		}
	}
	return n, nil
}

// SendTo writes the n CommitLog bytes at offset to w with the backend's
// zero-copy path (sendfile(2) from the segment when w is a socket and the
// backend keeps the bytes in a file). The range must be readable and lie in
// one segment: n ≤ Available(offset, n).
func (r *CommitLogReader) SendTo(ctx context.Context, w io.Writer, offset int64, n int) (int64, error) {
	if k, err := r.Available(offset, n); err != nil {
		return 0, err
	} else if k < n {
		return 0, fmt.Errorf("send commit log [%d,%d): only %d bytes readable in one segment: %w", offset, offset+int64(n), k, mappedfile.ErrOutOfRange)
	}
	mf := r.s.log.queue.Find(offset)
	if mf == nil || !mf.Retain() {
		return 0, fmt.Errorf("send commit log at %d: the segment was deleted: %w", offset, ErrOffsetDeleted)
	}
	defer mf.Release()
	sent, err := mf.SendRange(ctx, w, offset-mf.FromOffset(), int64(n))
	if err != nil {
		return sent, fmt.Errorf("send commit log [%d,%d): %w", offset, offset+int64(n), err)
	}
	return sent, nil
}

// Wait blocks until bytes at offset are readable (Available > 0) and returns
// nil; or returns Available's error, ctx's error, or ErrClosed when the store
// closes. Appends, commits and replicated appends wake it; it never polls.
func (r *CommitLogReader) Wait(ctx context.Context, offset int64) error {
	g := &r.s.repl.growth
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	for {
		ch := g.channel() // before the check: growth after it closes ch
		n, err := r.Available(offset, 1)
		if err != nil || n > 0 {
			return err
		}
		select {
		case <-ch:
		case <-r.s.repl.closing:
			return fmt.Errorf("wait for commit log offset %d: %w", offset, ErrClosed)
		case <-ctx.Done():
			return fmt.Errorf("wait for commit log offset %d: %w", offset, ctx.Err())
		}
	}
}

// growth wakes CommitLog readers waiting for the readable end to move. A
// producer pays one atomic load when nobody waits.
type growth struct {
	waiting atomic.Int32
	mu      sync.Mutex
	ch      chan struct{} // closed when the log grows; nil when nobody took it
}

func (g *growth) channel() chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
	return g.ch
}

// notify wakes the waiters; it never blocks.
func (g *growth) notify() {
	if g.waiting.Load() == 0 {
		return
	}
	g.mu.Lock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
	g.mu.Unlock()
}
