package bench

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestThreadCPUCountsAShortRun: a thread that runs for a fraction of a
// scheduler tick reads that CPU time, not 0 (getrusage alone returns the
// runtime as of the thread's last tick or switch). The thread's CPU clock,
// read around each pair of readings, says how much CPU the thread had in
// between, whatever else the machine runs.
func TestThreadCPUCountsAShortRun(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	clock := func() time.Duration {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ts.Nano())
	}
	for round := range 20 {
		c0 := clock()
		u0, s0 := threadCPU()
		// Spin on the wall clock (the vDSO: no system call that would bring
		// the thread's runtime up to date on its own), well under a tick.
		for start := time.Now(); time.Since(start) < 300*time.Microsecond; {
		}
		u1, s1 := threadCPU()
		ran := clock() - c0
		if got := (u1 - u0) + (s1 - s0); got < ran-50*time.Microsecond {
			t.Fatalf("round %d: %v of thread CPU where the thread's clock says it ran %v", round, got, ran)
		}
	}
}
