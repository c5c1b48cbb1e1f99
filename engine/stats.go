package engine

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// latencyHistogram is a lock-free log-linear histogram of durations in
// nanoseconds: 16 linear sub-buckets per power of two (≤ 6.25 % relative
// error). Recording is two atomic adds (its bucket, the sum) and a load of
// the maximum, so Put can record on its hot path from many goroutines
// without a lock (hdrhistogram-go is not safe for concurrent writers; the
// harness keeps one of those per goroutine instead). How many were recorded
// is the buckets' sum, counted when read: each shared counter a Put adds to
// is a cache line the CPUs pass between them.
type latencyHistogram struct {
	counts [64 * subBuckets]atomic.Uint64
	sumNs  atomic.Uint64
	maxNs  atomic.Int64
}

const subBucketBits = 4
const subBuckets = 1 << subBucketBits

func bucketOf(ns int64) int {
	if ns < subBuckets {
		if ns < 0 {
			ns = 0
		}
		return int(ns)
	}
	exp := bits.Len64(uint64(ns)) - 1 // ≥ subBucketBits
	sub := int(ns>>(exp-subBucketBits)) & (subBuckets - 1)
	return (exp-subBucketBits+1)*subBuckets + sub
}

// bucketUpper is the largest value that falls in bucket b.
func bucketUpper(b int) int64 {
	if b < subBuckets {
		return int64(b)
	}
	exp := b/subBuckets + subBucketBits - 1
	sub := int64(b % subBuckets)
	low := (int64(subBuckets) + sub) << (exp - subBucketBits)
	return low + (int64(1) << (exp - subBucketBits)) - 1
}

func (h *latencyHistogram) record(d time.Duration) {
	ns := int64(d)
	h.counts[bucketOf(ns)].Add(1)
	h.sumNs.Add(uint64(max(ns, 0)))
	for {
		cur := h.maxNs.Load()
		if ns <= cur || h.maxNs.CompareAndSwap(cur, ns) {
			return
		}
	}
}

// LatencySummary is a snapshot of a latency histogram.
type LatencySummary struct {
	Count                     uint64
	Mean, P50, P99, P999, Max time.Duration
	P90, P9999                time.Duration
	// Total is the sum of every duration recorded: the difference of two
	// snapshots' Totals is the time spent between them (Stats.FlushLatency:
	// in durable flushes).
	Total time.Duration
}

func (h *latencyHistogram) summary() LatencySummary {
	var counts [64 * subBuckets]uint64
	var n uint64
	for i := range counts {
		counts[i] = h.counts[i].Load()
		n += counts[i]
	}
	s := LatencySummary{Count: n, Max: time.Duration(h.maxNs.Load()), Total: time.Duration(h.sumNs.Load())}
	if n == 0 {
		return s
	}
	s.Mean = time.Duration(h.sumNs.Load() / n)
	q := func(p float64) time.Duration {
		rank := uint64(p*float64(n) + 0.5)
		rank = max(rank, 1)
		var seen uint64
		for i, c := range counts {
			seen += c
			if seen >= rank {
				return min(time.Duration(bucketUpper(i)), s.Max)
			}
		}
		return s.Max
	}
	s.P50, s.P90, s.P99, s.P999, s.P9999 = q(0.50), q(0.90), q(0.99), q(0.999), q(0.9999)
	return s
}

// storeStats are the store's counters; every field is updated atomically.
type storeStats struct {
	putBytes, putFailures              atomic.Uint64
	putLatency                         latencyHistogram // its count is the successful Puts
	flushes, commits                   atomic.Uint64
	flushLatency, commitLatency        latencyHistogram
	flushDiskTimeouts, osPageCacheBusy atomic.Uint64
	rolls                              atomic.Uint64
	dispatchFed, dispatchRead          atomic.Uint64
	gets, gotMessages                  atomic.Uint64
}

func (s *storeStats) recordFlush(d time.Duration) {
	s.flushes.Add(1)
	s.flushLatency.record(d)
}

func (s *storeStats) recordCommit(d time.Duration) {
	s.commits.Add(1)
	s.commitLatency.record(d)
}

// Stats is a snapshot of the store's counters.
type Stats struct {
	Backend   string
	FlushMode string

	Puts              uint64
	PutBytes          uint64
	PutFailures       uint64
	PutLatency        LatencySummary
	FlushDiskTimeouts uint64
	OSPageCacheBusy   uint64
	Rolls             uint64
	Gets              uint64
	GotMessages       uint64
	// DispatchedOffset is how far ConsumeQueues and the index are built.
	DispatchedOffset int64
	// DispatchLagLimit is the store's Options.DispatchLagLimitBytes in
	// effect (0: none); DispatchWaits counts the Puts that waited for
	// dispatch to come within it, DispatchWaitNs the time they waited.
	DispatchLagLimit int64
	DispatchWaits    uint64
	DispatchWaitNs   int64
	// DispatchFed counts the records dispatch took from what their appends
	// handed it, DispatchRead those it read back from the CommitLog (recovery's
	// re-dispatch, a slave's replicated bytes, a dispatch far behind).
	DispatchFed, DispatchRead uint64

	Flushes       uint64
	FlushLatency  LatencySummary
	Commits       uint64
	CommitLatency LatencySummary

	// Offsets in the CommitLog.
	MinOffset, WroteOffset, CommittedOffset, FlushedOffset int64
	// BytesBehindFlush is WroteOffset − FlushedOffset.
	BytesBehindFlush int64
	Segments         int
	// SegmentsPrewritten and SegmentsFallocated count the CommitLog
	// segments the allocation service made, written with zeros before use
	// or only fallocated (Options.PrewriteSegments).
	SegmentsPrewritten, SegmentsFallocated uint64
	// ZerosByDevice, ZerosDirect and ZerosCached count the pre-written
	// segments by how their zeros were written: by the device
	// (fallocate FALLOC_FL_WRITE_ZEROES, uring-direct's segments where the
	// kernel, file system and device have it), with O_DIRECT writes
	// (uring-direct's elsewhere), through the page cache (the buffered
	// backends'). A backend that keeps its files in memory counts none.
	ZerosByDevice, ZerosDirect, ZerosCached uint64
	// SegmentsRecycled counts the segments made from a file retention
	// retired (Options.RecycleSegments), SegmentsRetired the files it put
	// in the pool, and SegmentsPooled the files in the pool now.
	SegmentsRecycled, SegmentsRetired uint64
	SegmentsPooled                    int

	// LockedBytes is the memory the store's backends hold mlocked (warmed
	// segments with LockSegments, the transient pool's buffers); PagesLocked
	// is the same in pages.
	LockedBytes int64
	PagesLocked int64

	// WriteError and DispatchError are the errors that stopped writes (a
	// failed append, commit or flush) or dispatch, empty while none has:
	// either makes Put refuse with ServiceNotAvailable until the store is
	// reopened (and recovered).
	WriteError    string
	DispatchError string
}
