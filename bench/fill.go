package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mqstore/mqstore/engine"
)

const consumeGroup = "mqbench"

// fillStore appends the run's messages (store.Message) with bodies of
// sizeBytes to queue 0 of the bench topic with four producers until the
// CommitLog holds at least totalBytes, and waits
// until every message is dispatched to the ConsumeQueue. keep receives the
// open store; without keep the store is left open (the produce-crash
// worker is killed holding it).
func fillStore(ctx context.Context, store StoreConfig, dir, backend string, sizeBytes int, totalBytes int64, keep func(*engine.Store)) error {
	s, err := storeOpen(ctx, store, dir, backend, "async")
	if err != nil {
		return err
	}
	if err := fill(ctx, s, store.Message, sizeBytes, totalBytes); err != nil {
		s.Close()
		return err
	}
	if keep != nil {
		keep(s)
	}
	return nil
}

func fill(ctx context.Context, s *engine.Store, message string, sizeBytes int, totalBytes int64) error {
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := newProducerMessages(message, w, sizeBytes)
			for s.MaxOffset() < totalBytes && ctx.Err() == nil {
				m := g.next()
				m.QueueID = 0
				if _, err := s.Put(ctx, m); err != nil {
					errs[w] = fmt.Errorf("fill: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// A dispatch stuck for half a minute is a failure.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.WaitDispatched(wctx, s.MaxOffset()); err != nil {
		return fmt.Errorf("fill: dispatch did not reach %d (at %d): %w", s.MaxOffset(), s.DispatchedOffset(), err)
	}
	return nil
}
