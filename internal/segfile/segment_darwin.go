package segfile

import (
	"context"
	"io"
	"os"
)

// directIOHint: macOS has no O_DIRECT flag (F_NOCACHE is a different
// contract), so no backend opens files with it here.
func directIOHint(err error, _ int) error { return err }

// SendFile writes [off, off+n) of f to w by a copy (macOS's sendfile(2)
// has another contract; the copy is what Linux falls back to as well).
func SendFile(ctx context.Context, w io.Writer, f *os.File, off, n int64) (int64, error) {
	return copyRange(ctx, w, f, off, n)
}

// DirectIOAlignment is 4096: no backend uses O_DIRECT on macOS.
func DirectIOAlignment(string) (offsetAlign, memAlign int64) { return 4096, 4096 }

// DropCache does nothing on macOS, which has no posix_fadvise: the file's
// pages stay cached.
func DropCache(string) error { return nil }
