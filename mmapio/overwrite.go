package mmapio

import (
	"fmt"
	"math"

	"github.com/mqstore/mqstore/mappedfile"
)

// noOverwrite is overwrittenFrom's value when no overwrite waits for a Flush.
const noOverwrite = math.MaxInt64

var _ mappedfile.Overwriter = (*file)(nil)

// WriteAt implements mappedfile.Overwriter: it copies p into the mapping at
// filePos, over bytes already appended ([filePos, filePos+len(p)) must lie
// below the write position, else ErrOutOfRange), and marks them for the next
// Flush, which syncs them even when they lie below the flushed position.
//
// It is called by the goroutine that appends (the owner), never concurrently
// with Append or Truncate; Flush may run at the same time on another
// goroutine. Readers copying the same bytes at the same time may see a mix of
// old and new bytes: the caller (the IndexFile) orders its in-place updates.
// A memory fault is sticky, like a failed Append. The success path does not
// allocate.
func (m *file) WriteAt(p []byte, filePos int64) (int, error) {
	if err := m.Err(); err != nil {
		return 0, err
	}
	if !m.Retain() {
		return 0, m.ClosedError("overwrite")
	}
	defer m.Release()
	wrote := m.WrotePosition()
	if filePos < 0 || int64(len(p)) > wrote-filePos {
		return 0, fmt.Errorf("mmapio: overwrite [%d,+%d) of %s, written up to %d: %w",
			filePos, len(p), m.Path(), wrote, mappedfile.ErrOutOfRange)
	}
	if len(p) == 0 {
		return 0, nil
	}
	end := filePos + int64(len(p))
	if faultErr := m.copyGuarded(m.mapping[filePos:end:end], p, "overwrite"); faultErr != nil {
		return 0, m.Fail(faultErr)
	}
	// Lower the mark only after the copy: a Flush that sees the new mark
	// also sees the bytes, and one that took the mark before still leaves
	// this one for the next Flush.
	m.markOverwritten(filePos)
	return len(p), nil
}

// SwapEach implements mappedfile.Overwriter: the fields swapped in order
// under one reference, one fault guard and one overwrite mark, with no
// atomic between two fields (a locked instruction would wait for each
// field's cache miss before the next one's could start).
func (m *file) SwapEach(p, old []byte, width int, filePos []int64) error {
	if err := m.Err(); err != nil {
		return err
	}
	if !m.Retain() {
		return m.ClosedError("overwrite")
	}
	defer m.Release()
	low, err := mappedfile.CheckSwapEach(m.Path(), p, old, width, filePos, m.WrotePosition())
	if err != nil || len(filePos) == 0 {
		return err
	}
	if faultErr := m.swapEachGuarded(p, old, width, filePos); faultErr != nil {
		return m.Fail(faultErr)
	}
	m.markOverwritten(low)
	return nil
}

// markOverwritten lowers overwrittenFrom to filePos.
func (m *file) markOverwritten(filePos int64) {
	for {
		cur := m.overwrittenFrom.Load()
		if filePos >= cur || m.overwrittenFrom.CompareAndSwap(cur, filePos) {
			return
		}
	}
}
