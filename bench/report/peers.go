package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mqstore/mqstore/bench/runfile"
)

// refPeer is the peer users read "sync" against: pebble's WAL alone
// (record.LogWriter, group-committed SyncRecord).
const refPeer = "pebble-wal"

// writeVersusPebbleWAL is each system ÷ pebble-wal at every producer count
// of the run, in the same run and on the same device: sync by acknowledged
// msgs/s (each acknowledgement is durable), async by durable MB/s where
// both report durability during the window (accepted MB/s of an async row
// is what buffers absorbed, which says nothing about durable speed).
func writeVersusPebbleWAL(b *strings.Builder, f *runfile.RunFile) {
	ref := map[string]*runfile.Cell{} // versusKey: flush|producers|size|target
	for c := range ptrs(f.Peers) {
		if c.Backend == refPeer && c.Workload == "throughput" && c.Pressure == "none" {
			ref[versusKey(c)] = c
		}
	}
	if len(ref) == 0 {
		return
	}
	systems := slices.DeleteFunc(allCells(f), func(c *runfile.Cell) bool {
		return c.Workload != "throughput" || c.Pressure != "none" || c.TwinOf != "" || c.Replication != "" || c.Policy != "" || c.Backend == refPeer ||
			ref[versusKey(c)] == nil
	})
	if len(systems) == 0 {
		return
	}
	producers := slices.Sorted(slices.Values(f.Config.Producers))
	b.WriteString("## Against pebble's WAL (each system ÷ `pebble-wal`, same producers, same run)\n\n")
	b.WriteString("`pebble-wal` is pebble's write-ahead log alone — record.LogWriter with group-committed SyncRecord, the strongest Go append-only log with group commit we know — the row to read \"sync\" against. Each entry is the ratio of the medians with the widest ratio the two intervals allow; \"no significant difference\" where the intervals overlap.\n\n")
	if n := messageNote(f); n != "" {
		fmt.Fprintf(b, "Not the same message: %s.\n\n", n)
	}
	for _, flush := range []string{"sync", "async"} {
		writeVersusTable(b, flush, systems, ref, producers)
	}
}

// versusRow is one row of a ÷ pebble-wal table: a system at a body size
// on a target.
type versusRow struct {
	name, target string
	size         int
}

func versusKey(c *runfile.Cell) string {
	return fmt.Sprintf("%s|%d|%d|%s", c.Flush, c.Producers, c.SizeBytes, c.Target)
}

// writeVersusTable is the ÷ pebble-wal table of one flush mode: a row per
// system, a column per producer count.
func writeVersusTable(b *strings.Builder, flush string, systems []*runfile.Cell, ref map[string]*runfile.Cell, producers []int) {
	var rows []versusRow
	cells := map[versusRow]map[int]*runfile.Cell{}
	for _, c := range systems {
		if c.Flush != flush {
			continue
		}
		k := versusRow{name: c.Backend + peerMark(c.Peer), size: c.SizeBytes, target: c.Target}
		if cells[k] == nil {
			cells[k] = map[int]*runfile.Cell{}
			rows = append(rows, k)
		}
		cells[k][c.Producers] = c
	}
	if len(rows) == 0 {
		return
	}
	figure, what := "msgsPerSec", "acknowledged msgs/s (every acknowledgement durable)"
	if flush == "async" {
		figure, what = "durableMBps", "durable MB/s during the window (each system's own records)"
		if !refAsyncMeasured(b, ref) {
			return
		}
	}
	fmt.Fprintf(b, "### %s: %s\n\n", flush, what)
	columns := mapped(producers, func(p int) string { return fmt.Sprintf("%d %s", p, plural(p, "producer", "producers")) })
	t := newTable(b, append([]string{"system", "size>"}, columns...)...)
	var notes []string
	for _, k := range rows {
		row := []string{k.name, runfile.SizeLabel(k.size)}
		for _, p := range producers {
			text := "—"
			if c := cells[k][p]; c != nil {
				var note string
				if text, note = versus(c, ref[versusKey(c)], figure); note != "" && !slices.Contains(notes, note) {
					notes = append(notes, note)
				}
			}
			row = append(row, text)
		}
		t.row(row...)
	}
	b.WriteString("\n")
	writeList(b, "", notes)
}

// refAsyncMeasured reports whether pebble-wal's async durability shows in
// a window; when it does not, every entry would be "—", and it says why
// instead of a table.
func refAsyncMeasured(b *strings.Builder, ref map[string]*runfile.Cell) bool {
	for _, r := range ref {
		if r.Flush == "async" && r.Measured() && !r.DurableAtDrainOnly && r.DurableMBps > 0 {
			return true
		}
	}
	for _, r := range ref {
		if r.Flush == "async" && r.DurableAtDrainOnly {
			fmt.Fprintf(b, "### async\n\nNo ratio: `%s` async reports durable bytes only at Drain (its own statement: \"%s\") — no durable rate to divide by. That is what it does (an accounting limit of the peer, not a failure to keep up); compare async rows by their own durable MB/s in the throughput table, and read the durability table before comparing async with sync.\n\n",
				refPeer, mechanismOf(r))
			break
		}
	}
	return false
}

func versus(c, ref *runfile.Cell, figure string) (text, note string) {
	switch {
	case !c.Measured() || !ref.Measured():
		return "— (" + strings.Join(unmeasuredSides(c, ref), ", ") + ")", ""
	case figure == "durableMBps" && ref.DurableAtDrainOnly:
		return "— ‡", fmt.Sprintf("‡ `%s` %s reports durable bytes only at Drain (its own statement: \"%s\"): no durable rate to divide by — an accounting limit of the peer, not a failure to keep up.",
			ref.Backend, ref.Flush, mechanismOf(ref))
	case figure == "durableMBps" && c.DurableAtDrainOnly:
		return "— ‡", fmt.Sprintf("‡ `%s` %s reports durable bytes only at Drain: no durable rate to divide — an accounting limit of the peer, not a failure to keep up.", c.Backend, c.Flush)
	case figure == "durableMBps" && (c.DurableMBps <= 0 || ref.DurableMBps <= 0):
		return "— (" + strings.Join(noDurableRate(c, ref), ", ") + ")", ""
	}
	text, r, separated := cellRatio("peer", c, ref, figure)
	if r.Missing != "" {
		return text, ""
	}
	if !separated {
		text += " no significant difference"
	}
	if figure == "durableMBps" && (sustainedNo(c) || sustainedNo(ref)) {
		text += " (" + strings.Join(notSustained(c, ref), ", ") + " not sustained)"
	}
	return text, ""
}

// unmeasuredSides names each of the cells that has no figures, with its
// status ("uring failed", "pebble-wal interrupted").
func unmeasuredSides(cs ...*runfile.Cell) []string {
	var out []string
	for _, c := range cs {
		if !c.Measured() {
			out = append(out, c.Backend+" "+c.Status)
		}
	}
	return out
}

// noDurableRate says, for each of the cells without a durable MB/s,
// why: it reports no durable position (in every measured repeat, or in
// some), or its median durable MB/s over the window is 0.
func noDurableRate(cs ...*runfile.Cell) []string {
	var out []string
	for _, c := range cs {
		reps := c.MeasuredRepeats()
		without := len(slices.DeleteFunc(slices.Clone(reps), func(r *runfile.Repeat) bool { return r.Result.Durability != nil }))
		switch {
		case c.DurableMBps > 0:
		case without > 0 && without == len(reps):
			out = append(out, c.Backend+" reports no durable position")
		case without > 0:
			out = append(out, fmt.Sprintf("%s reported no durable position in %d of its %d measured repeats", c.Backend, without, len(reps)))
		default:
			out = append(out, c.Backend+"'s durable MB/s in the window is 0 (median of its repeats)")
		}
	}
	return out
}

// cellRatio is c's figure ÷ ref's as a table shows it ("— (why)" without
// a ratio), the ratio, and whether the two intervals separate.
func cellRatio(kind string, c, ref *runfile.Cell, figure string) (string, runfile.Ratio, bool) {
	r := ratioOf(kind, c, ref.Name, figure, ref.Interval(figure), "")
	if r.Missing != "" {
		return "— (" + r.Missing + ")", r, false
	}
	return ratioRange(r), r, runfile.Separated(c.Interval(figure), ref.Interval(figure))
}

func mechanismOf(c *runfile.Cell) string {
	if c.Durability == nil {
		return "—"
	}
	return c.Durability.Mechanism
}
