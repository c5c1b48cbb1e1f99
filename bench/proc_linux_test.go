package bench

import (
	"runtime"
	"testing"
	"time"
)

// TestThreadCPUCountsAShortRun: a thread that runs for a fraction of a
// scheduler tick reads that CPU time, not 0 (getrusage alone returns the
// runtime as of the thread's last tick or switch). The thread's CPU clock,
// read by the same call just before getrusage, says how much CPU the
// thread had in between, whatever else the machine runs. (A clock read
// outside the call would also count what the runtime does on this thread
// between that read and getrusage — a preemption signal, a GC assist —
// which getrusage rightly leaves out.)
func TestThreadCPUCountsAShortRun(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var ranAll, gotAll time.Duration
	for round := range 20 {
		c0, u0, s0 := threadTimes()
		// Spin on the wall clock (the vDSO: no system call that would bring
		// the thread's runtime up to date on its own), well under a tick.
		for start := time.Now(); time.Since(start) < 300*time.Microsecond; {
		}
		c1, u1, s1 := threadTimes()
		ran, got := c1-c0, (u1-u0)+(s1-s0)
		if ran <= 0 {
			t.Fatalf("round %d: the thread's CPU clock did not advance over a 300µs spin (%v)", round, ran)
		}
		// A tick or a signal landing between a call's two reads moves a
		// round by up to ~50µs either way (measured over 20,000 rounds);
		// a runtime that is not brought up to date reads 0.
		if got < ran/2 {
			t.Fatalf("round %d: %v of thread CPU where the thread's clock says it ran %v", round, got, ran)
		}
		ranAll += ran
		gotAll += got
	}
	if gotAll < ranAll-100*time.Microsecond {
		t.Fatalf("20 rounds: %v of thread CPU where the thread's clock says they ran %v", gotAll, ranAll)
	}
}
