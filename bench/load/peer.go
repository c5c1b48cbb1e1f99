package load

// Body returns a deterministic message body of sizeBytes for a worker: an
// xorshift stream (not compressible, not all zeros). mqstore's cells and
// every peer put the same bodies.
func Body(worker, sizeBytes int) []byte {
	b := make([]byte, sizeBytes)
	x := uint64(worker)*0x9E3779B97F4A7C15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// Ack is what a system's acknowledgement means: when it is sent, what a
// process crash and a power loss lose, and by what mechanism data becomes
// durable.
type Ack struct {
	Ack          string `json:"ack"`
	ProcessCrash string `json:"processCrash"`
	PowerLoss    string `json:"powerLoss"`
	Mechanism    string `json:"mechanism"`
}

// PeerOutput is the peer protocol: the one JSON object the peers' mqpeer
// command prints for one run of a Spec on one peer (the peers live in
// their own module; both sides use this type). Label says exactly what
// runs, Version comes from the peer's build info, Options are its
// settings, Durability what its acknowledgement means.
type PeerOutput struct {
	Peer       string            `json:"peer"`
	Flush      string            `json:"flush"`
	Label      string            `json:"label,omitempty"`
	Version    string            `json:"version,omitempty"`
	Options    map[string]string `json:"options,omitempty"`
	Durability *Ack              `json:"durability,omitempty"`
	Result     Result            `json:"result"`
	GoVersion  string            `json:"goVersion"`
	Error      string            `json:"error,omitempty"`
}

// RecycleWALFlag is mqpeer's flag, without its dashes, that runs the
// pebble-wal peer on a recycled WAL file: before the warm-up the peer
// writes a log of at least that many bytes with its own writer, closes it
// and reuses the file for the window's log as pebble's WAL manager reuses
// an obsolete WAL. pebble-wal alone takes it (mqpeer refuses it for the
// other peers), so it is not one of PeerFlags. mqbench passes it to
// pebble-wal when its mqstore cells run on an aged store
// (--recycle-segments N: N × the segment size).
const RecycleWALFlag = "recycle-wal"

// RecycledLogOption is the PeerOutput.Options key of a peer whose window
// wrote over a recycled log file, saying what that file was and how it was
// reused; a peer without it wrote its logs into new files.
const RecycledLogOption = "recycledLog"
