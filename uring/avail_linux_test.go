package uring

import (
	"errors"
	"os"
	osexec "os/exec"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
	"golang.org/x/sys/unix"
)

func exec(t *testing.T, run string, env ...string) *osexec.Cmd {
	t.Helper()
	cmd := osexec.Command(os.Args[0], "-test.run="+run, "-test.v")
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

func TestClassifySetupError(t *testing.T) {
	cases := []struct {
		errno    unix.Errno
		disabled disabledState
		want     string
	}{
		{unix.ENOSYS, -1, "ENOSYS"},
		{unix.EPERM, 2, "kernel.io_uring_disabled=2"},
		{unix.EPERM, 1, "kernel.io_uring_disabled=1"},
		{unix.EPERM, 0, "seccomp"},
		{unix.EPERM, -1, "seccomp"},
		{unix.ENOMEM, 0, "RLIMIT_MEMLOCK"},
		{unix.EINVAL, 0, "io_uring_setup failed"},
	}
	for _, c := range cases {
		err := classifySetupError(c.errno, c.disabled)
		msg := err.Error()
		if !strings.Contains(msg, c.want) || !strings.Contains(msg, "use the mmap or transient backend") {
			t.Errorf("errno %v, sysctl %d: %q; want it to mention %q and the other backends", c.errno, c.disabled, msg, c.want)
		}
		if !errors.Is(err, mappedfile.ErrUnsupported) || !errors.Is(err, ErrUnsupported) || !errors.Is(err, c.errno) {
			t.Errorf("errno %v, sysctl %d: %v does not wrap ErrUnsupported and the errno", c.errno, c.disabled, err)
		}
	}
}

// TestUnavailableReported makes io_uring_setup fail inside this process
// (the seam sysSetup, instead of a machine-wide sysctl other processes would
// see) and checks what NewRing and NewBackend report: ErrUnsupported, the
// reason, and the backends to use instead.
func TestUnavailableReported(t *testing.T) {
	cases := []struct {
		errno unix.Errno
		want  string
	}{
		{unix.ENOSYS, "ENOSYS"},
		{unix.EPERM, "io_uring_disabled"}, // names the sysctl's value, whatever it is here
		{unix.ENOMEM, "RLIMIT_MEMLOCK"},
	}
	real := sysSetup
	t.Cleanup(func() { sysSetup = real })
	for _, c := range cases {
		sysSetup = func(uint32, *params) (int, unix.Errno) { return -1, c.errno }
		_, ringErr := NewRing(RingOptions{Entries: 4})
		_, backendErr := NewBackend(Options{})
		for _, err := range []error{ringErr, backendErr} {
			if !errors.Is(err, mappedfile.ErrUnsupported) || !errors.Is(err, c.errno) ||
				!strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "use the mmap or transient backend") {
				t.Errorf("setup failing with %v: %v; want ErrUnsupported, the errno, %q and the other backends", c.errno, err, c.want)
			}
		}
	}
	sysSetup = real
	r, err := NewRing(RingOptions{Entries: 4})
	if err != nil {
		testenv.Skip(t, testenv.Uring, "%v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}
