package ha

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/mqstore/mqstore/engine"
)

// The fork-point handshake (SlaveOptions.EpochHandshake), run on a new
// connection before the classic protocol (after TLS and the secret's
// challenge, if any). All integers big-endian.
//
//	slave → master  hello: marker int64 (epochMarker, a negative offset, so
//	                a master without the handshake refuses it as it does any
//	                negative first report) | the slave's CommitLog end int64 |
//	                N int32 | N × (epoch int32, startOffset int64)
//	master → slave  answer: marker int64 | found int32 (1: a common epoch) |
//	                point epoch int32 | point offset int64 | the master's end
//	                int64 | N int32 | N × (epoch int32, startOffset int64)
//
// The master finds the point with engine.FindConsistentPoint on the two
// histories. The classic protocol follows: the slave's first report is
// where the unit before the point starts, so the master sends that unit
// again and the slave compares it byte for byte with its own (as it does
// with its newest record in classic mode); only when it matches does the
// slave cut its log at the point (engine.Store.TruncateOnline, durably,
// the cut bytes kept) and append what follows. Before it appends the first
// bytes of each later epoch of the master's it records that epoch
// (engine.Store.AppendEpoch).
const (
	epochMarker     int64 = -0x45504f4348 // "EPOCH", negated
	maxEpochEntries       = 1 << 16
)

// ErrNoCommonEpoch: the slave has an epoch history and the master shares
// no epoch of it: the slave's log is another history. Nothing is cut.
var ErrNoCommonEpoch = errors.New("ha: the slave's epoch history shares no epoch with the master's")

// ErrStaleMaster: the slave's newest epoch is later than the master's: it
// was told to follow a master that an election has since replaced.
var ErrStaleMaster = errors.New("ha: the master's epoch is older than the slave's")

func appendMarker(b []byte) []byte {
	m := epochMarker
	return binary.BigEndian.AppendUint64(b, uint64(m))
}

func appendEpochs(b []byte, entries []engine.EpochEntry) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(entries)))
	for _, e := range entries {
		b = binary.BigEndian.AppendUint32(b, uint32(e.Epoch))
		b = binary.BigEndian.AppendUint64(b, uint64(e.StartOffset))
	}
	return b
}

func readEpochs(r io.Reader) ([]engine.EpochEntry, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	count := int32(binary.BigEndian.Uint32(n[:]))
	if count < 0 || count > maxEpochEntries {
		return nil, fmt.Errorf("%d epoch entries (at most %d): %w", count, maxEpochEntries, ErrProtocol)
	}
	buf := make([]byte, 12*int(count))
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	entries := make([]engine.EpochEntry, count)
	for i := range entries {
		entries[i] = engine.EpochEntry{Epoch: int32(binary.BigEndian.Uint32(buf[12*i:])), StartOffset: int64(binary.BigEndian.Uint64(buf[12*i+4:]))}
		if entries[i].Epoch < 1 || entries[i].StartOffset < 0 || (i > 0 && (entries[i].Epoch <= entries[i-1].Epoch || entries[i].StartOffset < entries[i-1].StartOffset)) {
			return nil, fmt.Errorf("epoch entry %d (%v) is out of order or invalid: %w", i+1, entries[i], ErrProtocol)
		}
	}
	return entries, nil
}

// epochAnswer is what the master answers a hello.
type epochAnswer struct {
	found     bool
	point     engine.ConsistentPoint
	masterEnd int64
	epochs    []engine.EpochEntry
}

// answerEpochHello reads the rest of a slave's hello (the marker was its
// first 8 bytes) and answers it; the sender is still waiting for the
// first report, so the reader writes.
func (sc *slaveConn) answerEpochHello() error {
	var head [8]byte
	if _, err := io.ReadFull(sc.c, head[:]); err != nil {
		return fmt.Errorf("read the slave's epoch hello: %w", err)
	}
	slaveEnd := int64(binary.BigEndian.Uint64(head[:]))
	local, err := readEpochs(sc.c)
	if err != nil {
		return fmt.Errorf("read the slave's epoch history: %w", err)
	}
	if slaveEnd < 0 {
		return fmt.Errorf("the slave says its CommitLog ends at %d: %w", slaveEnd, ErrProtocol)
	}
	mine := sc.m.store.Epochs()
	end := sc.m.reader.End()
	point, found := engine.FindConsistentPoint(local, slaveEnd, mine, end)
	b := appendMarker(nil)
	f := uint32(0)
	if found {
		f = 1
	}
	b = binary.BigEndian.AppendUint32(b, f)
	b = binary.BigEndian.AppendUint32(b, uint32(point.Epoch))
	b = binary.BigEndian.AppendUint64(b, uint64(point.Offset))
	b = binary.BigEndian.AppendUint64(b, uint64(end))
	b = appendEpochs(b, mine)
	sc.c.SetWriteDeadline(time.Now().Add(sc.m.opts.HousekeepingInterval))
	if _, err := sc.c.Write(b); err != nil {
		return fmt.Errorf("answer the slave's epoch hello: %w", err)
	}
	sc.m.log.Info("ha master: fork-point handshake", slog.String("slave", sc.addr), slog.Int64("slaveEnd", slaveEnd),
		slog.Int("slaveEpochs", len(local)), slog.Bool("found", found), slog.Int("epoch", int(point.Epoch)),
		slog.Int64("point", point.Offset), slog.Int64("masterEnd", end))
	return nil
}

// epochHandshake sends the hello and reads the answer.
func (ss *session) epochHandshake(local []engine.EpochEntry, end int64) (epochAnswer, error) {
	b := appendMarker(nil)
	b = binary.BigEndian.AppendUint64(b, uint64(end))
	b = appendEpochs(b, local)
	ss.c.SetWriteDeadline(time.Now().Add(ss.s.opts.HousekeepingInterval))
	if _, err := ss.c.Write(b); err != nil {
		return epochAnswer{}, fmt.Errorf("send the epoch hello to the master %s: %w", ss.addr, err)
	}
	ss.c.SetReadDeadline(time.Now().Add(ss.s.opts.HousekeepingInterval))
	var head [32]byte
	if _, err := io.ReadFull(ss.c, head[:8]); err != nil {
		return epochAnswer{}, fmt.Errorf("read the master %s's epoch answer: %w", ss.addr, err)
	}
	if m := int64(binary.BigEndian.Uint64(head[:8])); m != epochMarker {
		return epochAnswer{}, fmt.Errorf("the master %s answered the epoch hello with %s, not the handshake: "+
			"a master without the fork-point handshake (turn EpochHandshake off to replicate it classically): %w", ss.addr, asText(m), ErrProtocol)
	}
	if _, err := io.ReadFull(ss.c, head[8:32]); err != nil {
		return epochAnswer{}, fmt.Errorf("read the master %s's epoch answer: %w", ss.addr, err)
	}
	a := epochAnswer{found: binary.BigEndian.Uint32(head[8:]) == 1,
		point:     engine.ConsistentPoint{Epoch: int32(binary.BigEndian.Uint32(head[12:])), Offset: int64(binary.BigEndian.Uint64(head[16:]))},
		masterEnd: int64(binary.BigEndian.Uint64(head[24:]))}
	var err error
	if a.epochs, err = readEpochs(ss.c); err != nil {
		return epochAnswer{}, fmt.Errorf("read the master %s's epoch history: %w", ss.addr, err)
	}
	ss.c.SetReadDeadline(time.Time{})
	if a.found && (a.point.Offset < 0 || a.point.Offset > end || a.point.Offset > a.masterEnd) {
		return epochAnswer{}, fmt.Errorf("the master %s answered the fork point %d, outside the slave's [0, %d] or its own end %d: %w",
			ss.addr, a.point.Offset, end, a.masterEnd, ErrProtocol)
	}
	return a, nil
}

// planFork turns the master's answer into where the session starts: the
// unit before the point is compared, the log cut at the point, and the
// master's later epochs recorded as their bytes arrive. It returns the
// first report (verifyFrom) and the end of what is compared (verifyEnd).
func (ss *session) planFork(ctx context.Context, a epochAnswer, local []engine.EpochEntry, verifyFrom, end int64) (int64, int64, error) {
	s := ss.s
	switch {
	case a.found:
		ss.common = a.point.Epoch
		ss.epochs = nil
		for _, e := range a.epochs {
			if e.Epoch > a.point.Epoch {
				ss.epochs = append(ss.epochs, e)
			}
		}
		p := a.point.Offset
		if err := ss.checkFork(a, local, p, end); err != nil {
			return 0, 0, err
		}
		if p == end {
			return verifyFrom, end, nil // nothing to cut: compare the newest record as classic mode does
		}
		ss.cutAt = p
		if p == 0 || p <= s.store.MinOffset() {
			return p, p, nil // nothing before the point to compare with
		}
		from, err := s.store.UnitBefore(ctx, p)
		if err != nil {
			return 0, 0, fmt.Errorf("the master %s's fork point %d is not a record boundary of this slave's CommitLog: %w: %w", ss.addr, p, ErrDiverged, err)
		}
		return from, p, nil
	case len(local) > 0:
		return 0, 0, fmt.Errorf("the master %s's epochs %v share none with this slave's %v (its CommitLog ends at %d): "+
			"the slave's log is another history. %s: %w: %w", ss.addr, a.epochs, local, end, ss.repairAdvice(), ErrNoCommonEpoch, ErrDiverged)
	}
	// No history of its own: a new replica, or one that replicated
	// classically; its newest record is compared as in classic mode and
	// the master's epochs recorded as their bytes arrive.
	ss.epochs = a.epochs
	return verifyFrom, end, nil
}

// checkFork refuses the forks the epoch histories do not prove safe to
// cut: a master whose newest epoch is older than the slave's (replaced by
// an election since), and a master shorter than the slave in the master's
// own current epoch — it lost records of its epoch that the slave holds,
// which it may have acknowledged; those are never cut by themselves. A cut
// is automatic only when the master moved on to a later epoch than the
// common one: the slave's bytes past the point were then written by a
// master that no election kept, and the all-in-sync acknowledgement says
// no Put of them was acknowledged.
func (ss *session) checkFork(a epochAnswer, local []engine.EpochEntry, p, end int64) error {
	masterLast := a.epochs[len(a.epochs)-1] // found: the master has the common epoch
	if n := len(local); n > 0 && local[n-1].Epoch > masterLast.Epoch {
		return fmt.Errorf("the master %s is in epoch %d, this slave has seen epoch %d (from %d): a newer master was elected; "+
			"follow it instead: %w", ss.addr, masterLast.Epoch, local[n-1].Epoch, local[n-1].StartOffset, ErrStaleMaster)
	}
	if p < end && a.point.Epoch == masterLast.Epoch {
		return fmt.Errorf("the master %s's CommitLog ends at %d in its current epoch %d, but this slave holds up to %d of that epoch: "+
			"the master lost records of its own epoch (a restart before its flush?) that may have been acknowledged. %s: %w",
			ss.addr, a.masterEnd, masterLast.Epoch, end, ss.repairAdvice(), ErrDiverged)
	}
	return nil
}

// cut truncates the slave's log at the fork point.
func (ss *session) cut(ctx context.Context, point, end int64) error {
	res, err := ss.s.store.TruncateOnline(ctx, point)
	if err != nil {
		return fmt.Errorf("cut the slave's CommitLog at the fork point %d with the master %s: %w", point, ss.addr, err)
	}
	ss.s.log.Warn("ha slave: cut the CommitLog at the fork point with the master", slog.String("master", ss.addr),
		slog.Int64("point", point), slog.Int64("oldEnd", end), slog.Int64("cutBytes", res.CutBytes), slog.Any("savedTo", res.SavedTo))
	ss.s.update(func(st *SlaveStatus) { st.Truncations++ })
	return nil
}

// cutNow runs once the unit before the fork point matched the master's
// (or there is none): the cut, if one is planned, then settleEpochs.
func (ss *session) cutNow(ctx context.Context) error {
	if ss.cutAt >= 0 {
		if err := ss.cut(ctx, ss.cutAt, ss.s.store.MaxOffset()); err != nil {
			return err
		}
		ss.cutAt = -1
	}
	return ss.settleEpochs(ctx)
}

// settleEpochs runs once the slave's log is known to be the master's up
// to where it resumes: the slave's own epochs after the common one go.
func (ss *session) settleEpochs(ctx context.Context) error {
	if ss.common <= 0 {
		return nil
	}
	if err := ss.s.store.DropEpochsAfter(ctx, ss.common); err != nil {
		return fmt.Errorf("drop this slave's epochs after the common epoch %d: %w", ss.common, err)
	}
	ss.common = 0
	return nil
}

// recordEpochs records the master's epochs that the bytes up to to reach
// into, before they are appended.
func (ss *session) recordEpochs(ctx context.Context, to int64) error {
	for len(ss.epochs) > 0 && ss.epochs[0].StartOffset < to {
		e := ss.epochs[0]
		if err := ss.s.store.AppendEpoch(ctx, e.Epoch, e.StartOffset); err != nil {
			return fmt.Errorf("record the master's epoch %v: %w", e, err)
		}
		ss.epochs = ss.epochs[1:]
	}
	return nil
}
