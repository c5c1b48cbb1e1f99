package uring

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

// register is io_uring_register(2), retried on EINTR, on the ring thread.
// argOff is an offset in the ring's off-heap scratch page (the kernel reads
// or writes the argument there during the call only), or -1 for none.
func (r *Ring) register(op uintptr, argOff int, nrArgs uintptr) error {
	var arg uintptr
	if argOff >= 0 {
		arg = uintptr(unsafe.Pointer(&r.scratch[argOff]))
	}
	for {
		_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), op, arg, nrArgs, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
}

// args returns n bytes of the scratch page for register arguments, zeroed,
// or an error when they do not fit.
func (r *Ring) args(n uintptr, what string) ([]byte, error) {
	if n > uintptr(len(r.scratch)-scratchArgsFrom) {
		return nil, fmt.Errorf("uring: %s: %d bytes of arguments exceed the ring's %d-byte scratch page: %w",
			what, n, len(r.scratch)-scratchArgsFrom, mappedfile.ErrInvalidArgument)
	}
	b := r.scratch[scratchArgsFrom : scratchArgsFrom+int(n)]
	clear(b)
	return b, nil
}

// scratchAddr is the address of b, a slice of the scratch page.
func scratchAddr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

// requiredOps are the opcodes the backends cannot do without.
var requiredOps = []struct {
	op   uint8
	name string
}{
	{OpNop, "NOP"}, {OpWritev, "WRITEV"}, {OpFsync, "FSYNC"}, {OpReadFixed, "READ_FIXED"},
	{OpWriteFixed, "WRITE_FIXED"}, {OpRead, "READ"}, {OpWrite, "WRITE"},
}

// probeOps asks the kernel which opcodes it supports (IORING_REGISTER_PROBE)
// and fails when one the backends need is missing. It runs on the ring
// thread during setup.
func (r *Ring) probeOps() error {
	const nOps = 256
	buf, err := r.args(unsafe.Sizeof(probeHeader{})+nOps*unsafe.Sizeof(probeOp{}), "probe")
	if err != nil {
		return err
	}
	if err := r.register(registerProbe, scratchArgsFrom, nOps); err != nil {
		return fmt.Errorf("uring: IORING_REGISTER_PROBE (needs Linux 5.6 or later; use the mmap or transient backend): %w: %w",
			ErrUnsupported, err)
	}
	h := (*probeHeader)(unsafe.Pointer(&buf[0]))
	ops := buf[unsafe.Sizeof(probeHeader{}):]
	for i := 0; i < int(h.opsLen) && i < nOps; i++ {
		o := (*probeOp)(unsafe.Pointer(&ops[uintptr(i)*unsafe.Sizeof(probeOp{})]))
		r.supported[o.op] = o.flags&probeOpSupported != 0
	}
	var missing []string
	for _, o := range requiredOps {
		if !r.supported[o.op] {
			missing = append(missing, o.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("uring: the kernel's io_uring lacks %s; use the mmap or transient backend: %w",
			strings.Join(missing, ", "), ErrUnsupported)
	}
	return nil
}

// RegisterBuffers registers bufs as fixed buffers 0…len(bufs)-1
// (IORING_REGISTER_BUFFERS). Each must be off-heap memory (MapAnonymous) of
// at most 1 GiB that stays mapped until UnregisterBuffers or Close. The
// kernel pins the pages; without CAP_IPC_LOCK they count against
// RLIMIT_MEMLOCK.
func (r *Ring) RegisterBuffers(bufs [][]byte) error {
	if len(bufs) == 0 {
		return fmt.Errorf("uring: register no buffers: %w", mappedfile.ErrInvalidArgument)
	}
	var total int64
	for i, b := range bufs {
		if len(b) == 0 {
			return fmt.Errorf("uring: register buffer %d: empty: %w", i, mappedfile.ErrInvalidArgument)
		}
		total += int64(len(b))
	}
	return r.call(func() error {
		a, err := r.args(uintptr(len(bufs))*unsafe.Sizeof(iovec{}), "register buffers")
		if err != nil {
			return err
		}
		for i, b := range bufs {
			*(*iovec)(unsafe.Pointer(&a[uintptr(i)*unsafe.Sizeof(iovec{})])) = iovec{base: uint64(uintptr(unsafe.Pointer(&b[0]))), len: uint64(len(b))}
		}
		if err := r.register(registerBuffers, scratchArgsFrom, uintptr(len(bufs))); err != nil {
			return registerError("register buffers", total, err)
		}
		return nil
	})
}

// UnregisterBuffers drops every registered buffer (classic or table).
func (r *Ring) UnregisterBuffers() error {
	return r.call(func() error {
		if err := r.register(unregisterBuffers, -1, 0); err != nil {
			return fmt.Errorf("uring: unregister buffers: %w", err)
		}
		return nil
	})
}

// RegisterBufferTable registers an empty table of n fixed-buffer slots
// (IORING_REGISTER_BUFFERS2, sparse; Linux 5.19+), filled later by
// UpdateBuffer, so buffers can be added and replaced while the ring runs.
func (r *Ring) RegisterBufferTable(n int) error {
	return r.call(func() error {
		a, err := r.args(unsafe.Sizeof(rsrcRegister{}), "register a buffer table")
		if err != nil {
			return err
		}
		*(*rsrcRegister)(unsafe.Pointer(&a[0])) = rsrcRegister{nr: uint32(n), flags: rsrcRegisterSparse}
		if err := r.register(registerBuffers2, scratchArgsFrom, unsafe.Sizeof(rsrcRegister{})); err != nil {
			return fmt.Errorf("uring: register a table of %d buffers: %w", n, err)
		}
		return nil
	})
}

// UpdateBuffer puts buf (off-heap, ≤ 1 GiB) into slot index of the buffer
// table; a nil buf empties the slot. Requests already in flight keep the
// old buffer until they complete.
func (r *Ring) UpdateBuffer(index int, buf []byte) error {
	return r.call(func() error {
		const upSize = unsafe.Sizeof(rsrcUpdate2{})
		a, err := r.args(upSize+unsafe.Sizeof(iovec{}), "update a buffer")
		if err != nil {
			return err
		}
		iov := (*iovec)(unsafe.Pointer(&a[upSize]))
		if len(buf) > 0 {
			*iov = iovec{base: uint64(uintptr(unsafe.Pointer(&buf[0]))), len: uint64(len(buf))}
		}
		*(*rsrcUpdate2)(unsafe.Pointer(&a[0])) = rsrcUpdate2{offset: uint32(index), data: scratchAddr(a[upSize:]), nr: 1}
		if err := r.register(registerBuffersUpdate, scratchArgsFrom, upSize); err != nil {
			return registerError(fmt.Sprintf("update buffer slot %d", index), int64(len(buf)), err)
		}
		return nil
	})
}

// RegisterFiles registers fds as fixed files 0…len(fds)-1; -1 leaves a slot
// empty. Requests then name a file by index with FlagFixedFile.
func (r *Ring) RegisterFiles(fds []int32) error {
	if len(fds) == 0 {
		return fmt.Errorf("uring: register no files: %w", mappedfile.ErrInvalidArgument)
	}
	return r.call(func() error {
		a, err := r.args(uintptr(len(fds))*4, "register files")
		if err != nil {
			return err
		}
		copy(unsafe.Slice((*int32)(unsafe.Pointer(&a[0])), len(fds)), fds)
		if err := r.register(registerFiles, scratchArgsFrom, uintptr(len(fds))); err != nil {
			return fmt.Errorf("uring: register %d files: %w", len(fds), err)
		}
		return nil
	})
}

// UpdateFiles replaces registered files from slot offset on (-1 empties a slot).
func (r *Ring) UpdateFiles(offset int, fds []int32) error {
	if len(fds) == 0 {
		return nil
	}
	return r.call(func() error {
		const upSize = unsafe.Sizeof(filesUpdate{})
		a, err := r.args(upSize+uintptr(len(fds))*4, "update files")
		if err != nil {
			return err
		}
		copy(unsafe.Slice((*int32)(unsafe.Pointer(&a[upSize])), len(fds)), fds)
		*(*filesUpdate)(unsafe.Pointer(&a[0])) = filesUpdate{offset: uint32(offset), fds: scratchAddr(a[upSize:])}
		if err := r.register(registerFilesUpdate, scratchArgsFrom, uintptr(len(fds))); err != nil {
			return fmt.Errorf("uring: update files at %d: %w", offset, err)
		}
		return nil
	})
}

// UnregisterFiles drops the registered files.
func (r *Ring) UnregisterFiles() error {
	return r.call(func() error {
		if err := r.register(unregisterFiles, -1, 0); err != nil {
			return fmt.Errorf("uring: unregister files: %w", err)
		}
		return nil
	})
}

func registerError(what string, bytes int64, err error) error {
	if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EPERM) {
		return fmt.Errorf("uring: %s: pinning %d bytes failed; registered buffers count against RLIMIT_MEMLOCK without CAP_IPC_LOCK: %w",
			what, bytes, err)
	}
	return fmt.Errorf("uring: %s (%d bytes): %w", what, bytes, err)
}

// sysctlIOUringDisabled is the knob that turns io_uring off (Linux 6.6+).
const sysctlIOUringDisabled = "/proc/sys/kernel/io_uring_disabled"

// disabledState is the value of kernel.io_uring_disabled, or -1 when the
// kernel has no such sysctl or it cannot be read.
type disabledState int

func readIOUringDisabled() disabledState {
	b, err := os.ReadFile(sysctlIOUringDisabled)
	if err != nil {
		return -1
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return disabledState(v)
}

const useInstead = "use the mmap or transient backend"

// classifySetupError turns a failed io_uring_setup into an error that says
// why io_uring is unavailable and what to use instead. It wraps
// ErrUnsupported when io_uring cannot run here at all.
func classifySetupError(errno unix.Errno, disabled disabledState) error {
	switch {
	case errno == unix.ENOSYS:
		return fmt.Errorf("uring: the kernel has no io_uring (io_uring_setup: ENOSYS: Linux older than 5.1 or built without CONFIG_IO_URING); %s: %w: %w",
			useInstead, ErrUnsupported, errno)
	case errno == unix.EPERM && disabled == 2:
		return fmt.Errorf("uring: io_uring is disabled for every process by sysctl kernel.io_uring_disabled=2; %s: %w: %w",
			useInstead, ErrUnsupported, errno)
	case errno == unix.EPERM && disabled == 1:
		return fmt.Errorf("uring: io_uring is limited by sysctl kernel.io_uring_disabled=1 to CAP_SYS_ADMIN and the group in kernel.io_uring_group, and this process is neither; %s: %w: %w",
			useInstead, ErrUnsupported, errno)
	case errno == unix.EPERM:
		return fmt.Errorf("uring: io_uring_setup is not permitted (EPERM with kernel.io_uring_disabled=%s): most likely a seccomp filter, as container runtimes' default profiles block io_uring; %s: %w: %w",
			disabledString(disabled), useInstead, ErrUnsupported, errno)
	case errno == unix.ENOMEM:
		return fmt.Errorf("uring: io_uring_setup: out of memory (kernels before 5.12 charge rings to RLIMIT_MEMLOCK; raise it) or %s: %w: %w",
			useInstead, ErrUnsupported, errno)
	default:
		return fmt.Errorf("uring: io_uring_setup failed; %s: %w: %w", useInstead, ErrUnsupported, errno)
	}
}

func disabledString(d disabledState) string {
	if d < 0 {
		return "unknown"
	}
	return strconv.Itoa(int(d))
}
