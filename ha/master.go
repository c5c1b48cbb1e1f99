package ha

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mqstore/mqstore/engine"
)

// Master is the HA master of a store (RocketMQ's HAService with its
// HAConnections): it listens on the HA port, streams the CommitLog to every
// slave that connects, tracks what each acknowledged, and keeps the store
// informed (Store.ReportSlaves) so that a SYNC_MASTER Put waits for a slave.
//
// Each connection has one goroutine that sends frames and one that reads
// the slave's reports. A slave's first report says where to start; a
// report beyond the master's CommitLog end, or before its first offset, is
// refused: the master answers with one heartbeat carrying its own end (or
// start), so the slave can name both offsets, logs why, and closes.
type Master struct {
	store  *engine.Store
	reader *engine.CommitLogReader
	opts   MasterOptions
	log    *slog.Logger
	ln     net.Listener

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	peerLog *logLimiter // lines about peers that are not (good) slaves

	mu      sync.Mutex
	conns   map[*slaveConn]struct{}
	changed chan struct{} // closed and replaced when a slave connects, acknowledges or leaves
	closed  bool

	refused      atomic.Uint64
	acceptErrors atomic.Uint64
}

// slaveConn is one slave connection.
type slaveConn struct {
	m           *Master
	c           net.Conn
	addr        string
	connectedAt time.Time
	ctx         context.Context
	cancel      context.CancelFunc
	first       chan int64    // the first report, from the reader to the sender
	decided     chan struct{} // closed by the sender once it accepted the first report

	dropped   atomic.Bool
	reported  atomic.Bool  // the first report was accepted: the slave is connected
	verified  atomic.Bool  // it acknowledged bytes sent on this connection: its acks count
	requested atomic.Int64 // its first report
	start     atomic.Int64 // where the master started it
	acked     atomic.Int64 // its latest report once verified (-1 before)
	lastAckAt atomic.Int64 // unix ns
	sentEnd   atomic.Int64 // frames written (or being written) up to here
	frames    atomic.Uint64
	sentBytes atomic.Uint64
}

// NewMaster starts the HA master of store, whose role must be
// AsyncMaster or SyncMaster: it listens on opts.ListenAddr at once and
// serves until Close.
func NewMaster(store *engine.Store, opts MasterOptions) (*Master, error) {
	if role := store.Options().Role; role == engine.Slave {
		return nil, badOption("the store is a %v; an HA master needs a master store", role)
	}
	o := opts.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	ln := o.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", o.ListenAddr); err != nil {
			return nil, fmt.Errorf("ha master: listen on %s: %w", o.ListenAddr, err)
		}
	}
	if o.TLS != nil {
		ln = tls.NewListener(ln, o.TLS)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Master{store: store, reader: store.CommitLogReader(), opts: o, log: o.Logger, ln: ln,
		ctx: ctx, cancel: cancel, conns: make(map[*slaveConn]struct{}), changed: make(chan struct{}),
		peerLog: newLogLimiter(o.Logger, 5, time.Second)}
	m.log.Info("ha master listening", slog.String("addr", ln.Addr().String()), slog.String("role", store.Options().Role.String()),
		slog.String("emptySlaveStart", o.EmptySlaveStart.String()), slog.Bool("tls", o.TLS != nil), slog.Bool("secret", o.Secret != nil))
	m.wg.Add(2)
	go m.accept()
	go m.tick()
	return m, nil
}

// Addr is the address the master listens on.
func (m *Master) Addr() net.Addr { return m.ln.Addr() }

// Close stops listening, closes every slave connection and waits for their
// goroutines. The store stays open (close it after).
func (m *Master) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	m.closed = true
	m.mu.Unlock()
	m.cancel() // first: the accept loop then knows its error is the close
	err := m.ln.Close()
	m.mu.Lock()
	for sc := range m.conns {
		sc.c.Close() // unblocks its reader and a sender blocked in a write
	}
	m.mu.Unlock()
	m.wg.Wait()
	m.store.ReportSlaves(nil)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("ha master: close: %w", err)
	}
	return nil
}

// Accept retry delays, as net/http's Server uses for a failed Accept.
const (
	acceptMinDelay = 5 * time.Millisecond
	acceptMaxDelay = time.Second
)

// accept serves the listener until the master closes. A failed Accept
// (EMFILE when the process is out of descriptors, ECONNABORTED, ...) is
// retried after a delay that doubles from 5 ms to 1 s, as net/http does,
// never the end of the loop: slaves that connect once descriptors are
// free again are served. A connection beyond MaxConnections is closed at
// once.
func (m *Master) accept() {
	defer m.wg.Done()
	var delay time.Duration
	for {
		c, err := m.ln.Accept()
		if err != nil {
			if m.ctx.Err() != nil {
				return
			}
			if errors.Is(err, net.ErrClosed) {
				m.log.Error("ha master: the listener was closed; no more slaves are accepted", slog.Any("err", err))
				return
			}
			delay = min(max(2*delay, acceptMinDelay), acceptMaxDelay)
			m.acceptErrors.Add(1)
			m.peerLog.Log(slog.LevelError, "ha master: accept failed; retrying", slog.Duration("after", delay), slog.Any("err", err))
			t := time.NewTimer(delay)
			select {
			case <-m.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		delay = 0
		raw := c
		if tc, ok := c.(*tls.Conn); ok {
			raw = tc.NetConn()
		}
		if tc, ok := raw.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		ctx, cancel := context.WithCancel(m.ctx)
		sc := &slaveConn{m: m, c: c, addr: c.RemoteAddr().String(), connectedAt: time.Now(), ctx: ctx, cancel: cancel,
			first: make(chan int64, 1), decided: make(chan struct{})}
		sc.acked.Store(-1)
		sc.requested.Store(-1)
		sc.start.Store(-1)
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			c.Close()
			cancel()
			return
		}
		if n := len(m.conns); n >= m.opts.MaxConnections {
			m.mu.Unlock()
			m.refused.Add(1) // before the close: a peer that sees it closed sees it counted
			c.Close()
			cancel()
			m.peerLog.Log(slog.LevelWarn, "ha master: connection refused: MaxConnections reached", slog.String("peer", sc.addr),
				slog.Int("connections", n))
			continue
		}
		m.conns[sc] = struct{}{}
		m.mu.Unlock()
		m.log.Debug("ha master: connection accepted", slog.String("peer", sc.addr))
		m.wg.Add(2)
		go sc.readReports()
		go sc.send()
	}
}

// authenticate is the TLS handshake (the slave's certificate verified)
// and the shared secret's challenge–response, whichever the master
// requires, within a heartbeat interval; before it succeeds the peer is
// sent nothing of the CommitLog.
func (sc *slaveConn) authenticate() error {
	o := sc.m.opts
	if o.TLS == nil && o.Secret == nil {
		return nil
	}
	sc.c.SetDeadline(time.Now().Add(o.SendHeartbeatInterval))
	defer sc.c.SetDeadline(time.Time{})
	if tc, ok := sc.c.(*tls.Conn); ok {
		if err := tc.HandshakeContext(sc.ctx); err != nil {
			return fmt.Errorf("TLS handshake (a slave must present a certificate the master's CA signed): %w: %w", ErrAuth, err)
		}
	}
	if o.Secret != nil {
		if err := authenticateSlave(sc.c, o.Secret); err != nil {
			return fmt.Errorf("shared secret: %w", err)
		}
	}
	return nil
}

// tick reports the slaves to the store regularly, not only when one
// acknowledges more: the in-sync set drops a member that stopped
// acknowledging (engine.Options.InSyncMaxLagTime) even while no report
// arrives.
func (m *Master) tick() {
	defer m.wg.Done()
	every := min(m.opts.SendHeartbeatInterval, max(m.store.Options().InSyncMaxLagTime/4, 10*time.Millisecond))
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
			m.slavesChanged()
		}
	}
}

// refuse drops a peer that is not a slave, broke the protocol or may not
// replicate this master; the line is rate-limited.
func (sc *slaveConn) refuse(why string) {
	sc.m.refused.Add(1)
	sc.dropWith(sc.m.peerLog.Log, slog.LevelWarn, "refused: "+why, nil)
}

// drop ends a connection (once both goroutines are done it is forgotten).
func (sc *slaveConn) drop(level slog.Level, why string, err error) {
	sc.dropWith(func(level slog.Level, msg string, attrs ...any) {
		sc.m.log.Log(context.Background(), level, msg, attrs...)
	}, level, why, err)
}

func (sc *slaveConn) dropWith(logf func(slog.Level, string, ...any), level slog.Level, why string, err error) {
	if !sc.dropped.CompareAndSwap(false, true) {
		return
	}
	if sc.m.ctx.Err() != nil {
		level, why = slog.LevelInfo, "the master closed"
	}
	sc.cancel()
	sc.c.Close()
	attrs := []any{slog.String("slave", sc.addr), slog.String("why", why), slog.Int64("acked", sc.acked.Load())}
	if err != nil {
		attrs = append(attrs, slog.Any("err", err))
	}
	logf(level, "ha master: slave connection closed", attrs...)
	sc.m.mu.Lock()
	delete(sc.m.conns, sc)
	sc.m.mu.Unlock()
	sc.m.slavesChanged()
}

// readReports reads the slave's 8-byte offsets (RocketMQ's
// ReadSocketService); a connection silent for HousekeepingInterval is
// dropped.
func (sc *slaveConn) readReports() {
	defer sc.m.wg.Done()
	defer sc.drop(slog.LevelInfo, "reader stopped", nil)
	if err := sc.authenticate(); err != nil {
		sc.refuse(err.Error())
		return
	}
	var buf [reportSize]byte
	first, helloDone := true, false
	for {
		// A slave reports as soon as it connects: a peer that says nothing
		// for a heartbeat interval is not one, and holds no connection
		// slot for longer.
		timeout := sc.m.opts.HousekeepingInterval
		if first {
			timeout = sc.m.opts.SendHeartbeatInterval
		}
		sc.c.SetReadDeadline(time.Now().Add(timeout))
		if _, err := io.ReadFull(sc.c, buf[:]); err != nil {
			switch {
			case sc.ctx.Err() != nil:
			case first && errors.Is(err, os.ErrDeadlineExceeded):
				sc.refuse(fmt.Sprintf("the peer reported nothing within %v of connecting: not an HA slave? (%v)", timeout, ErrProtocol))
			case first:
				sc.refuse(fmt.Sprintf("the peer left before its first report (%v)", err))
			case errors.Is(err, os.ErrDeadlineExceeded):
				sc.drop(slog.LevelWarn, fmt.Sprintf("the slave said nothing for %v (housekeeping)", sc.m.opts.HousekeepingInterval), nil)
			case errors.Is(err, io.EOF):
				sc.drop(slog.LevelInfo, "the slave closed the connection", nil)
			default:
				sc.drop(slog.LevelWarn, "read from the slave", err)
			}
			return
		}
		offset := int64(binary.BigEndian.Uint64(buf[:]))
		if first && offset == epochMarker && !helloDone {
			// The fork-point handshake (epoch.go); the first report follows.
			helloDone = true
			if err := sc.answerEpochHello(); err != nil {
				sc.refuse(err.Error())
				return
			}
			continue
		}
		if first {
			first = false
			sc.first <- offset
			// Read on only once the sender accepted it: a refused peer's
			// next bytes must not race the refusal.
			select {
			case <-sc.decided:
			case <-sc.ctx.Done():
				return
			}
			continue
		}
		if why := implausible(offset, sc.m.reader.End()); why != "" {
			sc.refuse(fmt.Sprintf("the slave reported offset %d (bytes %s): %s; is it an HA slave? (%v)", offset, asText(offset), why, ErrProtocol))
			return
		}
		if sent := sc.sentEnd.Load(); offset > sent {
			sc.refuse(fmt.Sprintf("the slave acknowledged offset %d, past the %d bytes sent to it (%v)", offset, sent, ErrProtocol))
			return
		}
		if !sc.verified.Load() {
			// Verified once it acknowledges bytes past both its first
			// report and where it was started: bytes sent on this
			// connection, which a slave acknowledges only after it
			// compared its own newest record with the master's copy (and
			// appended, and flushed or committed, what followed). Its
			// first report, and heartbeats repeating it, prove nothing.
			if offset <= max(sc.requested.Load(), sc.start.Load()) {
				continue
			}
			sc.verified.Store(true)
			sc.m.log.Info("ha master: slave verified; its acknowledgements count", slog.String("slave", sc.addr),
				slog.Int64("acked", offset), slog.Int64("requested", sc.requested.Load()))
		}
		if sc.raiseAcked(offset) {
			sc.m.slavesChanged()
		}
	}
}

// raiseAcked records a report; false when it is not news.
func (sc *slaveConn) raiseAcked(offset int64) bool {
	for {
		cur := sc.acked.Load()
		if offset <= cur {
			return false
		}
		if sc.acked.CompareAndSwap(cur, offset) {
			sc.lastAckAt.Store(time.Now().UnixNano())
			return true
		}
	}
}

// startOffset decides where a slave that first reported offset starts,
// or refuses it: refused is the offset the refusal heartbeat carries.
func (sc *slaveConn) startOffset(offset int64) (start int64, refused bool, why string) {
	m := sc.m
	end, first := m.reader.End(), m.reader.Start()
	if bad := implausible(offset, end); bad != "" {
		return end, true, fmt.Sprintf("first report %d (bytes %s): %s; is it an HA slave? (%v)", offset, asText(offset), bad, ErrProtocol)
	}
	switch {
	case offset == 0 && m.opts.EmptySlaveStart == StartAtLastSegment:
		seg := m.reader.SegmentSizeBytes()
		return max(end-end%seg, first), false, ""
	case offset == 0:
		return first, false, ""
	case offset > end:
		return end, true, fmt.Sprintf("the slave's CommitLog reaches %d, past the master's end %d: the slave holds data the master does not (%v)",
			offset, end, ErrDiverged)
	case offset < first:
		return first, true, fmt.Sprintf("the slave needs offset %d, but the master's CommitLog starts at %d: retention deleted [%d,%d) (%v)",
			offset, first, offset, first, ErrMasterGap)
	}
	ok, err := m.reader.UnitStart(offset)
	switch {
	case err != nil:
		return end, true, fmt.Sprintf("cannot check where the slave asks to start (%d): %v", offset, err)
	case !ok:
		return notAUnit, true, fmt.Sprintf("the slave asks to start at %d, which is inside a record of the master's CommitLog: "+
			"its CommitLog is another history, or it is not an HA slave (%v)", offset, ErrDiverged)
	}
	return offset, false, ""
}

// send streams the CommitLog to the slave (RocketMQ's WriteSocketService):
// frames of at most TransferBatchSize bytes, never across a segment end,
// sent with sendfile from the segment where the backend allows it; an
// empty frame when the connection has been idle a heartbeat interval, and
// once at once when the slave has caught up, so that it learns where the
// master's CommitLog ends.
func (sc *slaveConn) send() {
	defer sc.m.wg.Done()
	m := sc.m
	var offset int64
	select {
	case offset = <-sc.first:
	case <-sc.ctx.Done():
		return
	}
	start, refused, why := sc.startOffset(offset)
	if refused {
		sc.writeHeader(start, 0) // the slave learns the master's end (or start)
		sc.refuse(why)
		return
	}
	sc.requested.Store(offset)
	sc.start.Store(start)
	sc.sentEnd.Store(start)
	sc.reported.Store(true)
	close(sc.decided)
	m.log.Info("ha master: slave starts", slog.String("slave", sc.addr), slog.Int64("reported", offset), slog.Int64("from", start),
		slog.Int64("masterEnd", m.reader.End()))
	m.slavesChanged()

	next := start
	lastWrite := time.Now()
	// told: the slave was told where the master's CommitLog ends (a
	// heartbeat the first time the sender catches up, so that a slave
	// holding more than the master learns it at once).
	told := false
	for {
		n, err := m.reader.Available(next, m.opts.TransferBatchSize)
		if err != nil {
			sc.drop(slog.LevelError, fmt.Sprintf("cannot read the CommitLog at %d for the slave", next), err)
			return
		}
		if n > 0 {
			sc.sentEnd.Store(next + int64(n))
			if err := sc.writeFrame(next, n); err != nil {
				sc.drop(slog.LevelWarn, fmt.Sprintf("send the frame at %d", next), err)
				return
			}
			next += int64(n)
			lastWrite = time.Now()
			continue
		}
		if !told || time.Since(lastWrite) >= m.opts.SendHeartbeatInterval {
			if err := sc.writeHeader(next, 0); err != nil {
				sc.drop(slog.LevelWarn, "send a heartbeat", err)
				return
			}
			lastWrite, told = time.Now(), true
		}
		wait := m.opts.SendHeartbeatInterval - time.Since(lastWrite)
		ctx, cancel := context.WithTimeout(sc.ctx, wait)
		err = m.reader.Wait(ctx, next)
		cancel()
		switch {
		case sc.ctx.Err() != nil:
			return
		case errors.Is(err, context.DeadlineExceeded):
		case errors.Is(err, engine.ErrClosed):
			sc.drop(slog.LevelInfo, "the store closed", nil)
			return
		case err != nil:
			sc.drop(slog.LevelError, fmt.Sprintf("wait for the CommitLog at %d", next), err)
			return
		}
	}
}

func (sc *slaveConn) writeHeader(offset int64, size int) error {
	var b [headerSize]byte
	putHeader(b[:], offset, size)
	sc.c.SetWriteDeadline(time.Now().Add(sc.m.opts.HousekeepingInterval))
	_, err := sc.c.Write(b[:])
	return err
}

func (sc *slaveConn) writeFrame(offset int64, n int) error {
	if err := sc.writeHeader(offset, n); err != nil {
		return err
	}
	// The deadline set for the header bounds the body too: a slave that
	// stops reading cannot hold this goroutine past the housekeeping time.
	sent, err := sc.m.reader.SendTo(sc.ctx, sc.c, offset, n)
	sc.frames.Add(1)
	sc.sentBytes.Add(uint64(sent))
	return err
}

// slavesChanged tells the store about the connected slaves (only a
// verified one's acknowledgements count) and wakes WaitSlaves and
// WaitAcked.
func (m *Master) slavesChanged() {
	m.mu.Lock()
	reports := make([]engine.SlaveReport, 0, len(m.conns))
	for sc := range m.conns {
		if sc.reported.Load() {
			reports = append(reports, sc.report())
		}
	}
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
	m.store.ReportSlaves(reports)
}

func (sc *slaveConn) report() engine.SlaveReport {
	r := engine.SlaveReport{Addr: sc.addr, Verified: sc.verified.Load(), AckedOffset: sc.acked.Load()}
	r.Position = max(sc.requested.Load(), sc.start.Load())
	if r.Verified {
		r.Position = r.AckedOffset
	}
	return r
}

// SlaveInfo describes one connected slave.
type SlaveInfo struct {
	Addr            string
	ConnectedAt     time.Time
	RequestedOffset int64 // its first report (-1: none yet)
	// Verified: it acknowledged bytes sent on this connection (see
	// engine.SlaveReport); before that its reports count for nothing.
	Verified    bool
	InSync      bool  // a member of the store's in-sync set
	AckedOffset int64 // its latest report once verified (-1: none yet)
	LagBytes    int64 // the master's CommitLog end minus AckedOffset
	LastAckAt   time.Time
	Frames      uint64
	SentBytes   uint64
}

// Slaves describes the connected slaves, by address.
func (m *Master) Slaves() []SlaveInfo {
	end := m.reader.End()
	inSync := map[string]bool{}
	for _, a := range m.store.InSyncSlaves() {
		inSync[a] = true
	}
	m.mu.Lock()
	out := make([]SlaveInfo, 0, len(m.conns))
	for sc := range m.conns {
		i := SlaveInfo{Addr: sc.addr, ConnectedAt: sc.connectedAt, RequestedOffset: sc.requested.Load(), Verified: sc.verified.Load(),
			AckedOffset: sc.acked.Load(), InSync: inSync[sc.addr],
			Frames: sc.frames.Load(), SentBytes: sc.sentBytes.Load()}
		if ns := sc.lastAckAt.Load(); ns != 0 {
			i.LastAckAt = time.Unix(0, ns)
		}
		if i.AckedOffset >= 0 {
			i.LagBytes = end - i.AckedOffset
		}
		out = append(out, i)
	}
	m.mu.Unlock()
	sort.Slice(out, func(a, b int) bool { return out[a].Addr < out[b].Addr })
	return out
}

// Refused is how many connections were refused (ahead of the master,
// behind its first offset, not speaking the protocol, silent, or beyond
// MaxConnections).
func (m *Master) Refused() uint64 { return m.refused.Load() }

// AcceptErrors is how many Accepts failed (and were retried).
func (m *Master) AcceptErrors() uint64 { return m.acceptErrors.Load() }

// WaitSlaves blocks until at least n slaves are connected and have
// reported where they are (verified or not: a slave of an empty master has
// nothing to prove yet), or ctx ends.
func (m *Master) WaitSlaves(ctx context.Context, n int) error {
	for {
		m.mu.Lock()
		have := 0
		for sc := range m.conns {
			if sc.reported.Load() {
				have++
			}
		}
		ch, closed := m.changed, m.closed
		m.mu.Unlock()
		if have >= n {
			return nil
		}
		if closed {
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for %d slaves (%d connected): %w", n, have, ctx.Err())
		}
	}
}

// WaitAcked blocks until a slave has acknowledged offset (the store's
// replicated offset reached it), or ctx ends.
func (m *Master) WaitAcked(ctx context.Context, offset int64) error {
	for {
		m.mu.Lock()
		ch, closed := m.changed, m.closed
		m.mu.Unlock()
		if m.store.ReplicatedOffset() >= offset {
			return nil
		}
		if closed {
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for a slave to acknowledge %d (at %d): %w", offset, m.store.ReplicatedOffset(), ctx.Err())
		}
	}
}
