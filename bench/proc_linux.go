package bench

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the calling OS thread's user and system CPU time
// (getrusage RUSAGE_THREAD).
func threadCPU() (time.Duration, time.Duration) {
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
