package load

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// timerfdSleeper sleeps on a timerfd registered with Go's network poller.
// Go's own timers wake up to a millisecond late when the process is
// otherwise idle (the poller's epoll timeout is in whole milliseconds); a
// timerfd wakes the poller at the kernel's hrtimer precision, with no
// thread spinning.
type timerfdSleeper struct {
	file *os.File
	buf  [8]byte
}

func newPreciseSleeper() (sleeper, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd_create: %w", err)
	}
	return &timerfdSleeper{file: os.NewFile(uintptr(fd), "timerfd")}, nil
}

// maxTimerWait bounds one wait so a cancelled context is noticed.
const maxTimerWait = 50 * time.Millisecond

func (s *timerfdSleeper) SleepUntil(ctx context.Context, t time.Time) {
	sleepUntil(ctx, t, func(left time.Duration) {
		wait := min(left, maxTimerWait)
		spec := unix.ItimerSpec{Value: unix.NsecToTimespec(wait.Nanoseconds())}
		if err := unix.TimerfdSettime(int(s.file.Fd()), 0, &spec, nil); err != nil {
			time.Sleep(wait) // cannot happen with a valid fd; degrade, do not fail the run
			return
		}
		if _, err := s.file.Read(s.buf[:]); err != nil {
			time.Sleep(wait)
		}
	})
}

func (s *timerfdSleeper) Close() error { return s.file.Close() }
