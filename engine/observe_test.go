package engine

import (
	"context"
	"testing"
	"time"

	"github.com/mqstore/mqstore/mappedfile"
)

// AppendLockHeldFor reads 0 while the append lock is free and grows while
// a Put holds it (here waiting, under the lock, for the CommitLog's next
// segment, whose creation the test holds back).
func TestAppendLockHeldFor(t *testing.T) {
	ctx := context.Background()
	h := newHooked(mappedfile.NewMemFS(mappedfile.MemOptions{}))
	o := smallLogicsOptions(Options{BackendImpl: h, AllocationTimeout: time.Minute, OSPageCacheBusyTimeout: time.Hour})
	o.SegmentSizeBytes = 16 << 10
	s := openStore(t, t.TempDir(), o)
	defer s.Close()
	if d := s.AppendLockHeldFor(); d != 0 {
		t.Fatalf("AppendLockHeldFor %v with no Put running", d)
	}
	noSegment := newGate()
	defer noSegment.open()
	h.set(on("open", commitLogDirName, func(string) error { noSegment.wait(); return nil }))
	done := make(chan error, 1)
	go func() {
		for i := range 100 { // 100 × ~1 KiB: past the first 16 KiB segment
			if _, err := s.Put(ctx, testMessage("L", 0, i, 900)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.AppendLockHeldFor() < 20*time.Millisecond {
		select {
		case err := <-done:
			t.Fatalf("the Puts ended (%v) before one held the append lock waiting for a segment", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no Put held the append lock for 20 ms while the next segment was held back")
		}
		time.Sleep(time.Millisecond)
	}
	noSegment.open()
	h.set(nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := s.AppendLockHeldFor(); d != 0 {
		t.Fatalf("AppendLockHeldFor %v once the Puts are done", d)
	}
}

// ConsumeQueueStats counts the queues, their units and file bytes;
// SlaveReports returns the verified slaves the HA master reported.
func TestConsumeQueueStatsAndSlaveReports(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), smallLogicsOptions(Options{Backend: "mem"}))
	defer s.Close()
	if st := s.ConsumeQueueStats(); st != (ConsumeQueueStats{}) {
		t.Fatalf("an empty store's ConsumeQueueStats %+v", st)
	}
	for i := range 60 {
		if _, err := s.Put(ctx, testMessage("Q", int32(i%3), i, 10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.WaitDispatched(ctx, s.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	st := s.ConsumeQueueStats()
	if st.Queues != 3 || st.Units != 60 || st.FileBytes != 3*s.Options().ConsumeQueueFileSizeBytes {
		t.Fatalf("ConsumeQueueStats %+v, want 3 queues, 60 units, 3 files of %d bytes", st, s.Options().ConsumeQueueFileSizeBytes)
	}
	if r := s.SlaveReports(); r != nil {
		t.Fatalf("SlaveReports %v before any report", r)
	}
	s.ReportSlaves([]SlaveReport{{Addr: "a", Verified: true, AckedOffset: 100, Position: 100}, {Addr: "b", Position: 7}})
	r := s.SlaveReports()
	if len(r) != 1 || r[0].Addr != "a" || r[0].AckedOffset != 100 {
		t.Fatalf("SlaveReports %+v, want the verified slave a at 100", r)
	}
}
