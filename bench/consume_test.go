package bench

import (
	"errors"
	"testing"
	"time"
)

// TestSenderCPUIsTheSendersOwn: the consume workload's sender CPU counts
// the sends, not the wait for the reader. A fake thread clock that the
// send advances by 3 ms and the wait by 40 ms: the sender's CPU is 3 ms.
func TestSenderCPUIsTheSendersOwn(t *testing.T) {
	var clock time.Duration
	cpu := func() (time.Duration, time.Duration) { return clock, clock / 2 }
	send := func() (int64, int64, error) { clock += 3 * time.Millisecond; return 10, 1 << 20, nil }
	var waited int64
	wait := func(n int64) error { waited = n; clock += 40 * time.Millisecond; return nil }
	m, err := senderCPU(send, wait, cpu)
	if err != nil {
		t.Fatal(err)
	}
	if m.user != 3*time.Millisecond || m.sys != 1500*time.Microsecond || m.msgs != 10 || m.sent != 1<<20 || waited != 1<<20 {
		t.Errorf("got %+v (waited for %d bytes), want 3 ms user, 1.5 ms sys, 10 messages, 1 MiB", m, waited)
	}
	if _, err := senderCPU(func() (int64, int64, error) { return 0, 0, errors.New("boom") }, wait, cpu); err == nil {
		t.Error("a failed send returned no error")
	}
}
