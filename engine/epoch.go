package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/mqstore/mqstore/engine/storefs"
)

// The epoch file is a store's master-epoch history: for every epoch in
// which its CommitLog took records (as a master, or copied from one), the
// offset where that epoch's records start. A replica that returns to a new
// master finds with it the last (epoch, offset) both histories share
// (FindConsistentPoint) and cuts what follows (Store.TruncateOnline): the
// records an old master wrote that no in-sync replica acknowledged.
//
// The layout is RocketMQ's epochFileCheckpoint (its CheckpointFile), so its
// tools and brokers read it:
//
//	<N>\n
//	<crc32 of the N entry lines, masked to 31 bits>\n
//	<epoch>-<startOffset>\n   N times
//
// Unlike RocketMQ's (a plain write, no fsync, a .bak copy), it is replaced
// durably (storefs.WriteFileAtomic); no .bak is written, and one is read
// only when the file itself is missing (a store RocketMQ wrote).

// epochFileName is the epoch file in the store directory.
const epochFileName = "epochFileCheckpoint"

// Epoch-file errors; test with errors.Is.
var (
	// ErrEpochFile: the epoch file is damaged (count, CRC, order). Open
	// stops; the error names the file and the repair.
	ErrEpochFile = errors.New("engine: damaged epoch file")
	// ErrEpochInvalid: an epoch entry that cannot be recorded — an epoch
	// below 1, a negative start offset, or a start before the newest
	// entry's (the CommitLog was cut without its epochs).
	ErrEpochInvalid = errors.New("engine: invalid epoch entry")
)

// EpochEntry is one epoch of a store's history: its records start at
// StartOffset and end where the next epoch starts (the last one: at the
// end of the CommitLog).
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

func (e EpochEntry) String() string { return fmt.Sprintf("%d-%d", e.Epoch, e.StartOffset) }

// epochCache is a store's epoch history in memory; every change is written
// to the file before it is visible.
type epochCache struct {
	mu      sync.Mutex
	path    string
	entries []EpochEntry
}

// encodeEpochs is the file's content for entries.
func encodeEpochs(entries []EpochEntry) []byte {
	var lines []byte
	for _, e := range entries {
		lines = strconv.AppendInt(lines, int64(e.Epoch), 10)
		lines = append(lines, '-')
		lines = strconv.AppendInt(lines, e.StartOffset, 10)
		lines = append(lines, '\n')
	}
	out := strconv.AppendInt(nil, int64(len(entries)), 10)
	out = append(out, '\n')
	out = strconv.AppendUint(out, uint64(epochCRC(lines)), 10)
	out = append(out, '\n')
	return append(out, lines...)
}

// epochCRC is RocketMQ's UtilAll.crc32: CRC-32 (IEEE) masked to 31 bits.
func epochCRC(lines []byte) uint32 { return crc32.ChecksumIEEE(lines) & 0x7fffffff }

// decodeEpochs parses and checks an epoch file: the count, the CRC, and
// epochs and start offsets strictly increasing. Lines may end in \r\n (a
// file a Java broker wrote on Windows).
func decodeEpochs(data []byte) ([]EpochEntry, error) {
	lines := bytes.Split(data, []byte("\n"))
	if n := len(lines); n > 0 && len(lines[n-1]) == 0 {
		lines = lines[:n-1] // the newline that ends the last line
	}
	for i := range lines {
		lines[i] = bytes.TrimSuffix(lines[i], []byte("\r"))
	}
	if len(lines) < 2 {
		return nil, fmt.Errorf("%d lines, want at least the count and the CRC", len(lines))
	}
	n, err := strconv.Atoi(string(lines[0]))
	if err != nil || n < 0 {
		return nil, fmt.Errorf("the count %q is not a number of entries", lines[0])
	}
	if got := len(lines) - 2; got != n {
		return nil, fmt.Errorf("the count says %d entries, the file has %d", n, got)
	}
	want, err := strconv.ParseUint(string(lines[1]), 10, 32)
	if err != nil {
		return nil, fmt.Errorf("the CRC %q is not a number", lines[1])
	}
	var body []byte
	entries := make([]EpochEntry, 0, n)
	for i, line := range lines[2:] {
		body = append(append(body, line...), '\n')
		ep, start, ok := bytes.Cut(line, []byte("-"))
		e, err1 := strconv.ParseInt(string(ep), 10, 32)
		o, err2 := strconv.ParseInt(string(start), 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("entry %d %q is not <epoch>-<startOffset>", i+1, line)
		}
		entries = append(entries, EpochEntry{Epoch: int32(e), StartOffset: o})
	}
	if got := epochCRC(body); uint64(got) != want {
		return nil, fmt.Errorf("the CRC of the entries is %d, the file says %d", got, want)
	}
	for i, e := range entries {
		switch {
		case e.Epoch < 1 || e.StartOffset < 0:
			return nil, fmt.Errorf("entry %d (%v) has an epoch below 1 or a negative offset", i+1, e)
		case i > 0 && (e.Epoch <= entries[i-1].Epoch || e.StartOffset <= entries[i-1].StartOffset):
			return nil, fmt.Errorf("entry %d (%v) does not follow entry %d (%v): epochs and start offsets must increase", i+1, e, i, entries[i-1])
		}
	}
	return entries, nil
}

// loadEpochs reads the epoch file of a store whose CommitLog runs from
// minOffset to end (recovered): entries that start past end go (a crash
// lost the records they were written for; one that starts at end stays),
// and so do leading ones whose records retention deleted. It writes the
// file back when it dropped anything.
func (s *Store) loadEpochs(minOffset, end int64) error {
	c := &s.epochs
	c.mu.Lock()
	defer c.mu.Unlock()
	c.path = filepath.Join(s.dir, epochFileName)
	path := c.path
	data, err := s.fs.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(data) == 0) {
		bak := path + ".bak"
		if b, berr := s.fs.ReadFile(bak); berr == nil && len(b) > 0 {
			s.opts.Logger.Warn("epoch file missing; reading its .bak", slog.String("file", bak))
			path, data, err = bak, b, nil
		} else if berr != nil && !errors.Is(berr, fs.ErrNotExist) {
			return fmt.Errorf("read epoch file %s: %w", bak, berr)
		}
	}
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(data) == 0) {
		c.entries = nil
		return nil
	}
	if err != nil {
		return fmt.Errorf("read epoch file %s: %w", path, err)
	}
	entries, err := decodeEpochs(data)
	if err != nil {
		return fmt.Errorf("epoch file %s: %v; the store cannot say which master epochs its CommitLog holds. "+
			"Repair: copy the file from a replica of the same history, or move it aside and let this store copy "+
			"its master anew (an empty store): %w: %w", path, err, ErrEpochFile, ErrCorrupt)
	}
	kept := entries
	for len(kept) > 0 && kept[len(kept)-1].StartOffset > end {
		kept = kept[:len(kept)-1]
	}
	kept = trimEpochPrefix(kept, minOffset)
	if len(kept) != len(entries) {
		s.opts.Logger.Info("epoch file: dropped entries past the CommitLog's end or before its start",
			slog.Int("kept", len(kept)), slog.Int("had", len(entries)), slog.Int64("minOffset", minOffset), slog.Int64("end", end))
		if err := storefs.WriteFileAtomic(s.fs, c.path, encodeEpochs(kept)); err != nil {
			return fmt.Errorf("epoch file: %w", err)
		}
	}
	c.entries = kept
	return nil
}

// trimEpochPrefix drops leading entries whose records all precede
// minOffset (the next entry starts at or before it); the last entry stays.
func trimEpochPrefix(entries []EpochEntry, minOffset int64) []EpochEntry {
	for len(entries) > 1 && entries[1].StartOffset <= minOffset {
		entries = entries[1:]
	}
	return entries
}

// writeEpochsLocked makes entries the history, durably, then in memory.
func (s *Store) writeEpochsLocked(entries []EpochEntry) error {
	c := &s.epochs
	if err := storefs.WriteFileAtomic(s.fs, c.path, encodeEpochs(entries)); err != nil {
		return fmt.Errorf("epoch file: %w", err)
	}
	c.entries = entries
	return nil
}

// AppendEpoch records, durably, that the CommitLog's records of epoch
// start at startOffset: a master calls it once it is elected, with its
// CommitLog's end (after its flush), before it takes a Put; a slave, with
// its master's entries, before it appends the records of one. Entries of
// epoch and later go first (a history rewritten from that epoch on), and so
// does an epoch that holds no record (the newest entry starting at
// startOffset). Bad input (an epoch below 1, a negative offset, an offset
// before the newest remaining entry's) is ErrEpochInvalid and changes
// nothing.
func (s *Store) AppendEpoch(ctx context.Context, epoch int32, startOffset int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("append epoch %d: %w", epoch, err)
	}
	if epoch < 1 || startOffset < 0 {
		return fmt.Errorf("append epoch %d at %d: epochs start at 1 and offsets at 0: %w", epoch, startOffset, ErrEpochInvalid)
	}
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return fmt.Errorf("append epoch %d: %w", epoch, ErrClosed)
	}
	return s.appendEpoch(epoch, startOffset)
}

// appendEpoch is AppendEpoch under the close lock.
func (s *Store) appendEpoch(epoch int32, startOffset int64) error {
	if epoch < 1 || startOffset < 0 {
		return fmt.Errorf("append epoch %d at %d: epochs start at 1 and offsets at 0: %w", epoch, startOffset, ErrEpochInvalid)
	}
	c := &s.epochs
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.entries
	for len(kept) > 0 && kept[len(kept)-1].Epoch >= epoch {
		kept = kept[:len(kept)-1]
	}
	if n := len(kept); n > 0 {
		last := kept[n-1]
		switch {
		case last.StartOffset > startOffset:
			return fmt.Errorf("append epoch %d at %d: epoch %d starts later, at %d (truncate the CommitLog with TruncateOnline, which cuts its epochs too): %w",
				epoch, startOffset, last.Epoch, last.StartOffset, ErrEpochInvalid)
		case last.StartOffset == startOffset:
			kept = kept[:n-1] // it holds no record: it tells no replica anything
		}
	}
	next := append(append(make([]EpochEntry, 0, len(kept)+1), kept...), EpochEntry{Epoch: epoch, StartOffset: startOffset})
	next = trimEpochPrefix(next, s.MinOffset())
	if err := s.writeEpochsLocked(next); err != nil {
		return fmt.Errorf("append epoch %d at %d: %w", epoch, startOffset, err)
	}
	s.opts.Logger.Info("epoch recorded", slog.Int("epoch", int(epoch)), slog.Int64("startOffset", startOffset))
	return nil
}

// StartEpoch is what a store elected master for epoch does before it takes
// a Put: with Puts and replicated appends held off, it flushes the whole
// CommitLog and records (epoch, its end) durably (AppendEpoch's rules);
// then it waits until dispatch has reached that end, so the ConsumeQueues
// and the queue offsets hold every record of the earlier epochs. It returns
// the entry. A slave store is refused (ErrSlaveReadOnly): reopen it as a
// master first.
func (s *Store) StartEpoch(ctx context.Context, epoch int32) (EpochEntry, error) {
	if err := ctx.Err(); err != nil {
		return EpochEntry{}, fmt.Errorf("start epoch %d: %w", epoch, err)
	}
	if epoch < 1 {
		return EpochEntry{}, fmt.Errorf("start epoch %d: epochs start at 1: %w", epoch, ErrEpochInvalid)
	}
	s.closeMu.Lock()
	switch {
	case s.closed:
		s.closeMu.Unlock()
		return EpochEntry{}, fmt.Errorf("start epoch %d: %w", epoch, ErrClosed)
	case s.opts.Role == Slave:
		s.closeMu.Unlock()
		return EpochEntry{}, fmt.Errorf("start epoch %d: the store is a slave (reopen it as a master): %w", epoch, ErrSlaveReadOnly)
	}
	end, err := s.flushAll(ctx)
	if err == nil {
		err = s.appendEpoch(epoch, end)
	}
	s.closeMu.Unlock()
	if err != nil {
		return EpochEntry{}, fmt.Errorf("start epoch %d: %w", epoch, err)
	}
	if err := s.WaitDispatched(ctx, end); err != nil {
		return EpochEntry{}, fmt.Errorf("start epoch %d: %w", epoch, err)
	}
	return EpochEntry{Epoch: epoch, StartOffset: end}, nil
}

// DropEpochsAfter removes, durably, the entries of the epochs after epoch:
// a replica that found its fork point with a master in epoch drops the
// later epochs of its own history, which the master's does not have (their
// records, if any, were cut at the fork point).
func (s *Store) DropEpochsAfter(ctx context.Context, epoch int32) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("drop the epochs after %d: %w", epoch, err)
	}
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return fmt.Errorf("drop the epochs after %d: %w", epoch, ErrClosed)
	}
	c := &s.epochs
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.entries
	for len(kept) > 0 && kept[len(kept)-1].Epoch > epoch {
		kept = kept[:len(kept)-1]
	}
	if len(kept) == len(c.entries) {
		return nil
	}
	if err := s.writeEpochsLocked(append([]EpochEntry(nil), kept...)); err != nil {
		return fmt.Errorf("drop the epochs after %d: %w", epoch, err)
	}
	return nil
}

// cutEpochsLocked drops, durably, the entries that start past offset (the
// CommitLog is being cut there); c.mu held.
func (s *Store) cutEpochsLocked(offset int64) error {
	c := &s.epochs
	kept := c.entries
	for len(kept) > 0 && kept[len(kept)-1].StartOffset > offset {
		kept = kept[:len(kept)-1]
	}
	if len(kept) == len(c.entries) {
		return nil
	}
	return s.writeEpochsLocked(append([]EpochEntry(nil), kept...))
}

// Epochs returns the epoch history, oldest first.
func (s *Store) Epochs() []EpochEntry {
	c := &s.epochs
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]EpochEntry(nil), c.entries...)
}

// LastEpoch returns the newest epoch entry, and false when there is none.
func (s *Store) LastEpoch() (EpochEntry, bool) {
	c := &s.epochs
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) == 0 {
		return EpochEntry{}, false
	}
	return c.entries[len(c.entries)-1], true
}

// ConsistentPoint is where two epoch histories part: the last epoch both
// hold with the same start, and the offset up to which both hold its
// records.
type ConsistentPoint struct {
	Epoch  int32
	Offset int64
}

// FindConsistentPoint finds the last (epoch, offset) a replica's history
// (local, its CommitLog ending at localEnd) shares with its master's
// (master, ending at masterEnd) — RocketMQ's findConsistentPoint: walking
// the replica's epochs from the newest, the first one the master holds with
// the same start offset; the point is the lesser of the two ends of that
// epoch (an epoch ends where the next one starts, the newest at the log's
// end). false when there is none: an empty history, or no epoch in common.
// The replica holds the master's records below the point and must cut
// what it holds past it.
func FindConsistentPoint(local []EpochEntry, localEnd int64, master []EpochEntry, masterEnd int64) (ConsistentPoint, bool) {
	end := func(h []EpochEntry, i int, logEnd int64) int64 {
		if i+1 < len(h) {
			return h[i+1].StartOffset
		}
		return logEnd
	}
	for i := len(local) - 1; i >= 0; i-- {
		e := local[i]
		for j := len(master) - 1; j >= 0; j-- {
			m := master[j]
			if m.Epoch != e.Epoch {
				continue
			}
			if m.StartOffset != e.StartOffset {
				break // the same epoch number from another history
			}
			off := min(end(local, i, localEnd), end(master, j, masterEnd))
			return ConsistentPoint{Epoch: e.Epoch, Offset: off}, true
		}
	}
	return ConsistentPoint{}, false
}
