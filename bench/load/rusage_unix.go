//go:build unix

package load

import (
	"syscall"
	"time"
)

// cpuTimes returns the process's user and system CPU time (getrusage
// RUSAGE_SELF: every thread, the store's background services included; not
// the kernel's writeback threads).
func cpuTimes() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}
