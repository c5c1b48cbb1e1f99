package uring

import (
	"errors"
	"os"
	osexec "os/exec"
	"strings"
	"testing"

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

// TestDisabledBySysctl really turns io_uring off (kernel.io_uring_disabled=2)
// for the moment it takes to create one ring, then restores the old value.
func TestDisabledBySysctl(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to set kernel.io_uring_disabled")
	}
	old, err := os.ReadFile(sysctlIOUringDisabled)
	if err != nil {
		t.Skipf("needs the sysctl kernel.io_uring_disabled (Linux 6.6+): %v", err)
	}
	restore := func() {
		if err := os.WriteFile(sysctlIOUringDisabled, old, 0o644); err != nil {
			t.Errorf("RESTORE kernel.io_uring_disabled=%s BY HAND: %v", strings.TrimSpace(string(old)), err)
		}
	}
	t.Cleanup(restore) // in case of a panic below
	if err := os.WriteFile(sysctlIOUringDisabled, []byte("2"), 0o644); err != nil {
		t.Skipf("cannot set kernel.io_uring_disabled (read-only /proc/sys in a container?): %v", err)
	}
	_, ringErr := NewRing(RingOptions{Entries: 4})
	_, backendErr := NewBackend(Options{})
	restore()
	for _, err := range []error{ringErr, backendErr} {
		if !errors.Is(err, mappedfile.ErrUnsupported) || !strings.Contains(err.Error(), "io_uring_disabled=2") ||
			!strings.Contains(err.Error(), "use the mmap or transient backend") {
			t.Fatalf("with io_uring disabled: %v; want ErrUnsupported naming the sysctl and the other backends", err)
		}
	}
	t.Logf("reported: %v", ringErr)
	if b, _ := os.ReadFile(sysctlIOUringDisabled); string(b) != string(old) {
		t.Fatalf("kernel.io_uring_disabled is %q, was %q", b, old)
	}
}
