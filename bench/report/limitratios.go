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
		out = append(out, groupCommitRatios(f, c)...)
	}
	if c.Workload == "latency" && c.Flush == "sync" {
		add("device", runfile.LimitDeviceSync, 0, "p50Ns", "p50Ns", "open-loop p50 (the median of the repeats' p50s) ÷ one 4 KiB pwrite + fdatasync p50 on a fallocated file: how many device syncs a durable append costs")
		add("device", runfile.LimitDeviceSyncPrewritten, 0, "p50Ns", "p50Ns", "open-loop p50 (the median of the repeats' p50s) ÷ one 4 KiB pwrite + fdatasync p50 on a pre-written file: how many device syncs a durable append costs")
		add("device", runfile.LimitFioSync, 0, "p50Ns", "p50Ns", "open-loop p50 (the median of the repeats' p50s) ÷ fio's fdatasync p50 (fio times the sync apart from its 4 KiB write, so this ratio runs a little high)")
	}
	return out
}

// Ratio kinds of the group-commit limit: on written extents (a
// pre-written file), and on a fallocated file for the cells whose windows
// made fallocated segments.
const (
	kindGroupCommit           = "group-commit"
	kindGroupCommitFallocated = "group-commit-fallocated"
)

// groupCommitRatios relates a sync throughput cell to the device's
// group-commit limit at its producer count and record size: always on
// written extents (what a pre-written or reused segment gives: a sync
// commits data only), and also on a fallocated file when its measured
// windows made fallocated segments (then its syncs also committed extent
// conversions, which the written-extent limit does not pay).
func groupCommitRatios(f *runfile.RunFile, c *runfile.Cell) []runfile.Ratio {
	var out []runfile.Ratio
	if ref, against, how, ok := groupCommitLimit(f, c, true); ok {
		out = append(out, ratioOf(kindGroupCommit, c, against, "msgsPerSec", ref,
			fmt.Sprintf("acknowledged msgs/s ÷ the most the device made durable with %d %s of %d B per durable write on written extents (a pre-written file; %s): how close the group commit comes to the device where its segments have written extents (pre-written or reused)",
				c.Producers, plural(c.Producers, "record", "records"), c.RecordBytes, how)))
	}
	if made := fallocatedSegments(c); made > 0 {
		if ref, against, how, ok := groupCommitLimit(f, c, false); ok {
			out = append(out, ratioOf(kindGroupCommitFallocated, c, against, "msgsPerSec", ref,
				fmt.Sprintf("acknowledged msgs/s ÷ the same on a fallocated file (%s; each sync also commits an extent conversion): its measured windows made %d fallocated segments, written without pre-written zeros",
					how, made)))
		}
	}
	return out
}

// fallocatedSegments is how many fallocated segments c's measured windows
// made (0 in run files from before they were counted).
func fallocatedSegments(c *runfile.Cell) uint64 {
	var n uint64
	for _, r := range c.Repeats {
		if !r.Warm && r.Store != nil {
			n += r.Store.SegmentsFallocated
		}
	}
	return n
}

// groupCommitLimit is the device's group-commit limit for a sync
// throughput cell on written extents or on a fallocated file: the best of
// that file's limits' msgs/s (each method, one or two in flight) at its
// producer count and record size, on its target. The interval of the best
// of figures, each within its own interval, is [the highest low, the
// highest high]. A two-in-flight limit of a run file older than schema 5
// is no bound (see boundsItsProducers). It returns the limits it took (for
// the ratio's against) and how they wrote.
func groupCommitLimit(f *runfile.RunFile, c *runfile.Cell, written bool) (best runfile.Interval, against, how string, ok bool) {
	var names, ways []string
	inFlight := map[string][]string{}
	for l := range ptrs(f.Limits) {
		way, isGC := runfile.GroupCommitLimit(l.Name)
		if !isGC || way.Written != written || l.Status != runfile.StatusOK || l.Target != c.Target || l.Producers != c.Producers ||
			l.SizeBytes != c.SizeBytes || l.RecordBytes != c.RecordBytes || c.RecordBytes == 0 || !boundsItsProducers(f, l) {
			continue
		}
		iv := l.Interval("msgsPerSec")
		if iv.Median > best.Median {
			best.Median, best.Level = iv.Median, iv.Level
		}
		best.Lo, best.Hi = max(best.Lo, iv.Lo), max(best.Hi, iv.Hi)
		names = appendNew(names, l.Name)
		inFlight[l.Name] = append(inFlight[l.Name], strconv.Itoa(l.InFlight))
		method := "pwrite + fdatasync"
		if way.Direct {
			method = "O_DIRECT pwritev2 RWF_DSYNC"
		}
		if l.InFlight > 1 {
			method += " split over " + strconv.Itoa(l.InFlight) + " in flight"
		}
		ways = append(ways, method)
	}
	if len(names) == 0 {
		return best, "", "", false
	}
	from := make([]string, len(names))
	for i, name := range names {
		from[i] = fmt.Sprintf("%s ×%d (%s in flight)", name, c.Producers, strings.Join(inFlight[name], " or "))
	}
	how = "the best of " + strings.Join(ways, ", ")
	if len(ways) == 1 {
		how = ways[0]
	}
	return best, strings.Join(from, ", "), how, true
}

// boundsItsProducers says whether a group-commit limit keeps no more
// records outstanding than its producer count: every one but the
// two-in-flight limits of run files before schema 5, whose two writers
// each wrote N records per op.
func boundsItsProducers(f *runfile.RunFile, l *runfile.Limit) bool {
	return l.InFlight < 2 || f.Schema >= 5
}
