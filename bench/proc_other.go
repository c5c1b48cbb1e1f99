//go:build !linux

package bench

import (
	"syscall"
	"time"
)

// threadCPU has no per-thread figure outside Linux: zero, so the sender's
// CPU per GiB reads 0 rather than the whole process's.
func threadCPU() (time.Duration, time.Duration) { return 0, 0 }

// dieWithParent: no PR_SET_PDEATHSIG outside Linux.
func dieWithParent() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
