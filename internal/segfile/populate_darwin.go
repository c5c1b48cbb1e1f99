package segfile

import "errors"

// mapPopulate: macOS has no MAP_POPULATE; anonymous memory is faulted in
// on first use.
const mapPopulate = 0

// ErrNoPopulateWrite: the system has no MADV_POPULATE_WRITE.
var ErrNoPopulateWrite = errors.New("segfile: madvise(MADV_POPULATE_WRITE) is Linux only")

// PopulateWrite returns ErrNoPopulateWrite: callers touch the pages instead.
func PopulateWrite([]byte) error { return ErrNoPopulateWrite }
