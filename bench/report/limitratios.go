package report

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/mqstore/mqstore/bench/runfile"
)

// findLimit is the run's measured limit of that name on target (and body
// size, unless 0).
func findLimit(f *runfile.RunFile, name string, size int, target string) *runfile.Limit {
	for l := range ptrs(f.Limits) {
		if l.Name == name && l.Status == runfile.StatusOK && (size == 0 || l.SizeBytes == size) && l.Target == target {
			return l
		}
	}
	return nil
}

// limitRatios relates a cell to the limits beside the store: the device's
// bandwidth and sync latency, the group commit's limit.
func limitRatios(f *runfile.RunFile, c *runfile.Cell) []runfile.Ratio {
	var out []runfile.Ratio
	add := func(kind, name string, size int, fig, limitFig, note string) {
		if l := findLimit(f, name, size, c.Target); l != nil {
			out = append(out, ratioOf(kind, c, l.Name, fig, l.Interval(limitFig), note))
		}
	}
	if c.Workload == "throughput" && c.Flush == "async" && c.DurableMBps > 0 {
		// The device's bandwidth bounds async cells; sync cells are bound
		// by the device's flush latency (below).
		for _, name := range []string{runfile.LimitDeviceSeq, runfile.LimitFioSeq} {
			add("device", name, 0, "durableMBps", "mbPerSec", "durable record MB/s ÷ sequential O_DIRECT MB/s (no sync: what the device accepts)")
		}
		add("device", runfile.LimitDeviceSeqDurable, 0, "durableMBps", "mbPerSec", "durable record MB/s ÷ sequential O_DIRECT MB/s to the fdatasync after them: what the device makes durable")
	}
	if c.Workload == "throughput" && c.Flush == "sync" {
		if ref, against, ok := groupCommitLimit(f, c); ok {
			out = append(out, ratioOf("group-commit", c, against, "msgsPerSec", ref,
				fmt.Sprintf("acknowledged msgs/s ÷ the device's %d records of %d B per write+fdatasync, as one or split over two in flight (msgs/s, the better of the two): how close the group commit comes to the device", c.Producers, c.RecordBytes)))
		}
	}
	if c.Workload == "latency" && c.Flush == "sync" {
		for _, name := range []string{runfile.LimitDeviceSync, runfile.LimitDeviceSyncPrewritten, runfile.LimitFioSync} {
			add("device", name, 0, "p50Ns", "p50Ns", "open-loop p50 ÷ one 4 KiB write+fdatasync p50: how many device syncs a durable append costs")
		}
	}
	return out
}

// groupCommitLimit is the device's group-commit limit for a sync
// throughput cell: the better of the one- and two-in-flight limits'
// msgs/s at its producer count and record size, on its target. The
// interval of the better of two figures, each within its own interval, is
// [the higher low, the higher high]. A two-in-flight limit of a run file
// older than schema 5 is no bound (see boundsItsProducers).
func groupCommitLimit(f *runfile.RunFile, c *runfile.Cell) (runfile.Interval, string, bool) {
	var best runfile.Interval
	var from []string
	for l := range ptrs(f.Limits) {
		if l.Name != runfile.LimitGroupCommit || l.Status != runfile.StatusOK || l.Target != c.Target || l.Producers != c.Producers ||
			l.SizeBytes != c.SizeBytes || l.RecordBytes != c.RecordBytes || c.RecordBytes == 0 || !boundsItsProducers(f, l) {
			continue
		}
		iv := l.Interval("msgsPerSec")
		if iv.Median > best.Median {
			best.Median, best.Level = iv.Median, iv.Level
		}
		best.Lo, best.Hi = max(best.Lo, iv.Lo), max(best.Hi, iv.Hi)
		from = append(from, strconv.Itoa(l.InFlight))
	}
	if len(from) == 0 {
		return best, "", false
	}
	return best, fmt.Sprintf("%s ×%d (%s in flight)", runfile.LimitGroupCommit, c.Producers, strings.Join(from, " or ")), true
}

// boundsItsProducers says whether a group-commit limit keeps no more
// records outstanding than its producer count: every one but the
// two-in-flight limits of run files before schema 5, whose two writers
// each wrote N records per op.
func boundsItsProducers(f *runfile.RunFile, l *runfile.Limit) bool {
	return l.InFlight < 2 || f.Schema >= 5
}
