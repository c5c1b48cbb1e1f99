package failover

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mqstore/mqstore/controller"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/record"
)

var (
	schedulePhases = flag.Int("failover.phases", 4, "fault phases of TestFailoverSchedule (kill the master or a slave, restart it)")
	scheduleSeed   = flag.Uint64("failover.seed", 0, "seed of TestFailoverSchedule (0: from the clock, printed)")
)

// producer writes unique keys to whichever broker is the writable master,
// following NotMasterError hints, and records a key as acknowledged only
// on a nil error.
type producer struct {
	c     *cluster
	mu    sync.Mutex
	acked map[string][]byte
	fails int
	// writers are the brokers that acknowledged in each epoch.
	writers map[int32]map[int64]bool
	stop    chan struct{}
	done    chan struct{}
}

func startProducer(c *cluster) *producer {
	p := &producer{c: c, acked: map[string][]byte{}, writers: map[int32]map[int64]bool{}, stop: make(chan struct{}),
		done: make(chan struct{})}
	go func() {
		defer close(p.done)
		var b *Broker
		for i := 1_000_000; ; i++ {
			select {
			case <-p.stop:
				return
			default:
			}
			if b == nil {
				if b = c.master(); b == nil {
					time.Sleep(5 * time.Millisecond)
					continue
				}
			}
			m := message(i)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			a, err := b.PutAck(ctx, m)
			cancel()
			p.mu.Lock()
			if err == nil {
				p.acked[fmt.Sprintf("k%d", i)] = m.Body
				if p.writers[a.Epoch] == nil {
					p.writers[a.Epoch] = map[int64]bool{}
				}
				p.writers[a.Epoch][a.Broker] = true
			} else {
				p.fails++
			}
			p.mu.Unlock()
			if err != nil {
				var nm *NotMasterError
				b = nil
				if errors.As(err, &nm) {
					b = c.byAddr(nm.Addr)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
	}()
	return p
}

// check fails the test unless every acknowledged record is in keys (the
// final master's) with its body, and one broker acknowledged per epoch.
func (p *producer) check(t *testing.T, keys map[string][]byte) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, body := range p.acked {
		if got, ok := keys[k]; !ok || !bytes.Equal(got, body) {
			t.Fatalf("acknowledged %s is not on the final master (found %v)", k, ok)
		}
	}
	for e, ws := range p.writers {
		if len(ws) != 1 {
			t.Fatalf("epoch %d: brokers %v acknowledged", e, ws)
		}
	}
}

func (p *producer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

// TestFailoverSchedule: a producer writes all along while a seeded
// schedule kills the master (its log then gains an unacknowledged tail
// while it is down, or not) or a slave, and restarts it. After every
// phase the set is whole again; at the end every replica is
// byte-identical and holds every acknowledged record, and one broker
// acknowledged per epoch. -failover.phases makes it longer.
func TestFailoverSchedule(t *testing.T) {
	seed := *scheduleSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-failover.seed to repeat), %d phases", seed, *schedulePhases)
	rng := rand.New(rand.NewPCG(seed, 7))
	c := newCluster(t)
	waitUntil(t, "a master", 10*time.Second, func() bool { return c.master() != nil })
	p := startProducer(c)
	defer func() {
		select {
		case <-p.stop:
		default:
			close(p.stop)
		}
		<-p.done
	}()
	whole := func(what string) {
		t.Helper()
		waitUntil(t, what, 20*time.Second, func() bool {
			info := c.info()
			return len(info.SyncStateSet) == 3 && c.master() != nil && c.master().ID() == info.MasterID
		})
	}
	whole("every replica in the in-sync set")
	var failovers []time.Duration
	for phase := 0; phase < *schedulePhases; phase++ {
		before := p.count()
		waitUntil(t, "the producer making progress", 10*time.Second, func() bool { return p.count() >= before+20 })
		m := c.master()
		live := c.live()
		victim := live[rng.IntN(len(live))]
		if rng.IntN(2) == 0 {
			victim = m // half the phases kill the master
		}
		idx := slices.Index(c.brokers, victim)
		wasMaster := victim == m
		epoch := c.info().MasterEpoch
		if err := victim.Close(); err != nil {
			t.Fatalf("phase %d: close broker %d: %v", phase, victim.ID(), err)
		}
		killed := time.Now()
		c.set(idx, nil)
		tail := wasMaster && rng.IntN(2) == 0
		if wasMaster {
			waitUntil(t, "a new master", 15*time.Second, func() bool {
				nm := c.master()
				return nm != nil && nm.Status().Epoch > epoch
			})
			failovers = append(failovers, time.Since(killed))
		}
		if tail {
			appendTail(t, c.dirs[idx], 10+rng.IntN(30))
		} else if d := time.Duration(rng.IntN(500)) * time.Millisecond; d > 0 {
			time.Sleep(d) // a broker down for a while (a schedule, not a wait for a condition)
		}
		t.Logf("phase %d: killed broker %d (master %v, unacknowledged tail %v)", phase, victim.ID(), wasMaster, tail)
		c.start(idx)
		whole(fmt.Sprintf("phase %d: the set whole again", phase))
	}
	before := p.count()
	waitUntil(t, "the producer making progress", 10*time.Second, func() bool { return p.count() >= before+20 })
	close(p.stop)
	<-p.done
	convergedAndChecked(t, c, c.master(), p)
	slices.Sort(failovers)
	if len(failovers) > 0 {
		t.Logf("%d acknowledged, %d Puts not acknowledged; %d failovers: p50 %v, max %v", len(p.acked), p.fails, len(failovers),
			failovers[len(failovers)/2].Round(time.Millisecond), failovers[len(failovers)-1].Round(time.Millisecond))
	} else {
		t.Logf("%d acknowledged, %d Puts not acknowledged; no master was killed", len(p.acked), p.fails)
	}
}

// TestMasterCutOffFromControllers: the master loses the controllers but
// keeps its slaves and its producer. Its lease runs out: it refuses Puts
// as not the master. The controller elects an in-sync
// slave; from the moment the new master stops replicating from it, the
// old master acknowledges nothing (its acknowledgements need every member
// of the in-sync set it knows, the new master included). Healed, it
// learns the new epoch, steps down, is cut at the fork point and
// converges; every acknowledged record is on the new master.
func TestMasterCutOffFromControllers(t *testing.T) {
	c := newCluster(t)
	waitUntil(t, "a master", 10*time.Second, func() bool { return c.master() != nil })
	p := startProducer(c)
	defer func() {
		select {
		case <-p.stop:
		default:
			close(p.stop)
		}
		<-p.done
	}()
	waitUntil(t, "every replica in the in-sync set", 20*time.Second, func() bool { return len(c.info().SyncStateSet) == 3 })
	before := p.count()
	waitUntil(t, "the producer making progress", 10*time.Second, func() bool { return p.count() >= before+50 })
	old := c.master()
	idx := slices.Index(c.brokers, old)
	epoch := old.Status().Epoch
	c.isolate(idx, true)
	cut := time.Now()
	// Its lease runs out: it refuses Puts as not the master, elected or
	// not elsewhere yet.
	waitUntil(t, "the cut-off master refusing Puts", 10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := old.Put(ctx, message(1))
		return errors.Is(err, ErrNotMaster)
	})
	t.Logf("the cut-off master refused Puts %v after the cut (its role: %v)", time.Since(cut).Round(time.Millisecond), old.Status().Role)
	waitUntil(t, "a new master", 15*time.Second, func() bool {
		info := c.info()
		return info.MasterEpoch > epoch && info.MasterID != old.ID()
	})
	newID := c.info().MasterID
	t.Logf("broker %d elected %v after the master was cut off", newID, time.Since(cut).Round(time.Millisecond))
	var fresh *Broker
	waitUntil(t, "the new master writable", 10*time.Second, func() bool {
		fresh = c.master()
		return fresh != nil && fresh.ID() == newID
	})
	if st := old.Status(); st.Role != Master {
		t.Logf("the cut-off master is %v already", st.Role)
	}
	before = p.count()
	waitUntil(t, "the producer writing to the new master", 10*time.Second, func() bool { return p.count() >= before+50 })
	c.isolate(idx, false)
	waitUntil(t, "the old master following the new one", 10*time.Second, func() bool {
		st := old.Status()
		return st.Role == Slave && st.Epoch > epoch
	})
	before = p.count()
	waitUntil(t, "the producer making progress", 10*time.Second, func() bool { return p.count() >= before+20 })
	close(p.stop)
	<-p.done
	convergedAndChecked(t, c, fresh, p)
	t.Logf("%d acknowledged, %d Puts not acknowledged", len(p.acked), p.fails)
}

// convergedAndChecked waits until every live replica's log is
// byte-identical with master's, then checks every acknowledged key
// against master's log.
func convergedAndChecked(t *testing.T, c *cluster, master *Broker, p *producer) {
	t.Helper()
	waitUntil(t, "every replica byte-identical with the master", 20*time.Second, func() bool {
		want, _, _ := readAll(t, master)
		for _, b := range c.live() {
			if got, _, _ := readAll(t, b); !bytes.Equal(got, want) {
				return false
			}
		}
		return true
	})
	_, _, keys := readAll(t, master)
	p.check(t, keys)
}

// TestMasterRestartsShorter: the master restarts, before the controller
// counts it dead, with a log that lost its tail — acknowledged records
// its slaves hold (an asynchronously flushed master after a power loss;
// here the tail is cut while it is down, and the test heartbeats for it
// meanwhile, as a fast restart would). It does not take its role back at
// its epoch: the controller elects the slave that is ahead, the old
// master follows it and gets the tail back, and every acknowledged record
// is on every replica.
func TestMasterRestartsShorter(t *testing.T) {
	c := newCluster(t)
	waitUntil(t, "a master", 10*time.Second, func() bool { return c.master() != nil })
	p := startProducer(c)
	waitUntil(t, "every replica in the in-sync set", 20*time.Second, func() bool { return len(c.info().SyncStateSet) == 3 })
	waitUntil(t, "the producer making progress", 10*time.Second, func() bool { return p.count() >= 300 })
	close(p.stop)
	<-p.done
	old := c.master()
	idx := slices.Index(c.brokers, old)
	epoch := old.Status().Epoch
	var offsets []int64
	if err := old.WithStore(func(s *engine.Store) error {
		_, err := s.Scan(context.Background(), s.CommitLogReader().Start(), func(off int64, _ []byte, rec *record.Record) error {
			if rec != nil {
				offsets = append(offsets, off)
			}
			return nil
		})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	cut := offsets[len(offsets)-20] // the last 20 records, acknowledged, are lost
	stopBeats := make(chan struct{})
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			c.client.Heartbeat(ctx, controller.Heartbeat{Set: "set-a", ID: old.ID(), LastEpoch: epoch, MaxOffset: cut})
			cancel()
			select {
			case <-stopBeats:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.TruncateCommitLog(context.Background(), c.dirs[idx], cut, brokerOptions(c.dirs[idx], nil).Store); err != nil {
		t.Fatal(err)
	}
	c.start(idx)
	close(stopBeats)
	<-beating
	restarted := c.brokers[idx]
	next := c.info()
	waitUntil(t, "a slave that is ahead elected", 15*time.Second, func() bool {
		next = c.info()
		return next.MasterEpoch > epoch && next.MasterID != old.ID()
	})
	waitUntil(t, "the restarted master following it", 15*time.Second, func() bool {
		st := restarted.Status()
		return st.Role == Slave && st.Epoch == next.MasterEpoch
	})
	var fresh *Broker
	waitUntil(t, "the new master writable", 10*time.Second, func() bool {
		fresh = c.master()
		return fresh != nil && fresh.ID() == next.MasterID
	})
	convergedAndChecked(t, c, fresh, p)
	t.Logf("broker %d restarted without its last %d records; broker %d took over at epoch %d; %d acknowledged records on every replica",
		old.ID(), 20, next.MasterID, next.MasterEpoch, len(p.acked))
}
