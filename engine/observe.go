package engine

import "time"

// Read-only figures for exporters (package metrics): they read what the
// store already keeps and change nothing.

// AppendLockHeldFor is how long the current holder of the CommitLog's
// append lock has held it, 0 while it is free: RocketMQ's
// pageCacheLockTimeMills, against which Put judges OS_PAGE_CACHE_BUSY
// (Options.OSPageCacheBusyTimeout).
func (s *Store) AppendLockHeldFor() time.Duration {
	since := s.log.lockedSince.Load()
	if since == 0 {
		return 0
	}
	return max(time.Duration(s.opts.now().UnixNano()-since), 0)
}

// ConsumeQueueStats sums the store's ConsumeQueues.
type ConsumeQueueStats struct {
	// Queues is how many ConsumeQueues are open.
	Queues int
	// Units is how many units (messages) they hold: MaxOffset − MinOffset
	// summed over the queues.
	Units int64
	// FileBytes is the size of their files (whole files: each is
	// preallocated to ConsumeQueueFileSizeBytes).
	FileBytes int64
}

// ConsumeQueueStats returns the ConsumeQueues' sizes.
func (s *Store) ConsumeQueueStats() ConsumeQueueStats {
	var st ConsumeQueueStats
	for _, q := range s.logics.queues() {
		st.Queues++
		st.Units += max(q.MaxOffset()-q.MinOffset(), 0)
		st.FileBytes += q.FileBytes()
	}
	return st
}

// SlaveReports returns the verified slaves of the HA master's last report
// (ReportSlaves), each with the offset it acknowledged; nil on a slave or
// a master without verified slaves.
func (s *Store) SlaveReports() []SlaveReport {
	r := &s.repl
	r.isrMu.Lock()
	defer r.isrMu.Unlock()
	if len(r.verifiedSlaves) == 0 {
		return nil
	}
	return append([]SlaveReport(nil), r.verifiedSlaves...)
}

// QueueCounts returns, for each topic with a ConsumeQueue, one more than
// its highest queue id: the queues the store holds messages in, whatever
// a broker's topic table says.
func (s *Store) QueueCounts() map[string]int32 {
	out := map[string]int32{}
	for _, q := range s.logics.queues() {
		out[q.Topic()] = max(out[q.Topic()], q.QueueID()+1)
	}
	return out
}
