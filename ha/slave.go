package ha

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mqstore/mqstore/engine"
)

// Slave is the HA client of a slave store (RocketMQ's HAClient): it
// connects to the master, reports where its CommitLog ends, appends the
// frames the master sends (Store.AppendReplicated), reports its offset when
// it advances and every heartbeat interval, drops a connection the master
// left silent for the housekeeping interval, and connects again with a
// backoff — resuming from its own CommitLog, whichever side restarted.
//
// On every connection it first reports the start of its newest record, not
// its end, so the master sends that record again and the slave compares it
// byte for byte with its own before it appends anything: a master that lost
// or rewrote the tail the slave holds (a crash with unflushed data) is
// caught, and so is one whose CommitLog ends before the slave's. Either way
// the slave stops with ErrDiverged, naming both offsets, and changes nothing;
// the repair (mqstore repair-slave) is the operator's decision.
type Slave struct {
	store *engine.Store
	own   *engine.CommitLogReader
	opts  SlaveOptions
	log   *slog.Logger

	mu sync.Mutex
	st SlaveStatus
}

// SlaveStatus is a snapshot of a slave's replication state.
type SlaveStatus struct {
	MasterAddress string
	Connected     bool
	Connects      int   // connections made so far
	Offset        int64 // where the slave's complete records end
	FlushedOffset int64 // how far the slave's CommitLog is durable
	AckedOffset   int64 // the last offset reported to the master
	// MasterOffset is the furthest master offset seen (the end of a frame,
	// or a heartbeat's offset: the master's end when it is idle); -1: none.
	// MasterOffset − Offset is what the slave knows it lacks; the master's
	// own view (Master.Slaves) is the exact lag.
	MasterOffset int64
	LastFrameAt  time.Time
	LastError    string
	// Truncations counts the cuts at a fork point (EpochHandshake).
	Truncations int
	// Backoff is the wait before the next connection attempt after the
	// last one ended.
	Backoff time.Duration
}

// NewSlave returns the HA client of store, whose role must be Slave. Run
// starts it.
func NewSlave(store *engine.Store, opts SlaveOptions) (*Slave, error) {
	if role := store.Options().Role; role != engine.Slave {
		return nil, badOption("the store is a %v; an HA slave needs a store opened with Role Slave", role)
	}
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	s := &Slave{store: store, own: store.CommitLogReader(), opts: o, log: o.Logger}
	s.st = SlaveStatus{MasterAddress: o.MasterAddress, Offset: store.MaxOffset(), AckedOffset: -1, MasterOffset: -1}
	return s, nil
}

// Status returns a snapshot of the replication state.
func (s *Slave) Status() SlaveStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Offset = s.store.Stats().WroteOffset
	st.FlushedOffset = s.store.FlushedOffset()
	return st
}

func (s *Slave) update(f func(st *SlaveStatus)) {
	s.mu.Lock()
	f(&s.st)
	s.mu.Unlock()
}

// Run replicates until ctx ends (then it returns nil) or until an error
// that connecting again cannot cure: ErrDiverged, ErrMasterGap, a master
// whose records do not fit the slave's configuration
// (engine.ErrReplicaMismatch), or a store that stopped (its I/O failed, or
// it was closed). Every other failure — no master, a dropped or silent
// connection, a protocol error — is logged and followed by a new
// connection after a backoff.
func (s *Slave) Run(ctx context.Context) error {
	backoff := s.opts.ReconnectMinBackoff
	for {
		progressed, err := s.session(ctx)
		s.update(func(st *SlaveStatus) {
			st.Connected = false
			if err != nil {
				st.LastError = err.Error()
			}
		})
		if ctx.Err() != nil {
			return nil
		}
		if fatal(err) {
			s.log.Error("ha slave: stopped", slog.String("master", s.opts.MasterAddress), slog.Any("err", err))
			return err
		}
		// Only a session that replicated resets the backoff, and only
		// when the master did not break the protocol or send bad data: a
		// peer that sends a frame and then garbage on every connection is
		// retried ever more slowly, not in a loop.
		if progressed && !errors.Is(err, ErrProtocol) && !errors.Is(err, engine.ErrReplicaData) && !errors.Is(err, engine.ErrReplicaOffset) {
			backoff = s.opts.ReconnectMinBackoff
		}
		s.update(func(st *SlaveStatus) { st.Backoff = backoff })
		s.log.Warn("ha slave: connection ended; connecting again", slog.String("master", s.opts.MasterAddress),
			slog.Duration("after", backoff), slog.Any("err", err))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, s.opts.ReconnectMaxBackoff)
	}
}

func fatal(err error) bool {
	return errors.Is(err, ErrDiverged) || errors.Is(err, ErrMasterGap) || errors.Is(err, ErrStaleMaster) || errors.Is(err, engine.ErrReplicaMismatch) ||
		errors.Is(err, engine.ErrServiceNotAvailable) || errors.Is(err, engine.ErrClosed) || errors.Is(err, engine.ErrCorrupt)
}

// session is one connection to the master.
type session struct {
	s    *Slave
	c    net.Conn
	addr string

	// expect is the master offset the next frame must carry; -1 for an
	// empty slave before the master's first frame (the master picks the
	// start).
	expect int64
	// [verifyFrom, verifyEnd) is what the slave holds of its newest record:
	// the master's bytes there are compared, not appended.
	verifyFrom, verifyEnd int64
	verified              atomic.Bool
	gotData               bool
	ownBuf                []byte

	// The fork-point handshake (epoch.go): cutAt is where the log is cut
	// once the unit before it matched the master's (-1: no cut); epochs
	// are the master's epochs still to record, oldest first.
	cutAt  int64
	epochs []engine.EpochEntry
	common int32 // the common epoch, until the slave's later ones are dropped (0: none)

	advanced chan struct{} // capacity 1: the slave has more to acknowledge
}

func (s *Slave) session(ctx context.Context) (progressed bool, err error) {
	c, err := dialMaster(ctx, s.opts)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		c.Close()
	}()
	verifyFrom, end, err := s.store.ReplicaResume(ctx)
	if err != nil {
		return false, err
	}
	ss := &session{s: s, c: c, addr: s.opts.MasterAddress, cutAt: -1, advanced: make(chan struct{}, 1)}
	if s.opts.EpochHandshake {
		local := s.store.Epochs()
		a, err := ss.epochHandshake(local, end)
		if err != nil {
			return false, err
		}
		if verifyFrom, end, err = ss.planFork(ctx, a, local, verifyFrom, end); err != nil {
			return false, err
		}
	}
	// A slave whose newest record starts at 0 (it holds one) reports 0,
	// as an empty slave does: a master that starts empty slaves at its
	// first offset, 0, sends that record and the slave compares it; one
	// that starts them elsewhere cannot be compared with and is refused
	// (gap) rather than followed unverified.
	ss.expect, ss.verifyFrom, ss.verifyEnd = verifyFrom, verifyFrom, end
	if end == 0 {
		ss.expect = -1
	}
	if err := ss.writeReport(verifyFrom); err != nil {
		return false, fmt.Errorf("report to the master %s: %w", ss.addr, err)
	}
	if verifyFrom == end {
		// Nothing to compare: a cut at a fork point with no record before
		// it is made now (after the report, which the master waits for).
		if err := ss.cutNow(ctx); err != nil {
			return false, err
		}
		ss.verified.Store(true)
	}
	s.update(func(st *SlaveStatus) {
		st.Connected = true
		st.Connects++
		st.AckedOffset = verifyFrom
	})
	s.log.Info("ha slave: connected", slog.String("master", ss.addr), slog.Int64("end", end), slog.Int64("reported", verifyFrom))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ss.reportLoop(ctx, verifyFrom)
	}()
	err = ss.readFrames(ctx)
	cancel()
	wg.Wait()
	return ss.gotData && ss.verified.Load(), err
}

func (ss *session) writeReport(offset int64) error {
	var b [reportSize]byte
	binary.BigEndian.PutUint64(b[:], uint64(offset))
	ss.c.SetWriteDeadline(time.Now().Add(ss.s.opts.HousekeepingInterval))
	_, err := ss.c.Write(b[:])
	return err
}

// reportLoop is the only writer after the first report: it reports what
// the slave may acknowledge when that advances and every heartbeat
// interval. With a sync-flush slave that waits for the flush, while the
// reader goes on receiving.
func (ss *session) reportLoop(ctx context.Context, reported int64) {
	s := ss.s
	ticker := time.NewTicker(s.opts.SendHeartbeatInterval)
	defer ticker.Stop()
	for {
		heartbeat := false
		select {
		case <-ctx.Done():
			return
		case <-ss.advanced:
		case <-ticker.C:
			heartbeat = true
		}
		offset := reported
		if ss.verified.Load() {
			off, err := s.store.ReplicaAckOffset(ctx)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("ha slave: flush before the acknowledgement", slog.Any("err", err))
			}
			offset = max(off, reported)
		}
		if offset == reported && !heartbeat {
			continue
		}
		if err := ss.writeReport(offset); err != nil {
			if ctx.Err() == nil {
				ss.c.Close() // the reader sees it and the session ends
			}
			return
		}
		reported = offset
		s.update(func(st *SlaveStatus) { st.AckedOffset = offset })
	}
}

func (ss *session) signalAdvanced() {
	select {
	case ss.advanced <- struct{}{}:
	default:
	}
}

// readFrames reads and applies the master's frames until an error.
func (ss *session) readFrames(ctx context.Context) error {
	s := ss.s
	br := bufio.NewReaderSize(ss.c, 256<<10)
	var hdr [headerSize]byte
	var body []byte
	for {
		ss.c.SetReadDeadline(time.Now().Add(s.opts.HousekeepingInterval))
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return ss.readError(ctx, err)
		}
		offset, size := parseHeader(hdr[:])
		if size < 0 || int(size) > s.opts.MaxFrameBytes {
			return fmt.Errorf("the master %s sent a frame header for %d bytes at offset %d (header bytes %q), not a frame of at most %d bytes: is it an HA master?: %w",
				ss.addr, size, offset, hdr[:], s.opts.MaxFrameBytes, ErrProtocol)
		}
		if size == 0 {
			if err := ss.heartbeat(offset); err != nil {
				return err
			}
			continue
		}
		if cap(body) < int(size) {
			body = make([]byte, size)
		}
		body = body[:size]
		if _, err := io.ReadFull(br, body); err != nil {
			return ss.readError(ctx, err)
		}
		if err := ss.apply(ctx, offset, body); err != nil {
			return err
		}
		s.update(func(st *SlaveStatus) {
			st.MasterOffset = max(st.MasterOffset, offset+int64(size))
			st.LastFrameAt = time.Now()
		})
	}
}

func (ss *session) readError(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("the master %s said nothing for %v (housekeeping): %w", ss.addr, ss.s.opts.HousekeepingInterval, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("the master %s closed the connection: %w", ss.addr, err)
	}
	return fmt.Errorf("read from the master %s: %w", ss.addr, err)
}

// heartbeat handles an empty frame: its offset is where the master's
// stream is; when the master is idle, its CommitLog's end.
func (ss *session) heartbeat(offset int64) error {
	ss.s.update(func(st *SlaveStatus) { st.MasterOffset = max(st.MasterOffset, offset) })
	switch {
	case offset == notAUnit && !ss.gotData:
		return fmt.Errorf("the master %s refused this slave: the offset it asked to start from, %d (where its newest record starts; "+
			"it holds up to %d), is inside a record of the master's CommitLog: the master's CommitLog differs from this slave's there. %s: %w",
			ss.addr, ss.verifyFrom, ss.verifyEnd, ss.repairAdvice(), ErrDiverged)
	case ss.expect < 0:
		return nil // an empty slave: the master has nothing to send yet
	case offset == ss.expect && ss.expect < ss.verifyEnd, offset < ss.expect && !ss.gotData:
		// The master is idle at (or refused the slave with) its end, which
		// is before what the slave holds.
		return ss.ahead(offset)
	case offset > ss.expect && !ss.gotData:
		return ss.gap(offset)
	case offset != ss.expect:
		return fmt.Errorf("the master %s sent a heartbeat at %d after frames up to %d: %w", ss.addr, offset, ss.expect, ErrProtocol)
	}
	return nil
}

// apply handles a data frame: the part the slave already holds is
// compared, the rest appended.
func (ss *session) apply(ctx context.Context, offset int64, data []byte) error {
	s := ss.s
	if ss.expect < 0 {
		ss.expect = offset // the master chose where an empty slave starts
	}
	if offset != ss.expect {
		if offset > ss.expect && !ss.gotData {
			return ss.gap(offset)
		}
		return fmt.Errorf("the master %s sent a frame at %d, the slave expected %d: %w", ss.addr, offset, ss.expect, ErrProtocol)
	}
	ss.gotData = true
	if ss.expect < ss.verifyEnd {
		k := int(min(int64(len(data)), ss.verifyEnd-ss.expect))
		if cap(ss.ownBuf) < k {
			ss.ownBuf = make([]byte, k)
		}
		own := ss.ownBuf[:k]
		if n, err := s.own.ReadAt(own, ss.expect); n != k {
			return fmt.Errorf("read the slave's own CommitLog at %d to compare it with the master's: %w", ss.expect, err)
		}
		for i := range own {
			if own[i] != data[i] {
				return ss.differs(ss.expect + int64(i))
			}
		}
		ss.expect += int64(k)
		data = data[k:]
		if ss.expect == ss.verifyEnd {
			if err := ss.cutNow(ctx); err != nil {
				return err
			}
			ss.verified.Store(true)
			ss.signalAdvanced()
			s.log.Info("ha slave: the master's copy of the newest record matches; replicating", slog.String("master", ss.addr),
				slog.Int64("from", ss.verifyEnd))
		}
	}
	if len(data) == 0 {
		return nil
	}
	if err := ss.recordEpochs(ctx, ss.expect+int64(len(data))); err != nil {
		return err
	}
	if _, err := s.store.AppendReplicated(ctx, ss.expect, data); err != nil {
		return fmt.Errorf("apply the master's frame at %d: %w", ss.expect, err)
	}
	ss.expect += int64(len(data))
	ss.signalAdvanced()
	return nil
}

func (ss *session) repairAdvice() string {
	dir := ss.s.store.Dir()
	return fmt.Sprintf("Nothing was changed. The slave's extra records may include messages a SYNC_MASTER acknowledged "+
		"before it lost them: to keep them, make this slave's directory the master instead. To replicate this master again, "+
		"stop the slave and run `mqstore repair-slave --dir %s --master %s` (it finds where the two CommitLogs part, "+
		"cuts the slave's there and keeps the cut bytes in %s/diverged/), or start the slave from an empty directory", dir, ss.addr, dir)
}

func (ss *session) ahead(masterEnd int64) error {
	return fmt.Errorf("the master %s's CommitLog ends at %d, but this slave's holds up to %d (its newest record starts at %d): "+
		"the slave has data the master does not — the master lost it (a crash before its flush?) or is another master. %s: %w",
		ss.addr, masterEnd, ss.verifyEnd, ss.verifyFrom, ss.repairAdvice(), ErrDiverged)
}

func (ss *session) differs(at int64) error {
	return fmt.Errorf("the master %s's CommitLog differs from this slave's at offset %d (the slave holds up to %d and compared its newest record, from %d, with the master's): "+
		"the master lost and rewrote data the slave has (a crash before its flush?) or is another master. %s: %w",
		ss.addr, at, ss.verifyEnd, ss.verifyFrom, ss.repairAdvice(), ErrDiverged)
}

func (ss *session) gap(masterStart int64) error {
	if ss.verifyFrom == 0 && ss.verifyEnd > 0 {
		return fmt.Errorf("the master %s starts this slave at %d, but the slave holds one record, at 0 to %d, and must compare it with "+
			"the master's before it follows (the master's retention deleted offset 0, or it starts empty slaves at its last segment). "+
			"Start the slave from an empty directory: %w", ss.addr, masterStart, ss.verifyEnd, ErrMasterGap)
	}
	return fmt.Errorf("the master %s's CommitLog starts at %d, but this slave needs offset %d (it holds up to %d): "+
		"the master deleted what the slave lacks, the bytes [%d,%d) (retention; see engine.Options.SlaveRetentionMaxBytes). "+
		"Start the slave from an empty directory: %w",
		ss.addr, masterStart, ss.expect, ss.verifyEnd, ss.expect, masterStart, ErrMasterGap)
}
