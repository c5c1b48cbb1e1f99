package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/engine"
)

// e2eRepeat runs producers (the open loop of spec; each message's body
// carries the wall-clock time of its *intended* start) and one long-polling
// consumer per queue; the store-to-delivery latency is the consumer's clock
// when it has decoded the message minus that stamp, so a producer that
// starts late does not hide the wait. Arrivals the producers never started
// are in the producers' latency (load.Result.Unstarted), not in delivery.
func e2eRepeat(ctx context.Context, store StoreConfig, dir, backend, flush string, spec load.Spec) (runfile.Repeat, map[string]string) {
	defer os.RemoveAll(dir)
	if spec.SizeBytes < 8 {
		return failedRepeat(fmt.Errorf("e2e needs bodies of at least 8 bytes (the timestamp), got %d", spec.SizeBytes)), nil
	}
	if err := ageStore(ctx, store, dir, backend); err != nil {
		return setupFailed(ctx, err), nil
	}
	s, err := storeOpen(ctx, store, dir, backend, flush)
	if err != nil {
		return failedRepeat(err), nil
	}
	options := optionsMap(s.Options())
	queues := min(spec.Workers(), 8)
	produced := make([]atomic.Int64, queues)
	cctx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	var producing atomic.Bool
	producing.Store(true)
	deliveries := make([][]delivery, queues)
	errs := make([]error, queues)
	var wg sync.WaitGroup
	for q := range queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[q] = consumeQueue(cctx, s, int32(q), &produced[q], &producing, &deliveries[q])
		}()
	}
	res := load.RunTimed(ctx, spec, nil, nil, stampedPuts(s, store.Message, spec.SizeBytes, produced))
	producing.Store(false)
	if err := awaitConsumers(&wg, stopConsumers, s, produced); err != nil {
		errs = append(errs, err)
	}
	closeErr := s.Close()
	res.Workload = WorkloadE2E
	res.Delivery, res.Delivered, res.DeliveryQuarters = deliveredIn(deliveries, res.StartUnixNs, res.StartUnixNs+res.WindowNs)
	rep := repeatOf(res, nil)
	if err := errors.Join(errs...); err != nil && rep.Status != runfile.StatusFailed {
		rep.Status, rep.Reason = runfile.StatusFailed, err.Error()
	}
	if closeErr != nil && rep.Status != runfile.StatusFailed {
		rep.Status, rep.Reason = runfile.StatusFailed, "close: "+closeErr.Error()
	}
	return rep, options
}

// stampedPuts is the e2e producer: each Put carries its intended start in
// the body's first 8 bytes, on the queue of its worker (one of
// len(produced), each counting what was put on it).
func stampedPuts(s *engine.Store, message string, size int, produced []atomic.Int64) func(worker int) load.TimedOp {
	return func(worker int) load.TimedOp {
		q := worker % len(produced)
		g := newProducerMessages(message, worker, size)
		return func(ctx context.Context, intended time.Time) error {
			m := g.next()
			m.QueueID = int32(q)
			binary.LittleEndian.PutUint64(m.Body, uint64(intended.UnixNano()))
			if _, err := s.Put(ctx, m); err != nil {
				return err
			}
			produced[q].Add(1)
			return nil
		}
	}
}

// awaitConsumers waits up to 10 s after the producers' end for the
// consumers to receive every message, then stops them and says how far
// behind they were.
func awaitConsumers(wg *sync.WaitGroup, stop context.CancelFunc, s *engine.Store, produced []atomic.Int64) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
	}
	stop()
	<-done
	var behind []string
	for q := range produced {
		behind = append(behind, fmt.Sprintf("q%d produced %d", q, produced[q].Load()))
	}
	return fmt.Errorf("consumers did not receive every message within 10 s of the producers' end (%s; store max offset %d, dispatched %d)",
		strings.Join(behind, ", "), s.MaxOffset(), s.DispatchedOffset())
}

// delivery is one message a consumer decoded: its intended start (the
// producer's stamp) and the time from it to the decoding.
type delivery struct{ stamp, latencyNs int64 }

// deliveredIn is the store-to-delivery latency of the messages intended
// within the measured window [start, end) — known only once the producers'
// loop has run (its warm-up ends when its last request does) — their
// count, and the latency's percentiles for the messages intended in each
// quarter of the window.
func deliveredIn(deliveries [][]delivery, start, end int64) (*load.Histogram, int64, []load.Percentiles) {
	h, n := load.NewHistogram(), int64(0)
	var quarter [4]*load.Histogram
	for i := range quarter {
		quarter[i] = load.NewHistogram()
	}
	for _, ds := range deliveries {
		for _, d := range ds {
			if d.stamp >= start && d.stamp < end {
				h.Record(time.Duration(d.latencyNs))
				quarter[min(int(4*(d.stamp-start)/(end-start)), 3)].Record(time.Duration(d.latencyNs))
				n++
			}
		}
	}
	var qs []load.Percentiles
	for _, q := range quarter {
		qs = append(qs, q.Percentiles())
	}
	return h, n, qs
}

// consumeQueue long-polls queue q until the producers are done and it has
// read everything they produced there, keeping every delivery.
func consumeQueue(ctx context.Context, s *engine.Store, q int32, produced *atomic.Int64, producing *atomic.Bool, out *[]delivery) error {
	var offset int64
	for {
		if !producing.Load() && offset >= produced.Load() {
			return nil
		}
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		res, err := s.GetLongPoll(pctx, consumeGroup, benchTopic, q, offset, 64, nil)
		cancel()
		if err != nil {
			return fmt.Errorf("consumer %d: %w", q, err)
		}
		if ctx.Err() != nil {
			res.Release()
			return nil
		}
		for i := range res.Messages {
			rec, err := res.Message(i)
			if err != nil {
				res.Release()
				return fmt.Errorf("consumer %d: %w", q, err)
			}
			stamp := int64(binary.LittleEndian.Uint64(rec.Body))
			*out = append(*out, delivery{stamp: stamp, latencyNs: time.Now().UnixNano() - stamp})
		}
		offset = res.NextBeginOffset
		res.Release()
	}
}
