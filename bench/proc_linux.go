package bench

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the calling OS thread's user and system CPU time
// (getrusage RUSAGE_THREAD).
func threadCPU() (time.Duration, time.Duration) {
	// getrusage(RUSAGE_THREAD) reads the thread's runtime as the scheduler
	// last stored it: a thread that has run since its last tick or switch
	// (up to a tick, 4 ms at 250 Hz) reads as if it had not. Reading the
	// thread's CPU clock first makes the kernel bring that runtime up to
	// date, so a short send is not counted as 0.
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// dieWithParent makes a child get SIGKILL when mqbench dies
// (PR_SET_PDEATHSIG), whatever kills it.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
