package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench/host"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/internal/hostctl"
	"github.com/mqstore/mqstore/mappedfile"
)

// Time model of the estimate: what a repeat costs beyond its warm-up and
// window (opening a fresh store, draining and closing it, removing it;
// starting mqpeer), measured on a 2-core VM.
const (
	storeRunOverhead = 600 * time.Millisecond
	peerRunOverhead  = 1200 * time.Millisecond
	// replRunOverhead: starting the slave process and its store, waiting
	// for it to connect and to acknowledge what was written, stopping it.
	replRunOverhead  = 1500 * time.Millisecond
	floorRunOverhead = 50 * time.Millisecond
	// fillBytesPerSec is how fast a store is filled before its cell:
	// consume's and recovery's logs, an aged store's segments.
	fillBytesPerSec = 300e6
	// minWindow is the shortest automatic window; maxWindow the longest.
	minWindow = time.Second
	maxWindow = 20 * time.Second
)

// planCounts counts what a run will do. Open-loop cells count every rung
// (an upper bound: rungs above a system's sustained rate but the first are
// skipped), searches their maximum probes.
type planCounts struct {
	storeCells, replCells, peerCells, floors, probes, profiles int
	// peerProbes are the peers' search probes (in probes too);
	// walPeerCells and walPeerProbes the cells and probes of the peer that
	// runs on a recycled WAL with --recycle-segments (recycledWALPeer).
	peerProbes, walPeerCells, walPeerProbes int
}

func countPlan(c *Config, root bool, targets int) planCounts {
	var n planCounts
	for ti := 0; ti < targets; ti++ {
		for _, pressure := range c.Pressures {
			if pressure != PressureNone && !root {
				continue
			}
			thr, open := runsUnder(c, "throughput", pressure), 0
			for _, w := range []string{"latency", WorkloadE2E} {
				if runsUnder(c, w, pressure) {
					open++
				}
			}
			for _, sys := range systems(c, pressure) {
				switch {
				case sys.peer:
					cells, probes := 0, 0
					if thr {
						cells += len(c.Producers)
					}
					if hasWorkload(c, "latency") {
						cells += len(c.Rates)
						probes += c.SearchProbes
					}
					n.peerCells += cells
					n.probes += probes
					n.peerProbes += probes
					if sys.backend == recycledWALPeer {
						n.walPeerCells += cells
						n.walPeerProbes += probes
					}
				case sys.replicated(): // without pressure only
					if thr {
						n.replCells += len(c.Producers)
					}
					if runsUnder(c, "latency", pressure) {
						n.replCells += len(c.Rates)
					}
				default:
					if thr {
						n.storeCells += len(c.Producers)
					}
					n.storeCells += len(c.Rates) * open
					if pressure == PressureNone && hasWorkload(c, "latency") {
						n.probes += c.SearchProbes
					}
				}
			}
			if pressure == PressureNone && ti == 0 && thr && c.Profile && len(c.Policies) == 0 {
				for _, b := range c.Backends {
					n.profiles += len(policiesFor(c, b)) * len(c.Sizes)
				}
			}
			// The twin is of a cell without a slave.
			if pressure == PressureNone && c.AA && ti == 0 && slices.Contains(replications(c), ReplicationNone) {
				n.storeCells++
			}
			if open > 0 {
				n.floors += len(c.Rates)
				if pressure == PressureNone && len(c.Peers) > 0 && hasWorkload(c, "latency") {
					n.floors += len(c.Rates) // the floor in the peers' process
				}
			}
		}
	}
	return n
}

// plan estimates the run before the window is known (the automatic window
// is counted at its minimum).
func plan(c *Config, root bool, targets int) runfile.Plan {
	p := runfile.Plan{WindowNs: c.Duration.Nanoseconds(), WindowWhy: "--duration"}
	if c.Duration == 0 {
		p.WindowNs, p.WindowWhy = minWindow.Nanoseconds(), "automatic (chosen after the device probe; estimated at its minimum)"
	}
	return replan(p, c, root, targets)
}

// replan recomputes the plan's counts and estimate with its window.
func replan(p runfile.Plan, c *Config, root bool, targets int) runfile.Plan {
	n := countPlan(c, root, targets)
	rounds := float64(c.Repeat + 1)
	// runs is the time of count runs of a window plus overhead each.
	runs := func(count int, window, overhead time.Duration) float64 {
		return float64(count) * (c.Warmup + window + overhead).Seconds()
	}
	w := time.Duration(p.WindowNs)
	p.Cells = n.storeCells + n.replCells + n.peerCells
	p.Runs = int(rounds)*(p.Cells+n.floors) + n.probes
	p.EstimatedSeconds = rounds*(runs(n.storeCells, w, storeRunOverhead)+runs(n.replCells, w, replRunOverhead)+runs(n.peerCells, w, peerRunOverhead)+runs(n.floors, w, floorRunOverhead)) +
		runs(n.probes, c.SearchDuration, storeRunOverhead) + runs(n.profiles, c.ProfileDuration, 0) + limitSeconds(c)*float64(targets)
	if hasWorkload(c, WorkloadConsume) || hasWorkload(c, WorkloadRecovery) {
		// Consume and recovery: filling their stores dominates.
		bytes := float64(c.ConsumeBytes+c.RecoveryBytes) * float64(len(c.Backends)*len(c.Sizes)*targets)
		p.EstimatedSeconds += bytes/fillBytesPerSec + float64(c.Repeat)*bytes/1e9
	}
	if segs := c.Store.RecycleSegments; segs > 0 {
		// Every store run of a window, a search probe or a profile is aged
		// first (ageStore): segs segments and a little more written.
		// So is every run of pebble-wal (peerRecycledWALBytes): its log
		// filled to as many bytes.
		aged := rounds*float64(n.storeCells+n.replCells+n.walPeerCells) + float64(n.probes-n.peerProbes+n.walPeerProbes+n.profiles)
		p.EstimatedSeconds += aged * float64(segs) * float64(c.Store.SegmentSizeBytes) / fillBytesPerSec
	}
	return p
}

// limitSeconds estimates the limits of one target.
func limitSeconds(c *Config) float64 {
	if c.NoLimits {
		return 0
	}
	r := float64(c.Repeat)
	seq := float64(c.DeviceProbeBytes) / 1e9 * 2              // probe and fio at ~1 GB/s
	sync := float64(c.SyncProbeCount) * 200e-6 * 3            // fallocated, pre-written, fio
	segments := 2*float64(c.Store.SegmentSizeBytes)/1e9 + 0.1 // two pre-written ones at ~1 GB/s, a fallocated one
	// Per op ~200 µs, and its file's bytes at ~1 GB/s twice for a
	// pre-written one (the zeros, then the writes), once otherwise.
	for _, g := range groupCommitProbes(c) {
		bytes := float64(c.SyncProbeCount) * float64(g.n*g.recBytes)
		if g.variant.way().Written {
			bytes *= 2
		}
		sync += float64(c.SyncProbeCount)*200e-6 + bytes/1e9
	}
	return r * (seq + sync + segments)
}

// limitRuns is the progress units of the limits.
func limitRuns(c *Config, targets int) int {
	if c.NoLimits {
		return 0
	}
	// seq, sync, pre-written sync, three segments, fio's two, the
	// group-commit limits
	return targets * c.Repeat * (6 + 2 + len(groupCommitProbes(c)))
}

func planLine(p *runfile.Plan, c *Config) string {
	return fmt.Sprintf("plan: %d cells × (1 warm + %d measured) repeats, %d runs with floors and search probes (rungs above a system's sustained rate are skipped: an upper bound), window %s (%s), warm-up %s — estimated %s%s",
		p.Cells, c.Repeat, p.Runs, time.Duration(p.WindowNs), p.WindowWhy, c.Warmup, (time.Duration(p.EstimatedSeconds) * time.Second).Round(time.Second),
		map[bool]string{true: " plus the peers' build (about a minute the first time)", false: ""}[len(c.Peers) > 0 && c.PeerCommand == ""])
}

// chooseWindow picks every cell's measured window. A given --duration is
// used as it is. Otherwise: sync cells acknowledge only durable data, so
// nothing is buffered and minWindow suffices; an async cell can accept
// into buffers — the kernel's dirty page cache (mmap, uring, the
// transient pool's fallback), the transient pool, uring's staging buffers
// — faster than the device drains them, so the window is at least as long
// as the slowest of the run's targets takes to absorb the largest of those
// buffers at its measured sequential rate — what it makes durable, where
// measured — (clamped to [minWindow, maxWindow]); the reason names that
// target.
func chooseWindow(c *Config, h hostctl.Host, limits []runfile.Limit, targets []string) (time.Duration, string) {
	if c.Duration > 0 {
		return c.Duration, "given with --duration"
	}
	if !hasFlush(c, "async") {
		return minWindow, "automatic: no async cell, and a sync acknowledgement is durable — nothing to absorb"
	}
	bufBytes, bufWhat := largestBuffer(c, h)
	slowest, devMBps, rateWhat := "", 0.0, ""
	for _, t := range targets {
		// What the device makes durable where measured (a device with a
		// volatile cache accepts writes faster), else what it accepts.
		rate, durable := 0.0, false
		for _, l := range limits {
			if l.Target != t || l.Status != runfile.StatusOK || l.MBPerSec <= 0 {
				continue
			}
			switch {
			case l.Name == runfile.LimitDeviceSeqDurable:
				rate, durable = l.MBPerSec, true
			case l.Name == runfile.LimitDeviceSeq && !durable:
				rate = l.MBPerSec
			}
		}
		if rate <= 0 {
			return 5 * time.Second, fmt.Sprintf("automatic: the rate of %s was not measured (--no-limits or a failed probe), so 5 s; the largest buffer is %s (%s)",
				t, fmtBytes(bufBytes), bufWhat)
		}
		if slowest == "" || rate < devMBps {
			slowest, devMBps, rateWhat = t, rate, map[bool]string{true: "durable (device-seq-write-durable)", false: "accepted, unsynced (device-seq-write)"}[durable]
		}
	}
	absorb := time.Duration(float64(bufBytes) / (devMBps * 1e6) * float64(time.Second))
	w := min(max(absorb, minWindow), maxWindow)
	w = (w + 499*time.Millisecond).Truncate(500 * time.Millisecond)
	device := "the device"
	if len(targets) > 1 {
		device = "the slowest of the targets"
	}
	return w, fmt.Sprintf("automatic: the largest buffer an async cell can fill is %s (%s); %s, %s, absorbs it at %.0f MB/s %s in %s; window = that, within [%s, %s], rounded up to 0.5 s",
		fmtBytes(bufBytes), bufWhat, device, slowest, devMBps, rateWhat, absorb.Round(time.Millisecond), minWindow, maxWindow)
}

// largestBuffer is the largest amount of accepted data the run's async
// backends can hold before the device limits them: the kernel's dirty
// threshold for a backend whose committed bytes reach the page cache, and
// what the backend itself holds unflushed (its registration's Unflushed:
// a buffer pool, staging rings) when that is more.
func largestBuffer(c *Config, h hostctl.Host) (int64, string) {
	dirty, dirtyWhat := dirtyThreshold(h)
	best, what := int64(0), ""
	cfg := mappedfile.Config{SegmentSizeBytes: c.Store.SegmentSizeBytes}
	for _, b := range c.Backends {
		reg, err := mappedfile.Registered().Lookup(b)
		if err != nil || reg.Volatile {
			continue
		}
		var n int64
		var w string
		if !reg.DirectIO {
			n, w = dirty, "the kernel's dirty threshold, "+dirtyWhat
		}
		if reg.Unflushed != nil {
			bo, _, _ := backendOptions(c.Store, b, "async")
			if u, uw, err := reg.Unflushed(cfg, bo); err == nil && u > n {
				n, w = u, uw
			}
		}
		if n > best {
			best, what = n, w
		}
	}
	return best, what
}

// dirtyThreshold is where the kernel starts throttling writers: vm.dirty_bytes,
// or vm.dirty_ratio of the available memory.
func dirtyThreshold(h hostctl.Host) (int64, string) {
	if v, err := h.ReadSysctl("vm.dirty_bytes"); err == nil && v != "0" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n, "vm.dirty_bytes=" + v
		}
	}
	ratio := 20.0
	if v, err := h.ReadSysctl("vm.dirty_ratio"); err == nil {
		if r, err := strconv.ParseFloat(v, 64); err == nil {
			ratio = r
		}
	}
	avail := int64(0)
	if f := strings.Fields(host.ProcField("/proc/meminfo", "MemAvailable") + " 0"); len(f) > 0 {
		kb, _ := strconv.ParseInt(f[0], 10, 64)
		avail = kb << 10
	}
	return int64(math.Round(float64(avail) * ratio / 100)), fmt.Sprintf("vm.dirty_ratio=%.0f%% of %s available", ratio, fmtBytes(avail))
}

// fmtBytes formats a byte count in MB or GB (10^6, 10^9).
func fmtBytes(n int64) string {
	if n >= 1e9 {
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	}
	return fmt.Sprintf("%.0f MB", float64(n)/1e6)
}
