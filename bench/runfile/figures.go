package runfile

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/mqstore/mqstore/bench/load"
)

// Figures are one measurement's numbers (or the median, an interval bound,
// the min or the max of a cell's repeats, figure by figure). MB are 10^6
// bytes. Latency percentiles: open loop, completion − intended start with
// unstarted arrivals at (deadline − intended); closed loop, the service
// time; e2e, store-to-delivery latency.
type Figures struct {
	// MsgsPerSec: completed messages per second of the window (e2e:
	// delivered). MBPerSec: their body bytes.
	MsgsPerSec float64 `json:"msgsPerSec"`
	MBPerSec   float64 `json:"mbPerSec"`
	// WrittenMBps is record bytes the system accepted per second and
	// DurableMBps record bytes that became durable per second of the window
	// (both from load.Durability; 0 when the system does not report it).
	// BacklogBytes is written − durable at the window's end, BacklogShare
	// that over the bytes written in the window; DrainNs how long Drain (for
	// mqstore: Store.Flush) took to make the backlog durable; TimeToDurableMBps
	// is the window's written bytes ÷ (window + drain). CloseNs is how long
	// mqstore's Close took after the drain (dispatch, ConsumeQueue and index
	// flush, checkpoint): not part of the drain, which the peers' Drain
	// matches (their logs synced, nothing else).
	WrittenMBps       float64 `json:"writtenMBps"`
	DurableMBps       float64 `json:"durableMBps"`
	BacklogBytes      float64 `json:"backlogBytes"`
	BacklogShare      float64 `json:"backlogShare"`
	DrainNs           int64   `json:"drainNs"`
	TimeToDurableMBps float64 `json:"timeToDurableMBps"`
	CloseNs           int64   `json:"closeNs,omitempty"`
	// MsgsPerGroupCommit is Puts ÷ flushes in the window (mqstore sync).
	MsgsPerGroupCommit float64 `json:"msgsPerGroupCommit,omitempty"`
	// FlushBusyShare is the share of the window mqstore spent in durable
	// flushes (StoreCounters.FlushNs ÷ the window; a flush counts whole in
	// the window it ends in, so the share can pass 1 by a flush's length,
	// or more when flushes overlap), FlushMeanNs the mean of one. With sync flush and
	// one group commit in flight, a share near 1 says the device's syncs
	// set the rate (only more records per sync go faster); well below 1,
	// the time between syncs does — the producers, the CPUs, the scheduler.
	FlushBusyShare float64 `json:"flushBusyShare,omitempty"`
	FlushMeanNs    int64   `json:"flushMeanNs,omitempty"`
	P50Ns          int64   `json:"p50Ns"`
	P90Ns          int64   `json:"p90Ns"`
	P99Ns          int64   `json:"p99Ns"`
	P999Ns         int64   `json:"p999Ns"`
	P9999Ns        int64   `json:"p9999Ns"`
	MaxNs          int64   `json:"maxNs"`
	CPUSecPerGiB   float64 `json:"cpuSecPerGiB"`
	AllocsPerMsg   float64 `json:"allocsPerMsg"`
	// Open loop: service time (completion − actual start), the rate really
	// offered (arrivals in the window ÷ window), the share of arrivals
	// never started, the generator's wake-up lag p99.
	ServiceP50Ns      int64   `json:"serviceP50Ns,omitempty"`
	ServiceP99Ns      int64   `json:"serviceP99Ns,omitempty"`
	ServiceP999Ns     int64   `json:"serviceP999Ns,omitempty"`
	OfferedPerSec     float64 `json:"offeredPerSec,omitempty"`
	UnstartedFraction float64 `json:"unstartedFraction,omitempty"`
	DispatchLagP99    int64   `json:"dispatchLagP99Ns,omitempty"`
	// Consume: the whole process's CPU per GiB sent (CPUSecPerGiB is the
	// sending thread's). Cold variants: the share of the store's pages still
	// cached after the drop.
	ProcessCPUSecPerGiB float64 `json:"processCpuSecPerGiB,omitempty"`
	ResidentFraction    float64 `json:"residentFraction,omitempty"`
	// Recovery: how long engine.Open of the crashed store took.
	OpenNs int64 `json:"openNs,omitempty"`
	// Limits: a write+fdatasync probe's operations per second (all writers
	// together; MsgsPerSec is the records they made durable).
	OpsPerSec float64 `json:"opsPerSec,omitempty"`
	// Replication (cells with a slave, ReplicationResult). ReplLagP50Ns and
	// ReplLagP99Ns: the lag in time of the records acknowledged to a
	// producer in the window, from the start of a record's Put (its append,
	// not its acknowledgement) to the first slave acknowledgement covering
	// the record's end; ReplLagBytesP50 and ReplLagBytesP99: in bytes, how
	// far the slave's acknowledged offset was behind the record's end when
	// its Put returned (each the repeat's own percentile).
	// ReplUnackedFraction: the share of those records the slave had not
	// acknowledged by the deadline after the window.
	ReplLagP50Ns        int64   `json:"replLagP50Ns,omitempty"`
	ReplLagP99Ns        int64   `json:"replLagP99Ns,omitempty"`
	ReplLagBytesP50     float64 `json:"replLagBytesP50,omitempty"`
	ReplLagBytesP99     float64 `json:"replLagBytesP99,omitempty"`
	ReplUnackedFraction float64 `json:"replUnackedFraction,omitempty"`
	// SlaveDurableMBps is what the slave made durable of the record bytes
	// the master accepted in the window, MB/s over the time between the
	// slave's readings at the window's edges: its flushed offset's progress
	// past the master's written offset at the window's start, up to the
	// master's written offset at its end — as DurableMBps, a backlog
	// accepted before the window and flushed inside it does not count.
	SlaveDurableMBps float64 `json:"slaveDurableMBps,omitempty"`
	// ReplBacklogBytes is the master's written offset at the window's end
	// less the slave's CommitLog end read just after it (what the slave did
	// not have: what losing the master's machine then would have lost),
	// ReplBacklogShare that over the bytes the master accepted in the
	// window: above load.SustainedBacklogShare the slave did not keep up
	// with the master (the replication table's sustained verdict).
	ReplBacklogBytes float64 `json:"replBacklogBytes,omitempty"`
	ReplBacklogShare float64 `json:"replBacklogShare,omitempty"`
	// SlaveCPUSecPerGiB is the slave's process's CPU seconds over the
	// window (its getrusage, read at the window's edges) per GiB of message
	// bodies accepted (closed loop); a replicated cell's CPUSecPerGiB
	// includes it (Cell.Options["cpu"] says so; run files without that
	// option counted the master's process alone).
	SlaveCPUSecPerGiB float64 `json:"slaveCpuSecPerGiB,omitempty"`
}

// AddReplication sets the lag figures from a repeat's replication result
// (AddReplicationPositions sets those that need the master's positions).
func (f *Figures) AddReplication(r *ReplicationResult) {
	if r == nil {
		return
	}
	if r.LagNs != nil && r.LagNs.Count() > 0 {
		f.ReplLagP50Ns, f.ReplLagP99Ns = r.LagNs.Quantile(0.50), r.LagNs.Quantile(0.99)
	}
	if r.LagBytes != nil && r.LagBytes.Count() > 0 { // recorded + 1 (the histogram's least value is 1)
		f.ReplLagBytesP50, f.ReplLagBytesP99 = float64(r.LagBytes.Quantile(0.50)-1), float64(r.LagBytes.Quantile(0.99)-1)
	}
	if r.Records > 0 {
		f.ReplUnackedFraction = float64(r.Unacked) / float64(r.Records)
	}
}

// AddReplicationPositions sets the figures that set the slave's positions
// at the window's edges (r) against the master's (master): the slave's
// durable rate of the window's bytes and the replication backlog. It
// sets nothing when either is missing.
func (f *Figures) AddReplicationPositions(r *ReplicationResult, master *load.DurabilityResult) {
	if r == nil || master == nil {
		return
	}
	durable := max(0, min(r.SlaveFlushedEnd, master.WrittenEndBytes)-max(r.SlaveFlushedStart, master.WrittenStartBytes))
	f.SlaveDurableMBps = load.PerSec(float64(durable)/1e6, r.SlaveElapsedNs)
	f.ReplBacklogBytes, f.ReplBacklogShare = ReplicationBacklog(r, master)
}

// ReplicationBacklog is a repeat's replication backlog: the master's
// written offset at the window's end less the slave's CommitLog end (0
// when the slave had it all), and that as a share of the bytes the master
// accepted in the window (0 when it accepted none).
func ReplicationBacklog(r *ReplicationResult, master *load.DurabilityResult) (bytes, share float64) {
	backlog := max(0, master.WrittenEndBytes-r.SlaveWroteEnd)
	if w := master.WrittenBytes(); w > 0 {
		share = float64(backlog) / float64(w)
	}
	return float64(backlog), share
}

// FiguresOf turns one load result (and the store's counters over its
// window, when known) into figures.
func FiguresOf(r *load.Result, store *StoreCounters) Figures {
	f := Figures{MsgsPerSec: r.MsgsPerSec(), MBPerSec: r.MBPerSec(), AllocsPerMsg: r.AllocsPerMsg()}
	lat := r.Service
	switch r.Workload {
	case load.Latency, "e2e":
		lat = r.Latency
		s := r.Service.Percentiles()
		f.ServiceP50Ns, f.ServiceP99Ns, f.ServiceP999Ns = s.P50Ns, s.P99Ns, s.P999Ns
		f.OfferedPerSec = r.OfferedPerSec()
		if r.Arrivals > 0 {
			f.UnstartedFraction = float64(r.Unstarted) / float64(r.Arrivals)
		}
		if r.DispatchLag != nil {
			f.DispatchLagP99 = r.DispatchLag.Quantile(0.99)
		}
	default:
		// CPU per GiB only in the closed loop: in the open loop the load
		// generator's idle workers would be counted too.
		f.CPUSecPerGiB = r.CPUSecPerGiB()
	}
	if r.Workload == "e2e" {
		lat = r.Delivery
		f.MsgsPerSec = load.PerSec(float64(r.Delivered), r.WindowNs)
	}
	if lat != nil {
		p := lat.Percentiles()
		f.P50Ns, f.P90Ns, f.P99Ns, f.P999Ns, f.P9999Ns, f.MaxNs = p.P50Ns, p.P90Ns, p.P99Ns, p.P999Ns, p.P9999Ns, p.MaxNs
	}
	if d := r.Durability; d != nil {
		f.WrittenMBps = load.PerSec(float64(d.WrittenBytes())/1e6, r.ElapsedNs)
		f.DurableMBps = load.PerSec(float64(d.DurableBytes())/1e6, r.ElapsedNs)
		f.BacklogBytes = float64(d.BacklogBytes())
		if w := d.WrittenBytes(); w > 0 {
			f.BacklogShare = float64(d.BacklogBytes()) / float64(w)
		}
		f.DrainNs = d.DrainNs
		f.TimeToDurableMBps = load.PerSec(float64(d.WrittenBytes())/1e6, r.ElapsedNs+d.DrainNs)
	}
	if store != nil && store.Flushes > 0 {
		f.MsgsPerGroupCommit = float64(store.Puts) / float64(store.Flushes)
		if store.FlushNs > 0 && r.ElapsedNs > 0 {
			f.FlushBusyShare = float64(store.FlushNs) / float64(r.ElapsedNs)
			f.FlushMeanNs = store.FlushNs / int64(store.Flushes)
		}
	}
	return f
}

// figureIndex maps each figure's JSON name to its field of Figures (every
// field is a figure: a float64 or an int64), so medians and intervals are
// computed field by field and a figure added to Figures needs nothing more.
var figureIndex = func() map[string]int {
	m := map[string]int{}
	t := reflect.TypeFor[Figures]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		m[name] = i
	}
	return m
}()

func getFigure(v reflect.Value) float64 {
	if v.Kind() == reflect.Int64 {
		return float64(v.Int())
	}
	return v.Float()
}

func setFigure(v reflect.Value, x float64) {
	if v.Kind() == reflect.Int64 {
		v.SetInt(int64(x))
		return
	}
	v.SetFloat(x)
}

// Figure returns the named figure as a float; it panics on a name that is
// not a figure (a programming error).
func (f *Figures) Figure(name string) float64 {
	i, ok := figureIndex[name]
	if !ok {
		panic("runfile: unknown figure " + name)
	}
	return getFigure(reflect.ValueOf(f).Elem().Field(i))
}

// Summary is the median, interval and range of each figure over repeats.
type Summary struct {
	Median, CILow, CIHigh, Min, Max Figures
	CILevel                         float64
}

// Summarize computes, figure by figure, the median of fs, its confidence
// interval (MedianCI) and the min and max.
func Summarize(fs []Figures) Summary {
	var s Summary
	if len(fs) == 0 {
		return s
	}
	dsts := []reflect.Value{reflect.ValueOf(&s.Median).Elem(), reflect.ValueOf(&s.CILow).Elem(), reflect.ValueOf(&s.CIHigh).Elem(),
		reflect.ValueOf(&s.Min).Elem(), reflect.ValueOf(&s.Max).Elem()}
	for i := range reflect.TypeFor[Figures]().NumField() {
		xs := make([]float64, len(fs))
		for j := range fs {
			xs[j] = getFigure(reflect.ValueOf(&fs[j]).Elem().Field(i))
		}
		m, lo, hi, level := MedianCI(xs)
		s.CILevel = level
		for k, x := range []float64{m, lo, hi, slices.Min(xs), slices.Max(xs)} {
			setFigure(dsts[k].Field(i), x)
		}
	}
	return s
}

// SizeLabel formats a size in bytes as B, KiB or MiB when it is a whole
// one (a cell's body size, a pressure's file size); "" for 0.
func SizeLabel(b int) string {
	switch {
	case b == 0:
		return ""
	case b%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", b>>20)
	case b%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}
