package segfile

import (
	"errors"
	"os"
)

// macOS has no FIEMAP: the extent checks report ErrNoExtents (tests that
// need them skip).

// Extent is one extent of a file as FIEMAP reports it.
type Extent struct {
	Logical, Length int64
	Physical        int64
	Unwritten       bool
	Delalloc        bool
}

// ErrNoExtents: the file system does not report extents (FIEMAP).
var ErrNoExtents = errors.New("segfile: the file system does not report extents (FIEMAP)")

func Extents(*os.File, bool) ([]Extent, error) { return nil, ErrNoExtents }

func UnwrittenBytes(*os.File, int64, int64) (int64, error) { return 0, ErrNoExtents }
