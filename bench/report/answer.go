package report

import (
	"fmt"
	"strings"

	"github.com/mqstore/mqstore/bench/runfile"
)

// answerClasses are the two questions the first screen answers: what to
// run when an acknowledgement must mean durable (sync) and when it may
// mean in memory (any policy).
var answerClasses = map[string]string{"sync": "ack = durable", "any": "ack = in memory"}

// flushPolicy names the flush parameters a cell ran with, from its
// effective engine options.
func flushPolicy(c *runfile.Cell) string {
	o := c.Options
	if o == nil {
		return c.Flush
	}
	if c.Flush == "sync" {
		return fmt.Sprintf("sync (group commit, SyncFlushTimeout %s)", orDefault(o["SyncFlushTimeout"], "?"))
	}
	return fmt.Sprintf("async (FlushInterval %s, FlushLeastPages %s, FlushThoroughInterval %s)",
		orDefault(o["FlushInterval"], "?"), orDefault(o["FlushLeastPages"], "?"), orDefault(o["FlushThoroughInterval"], "?"))
}

// writeAnswer is summary.md's first screen: per device and body size, the
// backend and flush policy to run for each durability, with the figure
// and interval that decided it and what was excluded and why — or the tie
// and what would separate it. Everything else follows it.
func writeAnswer(b *strings.Builder, f *runfile.RunFile) {
	cell := map[string]*runfile.Cell{}
	for i := range f.Cells {
		cell[f.Cells[i].Name] = &f.Cells[i]
	}
	b.WriteString("## What to run\n\n")
	if len(f.Recommendations) == 0 {
		b.WriteString("This run has no throughput cells to recommend from.\n\n")
		return
	}
	fmt.Fprintf(b, "Highest durable MB/s among the backend/flush policies that qualify (sustained; not saturated, nor above %d× their own tail, under pressure; not on an emulated device that models no seek), median [interval] of %d repeats; a pick only where it separates from the rest on durable MB/s, or, tied there, on CPU per GiB.\n\n",
		PressureBar, f.Config.Repeat)
	last, lastSize := "", 0
	for _, r := range f.Recommendations {
		title, ok := answerClasses[r.Durability]
		if !ok {
			continue
		}
		if k := r.Target + fmt.Sprint(r.SizeBytes); k != last {
			if last != "" {
				writeSweepQuote(b, f, lastSize)
			}
			fmt.Fprintf(b, "**%s**, %s bodies:\n", orDefault(deviceLabel(f, r.Target), "target"), runfile.SizeLabel(r.SizeBytes))
			last, lastSize = k, r.SizeBytes
		}
		c := cell[r.Cell]
		switch {
		case r.Pick != "" && c != nil:
			fmt.Fprintf(b, "- %s: **%s**, flush %s — %s durable MB/s at %d producers\n", title, c.Backend, flushPolicy(c), ci(r.Interval, fmtFloat), c.Producers)
			fmt.Fprintf(b, "  - why: %s\n", r.Text)
		case len(r.Tied) > 0:
			fmt.Fprintf(b, "- %s: **no single pick** — %s\n", title, r.Text)
		default:
			fmt.Fprintf(b, "- %s: **nothing qualifies**\n", title)
		}
		if n := len(r.Excluded); n > 0 {
			fmt.Fprintf(b, "  - excluded: %s\n", strings.Join(r.Excluded, "; "))
		}
	}
	if last != "" {
		writeSweepQuote(b, f, lastSize)
	}
	b.WriteString("\nWhy, and every figure behind it: the sections below (the rule in full: run.json's recommendations, docs/harness.md).\n\n")
}
