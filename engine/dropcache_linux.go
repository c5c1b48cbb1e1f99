//go:build linux

package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/mqstore/mqstore/engine/segment"
	"golang.org/x/sys/unix"
)

// dropUnflushedPages asks the kernel to drop the cached pages of the
// CommitLog segments (of segmentSize bytes) in dir past flushed, the offset
// the checkpoint knows durable, before recovery reads them. A segment that
// ends at or below flushed is not opened.
//
// Why: after a failed writeback (a sync that returned EIO or ENOSPC) ext4
// and xfs keep the pages that did not reach the device cached and clean.
// A store that reported the failure stops, but a new process opens the
// segments through new descriptors, whose syncs succeed without writing
// those pages, and recovery would read them from the cache and take records
// the device never had as durable; a later power loss then leaves a hole
// that cuts the log, with records acknowledged after the restart behind it.
// POSIX_FADV_DONTNEED drops clean pages only: it starts writeback of dirty
// ones (what a crashed process left for the kernel to write) and leaves
// them, and a page the device has is read back as it was. So recovery sees
// past the flushed offset what the device holds, or what is still on its
// way there. The cost is rereading, at Open, what lies past the last
// checkpoint from the device.
func dropUnflushedPages(dir string, segmentSize, flushed int64) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("drop cached pages past the flushed offset %d: %w", flushed, err)
	}
	for _, e := range entries {
		start, err := segment.ParseName(e.Name())
		if err != nil || !e.Type().IsRegular() {
			continue // not a segment: the pool's directory, a kept .broken file
		}
		if start+segmentSize <= flushed {
			continue
		}
		if err := dropFrom(filepath.Join(dir, e.Name()), max(flushed-start, 0)); err != nil {
			return fmt.Errorf("drop cached pages past the flushed offset %d: %w", flushed, err)
		}
	}
	return nil
}

// dropFrom drops the clean cached pages of path from offset from to its end.
func dropFrom(path string, from int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if from >= st.Size() {
		return nil
	}
	from -= from % int64(os.Getpagesize()) // the page holding from: it may be part flushed, part not
	if err := unix.Fadvise(int(f.Fd()), from, st.Size()-from, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("posix_fadvise(DONTNEED) %s [%d, %d): %w", path, from, st.Size(), err)
	}
	return nil
}
