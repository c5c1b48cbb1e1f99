// Package segfile holds the file-system mechanics the real backends share:
// creating a preallocated segment durably, zeroing a range, syncing a file, a
// range of its mapping or a directory, sending a file range to a socket with
// sendfile(2), memory maps, and the O_DIRECT alignment of a file system. It
// keeps the backends from repeating each other; it knows nothing about
// records.
//
// Every system call the backends make on their files goes through this
// package's seam (see Install and Hook), where tests record and fail them.
// The files are split by system: *_unix.go (Linux and macOS), *_linux.go
// (fallocate, fdatasync, FIEMAP, O_DIRECT, sendfile, sync_file_range),
// *_darwin.go (F_FULLFSYNC where Linux uses fdatasync, msync followed by
// F_FULLFSYNC, ftruncate for fallocate, written zeros for a prewrite, a copy
// for sendfile); elsewhere every function returns an error wrapping
// mappedfile.ErrUnsupported, so the packages above it still build.
package segfile

import "strings"

// IsSegmentTemp reports whether name is a segment still being created.
func IsSegmentTemp(name string) bool { return strings.HasSuffix(name, ".tmp") }

// PageRange widens [from, to) to whole pages inside a region of size bytes.
func PageRange(from, to, size int64) (int64, int64) {
	const page = 4096
	from = from &^ (page - 1)
	to = (to + page - 1) &^ (page - 1)
	if to > size {
		to = size
	}
	return from, to
}

// PrewriteStepBytes is a paced prewrite's step (mappedfile.Spec.PrewritePace,
// PrewritePaced on Linux): zeros written, then fdatasynced, before the next
// step. Chosen on the reference machine (docs/backends.md, "Paced zeros"):
// beside 64 producers' sync Puts on 64 MiB segments, 1 MiB steps cut the
// Puts' p99.9 from 40–50 ms to about 12 ms for the least throughput of the
// sizes tried; 256 KiB steps cut the tail a little more for up to a sixth
// of the throughput; 4 MiB steps left the p99.9 at 15–18 ms.
const PrewriteStepBytes = 1 << 20
