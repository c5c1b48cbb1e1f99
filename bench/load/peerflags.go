package load

import (
	"flag"
	"time"
)

// PeerFlags are the peer protocol's flags: what mqbench passes every peer
// program for a repeat (bench's peerRepeat) and what the program turns into
// the Spec it runs. Each peer program registers them with RegisterPeerFlags
// and adds its own.
type PeerFlags struct {
	Peer, Dir, Flush, Workload, Arrival, ProfileDir *string
	Size, Producers, InFlight                       *int
	Duration, Warmup, SeriesInterval                *time.Duration
	Rate                                            *float64
	Seed                                            *uint64
	List                                            *bool
}

// RegisterPeerFlags registers the peer protocol's flags on fs; defaultPeer
// and peerUsage are --peer's default and usage.
func RegisterPeerFlags(fs *flag.FlagSet, defaultPeer, peerUsage string) *PeerFlags {
	return &PeerFlags{
		Peer:      fs.String("peer", defaultPeer, peerUsage),
		Dir:       fs.String("dir", "", "empty directory for the peer's files (required)"),
		Flush:     fs.String("flush", "async", "async or sync"),
		Workload:  fs.String("workload", "throughput", "throughput or latency"),
		Size:      fs.Int("size", 1024, "message body bytes"),
		Producers: fs.Int("producers", 4, "closed-loop producers"),
		InFlight:  fs.Int("inflight", 8, "open-loop workers"),
		Duration:  fs.Duration("duration", 2*time.Second, "measured window"),
		Warmup:    fs.Duration("warmup", 500*time.Millisecond, "unmeasured warm-up"),
		SeriesInterval: fs.Duration("series-interval", 0,
			"also keep a latency time series of the window at this interval (0: none), as mqbench does for its own cells"),
		Rate:       fs.Float64("rate", 0, "open-loop arrivals per second"),
		Arrival:    fs.String("arrival", "constant", "constant or poisson"),
		Seed:       fs.Uint64("seed", 1, "Poisson seed"),
		List:       fs.Bool("list", false, "print the peers this program runs as a JSON array of {name, label} and exit"),
		ProfileDir: fs.String("profile", "", "write cpu, heap, block and mutex profiles of this process (warm-up included) to this directory"),
	}
}

// Spec is the repeat the flags describe (not validated: Spec.Validate).
func (f *PeerFlags) Spec() Spec {
	return Spec{Workload: Workload(*f.Workload), SizeBytes: *f.Size, Producers: *f.Producers, InFlight: *f.InFlight,
		Duration: *f.Duration, Warmup: *f.Warmup, SeriesInterval: *f.SeriesInterval, RatePerSec: *f.Rate, Arrival: Arrival(*f.Arrival), Seed: *f.Seed}
}
