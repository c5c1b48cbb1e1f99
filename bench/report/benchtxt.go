package report

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/mqstore/mqstore/bench/runfile"
)

// WriteBenchTxt writes the run in Go's benchmark format, one line per
// repeat (the repeats are the samples benchstat needs to judge noise):
//
//	BenchmarkMQBench/workload=throughput/backend=mmap/size=1024/flush=async/pressure=none  N  … ns/op  … MB/s  … msgs/s …
//
// N is the messages of the repeat. Compare two runs with
// `benchstat -col .file A/bench.txt B/bench.txt` (or -row /backend …).
// Failed cells are comment lines, which benchstat ignores.
func WriteBenchTxt(w io.Writer, f *runfile.RunFile) error {
	var b strings.Builder
	fmt.Fprintf(&b, "goos: %s\ngoarch: %s\npkg: github.com/mqstore/mqstore/bench\n", f.Machine.OS, f.Machine.Arch)
	if f.Machine.CPUModel != "" {
		fmt.Fprintf(&b, "cpu: %s\n", f.Machine.CPUModel)
	}
	// The run id and commit differ between runs: as configuration lines they
	// would put each run in a table of its own, so they are comments.
	fmt.Fprintf(&b, "# mqbench run %s, commit %s, kernel %s\n", f.ID, f.Machine.Commit, f.Machine.Kernel)
	for _, c := range allCells(f) {
		writeCellLines(&b, c, len(f.Devices) > 1)
	}
	for _, l := range f.Limits {
		if l.Status != runfile.StatusOK {
			fmt.Fprintf(&b, "# limit %s %s: %s\n", l.Name, l.Status, l.Reason)
			continue
		}
		for _, r := range l.Repeats {
			if r.Warm {
				continue
			}
			target := ""
			if len(f.Devices) > 1 && l.Target != "" {
				target = "/target=" + runfile.SafeName(l.Target)
			}
			if l.Producers > 0 {
				split := ""
				if l.InFlight > 1 && boundsItsProducers(f, &l) {
					split = "/split" // N records split between the writers (schema 5), not N each: benchstat must not pair the two
				}
				target = fmt.Sprintf("/producers=%d/inflight=%d%s", l.Producers, l.InFlight, split) + target
			}
			fmt.Fprintf(&b, "BenchmarkMQBenchLimit/limit=%s/size=%d%s 1%s\n", l.Name, l.SizeBytes, target, limitValues(&r.Figures))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeCellLines writes one line per measured repeat of a measured cell.
// Saturated and generator-bound cells are comments: their figures are not
// the system's, and benchstat must not compare them.
func writeCellLines(b *strings.Builder, c *runfile.Cell, withTarget bool) {
	switch {
	case !c.Measured():
		fmt.Fprintf(b, "# %s %s: %s\n", c.Name, c.Status, strings.ReplaceAll(c.Reason, "\n", " "))
		return
	case c.Status == runfile.StatusSaturated:
		fmt.Fprintf(b, "# %s saturated (not comparable): %s\n", c.Name, strings.Join(c.Saturation, " | "))
		return
	case c.GeneratorBound:
		fmt.Fprintf(b, "# %s generator-bound (p99.9 below %gx the floor's %dns, service p99.9 within it): not comparable\n", c.Name, float64(runfile.GeneratorBoundFactor), c.FloorP999Ns)
		return
	}
	name := benchName(c, withTarget)
	for _, r := range c.Repeats {
		if !r.Warm {
			n, v := repeatValues(c.Workload, &r)
			fmt.Fprintf(b, "%s %d%s\n", name, n, v.String())
		}
	}
}

// benchName is a cell's benchmark name: its coordinates as key=value
// parts, so benchstat can group by any of them.
func benchName(c *runfile.Cell, withTarget bool) string {
	name := fmt.Sprintf("BenchmarkMQBench/workload=%s/backend=%s/size=%d/flush=%s/pressure=%s", c.Workload, c.Backend, c.SizeBytes, c.Flush, c.Pressure)
	switch {
	case c.RatePerSec > 0:
		name += fmt.Sprintf("/rate=%.0f", c.RatePerSec)
	case c.Producers > 0:
		name += fmt.Sprintf("/producers=%d", c.Producers)
	}
	if c.Variant != "" {
		name += "/variant=" + c.Variant
	}
	if c.Policy != "" {
		name += "/policy=" + runfile.SafeName(c.Policy)
	}
	if c.Replication != "" {
		name += "/replication=" + c.Replication
		if c.HADelayNs > 0 {
			name += "/ha-delay-emulated=" + runfile.SafeName(fmtNs(c.HADelayNs))
		}
	}
	if c.TwinOf != "" {
		name += "/aa=twin"
	}
	if withTarget && c.Target != "" {
		name += "/target=" + runfile.SafeName(c.Target)
	}
	return name
}

func repeatValues(workload string, r *runfile.Repeat) (int64, valueList) {
	f := &r.Figures
	var v valueList
	switch workload {
	case "consume":
		v.figs(f, "mbPerSec", "MB/s", "msgsPerSec", "msgs/s", "cpuSecPerGiB", "sender-cpu-sec/GiB", "processCpuSecPerGiB", "cpu-sec/GiB")
		return max(1, r.Result.Messages), v
	case "recovery":
		v.figs(f, "openNs", "ns/op", "mbPerSec", "MB/s")
		return 1, v
	case "throughput":
		v.add(float64(r.Result.ElapsedNs)/float64(max(r.Result.Messages, 1)), "ns/op")
		v.figs(f, "mbPerSec", "MB/s", "msgsPerSec", "msgs/s")
		if r.Result.Durability != nil {
			v.figs(f, "durableMBps", "durable-MB/s", "backlogBytes", "backlog-B", "drainNs", "drain-ns")
		}
		if f.FlushBusyShare > 0 { // mqstore's time in durable flushes (not in older runs)
			v.figs(f, "flushBusyShare", "flush-busy", "flushMeanNs", "flush-mean-ns")
		}
		v.figs(f, "cpuSecPerGiB", "cpu-sec/GiB")
	default:
		v.figs(f, "msgsPerSec", "msgs/s")
	}
	v.figs(f, "p50Ns", "p50-ns", "p99Ns", "p99-ns", "p999Ns", "p99.9-ns", "p9999Ns", "p99.99-ns", "maxNs", "max-ns")
	if workload == "latency" {
		v.figs(f, "serviceP999Ns", "service-p99.9-ns")
	}
	v.figs(f, "allocsPerMsg", "allocs/msg")
	if r.Replication != nil {
		v.figs(f, "replLagP50Ns", "repl-lag-p50-ns", "replLagP99Ns", "repl-lag-p99-ns", "replLagBytesP99", "repl-lag-p99-B", "slaveDurableMBps", "slave-durable-MB/s")
	}
	return max(r.Result.Messages, 1), v
}

func limitValues(f *runfile.Figures) string {
	var v valueList
	v.add(f.MBPerSec, "MB/s")
	ops := f.OpsPerSec
	if ops == 0 {
		ops = f.MsgsPerSec // the limits that count one message per op
	}
	v.add(ops, "ops/s")
	if f.OpsPerSec > 0 && f.MsgsPerSec != f.OpsPerSec {
		v.add(f.MsgsPerSec, "msgs/s")
	}
	if f.P50Ns > 0 {
		v.figs(f, "p50Ns", "p50-ns", "p99Ns", "p99-ns", "p999Ns", "p99.9-ns")
	}
	return v.String()
}

type valueList []string

func (v *valueList) add(x float64, unit string) {
	*v = append(*v, strconv.FormatFloat(x, 'g', 6, 64)+" "+unit)
}

func (v *valueList) figs(f *runfile.Figures, nameUnits ...string) {
	for i := 0; i < len(nameUnits); i += 2 {
		v.add(f.Figure(nameUnits[i]), nameUnits[i+1])
	}
}

func (v valueList) String() string {
	if len(v) == 0 {
		return ""
	}
	return "\t" + strings.Join(v, "\t")
}
