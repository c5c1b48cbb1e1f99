package segfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

func directIOHint(err error, flags int) error {
	if flags&unix.O_DIRECT != 0 && errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("%w (the file system does not support O_DIRECT, e.g. tmpfs; use the uring or mmap backend there)", err)
	}
	return err
}

// maxSendfile is the most one sendfile(2) call transfers.
const maxSendfile = 0x7ffff000

// SendFile writes [off, off+n) of f to w. When w is a socket (a syscall.Conn)
// it uses sendfile(2) from the page cache, looping on partial sends and
// waiting through the runtime poller on EAGAIN; otherwise it copies.
// It does not move f's file position.
func SendFile(ctx context.Context, w io.Writer, f *os.File, off, n int64) (int64, error) {
	if n <= 0 {
		return 0, nil
	}
	sc, ok := w.(syscall.Conn)
	if !ok {
		return copyRange(ctx, w, f, off, n)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return copyRange(ctx, w, f, off, n)
	}
	src := int(f.Fd())
	var sent int64
	var sendErr error
	for sent < n {
		if err := ctx.Err(); err != nil {
			return sent, fmt.Errorf("sendfile: %w", err)
		}
		werr := raw.Write(func(dst uintptr) bool {
			chunk := n - sent
			if chunk > maxSendfile {
				chunk = maxSendfile
			}
			pos := off + sent
			m, err := unix.Sendfile(int(dst), src, &pos, int(chunk))
			if m > 0 {
				sent += int64(m)
			}
			if err == unix.EAGAIN {
				return false // wait for the socket to be writable
			}
			if err == unix.EINTR {
				return sent >= n
			}
			if err != nil {
				sendErr = err
				return true
			}
			if m == 0 {
				sendErr = io.ErrUnexpectedEOF // the file is shorter than the range
			}
			return true
		})
		if sendErr != nil {
			if errors.Is(sendErr, unix.EINVAL) || errors.Is(sendErr, unix.ENOSYS) {
				// Not a socket sendfile can write to (a pipe of another
				// kind, say): copy the rest.
				m, err := copyRange(ctx, w, f, off+sent, n-sent)
				return sent + m, err
			}
			return sent, fmt.Errorf("sendfile [%d,%d): %w", off+sent, off+n, sendErr)
		}
		if werr != nil {
			return sent, fmt.Errorf("sendfile: %w", werr)
		}
	}
	return sent, nil
}

// DirectIOAlignment returns the offset and memory alignment O_DIRECT needs
// for files in dir, from statx(STATX_DIOALIGN), falling back to 4096 when the
// kernel or file system does not report it.
func DirectIOAlignment(path string) (offsetAlign, memAlign int64) {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_DIOALIGN, &st)
	if err != nil || st.Mask&unix.STATX_DIOALIGN == 0 || st.Dio_offset_align == 0 {
		return 4096, 4096
	}
	return int64(st.Dio_offset_align), int64(st.Dio_mem_align)
}

// DropCache asks the kernel to drop path's clean pages from the page cache
// (posix_fadvise DONTNEED): what a file written long ago looks like.
func DropCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("drop the cached pages of %s: %w", path, err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("drop the cached pages of %s: fadvise: %w", path, err)
	}
	return nil
}
