package hostctl

import (
	"os"
	"syscall"
	"testing"
	"time"
)

func rusageCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestProcessCPU: a process's CPU time read from /proc follows what
// getrusage says the process burnt, to its 10 ms ticks, and a process that
// does not exist is an error.
func TestProcessCPU(t *testing.T) {
	u0, s0, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	r0 := rusageCPU(t)
	x := 1
	for deadline := time.Now().Add(30 * time.Second); rusageCPU(t)-r0 < 200*time.Millisecond && time.Now().Before(deadline); {
		for range 100000 {
			x = x*31 + 7 // burn CPU on this thread
		}
	}
	_ = x
	u1, s1, err := ProcessCPU(os.Getpid())
	burnt := rusageCPU(t) - r0
	if err != nil {
		t.Fatal(err)
	}
	if got := (u1 - u0) + (s1 - s0); got < burnt-3*ClockTick || got > burnt+3*ClockTick {
		t.Errorf("/proc says %v of CPU (user %v → %v, system %v → %v), getrusage %v", got, u0, u1, s0, s1, burnt)
	}
	if _, _, err := ProcessCPU(1 << 30); err == nil {
		t.Error("a process that does not exist: no error")
	}
}
