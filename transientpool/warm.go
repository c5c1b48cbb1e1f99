package transientpool

import (
	"context"
	"fmt"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// touchCheckPages is how many pages Touch writes between context checks.
const touchCheckPages = 1024

// Warm prepares the segment for writing and reading.
//
//   - Touch writes a zero to every page at or after the write position of
//     the memory appends go to: the buffer (normally already resident: it is
//     populated and locked; this matters with NoLock), or, for a segment that
//     fell back, the file mapping, flushing every FlushEveryPages pages so the
//     warm-up does not pile up dirty pages. The file's tail is zero already
//     (fallocated or zeroed by Truncate), so the zeros change nothing on disk.
//     Only for a segment with nothing being appended concurrently.
//   - Lock mlocks the file mapping, so reads of the segment (and appends of a
//     fallen-back segment) never fault. Pool buffers are locked by the pool.
//   - Advise applies madvise(WILLNEED, SEQUENTIAL) to the file mapping.
func (s *segment) Warm(ctx context.Context, opts mappedfile.WarmOptions) error {
	if !s.ref.Retain() {
		return s.closedError("warm")
	}
	defer s.ref.Release()
	if opts.Touch {
		if err := s.touch(ctx, opts.FlushEveryPages); err != nil {
			return err
		}
	}
	if opts.Lock && !s.mappingLocked.Load() {
		if err := segfile.Lock("transientpool: warm "+s.path, s.mapping); err != nil {
			return err
		}
		s.mappingLocked.Store(true)
	}
	if opts.Advise {
		if err := segfile.AdviseWrite(s.mapping); err != nil {
			return fmt.Errorf("transientpool: warm %s: %w", s.path, err)
		}
	}
	return nil
}

// touch writes a zero to each page from the first page boundary at or after
// the write position.
func (s *segment) touch(ctx context.Context, flushEveryPages int) error {
	memory, throughMapping := s.mapping, true
	if buf := s.buffer.Load(); buf != nil {
		memory, throughMapping = buf.data, false
	}
	start := (s.wrotePosition.Load() + mappedfile.PageSize - 1) &^ (mappedfile.PageSize - 1)
	pages := 0
	for pos := start; pos < s.sizeBytes; pos += mappedfile.PageSize {
		memory[pos] = 0
		pages++
		if pages%touchCheckPages == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("transientpool: warm %s: touch: %w", s.path, err)
			}
		}
		if throughMapping && flushEveryPages > 0 && pages%flushEveryPages == 0 {
			if err := unix.Fdatasync(s.fd); err != nil {
				return fmt.Errorf("transientpool: warm %s: fdatasync: %w", s.path, err)
			}
		}
	}
	return nil
}

// Cool undoes Warm for the file mapping: munlock and madvise(DONTNEED)
// (file pages stay in the page cache; dirty ones are still written back).
// The buffer stays as it is: it belongs to the pool, locked for life.
func (s *segment) Cool() error {
	if !s.ref.Retain() {
		return s.closedError("cool")
	}
	defer s.ref.Release()
	if s.mappingLocked.Swap(false) {
		if err := segfile.Unlock(s.mapping); err != nil {
			return fmt.Errorf("transientpool: cool %s: %w", s.path, err)
		}
	}
	if err := segfile.AdviseCold(s.mapping); err != nil {
		return fmt.Errorf("transientpool: cool %s: %w", s.path, err)
	}
	return nil
}

// Truncate sets wrote, committed and flushed to validEnd, durably zeroes
// [validEnd, SizeBytes) and, when there is room left, borrows a buffer so
// appends continue (or falls back / waits, as at Open). Bytes the caller
// declares valid that are still only in the buffer are committed first. The
// buffer's content before validEnd does not matter: only [committed, wrote)
// is ever written from it. The file must not be in use.
func (s *segment) Truncate(ctx context.Context, validEnd int64) error {
	if validEnd < 0 || validEnd > s.sizeBytes {
		return fmt.Errorf("transientpool: truncate %s to %d of %d: %w", s.path, validEnd, s.sizeBytes, mappedfile.ErrOutOfRange)
	}
	if err := s.Err(); err != nil {
		return err
	}
	if !s.ref.Retain() {
		return s.closedError("truncate")
	}
	defer s.ref.Release()
	var borrowed *poolBuffer
	if validEnd < s.sizeBytes && s.buffer.Load() == nil {
		var err error
		if borrowed, err = s.pool.borrow(ctx); err != nil {
			return fmt.Errorf("transientpool: truncate %s: %w", s.path, err)
		}
	}
	if err := s.truncateFile(validEnd); err != nil {
		if borrowed != nil {
			s.pool.giveBack(borrowed)
		}
		return s.fail(err)
	}
	s.wrotePosition.Store(validEnd)
	s.committedPosition.Store(validEnd)
	s.flushedPosition.Store(validEnd)
	if borrowed != nil {
		s.buffer.Store(borrowed)
	} else if validEnd == s.sizeBytes {
		s.returnBuffer() // nothing left to append
	}
	return nil
}

// truncateFile writes buffered bytes below validEnd, zeroes the tail and
// makes both durable.
func (s *segment) truncateFile(validEnd int64) error {
	if buf := s.buffer.Load(); buf != nil {
		from, to := s.committedPosition.Load(), min(validEnd, s.wrotePosition.Load())
		if to > from {
			if err := s.writeBuffer(buf, from, to); err != nil {
				return err
			}
		}
	}
	if tail := s.sizeBytes - validEnd; tail > 0 {
		if err := segfile.ZeroRange(s.osFile, validEnd, tail); err != nil {
			return fmt.Errorf("transientpool: truncate %s to %d: %w", s.path, validEnd, err)
		}
		return nil
	}
	if err := unix.Fdatasync(s.fd); err != nil {
		return fmt.Errorf("transientpool: truncate %s: fdatasync: %w", s.path, err)
	}
	return nil
}
