package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
)

// summarize prints, from an mqbench run (a results directory or its run
// file), each remoting cell beside the in-process e2e cells of the same
// size, flush and offered rate: messages per second, the send latency
// (the producer's: SendSync, or the store's Put in process) and the
// end-to-end latency (the consumer's delivery minus the send's intended
// start), p50 and p99, over the measured repeats. mqbench's own tables
// show a peer's send latency only; the remoting cells' deliveries are in
// their results, which this reads.
func summarize(path string, w io.Writer) error {
	f, err := runfile.Read(path)
	if err != nil {
		return err
	}
	var remoting []*runfile.Cell
	for i := range f.Peers {
		if f.Peers[i].Backend == Peer {
			remoting = append(remoting, &f.Peers[i])
		}
	}
	if len(remoting) == 0 {
		return fmt.Errorf("%s has no %s cell (run mqbench with --peers %s)", path, Peer, Peer)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cell\tworkload\tflush\tsize\trate/s\tmsgs/s\tsend p50\tsend p99\te2e p50\te2e p99\trepeats\t")
	row := func(c *runfile.Cell) {
		var msgs, windowNs int64
		var send, e2e []*load.Histogram
		reps := c.MeasuredRepeats()
		for _, r := range reps {
			res := &r.Result
			n := res.Messages
			if c.Workload == "e2e" {
				n = res.Delivered
			}
			msgs, windowNs = msgs+n, windowNs+res.WindowNs
			if h := res.Latency; h != nil {
				send = append(send, h)
			} else if res.Service != nil {
				send = append(send, res.Service)
			}
			if res.Delivery != nil {
				e2e = append(e2e, res.Delivery)
			}
		}
		rate := "-"
		if c.RatePerSec > 0 {
			rate = fmt.Sprintf("%.0f", c.RatePerSec)
		}
		perSec := "-"
		if windowNs > 0 {
			perSec = fmt.Sprintf("%.0f", float64(msgs)/(float64(windowNs)/1e9))
		}
		sp50, sp99 := quantiles(send)
		ep50, ep99 := quantiles(e2e)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", c.Name, c.Workload, c.Flush, c.SizeBytes, rate, perSec,
			sp50, sp99, ep50, ep99, len(reps))
	}
	for _, c := range remoting {
		row(c)
		for i := range f.Cells {
			in := &f.Cells[i]
			if in.Workload == "e2e" && in.SizeBytes == c.SizeBytes && in.Flush == c.Flush && in.RatePerSec == c.RatePerSec &&
				c.RatePerSec > 0 && in.Pressure == c.Pressure && in.Replication == "" {
				row(in)
			}
		}
	}
	return tw.Flush()
}

func quantiles(hs []*load.Histogram) (p50, p99 string) {
	if len(hs) == 0 {
		return "-", "-"
	}
	h := load.Merged(hs...)
	if h.Count() == 0 {
		return "-", "-"
	}
	d := func(ns int64) string { return time.Duration(ns).Round(time.Microsecond).String() }
	return d(h.Quantile(0.50)), d(h.Quantile(0.99))
}
