package engine

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/mqstore/mqstore/mappedfile"
)

// Retention defaults (RocketMQ's fileReservedTime, deleteWhen, diskMaxUsedSpaceRatio).
const (
	DefaultFileReservedTime = 72 * time.Hour
	DefaultDeleteWhen       = "04"
	DefaultDiskMaxUsedRatio = 75
	DefaultCleanInterval    = 10 * time.Second
)

// CheckDeleteWhen reports whether s is a valid Options.DeleteWhen (hours
// 0-23 separated by ';', or "*"); the error wraps ErrInvalidOption.
func CheckDeleteWhen(s string) error {
	_, err := parseDeleteWhen(s)
	return err
}

// parseDeleteWhen parses RocketMQ's deleteWhen: hours separated by ';'
// ("04", "04;16"), or "*" for any hour.
func parseDeleteWhen(s string) (map[int]bool, error) {
	hours := map[int]bool{}
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "*" {
			for h := 0; h < 24; h++ {
				hours[h] = true
			}
			continue
		}
		h, err := strconv.Atoi(part)
		if err != nil || h < 0 || h > 23 {
			return nil, fmt.Errorf("DeleteWhen %q: %q is not an hour 0-23: %w", s, part, ErrInvalidOption)
		}
		hours[h] = true
	}
	return hours, nil
}

// cleaner is the retention service (RocketMQ's CleanCommitLogService and
// CleanConsumeQueueService): every CleanInterval it deletes CommitLog
// segments older than FileReservedTime at the DeleteWhen hours, or, while
// the disk is fuller than DiskMaxUsedRatio, the oldest ones whatever their
// age — at most maxDeletesPerPass per pass, never the active segment nor
// one not yet flushed and dispatched; ConsumeQueue and index files whose
// messages are gone follow.
type cleaner struct {
	service
	store *Store
}

func (c *cleaner) run() {
	defer close(c.done)
	if c.store.opts.NoRetention {
		<-c.stop
		return
	}
	ticker := time.NewTicker(c.store.opts.CleanInterval)
	defer ticker.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-ticker.C:
		case <-c.wake:
		}
		if _, err := c.store.CleanExpired(context.Background()); err != nil {
			c.store.opts.Logger.Error("retention", slog.Any("err", err))
		}
	}
}

// diskUsedPercent returns how full the store's file system is, as df
// shows it: used blocks over used plus those still available to the store
// (a non-root process). Blocks reserved for root count as neither: on a
// file system with a large reserve, 1 − available/total would call a
// one-third-full disk full and make retention delete data.
func diskUsedPercent(dir string) (float64, error) {
	used, avail, err := diskBlocks(dir)
	if err != nil {
		return 0, err
	}
	if total := used + avail; total > 0 {
		return 100 * used / total, nil
	}
	return 0, nil
}

// maxDeletesPerPass bounds the CommitLog segments one retention pass
// deletes (RocketMQ's DELETE_FILES_BATCH_MAX): a full disk is relieved over
// a few passes, never by a burst of unlinks that stalls the store.
const maxDeletesPerPass = 10

// CleanExpired runs one retention pass now and returns the number of
// CommitLog segments deleted: oldest first, at most maxDeletesPerPass,
// never the active segment, and never one holding bytes not yet flushed or
// not yet dispatched (a flush or dispatch in progress never meets a deleted
// segment). A segment being read is deleted from the directory at once, but
// its memory stays until the reader releases it.
func (s *Store) CleanExpired(ctx context.Context) (int, error) {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return 0, ErrClosed
	}
	s.cleanMu.Lock() // one pass at a time (the service and callers)
	defer s.cleanMu.Unlock()
	now := s.opts.now()
	timeUp := s.deleteHours[now.Hour()]
	used, err := s.opts.diskUsed(s.dir)
	if err != nil {
		return 0, err
	}
	spaceFull := used > float64(s.opts.DiskMaxUsedRatio)
	if spaceFull && s.pool != nil {
		// Pooled files are space retention can give back at once.
		if n, err := s.pool.empty(); n > 0 || err != nil {
			s.opts.Logger.Warn("the disk is full: removed the pooled CommitLog segments", slog.Int("removed", n), slog.Any("err", err))
		}
	}
	if !timeUp && !spaceFull {
		return 0, nil
	}
	deleted := 0
	for deleted < maxDeletesPerPass {
		files := s.log.queue.Files()
		if len(files) < 2 {
			break // never the active segment
		}
		end := files[0].FromOffset() + files[0].SizeBytes()
		if end > s.log.flushedOffset.Load() || end > s.logics.dispatchedOffset.Load() {
			break // not durable yet, or consumers have not got it yet
		}
		expired, err := s.segmentExpired(files[0], files[1], now)
		if err != nil {
			return deleted, err
		}
		if !expired && !spaceFull {
			break
		}
		if s.keptForSlave(files[0], end, spaceFull, used) {
			break
		}
		var keep func(mappedfile.MappedFile) (bool, error)
		if s.pool != nil {
			keep = func(mf mappedfile.MappedFile) (bool, error) { return s.pool.retire(mf, spaceFull) }
		}
		if err := s.log.queue.DeleteFirstOr(keep); err != nil {
			return deleted, err
		}
		deleted++
		s.opts.Logger.Info("retention deleted a CommitLog segment", slog.String("path", files[0].Path()),
			slog.Bool("diskFull", spaceFull), slog.Float64("diskUsedPercent", used))
		if spaceFull {
			if used, err = s.opts.diskUsed(s.dir); err != nil || used <= float64(s.opts.DiskMaxUsedRatio) {
				spaceFull = false
			}
		}
	}
	if deleted > 0 {
		return deleted, s.trimLogics(ctx)
	}
	return deleted, nil
}

// keptForSlave reports whether retention keeps seg, which ends at end,
// for the slowest connected slave that has not received all of it: while
// the store holds at most SlaveRetentionMaxBytes and the disk is not full.
// When it deletes the segment anyway it logs which slave loses it and why.
func (s *Store) keptForSlave(seg mappedfile.MappedFile, end int64, spaceFull bool, used float64) bool {
	slave, ok := s.slowestSlave()
	if !ok || s.opts.SlaveRetentionMaxBytes == SlaveRetentionIgnore || slave.AckedOffset >= end {
		return false
	}
	held := s.log.queue.WroteOffset() - seg.FromOffset()
	if !spaceFull && held <= s.opts.SlaveRetentionMaxBytes {
		return true
	}
	why := fmt.Sprintf("the store holds %d CommitLog bytes, more than SlaveRetentionMaxBytes %d", held, s.opts.SlaveRetentionMaxBytes)
	if spaceFull {
		why = fmt.Sprintf("the disk is %.0f%% full, more than DiskMaxUsedRatio %d%%", used, s.opts.DiskMaxUsedRatio)
	}
	s.opts.Logger.Warn("retention deletes a CommitLog segment a connected slave has not received", slog.String("path", seg.Path()),
		slog.String("slave", slave.Addr), slog.Int64("slaveAcked", slave.AckedOffset), slog.Int64("segmentEnd", end), slog.String("why", why))
	return false
}

// trimLogics deletes the ConsumeQueue and index files wholly before the
// CommitLog's new first offset.
func (s *Store) trimLogics(ctx context.Context) error {
	minOffset := s.MinOffset()
	for _, q := range s.logics.queues() {
		if _, err := q.DeleteBefore(ctx, minOffset); err != nil {
			return fmt.Errorf("retention of consume queue %s/%d: %w", q.Topic(), q.QueueID(), err)
		}
	}
	if _, err := s.logics.index.DeleteBefore(ctx, minOffset); err != nil {
		return fmt.Errorf("retention of index files: %w", err)
	}
	return nil
}

// segmentExpired reports whether seg's newest message is older than the
// reserved time: its end time is the store time of the first record of the
// segment after it.
func (s *Store) segmentExpired(seg, next mappedfile.MappedFile, now time.Time) (bool, error) {
	endMs, ok := firstStoreTimestamp(next)
	if !ok {
		return false, nil // the next segment has no record yet: seg is the newest data
	}
	return now.Sub(time.UnixMilli(endMs)) > s.opts.FileReservedTime, nil
}
