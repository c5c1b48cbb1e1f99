package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mappedfile/faultfile"
)

// TestGroupCommitLingers drives the owner's linger by hand: it waits until
// every sync Put in progress has queued — counted live, so producers an
// earlier flush released and that have not come back yet count, however
// small the last batch was (with one P the owner's back-to-back flushes
// kept the producers from running, and a linger sized by the last batch
// kept batches as small as they once were) — returns as soon as they
// are all there or one leaves, and when they do not come within the last
// flush's duration gives up and stops lingering for lingerBackoff flushes.
func TestGroupCommitLingers(t *testing.T) {
	q := &groupCommit{flushed: func() int64 { return 0 }, timeout: time.Hour, limit: 100, maxLinger: time.Hour, lingerWake: make(chan struct{}, 1),
		gomaxprocs: func() int { return 2 }}
	queue := func(n int) {
		for i := 0; i < n; i++ {
			if _, err := q.begin(context.Background(), 1, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	reset := func() {
		q.queued, q.count = q.queued[:0], 0
		q.queuedLen.Store(0)
		q.inPut.Store(0)
		q.noLinger = 0
	}
	lingering := func() <-chan struct{} {
		returned := make(chan struct{})
		go func() {
			q.linger()
			close(returned)
		}()
		return returned
	}
	stillLingering := func(returned <-chan struct{}, why string) {
		t.Helper()
		select {
		case <-returned:
			t.Fatalf("the owner stopped lingering %s", why)
		case <-time.After(50 * time.Millisecond):
		}
	}

	// Five Puts in progress, two queued (the last batch may have been
	// two): the owner waits for all five.
	q.lastFlush = time.Hour // a slow device: lingering pays
	for range 5 {
		q.enter()
	}
	queue(2)
	returned := lingering()
	stillLingering(returned, "with 2 of 5 Puts in progress queued")
	queue(2)
	stillLingering(returned, "with 4 of 5 Puts in progress queued")
	queue(1)
	<-returned
	if q.noLinger != 0 {
		t.Fatalf("a linger that filled its batch turned lingering off (%d)", q.noLinger)
	}

	// A Put that leaves without queuing (its ctx ended, or it needs no
	// flush) ends the wait for it.
	reset()
	for range 3 {
		q.enter()
	}
	queue(2)
	returned = lingering()
	stillLingering(returned, "with 2 of 3 Puts in progress queued")
	q.leave()
	<-returned

	reset()
	q.lastFlush = time.Millisecond // producers slower than the device
	for range 8 {
		q.enter()
	}
	queue(5)
	q.linger() // runs out with more than half there: a producer held up, not a slow set of them
	if q.noLinger != 0 {
		t.Fatalf("a linger that ran out with 5 of 8 producers there turned lingering off (%d)", q.noLinger)
	}
	reset()
	for range 9 {
		q.enter()
	}
	queue(1)
	q.linger() // runs out after about a millisecond with 1 of 9 there
	if q.noLinger != lingerBackoff {
		t.Fatalf("a linger that ran out left noLinger at %d, want %d", q.noLinger, lingerBackoff)
	}
	for i := 0; i < lingerBackoff; i++ {
		q.linger() // returns at once: the convoys go on
	}
	if q.noLinger != 0 {
		t.Fatalf("noLinger %d after %d flushes", q.noLinger, lingerBackoff)
	}

	// With one P a flush holds the only P, so the producers that have not
	// queued cannot append beside it: the linger waits past the last
	// flush's duration (up to maxLinger) and does not give up on lingering.
	reset()
	q.gomaxprocs = func() int { return 1 }
	q.lastFlush, q.maxLinger = time.Millisecond, time.Hour
	for range 9 {
		q.enter()
	}
	queue(1)
	returned = lingering()
	stillLingering(returned, "with one P, past the last flush's duration, with 1 of 9 queued")
	queue(8)
	<-returned
	if q.noLinger != 0 {
		t.Fatalf("with one P a linger turned lingering off (%d)", q.noLinger)
	}
	q.maxLinger = 2 * time.Millisecond
	reset()
	for range 9 {
		q.enter()
	}
	queue(1)
	q.linger() // runs out at maxLinger with 1 of 9 there
	if q.noLinger != 0 {
		t.Fatalf("with one P a linger that ran out turned lingering off (%d)", q.noLinger)
	}
	q.gomaxprocs, q.maxLinger = func() int { return 2 }, time.Hour

	// More Puts in progress than can queue (the rest get
	// errGroupCommitQueueFull): the owner waits for the queue's limit.
	reset()
	q.lastFlush, q.limit = time.Hour, 3
	for range 5 {
		q.enter()
	}
	queue(3)
	select {
	case <-lingering():
	case <-time.After(10 * time.Second):
		t.Fatal("the owner waits for more waiters than the queue holds")
	}
	q.limit = 100

	// A lone producer is never held: its own Put is the one in progress.
	reset()
	q.lastFlush = time.Hour
	q.enter()
	select {
	case <-lingering():
	case <-time.After(10 * time.Second):
		t.Fatal("the owner waits for a second producer that does not exist")
	}
}

// TestSyncPutsCountThemselves: a sync Put counts itself in the group
// commit's Puts in progress from before its append until it returns —
// while its flush is held up it counts — and every Put leaves the count,
// whatever its outcome.
func TestSyncPutsCountThemselves(t *testing.T) {
	ctx := context.Background()
	faults := faultfile.NewFaults()
	fb := faultfile.NewFaulty(mappedfile.NewMemFS(mappedfile.MemOptions{}), faults)
	s := openStore(t, t.TempDir(), Options{BackendImpl: fb, FlushMode: FlushSync, SegmentSizeBytes: 1 << 20, Logger: quietLogger})
	defer s.Close()
	if _, err := s.Put(ctx, testMessage("T", 0, 0, 100)); err != nil {
		t.Fatal(err)
	}
	if n := s.group.inPut.Load(); n != 0 {
		t.Fatalf("%d sync Puts in progress after the only one returned", n)
	}
	// A Put still appending (here: waiting for the append lock) counts:
	// its record can still join the batch.
	s.log.appendMu.Lock()
	appended := make(chan error, 1)
	go func() {
		_, err := s.Put(ctx, testMessage("T", 0, 1, 100))
		appended <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for s.group.inPut.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n, queued := s.group.inPut.Load(), s.group.queuedLen.Load(); n != 1 || queued != 0 {
		t.Fatalf("a Put waiting to append: %d in progress, %d queued; want 1 and 0", n, queued)
	}
	s.log.appendMu.Unlock()
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	faults.Add(faultfile.Fault{Op: faultfile.OpFlush, Latency: 300 * time.Millisecond, PathContains: "commitlog"})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			if _, err := s.Put(ctx, testMessage("T", 0, i, 100)); err != nil {
				t.Error(err)
			}
		})
	}
	deadline = time.Now().Add(5 * time.Second)
	for s.group.inPut.Load() != 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := s.group.inPut.Load(); n != 3 {
		t.Fatalf("%d sync Puts in progress while three wait for a slow flush, want 3", n)
	}
	wg.Wait()
	if n := s.group.inPut.Load(); n != 0 {
		t.Fatalf("%d sync Puts in progress after all returned", n)
	}
	bad := testMessage("T", -1, 0, 100) // refused before its append
	if _, err := s.Put(ctx, bad); err == nil {
		t.Fatal("a Put to queue -1 was taken")
	}
	if n := s.group.inPut.Load(); n != 0 {
		t.Fatalf("%d sync Puts in progress after a refused one returned", n)
	}
}

// TestGroupCommitTimesOutWhileTheFlushHangs: a flush that does not return
// must not hold its producers past SyncFlushTimeout — neither the one whose
// record is in the hanging flush nor one queued behind it. The records stay
// appended, and once the device answers they become durable and later Puts
// succeed (the waiters the watchdog answered are not reused early).
func TestGroupCommitTimesOutWhileTheFlushHangs(t *testing.T) {
	ctx := context.Background()
	faults := faultfile.NewFaults()
	fb := faultfile.NewFaulty(mappedfile.NewMemFS(mappedfile.MemOptions{}), faults)
	s := openStore(t, t.TempDir(), Options{BackendImpl: fb, FlushMode: FlushSync, SyncFlushTimeout: 50 * time.Millisecond,
		SegmentSizeBytes: 1 << 20, Logger: quietLogger})
	defer s.Close()
	faults.Add(faultfile.Fault{Op: faultfile.OpFlush, Latency: 1500 * time.Millisecond, PathContains: "commitlog"})
	results := make(chan PutResult, 8)
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func(i int) {
			res, err := s.Put(ctx, testMessage("H", 0, i, 10))
			results <- res
			errs <- err
		}(i)
	}
	for i := 0; i < 8; i++ {
		res, err := <-results, <-errs
		if res.Status != FlushDiskTimeout || !errors.Is(err, ErrFlushDiskTimeout) {
			t.Fatalf("put during a hanging flush: %v %v; want FlushDiskTimeout", res.Status, err)
		}
	}
	faults.Clear()
	for i := 0; i < 200; i++ {
		res, err := s.Put(ctx, testMessage("H", 0, 100+i, 10))
		if errors.Is(err, ErrFlushDiskTimeout) {
			continue // the hanging flush may still be returning
		}
		if err != nil || res.Status != PutOK {
			t.Fatalf("put after the device answered: %v %v", res.Status, err)
		}
		if end := res.PhysicalOffset + int64(res.Size); s.FlushedOffset() < end {
			t.Fatalf("acknowledged at %d, flushed %d", end, s.FlushedOffset())
		}
	}
}

// TestGroupCommitHonoursContext: a producer whose ctx ends while it waits
// gets ctx's error at once, and the waiter it leaves behind is answered and
// pooled by the owner without disturbing later waiters.
func TestGroupCommitHonoursContext(t *testing.T) {
	faults := faultfile.NewFaults(faultfile.Fault{Op: faultfile.OpFlush, Latency: 200 * time.Millisecond, PathContains: "commitlog"})
	fb := faultfile.NewFaulty(mappedfile.NewMemFS(mappedfile.MemOptions{}), faults)
	s := openStore(t, t.TempDir(), Options{BackendImpl: fb, FlushMode: FlushSync, SegmentSizeBytes: 1 << 20, Logger: quietLogger})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Put(ctx, testMessage("C", 0, 0, 10))
		done <- err
	}()
	waitFor(t, "the put to wait", func() bool {
		s.group.mu.Lock()
		defer s.group.mu.Unlock()
		return s.group.count > 0
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || !errors.Is(err, ErrFlushDiskTimeout) {
		t.Fatalf("cancelled wait: %v; want context.Canceled as FlushDiskTimeout", err)
	}
	faults.Clear()
	var wg sync.WaitGroup
	for p := 0; p < 8; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				res, err := s.Put(context.Background(), testMessage("C", int32(p), i, 10))
				if err != nil || s.FlushedOffset() < res.PhysicalOffset+int64(res.Size) {
					t.Errorf("put after a cancelled wait: %v %v (flushed %d)", res.Status, err, s.FlushedOffset())
					return
				}
			}
		}(p)
	}
	wg.Wait()
}

// TestProfileLabels: with ProfileLabels the services carry their stage, a
// producer waiting for durability is labelled wait, and Put gives the
// producer its own labels back when it returns.
func TestProfileLabels(t *testing.T) {
	faults := faultfile.NewFaults()
	fb := faultfile.NewFaulty(mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: true}), faults)
	s := openStore(t, t.TempDir(), Options{BackendImpl: fb, FlushMode: FlushSync, SegmentSizeBytes: 1 << 20, ProfileLabels: true, Logger: quietLogger})
	defer s.Close()
	label := func(stage string) string { return fmt.Sprintf("%q:%q", ProfileLabelKey, stage) }
	goroutines := func() string {
		var b bytes.Buffer
		if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	for _, stage := range []string{StageFlush, StageCommit, StageDispatch} {
		// A service labels itself when its goroutine starts.
		waitFor(t, "a goroutine labelled "+stage, func() bool { return strings.Contains(goroutines(), label(stage)) })
	}
	faults.Add(faultfile.Fault{Op: faultfile.OpFlush, Latency: 300 * time.Millisecond, PathContains: "commitlog"})
	returned := make(chan struct{})
	release := make(chan struct{})
	go pprof.Do(context.Background(), pprof.Labels("caller", "producer-7"), func(ctx context.Context) {
		if _, err := s.Put(ctx, testMessage("L", 0, 0, 10)); err != nil {
			t.Error(err)
		}
		close(returned)
		<-release // the profile below sees this goroutine after its Put
	})
	waitFor(t, "a producer labelled wait", func() bool { return strings.Contains(goroutines(), label(StageWait)) })
	<-returned
	g := goroutines()
	close(release)
	if !strings.Contains(g, `"caller":"producer-7"`) {
		t.Fatalf("the producer's own labels are gone after Put:\n%s", g)
	}
	if strings.Contains(g, label(StageWait)) {
		t.Fatalf("a goroutine is still labelled wait after its Put returned:\n%s", g)
	}
}

// TestBatchPolicyMeasuresBothModes: the owner's policy probes the convoys
// and then the merged batch, a few flushes each, keeps the one that
// flushed more records per second, and measures again after its exploit
// phase — which doubles while the same mode keeps winning clearly and
// falls back when the result is close or changes.
func TestBatchPolicyMeasuresBothModes(t *testing.T) {
	now := time.Unix(0, 0)
	// run feeds n flushes of the mode the policy is in: per flush, the
	// records and the time each mode takes.
	type mode struct {
		records int
		took    time.Duration
	}
	run := func(p *batchPolicy, n int, convoys, merged mode) {
		for range n {
			m := convoys
			if p.merge {
				m = merged
			}
			now = now.Add(m.took)
			p.flushed(m.records, now)
		}
	}
	phase := func(p *batchPolicy, want int, merge bool, left int) {
		t.Helper()
		if p.phase != want || p.merge != merge || p.left != left {
			t.Fatalf("phase %d merge %v left %d, want phase %d merge %v left %d", p.phase, p.merge, p.left, want, merge, left)
		}
	}
	// 256 producers on a device where a flush costs 170 µs + 2 µs a
	// record and the producers take 3 µs each to come back: convoys of
	// 128 flush every 426 µs, a merged batch of 256 every 0.68 + 0.77 ms.
	fastConvoys, slowMerged := mode{128, 426 * time.Microsecond}, mode{256, 1450 * time.Microsecond}
	p := newBatchPolicy(BatchingAuto)
	phase(&p, policyProbeOther, false, probeFlushes)
	run(&p, probeFlushes, fastConvoys, slowMerged)
	phase(&p, policyProbeBest, true, probeFlushes)
	run(&p, probeFlushes, fastConvoys, slowMerged)
	phase(&p, policyExploit, false, exploitFlushes)
	if got, want := p.rate[0], 128/426e-6; got < want*0.999 || got > want*1.001 {
		t.Errorf("convoys measured at %.0f records/s, want %.0f", got, want)
	}
	// The same clear winner: each exploit phase twice the last, up to the cap.
	for want := 2 * exploitFlushes; want <= 2*maxExploitFlushes; want *= 2 {
		run(&p, p.left, fastConvoys, slowMerged)
		phase(&p, policyProbeOther, true, probeFlushes) // the other mode is now the merged batch
		run(&p, 2*probeFlushes, fastConvoys, slowMerged)
		phase(&p, policyExploit, false, min(want, maxExploitFlushes))
	}
	// Four producers: convoys of two lose to batches of four, and the
	// policy turns within one cycle, back to the shortest exploit phase.
	slowConvoys, fastMerged := mode{2, 170 * time.Microsecond}, mode{4, 185 * time.Microsecond}
	run(&p, p.left+2*probeFlushes, slowConvoys, fastMerged)
	phase(&p, policyExploit, true, exploitFlushes)
	// A close result keeps the shortest exploit phase, whoever wins.
	run(&p, p.left+2*probeFlushes, mode{100, time.Millisecond}, mode{110, time.Millisecond})
	phase(&p, policyExploit, true, exploitFlushes)

	// A probe's settling flushes are not measured: a stall in them (the
	// convoys forming) does not count against the mode.
	p = newBatchPolicy(BatchingAuto)
	run(&p, settleFlushes, mode{1, time.Second}, mode{})
	run(&p, probeFlushes-settleFlushes, fastConvoys, slowMerged)
	if got, want := p.rate[0], 128/426e-6; got < want*0.999 || got > want*1.001 {
		t.Errorf("convoys measured at %.0f records/s with a stall in their settling flushes, want %.0f", got, want)
	}
	// A tie, or nothing measured, keeps the merged batch.
	p = newBatchPolicy(BatchingAuto)
	run(&p, 2*probeFlushes, mode{100, time.Millisecond}, mode{100, time.Millisecond})
	phase(&p, policyExploit, true, exploitFlushes)

	// Options.GroupCommitBatching naming a mode: that mode, never a probe.
	for _, m := range []BatchingMode{BatchingMerge, BatchingConvoys} {
		p = newBatchPolicy(m)
		for range 10 * maxExploitFlushes {
			if p.merge != (m == BatchingMerge) {
				t.Fatalf("%v: the policy left its mode", m)
			}
			run(&p, 1, fastConvoys, slowMerged)
		}
	}
}

// TestOwnerFollowsItsPolicy: while the policy runs convoys the owner takes
// whoever has queued at once; while it merges, it lingers for every sync
// Put in progress.
func TestOwnerFollowsItsPolicy(t *testing.T) {
	for _, merge := range []bool{false, true} {
		q := &groupCommit{service: newService(), flushed: func() int64 { return 0 },
			advance: func(target int64) (int64, error) { return target, nil },
			timeout: time.Hour, limit: 100, maxLinger: time.Hour, lastFlush: time.Hour, lingerWake: make(chan struct{}, 1)}
		q.policy = batchPolicy{best: merge, exploit: 1 << 30}
		q.policy.start(policyExploit)
		go q.run()
		for range 5 {
			q.enter() // five Puts in progress, two of them queued
		}
		var ws []*groupWaiter
		for range 2 {
			w, err := q.begin(context.Background(), 1, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			ws = append(ws, w)
		}
		answered := make(chan error, 1)
		go func() {
			for _, w := range ws {
				if err := q.end(w); err != nil {
					answered <- err
					return
				}
			}
			answered <- nil
		}()
		// Merging, the owner lingers up to the last flush's time (an hour
		// here); running convoys, it answers at once (10 s: a loaded
		// machine may be slow to schedule it, never an hour).
		wait := 10 * time.Second
		if merge {
			wait = 200 * time.Millisecond
		}
		select {
		case err := <-answered:
			if merge {
				t.Errorf("merging, the owner flushed 2 of 5 Puts in progress without waiting for the rest (%v)", err)
			} else if err != nil {
				t.Error(err)
			}
		case <-time.After(wait):
			if !merge {
				t.Fatal("running convoys, the owner lingered for Puts that had not queued")
			}
			for range 3 {
				q.leave() // the rest leave without queuing: the linger ends
			}
			if err := <-answered; err != nil {
				t.Fatal(err)
			}
		}
		q.shutdown()
	}
}
