package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/internal/testenv"
	"github.com/mqstore/mqstore/mappedfile"
)

// openRole opens a store for the replication tests; a uring backend that
// cannot run here is an environment skip.
func openRole(t testing.TB, dir string, o Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), dir, o)
	if errors.Is(err, mappedfile.ErrUnsupported) {
		testenv.Skip(t, testenv.Uring, "backend %s: %v", o.Backend, err)
	}
	if err != nil {
		t.Fatalf("open %s (%v): %v", o.Backend, o.Role, err)
	}
	return s
}

// logBytes reads a store's readable CommitLog [from, to) (the
// CommitLogReader reads only committed bytes, less on uring-direct).
func logBytes(t testing.TB, s *Store, from, to int64) []byte {
	t.Helper()
	buf := make([]byte, 0, to-from)
	for off := from; off < to; {
		n := min(to-off, s.log.segmentSizeBytes-off%s.log.segmentSizeBytes)
		chunk := make([]byte, n)
		if err := s.log.readAt(chunk, off); err != nil {
			t.Fatalf("read commit log [%d,%d): %v", off, off+n, err)
		}
		buf = append(buf, chunk...)
		off += n
	}
	return buf
}

// feed hands the master's CommitLog [from, to) to the slave in frames of
// random sizes (a frame may end anywhere in a record), as the HA slave
// does, checking after each one that the slave exposes only whole records.
func feed(t testing.TB, master, slave *Store, from, to int64, rng *rand.Rand, maxFrame int) {
	t.Helper()
	ctx := context.Background()
	data := logBytes(t, master, from, to)
	for pos := 0; pos < len(data); {
		n := 1 + rng.IntN(maxFrame)
		if rng.IntN(8) == 0 {
			n = 1 + rng.IntN(12) // a few bytes: a split inside a header
		}
		n = min(n, len(data)-pos)
		end, err := slave.AppendReplicated(ctx, from+int64(pos), data[pos:pos+n])
		if err != nil {
			t.Fatalf("append replicated [%d,+%d): %v", from+int64(pos), n, err)
		}
		pos += n
		if end > from+int64(pos) {
			t.Fatalf("slave says it holds up to %d after bytes up to %d", end, from+int64(pos))
		}
	}
}

// checkPrefix checks that the slave's CommitLog equals the master's from
// the slave's first offset to its end.
func checkPrefix(t testing.TB, master, slave *Store) {
	t.Helper()
	from, to := slave.MinOffset(), slave.MaxOffset()
	if to > master.MaxOffset() {
		t.Fatalf("slave ends at %d, past the master's %d", to, master.MaxOffset())
	}
	a, b := logBytes(t, master, from, to), logBytes(t, slave, from, to)
	if i := commonPrefixLen(a, b); i != len(a) {
		t.Fatalf("slave CommitLog differs from the master's at offset %d (range [%d,%d))", from+int64(i), from, to)
	}
}

func putRandom(t testing.TB, s *Store, rng *rand.Rand, n, queues, first int) []PutResult {
	t.Helper()
	var out []PutResult
	for i := first; i < first+n; i++ {
		res, err := s.Put(context.Background(), testMessage("Repl", int32(i%queues), i, 1+rng.IntN(3000)))
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		out = append(out, res)
	}
	last := out[len(out)-1]
	// Dispatched: every segment is readable up to there (a buffered
	// backend may still be committing an older segment when the newest
	// is readable).
	if err := s.WaitDispatched(context.Background(), last.PhysicalOffset+int64(last.Size)); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReplicaIsByteIdenticalForEveryBackendPair: a slave fed the master's
// bytes in frames that split records anywhere ends byte-identical to the
// master, for every pair of registered backends; while it is fed, readers
// of the slave (Get, queries) only ever see complete records equal to the
// master's; Verify passes on the slave.
func TestReplicaIsByteIdenticalForEveryBackendPair(t *testing.T) {
	for _, mb := range BackendNames() {
		for _, sb := range BackendNames() {
			t.Run(mb+"->"+sb, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(len(mb)*31+len(sb)), 7))
				mo := smallLogicsOptions(Options{Backend: mb, FlushMode: FlushMode(rng.IntN(2))})
				master := openRole(t, t.TempDir(), mo)
				defer master.Close()
				so := smallLogicsOptions(Options{Backend: sb, Role: Slave, FlushMode: FlushMode(rng.IntN(2))})
				slave := openRole(t, t.TempDir(), so)
				defer slave.Close()
				const queues = 3
				puts := putRandom(t, master, rng, 120, queues, 0)

				// A reader of the slave, running while it is fed.
				stop := make(chan struct{})
				readerErr := make(chan error, 1)
				go func() { readerErr <- readWhileReplicating(slave, master, queues, stop) }()
				feed(t, master, slave, 0, master.MaxOffset(), rng, 40000)
				close(stop)
				if err := <-readerErr; err != nil {
					t.Fatal(err)
				}
				// A buffered slave backend makes the bytes readable when it
				// commits them.
				if err := slave.WaitDispatched(context.Background(), master.MaxOffset()); err != nil {
					t.Fatal(err)
				}
				checkPrefix(t, master, slave)
				if slave.MaxOffset() != master.MaxOffset() {
					t.Fatalf("slave ends at %d, master at %d", slave.MaxOffset(), master.MaxOffset())
				}
				if err := verifyClean(context.Background(), slave); err != nil {
					t.Fatal(err)
				}
				// Queries on the slave.
				last := puts[len(puts)-1]
				r, err := slave.QueryByUniqKey(context.Background(), "Repl", fmt.Sprintf("U%08d", len(puts)-1))
				if err != nil || r.PhysicalOffset != last.PhysicalOffset {
					t.Fatalf("query the last message on the slave: %+v, %v", r.PhysicalOffset, err)
				}
			})
		}
	}
}

// readWhileReplicating reads every queue of the slave from the start until
// stop, checking each message it gets against the master's record at the
// same queue offset: a partial or not yet dispatched record must never be
// returned.
func readWhileReplicating(slave, master *Store, queues int, stop chan struct{}) error {
	ctx := context.Background()
	next := make([]int64, queues)
	for round := 0; ; round++ {
		select {
		case <-stop:
			return nil
		default:
		}
		// A query by key finds the record or nothing, never a part of one.
		rs, err := slave.QueryMessages(ctx, "Repl", fmt.Sprintf("k%d", round%120), 0, 0, 4)
		if err != nil {
			return fmt.Errorf("query the slave: %w", err)
		}
		for _, r := range rs {
			want, err := master.ReadMessage(ctx, r.PhysicalOffset)
			if err != nil || !bytes.Equal(want.Body, r.Body) || want.StoreTimestamp != r.StoreTimestamp {
				return fmt.Errorf("the slave's query returned the record at %d, not the master's (%v)", r.PhysicalOffset, err)
			}
		}
		for q := range next {
			res, err := slave.Get(ctx, "g", "Repl", int32(q), next[q], 8, nil)
			if err != nil {
				return fmt.Errorf("get from the slave: %w", err)
			}
			for i := range res.Messages {
				got, err := res.Raw(i)
				if err != nil {
					res.Release()
					return err
				}
				m := res.Messages[i]
				want := make([]byte, m.Size)
				if err := master.log.readAt(want, m.PhysicalOffset); err != nil || !bytes.Equal(got, want) {
					res.Release()
					return fmt.Errorf("slave returned queue %d offset %d at %d, which is not the master's record (%v)", q, m.QueueOffset, m.PhysicalOffset, err)
				}
				if m.PhysicalOffset+int64(m.Size) > slave.MaxOffset() {
					res.Release()
					return fmt.Errorf("slave returned a record ending at %d past its readable end %d", m.PhysicalOffset+int64(m.Size), slave.MaxOffset())
				}
			}
			if res.Status == Found {
				next[q] = res.NextBeginOffset
			}
			res.Release()
		}
	}
}

// TestAppendReplicatedRefusesBadInput: bytes that are not the master's
// records at the slave's end are refused with an error that says what, and
// the slave keeps exactly the valid records before them.
func TestAppendReplicatedRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	mo := smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})})
	master := openRole(t, t.TempDir(), mo)
	defer master.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	puts := putRandom(t, master, rng, 60, 2, 0)
	// rec returns a copy of the master's record i.
	rec := func(i int) []byte {
		return logBytes(t, master, puts[i].PhysicalOffset, puts[i].PhysicalOffset+int64(puts[i].Size))
	}
	type tc struct {
		name string
		// maxMessage and segmentSize, when set, configure the slave
		// differently from the master (it then starts empty).
		maxMessage  int
		segmentSize int64
		// frame returns the offset and bytes to append after the first
		// ten records were replicated (none for a differently configured
		// slave).
		frame func(end int64) (int64, []byte)
		want  error
		// kept is how many of the frame's bytes the slave must hold.
		kept int64
	}
	ten := puts[10].PhysicalOffset
	// The first segment's end-of-segment blank.
	blankAt := int64(0)
	for i := range puts {
		if puts[i].PhysicalOffset >= mo.SegmentSizeBytes {
			blankAt = puts[i-1].PhysicalOffset + int64(puts[i-1].Size)
			break
		}
	}
	bodyAt := int64(record.OffBornHost + 8 + 8 + 8 + 4 + 8 + 4) // v1, IPv4 hosts: BODY's first byte
	cases := []tc{
		{name: "gap", frame: func(end int64) (int64, []byte) { return end + 1, rec(10) }, want: ErrReplicaOffset},
		{name: "behind", frame: func(end int64) (int64, []byte) { return puts[9].PhysicalOffset, rec(9) }, want: ErrReplicaOffset},
		{name: "bad CRC after a good record", frame: func(end int64) (int64, []byte) {
			b := append(rec(10), rec(11)...)
			b[int64(puts[10].Size)+bodyAt] ^= 0xFF
			return end, b
		}, want: ErrReplicaData, kept: int64(puts[10].Size)},
		{name: "PHYSICALOFFSET", frame: func(end int64) (int64, []byte) {
			b := rec(10)
			binary.BigEndian.PutUint64(b[record.OffPhysicalOffset:], uint64(end+4096))
			return end, b
		}, want: ErrReplicaData},
		{name: "queue offset out of sequence", frame: func(end int64) (int64, []byte) {
			b := rec(10)
			binary.BigEndian.PutUint64(b[record.OffQueueOffset:], uint64(puts[10].QueueOffset+1))
			return end, b
		}, want: ErrReplicaData},
		{name: "garbage", frame: func(end int64) (int64, []byte) { return end, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n") }, want: ErrReplicaData},
		{name: "zeros", frame: func(end int64) (int64, []byte) { return end, make([]byte, 64) }, want: ErrReplicaData},
		{name: "record over the slave's maximum", maxMessage: 100,
			frame: func(int64) (int64, []byte) { return 0, logBytes(t, master, 0, ten) }, want: ErrReplicaMismatch},
		{name: "other segment size", segmentSize: 2 * mo.SegmentSizeBytes,
			frame: func(int64) (int64, []byte) { return 0, logBytes(t, master, 0, mo.SegmentSizeBytes) },
			want:  ErrReplicaMismatch, kept: blankAt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			so := smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{}), Role: Slave})
			custom := c.maxMessage != 0 || c.segmentSize != 0
			if c.maxMessage != 0 {
				so.MaxMessageSizeBytes = c.maxMessage
			}
			if c.segmentSize != 0 {
				so.SegmentSizeBytes = c.segmentSize
			}
			slave := openRole(t, t.TempDir(), so)
			defer slave.Close()
			if !custom {
				if _, err := slave.AppendReplicated(ctx, 0, logBytes(t, master, 0, ten)); err != nil {
					t.Fatal(err)
				}
			}
			before := slave.log.queue.WroteOffset()
			off, b := c.frame(before)
			end, err := slave.AppendReplicated(ctx, off, b)
			if !errors.Is(err, c.want) {
				t.Fatalf("append: %v; want %v", err, c.want)
			}
			t.Logf("refused: %v", err)
			if end != before+c.kept || slave.log.queue.WroteOffset() != end {
				t.Fatalf("slave holds up to %d (said %d); want %d", slave.log.queue.WroteOffset(), end, before+c.kept)
			}
			if end > 0 {
				if got, want := logBytes(t, slave, 0, end), logBytes(t, master, 0, end); !bytes.Equal(got, want) {
					t.Fatal("the slave's log is not the master's prefix")
				}
			}
			// The stream goes on from the slave's end.
			if !custom {
				if _, err := slave.AppendReplicated(ctx, end, logBytes(t, master, end, master.MaxOffset())); err != nil {
					t.Fatalf("continue after the refusal: %v", err)
				}
				checkPrefix(t, master, slave)
			}
		})
	}
	t.Run("empty slave at a non-boundary", func(t *testing.T) {
		slave := openRole(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{}), Role: Slave}))
		defer slave.Close()
		if _, err := slave.AppendReplicated(ctx, ten, rec(10)); !errors.Is(err, ErrReplicaMismatch) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("not a slave", func(t *testing.T) {
		if _, err := master.AppendReplicated(ctx, master.MaxOffset(), rec(0)); !errors.Is(err, ErrNotSlave) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("put to a slave", func(t *testing.T) {
		slave := openRole(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{}), Role: Slave}))
		defer slave.Close()
		res, err := slave.Put(ctx, testMessage("T", 0, 0, 10))
		if res.Status != ServiceNotAvailable || !errors.Is(err, ErrSlaveReadOnly) || !errors.Is(err, ErrServiceNotAvailable) {
			t.Fatalf("put to a slave: %v, %v", res.Status, err)
		}
		if slave.MaxOffset() != 0 {
			t.Fatal("a refused put wrote")
		}
	})
}

// TestEmptySlaveStartsAtASegment: an empty slave takes the master's log
// from a segment boundary (RocketMQ's "from the last segment"); its
// CommitLog starts there, its queues start at the queue offsets found
// there, and it verifies.
func TestEmptySlaveStartsAtASegment(t *testing.T) {
	ctx := context.Background()
	fs := mappedfile.NewMemFS(mappedfile.MemOptions{})
	master := openRole(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: fs}))
	defer master.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	putRandom(t, master, rng, 150, 2, 0)
	files := master.log.queue.Files()
	if len(files) < 4 {
		t.Fatalf("%d segments", len(files))
	}
	from := files[2].FromOffset()
	slaveFS := mappedfile.NewMemFS(mappedfile.MemOptions{})
	so := smallLogicsOptions(Options{BackendImpl: slaveFS, Role: Slave})
	dir := t.TempDir()
	slave := openRole(t, dir, so)
	feed(t, master, slave, from, master.MaxOffset(), rng, 5000)
	if slave.MinOffset() != from {
		t.Fatalf("slave starts at %d, want %d", slave.MinOffset(), from)
	}
	checkPrefix(t, master, slave)
	if err := slave.WaitDispatched(ctx, slave.MaxOffset()); err != nil {
		t.Fatal(err)
	}
	res, err := slave.Get(ctx, "g", "Repl", 0, 0, 4, nil)
	if err != nil || res.Status != OffsetTooSmall || res.NextBeginOffset == 0 {
		t.Fatalf("get from 0 on a slave that starts mid-log: %+v, %v", res, err)
	}
	res.Release()
	res, err = slave.Get(ctx, "g", "Repl", 0, res.NextBeginOffset, 4, nil)
	if err != nil || res.Status != Found || res.Messages[0].PhysicalOffset < from {
		t.Fatalf("get from the first offset: %+v, %v", res, err)
	}
	res.Release()
	if err := verifyClean(ctx, slave); err != nil {
		t.Fatal(err)
	}
	// A restarted slave resumes at its end and verifies its newest record.
	if err := slave.Close(); err != nil {
		t.Fatal(err)
	}
	slave = openRole(t, dir, so)
	defer slave.Close()
	verifyFrom, end, err := slave.ReplicaResume(ctx)
	if err != nil || end != master.MaxOffset() || verifyFrom >= end || verifyFrom < from {
		t.Fatalf("resume: %d, %d, %v (master ends at %d)", verifyFrom, end, err, master.MaxOffset())
	}
	if r, err := master.ReadMessage(ctx, verifyFrom); err != nil || verifyFrom+int64(r.TotalSize) > end {
		t.Fatalf("verifyFrom %d is not the newest record: %v", verifyFrom, err)
	}
	more := putRandom(t, master, rng, 20, 2, 150)
	feed(t, master, slave, end, master.MaxOffset(), rng, 5000)
	checkPrefix(t, master, slave)
	if slave.MaxOffset() != more[len(more)-1].PhysicalOffset+int64(more[len(more)-1].Size) {
		t.Fatal("slave did not catch up")
	}
}

// TestReplicaResumeDropsASplitRecord: the part of a record a frame split
// is dropped by ReplicaResume (a new connection sends it again) and never
// visible.
func TestReplicaResumeDropsASplitRecord(t *testing.T) {
	ctx := context.Background()
	master := openRole(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})}))
	defer master.Close()
	puts := putRandom(t, master, rand.New(rand.NewPCG(5, 6)), 5, 1, 0)
	slave := openRole(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{}), Role: Slave}))
	defer slave.Close()
	cut := puts[3].PhysicalOffset + int64(puts[3].Size)/2
	if end, err := slave.AppendReplicated(ctx, 0, logBytes(t, master, 0, cut)); err != nil || end != puts[3].PhysicalOffset {
		t.Fatalf("append up to the middle of record 3: end %d, %v", end, err)
	}
	if got := slave.MaxOffset(); got != puts[3].PhysicalOffset {
		t.Fatalf("slave readable up to %d, in the middle of a record", got)
	}
	verifyFrom, end, err := slave.ReplicaResume(ctx)
	if err != nil || end != puts[3].PhysicalOffset || verifyFrom != puts[2].PhysicalOffset {
		t.Fatalf("resume: %d %d %v", verifyFrom, end, err)
	}
	// The rest of record 3 alone is now out of place; from its start it fits.
	if _, err := slave.AppendReplicated(ctx, cut, logBytes(t, master, cut, master.MaxOffset())); !errors.Is(err, ErrReplicaOffset) {
		t.Fatalf("the rest of a dropped record: %v", err)
	}
	if _, err := slave.AppendReplicated(ctx, end, logBytes(t, master, end, master.MaxOffset())); err != nil {
		t.Fatal(err)
	}
	checkPrefix(t, master, slave)
}

// TestSyncFlushSlaveAcksDurable: a slave with sync flush acknowledges only
// what is durable on it.
func TestSyncFlushSlaveAcksDurable(t *testing.T) {
	ctx := context.Background()
	master := openRole(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})}))
	defer master.Close()
	putRandom(t, master, rand.New(rand.NewPCG(8, 9)), 40, 2, 0)
	for _, mode := range flushModes {
		t.Run(mode.String(), func(t *testing.T) {
			fs := mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: true})
			slave := openRole(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: fs, Role: Slave, FlushMode: mode,
				FlushInterval: time.Hour, CommitInterval: time.Hour, FlushThoroughInterval: time.Hour, CommitThoroughInterval: time.Hour}))
			defer slave.Close()
			end, err := slave.AppendReplicated(ctx, 0, logBytes(t, master, 0, master.MaxOffset()))
			if err != nil {
				t.Fatal(err)
			}
			ack, err := slave.ReplicaAckOffset(ctx)
			if err != nil || ack != end {
				t.Fatalf("ack offset %d, %v; want %d", ack, err, end)
			}
			// Never bytes still in a process buffer: what a kill -9 of
			// the slave keeps, at least.
			if committed := slave.Stats().CommittedOffset; committed < end {
				t.Fatalf("flush %v: acknowledged %d with only %d committed", mode, ack, committed)
			}
			durable := slave.FlushedOffset() >= end
			if durable != (mode == FlushSync) {
				t.Fatalf("flush %v: flushed %d of %d at the ack", mode, slave.FlushedOffset(), end)
			}
		})
	}
}

// TestSyncMasterStatuses: a SYNC_MASTER Put is PutOK only once a slave
// acknowledged its record; SlaveNotAvailable without a slave or with one
// too far behind; FlushSlaveTimeout when no acknowledgement comes in time.
// The record is stored in every case.
func TestSyncMasterStatuses(t *testing.T) {
	ctx := context.Background()
	for _, mode := range flushModes {
		t.Run(mode.String(), func(t *testing.T) {
			o := smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{Buffered: true}), Role: SyncMaster,
				FlushMode: mode, SlaveTimeout: 100 * time.Millisecond, HASlaveFallbehindMax: 4096})
			s := openRole(t, t.TempDir(), o)
			defer s.Close()
			put := func(i int) (PutResult, error) { return s.Put(ctx, testMessage("S", 0, i, 100)) }
			res, err := put(0)
			if res.Status != SlaveNotAvailable || !errors.Is(err, ErrSlaveNotAvailable) || res.Size == 0 {
				t.Fatalf("no slave: %v %v", res.Status, err)
			}
			reportSlave(s, 0) // a slave at 0: within 4 KiB
			res, err = put(1)
			if res.Status != FlushSlaveTimeout || !errors.Is(err, ErrFlushSlaveTimeout) {
				t.Fatalf("silent slave: %v %v", res.Status, err)
			}
			// Acknowledged while the Put waits.
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					reportSlave(s, s.MaxOffset())
					select {
					case <-stop:
						return
					case <-time.After(time.Millisecond):
					}
				}
			}()
			res2, err := put(2)
			close(stop)
			<-done
			if res2.Status != PutOK || err != nil {
				t.Fatalf("acknowledged: %v %v", res2.Status, err)
			}
			if s.ReplicatedOffset() < res2.PhysicalOffset+int64(res2.Size) {
				t.Fatal("PutOK before the slave acknowledged")
			}
			// The slave stops acknowledging; Puts get FlushSlaveTimeout
			// while it is within HASlaveFallbehindMax, then
			// SlaveNotAvailable; never PutOK.
			best := s.ReplicatedOffset()
			var last PutResult
			for i := 3; s.MaxOffset()-best < o.HASlaveFallbehindMax+4096; i++ {
				r, err := s.Put(ctx, testMessage("S", 0, i, 1500))
				if r.Status == PutOK || err == nil {
					t.Fatalf("PutOK with the slave stuck at %d", best)
				}
				last = r
			}
			if last.Status != SlaveNotAvailable {
				t.Fatalf("slave too far behind: %v", last.Status)
			}
			// Wait for the last record itself: MaxOffset is what readers
			// can read, which on a buffered backend may not include it yet.
			if err := s.WaitDispatched(ctx, last.PhysicalOffset+int64(last.Size)); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, "g", "S", 0, 0, 1000, nil)
			if err != nil || int64(len(got.Messages)) != got.MaxOffset || got.MaxOffset < 4 {
				t.Fatalf("the records stay on the master: %+v, %v", got, err)
			}
			got.Release()
			st := s.ReplicationStats()
			if st.SlaveNotAvailable < 2 || st.FlushSlaveTimeouts < 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// TestSyncMasterNeverAcksAheadOfTheSlave: many producers and a slave
// whose acknowledgements trail the log: every PutOK's record is at or
// below the acknowledged offset when Put returns.
func TestSyncMasterNeverAcksAheadOfTheSlave(t *testing.T) {
	ctx := context.Background()
	o := smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{}), Role: SyncMaster, SlaveTimeout: 2 * time.Second})
	o.SegmentSizeBytes = 1 << 20
	s := openRole(t, t.TempDir(), o)
	defer s.Close()
	stop := make(chan struct{})
	var acker sync.WaitGroup
	acker.Add(1)
	reportSlave(s, 0) // connected before the first Put (a Put with no slave answers SlaveNotAvailable)
	go func() {       // a slave that acknowledges half of what is there, then the rest
		defer acker.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			end := s.MaxOffset()
			reportSlave(s, s.ReplicatedOffset()+(end-s.ReplicatedOffset()+1)/2)
			time.Sleep(200 * time.Microsecond)
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for p := 0; p < 8; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				res, err := s.Put(ctx, testMessage("N", int32(p%2), p*1000+i, 200))
				if err != nil {
					errs <- err
					return
				}
				if acked := s.ReplicatedOffset(); acked < res.PhysicalOffset+int64(res.Size) {
					errs <- fmt.Errorf("PutOK for a record ending at %d with the slave at %d", res.PhysicalOffset+int64(res.Size), acked)
					return
				}
			}
		}(p)
	}
	wg.Wait()
	close(stop)
	acker.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestCommitLogReader: Available stays in one segment and says where the
// log starts and ends; Wait wakes on a Put, on Close and on ctx; SendTo to
// a socket (sendfile) sends the bytes ReadAt reads.
func TestCommitLogReader(t *testing.T) {
	ctx := context.Background()
	for _, backend := range []string{"mmap", "transient", "mem"} {
		t.Run(backend, func(t *testing.T) {
			s := openRole(t, t.TempDir(), smallLogicsOptions(Options{Backend: backend, CommitInterval: time.Millisecond}))
			defer s.Close()
			r := s.CommitLogReader()
			rng := rand.New(rand.NewPCG(10, 11))
			putRandom(t, s, rng, 80, 2, 0)
			end := r.End()
			var got []byte
			for off := int64(0); off < end; {
				n, err := r.Available(off, 1<<20)
				if err != nil || n == 0 {
					t.Fatalf("available at %d: %d, %v", off, n, err)
				}
				if (off%r.SegmentSizeBytes())+int64(n) > r.SegmentSizeBytes() {
					t.Fatalf("available at %d crosses a segment end: %d", off, n)
				}
				var buf bytes.Buffer
				if sent, err := r.SendTo(ctx, &buf, off, n); err != nil || sent != int64(n) {
					t.Fatalf("send: %d %v", sent, err)
				}
				got = append(got, buf.Bytes()...)
				off += int64(n)
			}
			if !bytes.Equal(got, logBytes(t, s, 0, end)) {
				t.Fatal("SendTo and ReadAt differ")
			}
			if n, err := r.Available(end, 10); n != 0 || err != nil {
				t.Fatalf("at the end: %d %v", n, err)
			}
			if _, err := r.Available(end+1, 10); !errors.Is(err, ErrOffsetBeyondEnd) {
				t.Fatalf("past the end: %v", err)
			}
			// Wait wakes on a Put.
			woke := make(chan error, 1)
			go func() { woke <- r.Wait(ctx, end) }()
			if _, err := s.Put(ctx, testMessage("Repl", 0, 999, 10)); err != nil {
				t.Fatal(err)
			}
			if err := <-woke; err != nil {
				t.Fatalf("wait: %v", err)
			}
			// ctx and Close.
			cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
			if err := r.Wait(cctx, r.End()); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("wait with a deadline: %v", err)
			}
			go func() { woke <- r.Wait(ctx, r.End()) }()
			waitFor(t, "the waiter to wait", func() bool { return s.repl.growth.waiting.Load() > 0 })
			s.Close()
			if err := <-woke; !errors.Is(err, ErrClosed) {
				t.Fatalf("wait across Close: %v", err)
			}
		})
	}
	t.Run("a slave that starts mid-log", func(t *testing.T) {
		master := openRole(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})}))
		defer master.Close()
		putRandom(t, master, rand.New(rand.NewPCG(1, 1)), 100, 1, 0)
		from := master.log.queue.Files()[1].FromOffset()
		slave := openRole(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{}), Role: Slave}))
		defer slave.Close()
		if _, err := slave.AppendReplicated(ctx, from, logBytes(t, master, from, master.MaxOffset())); err != nil {
			t.Fatal(err)
		}
		if _, err := slave.CommitLogReader().Available(from-1, 1); !errors.Is(err, ErrOffsetDeleted) {
			t.Fatalf("before the first offset: %v", err)
		}
	})
}

// TestTruncateCommitLog: the explicit repair cuts at a record boundary,
// keeps the cut bytes, and leaves a store whose queues and index end with
// the log; it refuses an offset inside a record or past the end and
// changes nothing then.
func TestTruncateCommitLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	o := smallLogicsOptions(Options{Backend: "mmap", Role: Slave})
	mo := smallLogicsOptions(Options{Backend: "mmap"})
	master := openRole(t, t.TempDir(), mo)
	defer master.Close()
	puts := putRandom(t, master, rand.New(rand.NewPCG(12, 13)), 90, 3, 0)
	slave := openRole(t, dir, o)
	if _, err := slave.AppendReplicated(ctx, 0, logBytes(t, master, 0, master.MaxOffset())); err != nil {
		t.Fatal(err)
	}
	if err := slave.Close(); err != nil {
		t.Fatal(err)
	}
	end := master.MaxOffset()
	cut := puts[60].PhysicalOffset
	for _, bad := range []int64{cut + 1, end + 100, -1} {
		if _, err := TruncateCommitLog(ctx, dir, bad, o); !errors.Is(err, ErrInvalidOption) {
			t.Fatalf("truncate at %d: %v", bad, err)
		}
	}
	res, err := TruncateCommitLog(ctx, dir, cut, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Offset != cut || res.OldEnd != end || res.CutBytes != end-cut || len(res.SavedTo) == 0 {
		t.Fatalf("result %+v", res)
	}
	var saved []byte
	for _, p := range res.SavedTo {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		saved = append(saved, b...)
	}
	if !bytes.Equal(saved, logBytes(t, master, cut, end)) {
		t.Fatalf("saved %d bytes are not the cut ones (%d)", len(saved), end-cut)
	}
	if filepath.Dir(res.SavedTo[0]) != filepath.Join(dir, "diverged") {
		t.Fatalf("saved to %s", res.SavedTo[0])
	}
	slave = openRole(t, dir, o)
	defer slave.Close()
	if slave.MaxOffset() != cut {
		t.Fatalf("slave ends at %d after the cut at %d", slave.MaxOffset(), cut)
	}
	if err := verifyClean(ctx, slave); err != nil {
		t.Fatal(err)
	}
	if _, err := slave.QueryByUniqKey(ctx, "Repl", fmt.Sprintf("U%08d", 70)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a cut record is still found: %v", err)
	}
	// Replication continues from the cut.
	if _, err := slave.AppendReplicated(ctx, cut, logBytes(t, master, cut, end)); err != nil {
		t.Fatal(err)
	}
	checkPrefix(t, master, slave)
}

// TestReplicationOptions: the replication knobs refuse bad values with an
// error naming them.
func TestReplicationOptions(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Role: BrokerRole(7)}, "Role"},
		{Options{SlaveTimeout: -time.Second}, "SlaveTimeout"},
		{Options{HASlaveFallbehindMax: -1}, "HASlaveFallbehindMax"},
	} {
		c.o.BackendImpl = mappedfile.NewMemFS(mappedfile.MemOptions{})
		c.o.Logger = quietLogger
		if _, err := Open(context.Background(), t.TempDir(), c.o); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.want, err)
		}
	}
	for s, want := range map[string]BrokerRole{"async-master": AsyncMaster, "SYNC_MASTER": SyncMaster, "sync-master": SyncMaster, "slave": Slave} {
		if r, err := ParseBrokerRole(s); err != nil || r != want {
			t.Errorf("parse %q: %v %v", s, r, err)
		}
	}
	if _, err := ParseBrokerRole("leader"); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("parse leader: %v", err)
	}
}

// BenchmarkAppendReplicated: a slave (mmap) appending its master's bytes
// in frames of 32 KiB (RocketMQ's haTransferBatchSize), records of 1 KiB
// split anywhere by the frames.
func BenchmarkAppendReplicated(b *testing.B) {
	ctx := context.Background()
	o := smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})})
	o.SegmentSizeBytes = 64 << 20
	master := openRole(b, b.TempDir(), o)
	defer master.Close()
	for i := 0; i < 20000; i++ {
		if _, err := master.Put(ctx, testMessage("B", int32(i%4), i, 1024)); err != nil {
			b.Fatal(err)
		}
	}
	data := logBytes(b, master, 0, master.MaxOffset())
	const frame = 32 << 10
	so := o
	so.BackendImpl, so.Backend, so.Role = nil, "mmap", Slave
	var slave *Store
	off := len(data)
	b.SetBytes(frame)
	b.ReportAllocs()
	for b.Loop() {
		if off+frame > len(data) { // start again with an empty slave
			b.StopTimer()
			if slave != nil {
				slave.Close()
			}
			slave = openRole(b, b.TempDir(), so)
			off = 0
			b.StartTimer()
		}
		if _, err := slave.AppendReplicated(ctx, int64(off), data[off:off+frame]); err != nil {
			b.Fatal(err)
		}
		off += frame
	}
	b.StopTimer()
	slave.Close()
}

// reportSlave reports one verified slave that acknowledged offset.
func reportSlave(s *Store, offset int64) {
	s.ReportSlaves([]SlaveReport{{Addr: "slave", Verified: true, AckedOffset: offset, Position: offset}})
}

// TestUnverifiedSlaveAcksNothing: a connection that has not proved it
// holds the master's bytes makes a Put wait (it may be a slave about to
// prove it) but never moves the replicated offset, whatever it claims.
func TestUnverifiedSlaveAcksNothing(t *testing.T) {
	ctx := context.Background()
	o := smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{}), Role: SyncMaster,
		SlaveTimeout: 100 * time.Millisecond})
	s := openRole(t, t.TempDir(), o)
	defer s.Close()
	claim := int64(1 << 40)
	s.ReportSlaves([]SlaveReport{{Addr: "raw", AckedOffset: claim, Position: claim}})
	res, err := s.Put(ctx, testMessage("U", 0, 0, 100))
	if res.Status != FlushSlaveTimeout || !errors.Is(err, ErrFlushSlaveTimeout) {
		t.Fatalf("an unverified slave only: %v %v", res.Status, err)
	}
	if got := s.ReplicatedOffset(); got > 0 {
		t.Fatalf("the replicated offset moved to %d on an unverified report", got)
	}
	end := res.PhysicalOffset + int64(res.Size)
	s.ReportSlaves([]SlaveReport{{Addr: "raw", AckedOffset: claim, Position: claim}, {Addr: "slave", Verified: true, AckedOffset: end, Position: end}})
	if got := s.ReplicatedOffset(); got != end {
		t.Fatalf("replicated offset %d; the verified slave acknowledged %d", got, end)
	}
}

// TestUnitStart: the master's check of where a slave asks to start.
func TestUnitStart(t *testing.T) {
	s := openRole(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})}))
	defer s.Close()
	var starts []int64
	for i := 0; i < 5; i++ {
		res, err := s.Put(context.Background(), testMessage("B", 0, i, 300))
		if err != nil {
			t.Fatal(err)
		}
		starts = append(starts, res.PhysicalOffset)
	}
	r := s.CommitLogReader()
	waitFor(t, "the log committed", func() bool { return r.End() == s.Stats().WroteOffset })
	for _, off := range append(starts, r.End()) {
		if ok, err := r.UnitStart(off); !ok || err != nil {
			t.Errorf("offset %d starts a record: %v %v", off, ok, err)
		}
	}
	for _, off := range []int64{1, starts[1] + 4, starts[2] - 1, r.End() + 1, -3} {
		if ok, err := r.UnitStart(off); ok || err != nil {
			t.Errorf("offset %d is inside a record: %v %v", off, ok, err)
		}
	}
}

// TestInSyncSet: with MinInSyncReplicas a Put waits for every member of
// the in-sync set, not the best slave; with fewer members it answers
// InSyncReplicasNotEnough at once; a member that falls behind for
// InSyncMaxLagTime or disconnects leaves the set, and one that caught up
// joins it again; unverified slaves never join.
func TestInSyncSet(t *testing.T) {
	ctx := context.Background()
	o := smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{}), Role: SyncMaster,
		SlaveTimeout: 200 * time.Millisecond, MinInSyncReplicas: 2, InSyncMaxLagBytes: 4096, InSyncMaxLagTime: 300 * time.Millisecond})
	s := openRole(t, t.TempDir(), o)
	defer s.Close()
	i := 0
	put := func(size int) (PutResult, error) {
		i++
		return s.Put(ctx, testMessage("I", 0, i, size))
	}
	end := func() int64 { return s.CommitLogReader().End() }
	slave := func(addr string, acked int64) SlaveReport {
		return SlaveReport{Addr: addr, Verified: true, AckedOffset: acked, Position: acked}
	}
	expect := func(what string, want PutStatus, wantErr error) PutResult {
		t.Helper()
		res, err := put(100)
		if res.Status != want || (wantErr != nil && !errors.Is(err, wantErr)) || res.Size == 0 {
			t.Fatalf("%s: %v %v; want %v", what, res.Status, err, want)
		}
		return res
	}
	expect("no slave", InSyncReplicasNotEnough, ErrInSyncReplicasNotEnough)
	s.ReportSlaves([]SlaveReport{slave("A", end()), {Addr: "raw", AckedOffset: end(), Position: end()}})
	if got := s.InSyncSlaves(); len(got) != 1 || got[0] != "A" {
		t.Fatalf("in sync %v; want [A] (raw is not verified)", got)
	}
	expect("one in sync of two needed", InSyncReplicasNotEnough, ErrInSyncReplicasNotEnough)
	s.ReportSlaves([]SlaveReport{slave("A", end()), slave("B", end())})
	// Only A acknowledges: the Put waits for B too.
	acking := func(reports func() []SlaveReport) (stop func()) {
		done := make(chan struct{})
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			for {
				s.ReportSlaves(reports())
				select {
				case <-done:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		return func() { close(done); <-finished }
	}
	bAt := end()
	stop := acking(func() []SlaveReport { return []SlaveReport{slave("A", end()), slave("B", bAt)} })
	res := expect("B silent", FlushSlaveTimeout, ErrFlushSlaveTimeout)
	stop()
	if s.Stats().WroteOffset > bAt+4096 {
		t.Fatal("the test needs B within the byte bound")
	}
	// Both acknowledge.
	stop = acking(func() []SlaveReport { return []SlaveReport{slave("A", end()), slave("B", end())} })
	res = expect("both acknowledge", PutOK, nil)
	stop()
	if off := s.ReplicationStats().InSyncOffset; off < res.PhysicalOffset+int64(res.Size) {
		t.Fatalf("PutOK with the in-sync offset at %d", off)
	}
	if st := s.ReplicationStats(); len(st.InSync) != 2 || st.MinInSyncReplicas != 2 {
		t.Fatalf("stats %+v", st)
	}
	// B falls behind by more than the bound, for longer than the lag time.
	bAt = end()
	stop = acking(func() []SlaveReport { return []SlaveReport{slave("A", end()), slave("B", bAt)} })
	for s.Stats().WroteOffset < bAt+8192 {
		if r, _ := put(1000); r.Status == PutOK {
			stop()
			t.Fatalf("PutOK with B at %d behind", bAt)
		}
	}
	waitFor(t, "B leaves the set", func() bool { return len(s.InSyncSlaves()) == 1 })
	stop()
	expect("B out", InSyncReplicasNotEnough, ErrInSyncReplicasNotEnough)
	// B catches up: back in.
	s.ReportSlaves([]SlaveReport{slave("A", end()), slave("B", end())})
	if got := s.InSyncSlaves(); len(got) != 2 {
		t.Fatalf("in sync %v after B caught up", got)
	}
	stop = acking(func() []SlaveReport { return []SlaveReport{slave("A", end()), slave("B", end())} })
	expect("B back", PutOK, nil)
	stop()
	// B disconnects.
	s.ReportSlaves([]SlaveReport{slave("A", end())})
	expect("B gone", InSyncReplicasNotEnough, ErrInSyncReplicasNotEnough)
	if st := s.ReplicationStats(); st.InSyncReplicasNotEnough < 4 {
		t.Fatalf("stats %+v", st)
	}
}

// TestRetentionKeepsWhatSlavesLack: an expired segment a connected,
// verified slave has not received is kept (an unverified connection keeps
// nothing); once the slave has it, it goes; beyond SlaveRetentionMaxBytes
// it goes anyway, with a log line naming the slave.
func TestRetentionKeepsWhatSlavesLack(t *testing.T) {
	ctx := context.Background()
	for _, limit := range []int64{0, 1} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			var clock atomic.Int64
			clock.Store(time.Date(2026, 11, 29, 4, 0, 0, 0, time.Local).UnixNano())
			var logs bytes.Buffer
			var logMu sync.Mutex
			o := smallLogicsOptions(Options{Backend: "mmap", SlaveRetentionMaxBytes: limit})
			o.now = func() time.Time { return time.Unix(0, clock.Load()) }
			o.FileReservedTime = time.Hour
			o.CleanInterval = time.Hour
			o.diskUsed = func(string) (float64, error) { return 10, nil }
			o.Logger = slog.New(slog.NewTextHandler(&syncWriter{w: &logs, mu: &logMu}, nil))
			s := openStore(t, t.TempDir(), o)
			defer s.Close()
			putN(t, s, "R", 1, 800, 300, nil)
			if _, err := s.flushOnce(ctx, 0, false); err != nil {
				t.Fatal(err)
			}
			if err := s.WaitDispatched(ctx, s.Stats().WroteOffset); err != nil {
				t.Fatal(err)
			}
			files := s.log.queue.Files()
			if len(files) < 4 {
				t.Fatalf("%d segments", len(files))
			}
			seg := files[0].SizeBytes()
			behind := files[0].FromOffset() + seg/2 // inside the first segment
			s.ReportSlaves([]SlaveReport{{Addr: "slave", Verified: true, AckedOffset: behind, Position: behind},
				{Addr: "raw", AckedOffset: 0, Position: 0}})
			clock.Add(int64(24 * time.Hour))
			n, err := s.CleanExpired(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if limit == 1 {
				logMu.Lock()
				line := logs.String()
				logMu.Unlock()
				if n != len(files)-1 || !strings.Contains(line, "a connected slave has not received") || !strings.Contains(line, "slave=slave") {
					t.Fatalf("over the limit: %d deleted of %d, log %q", n, len(files)-1, line)
				}
				return
			}
			if n != 0 || s.MinOffset() != 0 {
				t.Fatalf("deleted %d segments the slave (at %d) lacks", n, behind)
			}
			at := files[1].FromOffset() + seg // the end of the second segment
			s.ReportSlaves([]SlaveReport{{Addr: "slave", Verified: true, AckedOffset: at, Position: at}})
			if n, err := s.CleanExpired(ctx); err != nil || n != 2 {
				t.Fatalf("with the slave at %d: %d deleted, %v; want the 2 segments it has", at, n, err)
			}
		})
	}
}

type syncWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestCancelledAckLeavesWritesOn: a slave asked for its ack offset with a
// ctx that has ended (its connection closed) answers ctx's error — and the
// commit it would have made is not a write error: the store keeps taking
// replicated bytes. (The commit ran with the connection's ctx and its
// cancellation stopped the slave's writes for good.)
func TestCancelledAckLeavesWritesOn(t *testing.T) {
	ctx := context.Background()
	master := openRole(t, t.TempDir(), smallLogicsOptions(Options{BackendImpl: mappedfile.NewMemFS(mappedfile.MemOptions{})}))
	defer master.Close()
	putRandom(t, master, rand.New(rand.NewPCG(18, 19)), 40, 2, 0)
	// transient: its commit honours ctx (the buffered backend where the
	// cancelled commit was seen). The commit service, woken by the append,
	// may commit the bytes before the test looks; a fresh slave then tries
	// again, so the cancelled ack always meets pending bytes.
	var slave *Store
	var end int64
	for attempt := 0; ; attempt++ {
		slave = openRole(t, t.TempDir(), smallLogicsOptions(Options{Backend: "transient", SegmentSizeBytes: 1 << 20,
			Role: Slave, CommitInterval: time.Hour, CommitThoroughInterval: time.Hour, CommitLeastPages: 1 << 30}))
		var err error
		if end, err = slave.AppendReplicated(ctx, 0, logBytes(t, master, 0, master.MaxOffset())); err != nil {
			t.Fatal(err)
		}
		if committed := slave.Stats().CommittedOffset; committed < end {
			break
		} else if attempt == 20 {
			t.Fatalf("the replicated bytes are committed already (%d of %d) in %d attempts: the test needs them pending", committed, end, attempt+1)
		}
		slave.Close()
	}
	defer slave.Close()
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := slave.ReplicaAckOffset(ended); !errors.Is(err, context.Canceled) {
		t.Fatalf("ack offset with an ended ctx: %v, want context.Canceled", err)
	}
	if ack, err := slave.ReplicaAckOffset(ctx); err != nil || ack != end {
		t.Fatalf("ack offset after a cancelled one: %d, %v; want %d (writes stopped?)", ack, err, end)
	}
}
