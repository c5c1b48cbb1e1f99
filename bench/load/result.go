package load

import (
	"fmt"
	"time"
)

// Result is what one run of a Spec measured (the warm-up excluded).
type Result struct {
	Workload Workload `json:"workload"`
	// Messages completed: closed loop, those started in the window; open
	// loop, arrivals scheduled in the window that were started by the
	// deadline (every one of them completes: the run waits for it).
	Messages     int64 `json:"messages"`
	PayloadBytes int64 `json:"payloadBytes"`
	// StartUnixNs is the wall-clock time the measured window started
	// (after the warm-up); an open loop's intended starts count from it.
	StartUnixNs int64 `json:"startUnixNs,omitempty"`
	// ElapsedNs runs from the window's start to its end or the last
	// completion, whichever is later; WindowNs is the nominal window.
	ElapsedNs int64  `json:"elapsedNs"`
	WindowNs  int64  `json:"windowNs"`
	CPUUserNs int64  `json:"cpuUserNs"`
	CPUSysNs  int64  `json:"cpuSysNs"`
	Mallocs   uint64 `json:"mallocs"`
	// Open loop: the nominal rate, the arrivals scheduled in the window, and
	// those never started by the deadline (window end + Spec.Grace); each of
	// those is in Latency at (deadline − intended), a lower bound of what it
	// would have been.
	TargetRatePerSec float64 `json:"targetRatePerSec,omitempty"`
	Arrivals         int64   `json:"arrivals,omitempty"`
	Unstarted        int64   `json:"unstarted,omitempty"`
	// LastIntendedNs and LastStartNs are, from the window's start, the
	// latest intended start of an arrival that was started and the latest
	// actual start: a run that keeps its schedule starts its last arrival
	// about when it was due.
	LastIntendedNs int64 `json:"lastIntendedNs,omitempty"`
	LastStartNs    int64 `json:"lastStartNs,omitempty"`
	// Service is completion − actual start, per request.
	Service *Histogram `json:"service"`
	// Latency is completion − intended start (open loop only), unstarted
	// arrivals included (see Unstarted).
	Latency *Histogram `json:"latency,omitempty"`
	// DispatchLag is how late a worker that was waiting for an arrival woke
	// up for it: the load generator's own timing error (open loop only).
	DispatchLag *Histogram `json:"dispatchLag,omitempty"`
	// Quarters is the latency of the arrivals intended in each quarter of
	// the window (open loop), to tell a latency that keeps rising.
	Quarters []Percentiles `json:"quarters,omitempty"`
	// Series is the latency per Spec.SeriesInterval of the window.
	Series []SeriesPoint `json:"series,omitempty"`
	// Delivery is the e2e workload's store-to-delivery latency (delivery −
	// the message's intended start); Delivered counts those deliveries.
	Delivery  *Histogram `json:"delivery,omitempty"`
	Delivered int64      `json:"delivered,omitempty"`
	// DeliveryQuarters is the delivery latency of the messages intended in
	// each quarter of the window (e2e): a consumer that falls further
	// behind all window long saturates the cell as a producer's rising
	// latency does.
	DeliveryQuarters []Percentiles `json:"deliveryQuarters,omitempty"`
	// Durability holds the system's positions at the window's edges and
	// the drain (nil when the system under test does not implement
	// Durability).
	Durability  *DurabilityResult `json:"durability,omitempty"`
	Error       string            `json:"error,omitempty"`
	Interrupted bool              `json:"interrupted,omitempty"`
}

// DurabilityResult is what Durability reported around the window: the
// positions at its start and end (after every request of the window
// completed), then the time Drain took and the positions after it.
type DurabilityResult struct {
	WrittenStartBytes      int64  `json:"writtenStartBytes"`
	DurableStartBytes      int64  `json:"durableStartBytes"`
	WrittenEndBytes        int64  `json:"writtenEndBytes"`
	DurableEndBytes        int64  `json:"durableEndBytes"`
	DrainNs                int64  `json:"drainNs"`
	WrittenAfterDrainBytes int64  `json:"writtenAfterDrainBytes"`
	DurableAfterDrainBytes int64  `json:"durableAfterDrainBytes"`
	DrainError             string `json:"drainError,omitempty"`
}

// SustainedBacklogShare is the largest backlog, as a share of the bytes
// written in the window, of a cell that keeps up with what it accepts.
const SustainedBacklogShare = 0.10

// WrittenBytes is what the system accepted in the window.
func (d *DurabilityResult) WrittenBytes() int64 { return d.WrittenEndBytes - d.WrittenStartBytes }

// DurableBytes is what of the bytes accepted in the window became durable
// in it: the durable position's progress past the window's first written
// byte. A backlog left by the warm-up (accepted before the window, flushed
// inside it) does not count, so durable never exceeds written.
func (d *DurabilityResult) DurableBytes() int64 {
	return max(0, d.DurableEndBytes-max(d.DurableStartBytes, d.WrittenStartBytes))
}

// BacklogBytes is written − durable at the window's end.
func (d *DurabilityResult) BacklogBytes() int64 { return d.WrittenEndBytes - d.DurableEndBytes }

// Sustained reports whether the backlog at the window's end is at most
// SustainedBacklogShare of what was written in the window: the system made
// durable about as fast as it accepted, rather than filling buffers.
func (d *DurabilityResult) Sustained() bool {
	return float64(d.BacklogBytes()) <= SustainedBacklogShare*float64(d.WrittenBytes())
}

// Check reports positions that break the Durability contract (durable
// beyond written, a position going back, a drain that left bytes behind).
func (d *DurabilityResult) Check() error {
	switch {
	case d.DurableStartBytes > d.WrittenStartBytes, d.DurableEndBytes > d.WrittenEndBytes:
		return fmt.Errorf("durability: durable position beyond written (%+v)", *d)
	case d.WrittenEndBytes < d.WrittenStartBytes, d.DurableEndBytes < d.DurableStartBytes:
		return fmt.Errorf("durability: a position went back during the window (%+v)", *d)
	case d.DrainError == "" && d.DurableAfterDrainBytes < d.WrittenEndBytes:
		return fmt.Errorf("durability: drain returned with %d of the %d written bytes durable", d.DurableAfterDrainBytes, d.WrittenEndBytes)
	}
	return nil
}

// Failed reports whether the run produced no trustworthy figure.
func (r *Result) Failed() bool { return r.Error != "" || r.Interrupted || r.Messages == 0 }

// MsgsPerSec is the completed messages per second of the window.
func (r *Result) MsgsPerSec() float64 { return PerSec(float64(r.Messages), r.ElapsedNs) }

// MBPerSec is payload (body) megabytes (10^6) per second.
func (r *Result) MBPerSec() float64 { return PerSec(float64(r.PayloadBytes)/1e6, r.ElapsedNs) }

// KeptShare is how much of its schedule an open-loop run kept: the share
// of arrivals it started, times how early it was done starting them (the
// latest intended start ÷ the latest actual start). 1 when every arrival
// started on time; the service time of the last requests does not count.
func (r *Result) KeptShare() float64 {
	if r.Arrivals == 0 {
		return 0
	}
	share := float64(r.Messages) / float64(r.Arrivals)
	if r.LastStartNs > r.LastIntendedNs && r.LastIntendedNs > 0 {
		share *= float64(r.LastIntendedNs) / float64(r.LastStartNs)
	}
	return share
}

// OfferedPerSec is the arrivals scheduled in the window per second of it:
// the rate the open loop really offered (a Poisson schedule's count
// differs from the nominal rate by chance).
func (r *Result) OfferedPerSec() float64 { return PerSec(float64(r.Arrivals), r.WindowNs) }

// CPUSecPerGiB is process CPU seconds (user+system) per GiB of payload.
func (r *Result) CPUSecPerGiB() float64 {
	if r.PayloadBytes == 0 {
		return 0
	}
	return float64(r.CPUUserNs+r.CPUSysNs) / 1e9 / (float64(r.PayloadBytes) / (1 << 30))
}

// AllocsPerMsg is heap allocations (the whole process's) per message.
func (r *Result) AllocsPerMsg() float64 {
	if r.Messages == 0 {
		return 0
	}
	return float64(r.Mallocs) / float64(r.Messages)
}

// PerSec is v per second of ns nanoseconds (0 for no time).
func PerSec(v float64, ns int64) float64 {
	if ns <= 0 {
		return 0
	}
	return v / (float64(ns) / 1e9)
}

// Saturation thresholds of an open-loop result.
const (
	// MinKeptShare: a run that keeps less than this share of its schedule
	// (KeptShare) did not keep up with the rate it was offered.
	MinKeptShare = 0.98
	// RisingFactor: latency whose median rises quarter after quarter to at
	// least this multiple of the first quarter's is still climbing — a
	// queue that grows for as long as the window lasts.
	RisingFactor = 2.0
)

// Saturation tells whether an open-loop run could not keep its offered
// rate, and why: arrivals never started by the deadline, less than
// MinKeptShare of its schedule kept, or a latency still rising across the
// window. A saturated run's percentiles describe a queue that
// grows with the window, not the system.
func (r *Result) Saturation() (saturated bool, reasons []string) {
	if r.Arrivals == 0 { // a closed loop (or nothing scheduled)
		return false, nil
	}
	if r.Unstarted > 0 {
		reasons = append(reasons, fmt.Sprintf("%d of %d arrivals (%s) never started by the deadline", r.Unstarted, r.Arrivals, Percent(float64(r.Unstarted)/float64(r.Arrivals))))
	}
	if kept := r.KeptShare(); kept < MinKeptShare {
		reasons = append(reasons, fmt.Sprintf("kept %.1f%% of its schedule (below %.0f%%): %d of %d arrivals started, the last %v after it was due",
			100*kept, 100*MinKeptShare, r.Messages, r.Arrivals, time.Duration(r.LastStartNs-r.LastIntendedNs)))
	}
	if rising, why := Rising(r.Quarters); rising {
		reasons = append(reasons, why)
	}
	if rising, why := Rising(r.DeliveryQuarters); rising {
		reasons = append(reasons, "delivery "+why+": the consumers fell further behind all window long")
	}
	return len(reasons) > 0, reasons
}

// Percent formats a share as a percentage with two significant digits
// (0.12%, 4.5%, 97%, 100%).
func Percent(x float64) string {
	if p := 100 * x; p >= 10 || p <= -10 {
		return fmt.Sprintf("%.0f%%", p)
	}
	return fmt.Sprintf("%.2g%%", 100*x)
}

// Rising reports whether the median latency of the quarters increases
// from each quarter to the next and ends at least RisingFactor times the
// first quarter's.
func Rising(q []Percentiles) (bool, string) {
	if len(q) < 2 || q[0].P50Ns <= 0 {
		return false, ""
	}
	for i := 1; i < len(q); i++ {
		if q[i].P50Ns <= q[i-1].P50Ns {
			return false, ""
		}
	}
	last := q[len(q)-1].P50Ns
	if float64(last) < RisingFactor*float64(q[0].P50Ns) {
		return false, ""
	}
	return true, fmt.Sprintf("latency p50 rose in every quarter of the window, from %v to %v", time.Duration(q[0].P50Ns), time.Duration(last))
}
