package bench

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the calling OS thread's user and system CPU time
// (getrusage RUSAGE_THREAD).
func threadCPU() (time.Duration, time.Duration) {
	_, user, sys := threadTimes()
	return user, sys
}

// threadTimes reads the calling thread's CPU clock and then its
// getrusage(RUSAGE_THREAD) user and system time. The clock read is what
// brings the runtime getrusage reports up to date; it is returned so a
// caller can see what it was.
func threadTimes() (clock, user, sys time.Duration) {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return time.Duration(ts.Nano()), 0, 0
	}
	return time.Duration(ts.Nano()), time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// dieWithParent makes a child get SIGKILL when mqbench dies
// (PR_SET_PDEATHSIG), whatever kills it.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
