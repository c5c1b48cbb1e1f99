package mmapio

import (
	"context"
	"fmt"
	"io"
	"syscall"

	"github.com/mqstore/mqstore/internal/segfile"
	"github.com/mqstore/mqstore/mappedfile"
)

// sendChunkBytes bounds one Write of SendRange's copy path, so a cancelled
// context is noticed between chunks of a large range.
const sendChunkBytes = 1 << 20

// ReadAt implements mappedfile.MappedFile: a copy from the mapping, under a
// short reference (Acquire) so a concurrent Close cannot unmap it meanwhile;
// it still works after Close or Delete while someone holds a Retain.
func (m *file) ReadAt(dst []byte, filePos int64) (int, error) {
	if !m.Acquire() {
		return 0, m.ClosedError("read")
	}
	defer m.Release()
	n, err := mappedfile.CheckRead(filePos, len(dst), m.WrotePosition())
	if err == mappedfile.ErrOutOfRange {
		return 0, fmt.Errorf("mmapio: read %d bytes at %d of %s: %w", len(dst), filePos, m.Path(), err)
	}
	if n > 0 {
		if faultErr := m.copyGuarded(dst[:n], m.mapping[filePos:filePos+int64(n)], "read"); faultErr != nil {
			return 0, faultErr
		}
	}
	return n, err // err is nil or io.EOF, unwrapped as io.ReaderAt callers expect
}

// SendRange implements mappedfile.MappedFile. To a socket (any
// syscall.Conn) it uses sendfile(2) through the file descriptor: the mapped
// pages are the page cache sendfile reads, so nothing is copied in user
// space. To any other writer it writes slices of the mapping, which the
// io.Writer contract forbids the writer to keep.
func (m *file) SendRange(ctx context.Context, w io.Writer, filePos, n int64) (int64, error) {
	if !m.Acquire() {
		return 0, m.ClosedError("send from")
	}
	defer m.Release()
	readable := m.WrotePosition()
	if filePos < 0 || n < 0 || filePos > readable || n > readable-filePos {
		return 0, fmt.Errorf("mmapio: send [%d,+%d) of %s, readable up to %d: %w",
			filePos, n, m.Path(), readable, mappedfile.ErrOutOfRange)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("mmapio: send from %s: %w", m.Path(), err)
	}
	if n == 0 {
		return 0, nil
	}
	if _, ok := w.(syscall.Conn); ok {
		sent, err := segfile.SendFile(ctx, w, m.osFile, filePos, n)
		if err != nil {
			return sent, fmt.Errorf("mmapio: send from %s: %w", m.Path(), err)
		}
		return sent, nil
	}
	return m.writeFromMapping(ctx, w, filePos, n)
}

// writeFromMapping writes mapping[filePos:filePos+n] to w in chunks.
func (m *file) writeFromMapping(ctx context.Context, w io.Writer, filePos, n int64) (int64, error) {
	var sent int64
	for sent < n {
		if err := ctx.Err(); err != nil {
			return sent, fmt.Errorf("mmapio: send from %s: %w", m.Path(), err)
		}
		chunk := min(n-sent, sendChunkBytes)
		pos := filePos + sent
		written, err := m.writeGuarded(w, m.mapping[pos:pos+chunk:pos+chunk])
		sent += int64(written)
		if err == nil && int64(written) < chunk {
			err = io.ErrShortWrite
		}
		if err != nil {
			return sent, fmt.Errorf("mmapio: send [%d,%d) of %s: %w", pos, filePos+n, m.Path(), err)
		}
	}
	return sent, nil
}
