package transientpool

import (
	"context"
	"fmt"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
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
	if !s.Retain() {
		return s.ClosedError("warm")
	}
	defer s.Release()
	if opts.Touch {
		if err := s.touch(ctx, opts.FlushEveryPages); err != nil {
			return err
		}
	}
	if opts.Lock && !s.mappingLocked.Load() {
		if err := segfile.Lock("transientpool: warm "+s.Path(), s.mapping); err != nil {
			return err
		}
		s.mappingLocked.Store(true)
	}
	if opts.Advise {
		if err := segfile.AdviseWrite(s.mapping); err != nil {
			return fmt.Errorf("transientpool: warm %s: %w", s.Path(), err)
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
	start := (s.WrotePosition() + mappedfile.PageSize - 1) &^ (mappedfile.PageSize - 1)
	pages := 0
	for pos := start; pos < s.SizeBytes(); pos += mappedfile.PageSize {
		memory[pos] = 0
		pages++
		if pages%touchCheckPages == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("transientpool: warm %s: touch: %w", s.Path(), err)
			}
		}
		if throughMapping && flushEveryPages > 0 && pages%flushEveryPages == 0 {
			if err := segfile.Fdatasync(s.Path(), s.fd); err != nil {
				return s.Fail(fmt.Errorf("transientpool: warm: %w", err))
			}
		}
	}
	return nil
}

// Cool undoes Warm for the file mapping: munlock and madvise(DONTNEED)
// (file pages stay in the page cache; dirty ones are still written back).
// The buffer stays as it is: it belongs to the pool, locked for life.
func (s *segment) Cool() error {
	if !s.Retain() {
		return s.ClosedError("cool")
	}
	defer s.Release()
	if s.mappingLocked.Swap(false) {
		if err := segfile.Unlock(s.mapping); err != nil {
			return fmt.Errorf("transientpool: cool %s: %w", s.Path(), err)
		}
	}
	if err := segfile.AdviseCold(s.mapping); err != nil {
		return fmt.Errorf("transientpool: cool %s: %w", s.Path(), err)
	}
	return nil
}

// Truncate sets wrote, committed and flushed to validEnd, durably zeroes
// [validEnd, SizeBytes) and, when there is room left, borrows a buffer so
// appends continue (or falls back / waits, as at Open). Bytes the caller
// declares valid that are still only in the buffer are committed first. One
// fdatasync of the whole file then makes both the zeros and every byte below
// validEnd durable: after a crash those may be only in the page cache. The
// buffer's content before validEnd does not matter: only [committed, wrote)
// is ever written from it. The file must not be in use.
func (s *segment) Truncate(ctx context.Context, validEnd int64) error {
	if err := s.BeginTruncate(ctx, validEnd); err != nil {
		return err
	}
	defer s.Release()
	var borrowed *poolBuffer
	if validEnd < s.SizeBytes() && s.buffer.Load() == nil {
		var err error
		if borrowed, err = s.pool.borrow(ctx); err != nil {
			return fmt.Errorf("transientpool: truncate %s: %w", s.Path(), err)
		}
	}
	if err := s.truncateFile(ctx, validEnd); err != nil {
		if borrowed != nil {
			s.pool.giveBack(borrowed)
		}
		return s.Fail(err)
	}
	if buf := s.buffer.Load(); buf != nil && validEnd < s.WrotePosition() {
		// Bytes appended past the valid end are discarded: the buffer must
		// not bring them back under a later partial encoder.
		clear(buf.data[validEnd:s.WrotePosition()])
	}
	s.FinishTruncate(validEnd)
	if borrowed != nil {
		s.buffer.Store(borrowed)
	} else if validEnd == s.SizeBytes() {
		s.returnBuffer() // nothing left to append
	}
	return nil
}

// truncateFile writes buffered bytes below validEnd, zeroes the tail (by
// writing zeros where it is not zeros already, so written extents stay
// written: segfile.ZeroRangeContext) and fdatasyncs the whole file.
func (s *segment) truncateFile(ctx context.Context, validEnd int64) error {
	if buf := s.buffer.Load(); buf != nil {
		from, to := s.CommittedPosition(), min(validEnd, s.WrotePosition())
		if to > from {
			if err := s.writeBuffer(buf, from, to); err != nil {
				return err
			}
		}
	}
	if err := segfile.ZeroRangeContext(ctx, s.osFile, validEnd, s.SizeBytes()-validEnd); err != nil {
		return fmt.Errorf("transientpool: truncate %s to %d: %w", s.Path(), validEnd, err)
	}
	return nil
}
