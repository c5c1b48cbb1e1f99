package bench

import (
	"runtime"
	"testing"
	"time"
)

// TestThreadCPUCountsAShortRun: a thread that runs for a fraction of a
// scheduler tick reads that CPU time, not 0 (getrusage alone returns the
// runtime as of the thread's last tick or switch).
func TestThreadCPUCountsAShortRun(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for round := range 20 {
		u0, s0 := threadCPU()
		// Spin on the wall clock (the vDSO: no system call that would bring
		// the thread's runtime up to date on its own), well under a tick.
		for start := time.Now(); time.Since(start) < 300*time.Microsecond; {
		}
		u1, s1 := threadCPU()
		if got := (u1 - u0) + (s1 - s0); got < 200*time.Microsecond {
			t.Fatalf("round %d: %v of thread CPU over at least 300µs of spinning", round, got)
		}
	}
}
