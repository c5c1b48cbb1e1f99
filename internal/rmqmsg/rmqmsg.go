// Package rmqmsg makes the properties of the messages a RocketMQ producer
// sends, as the benchmarks put them: TAGS cycling through four tags of one
// length, two KEYS unique per message, a UNIQ_KEY in RocketMQ's message-id
// format, WAIT=true, the CLUSTER property the broker adds and a user
// property. mqbench's rocketmq message and the engine's load benchmark use
// it, so both measure the same message: unique keys land in random
// IndexFile slots, as a real producer's do.
package rmqmsg

import (
	"os"
	"unsafe"

	"github.com/mqstore/mqstore/engine/record"
)

// Tags are the tags the messages cycle through (one length, so every record
// has the same size).
var Tags = [...]string{"TagA", "TagB", "TagC", "TagD"}

// Offsets of the per-message values in Values.text.
const (
	keysOrder = len("ORDER-")                   // 16 hex: worker, sequence
	keysTrace = keysOrder + 16 + len(" TRACE-") // 16 hex: a bijective mix of the two
	keysEnd   = keysTrace + 16
	uniqAt    = keysEnd
	uniqSeqAt = uniqAt + 20 // the 12 hex of the sequence follow the fixed 20
	textLen   = uniqAt + 32
)

// Property is one name and value of a message, in the order they are sent.
type Property struct{ Name, Value string }

// Values is one producer's per-message values. KEYS and UNIQ_KEY are
// strings over a buffer the producer owns and Next rewrites in place: no
// allocation per message. That is sound only where the consumer of a
// message copies its properties before the next call (the engine's Put
// does, and keeps no reference after it returns).
type Values struct {
	text   []byte
	props  [6]Property
	worker uint64
	seq    uint64
}

// New returns worker's values; worker tells producers' keys apart.
func New(worker int) *Values {
	v := &Values{text: make([]byte, textLen), worker: uint64(worker)}
	copy(v.text, "ORDER-")
	copy(v.text[keysOrder+16:], " TRACE-")
	// RocketMQ's message id (MessageClientIDSetter): 16 bytes as 32
	// uppercase hex — the client's IPv4 address, its PID and a per-client
	// hash (here the worker), then what varies per message (RocketMQ: the
	// time since the month began and a counter; here a 48-bit per-worker
	// sequence, so every id of a run is unique).
	putHex(v.text[uniqAt:uniqAt+8], 0x7F000001)
	putHex(v.text[uniqAt+8:uniqAt+12], uint64(os.Getpid()))
	putHex(v.text[uniqAt+12:uniqAt+20], v.worker)
	str := func(from, to int) string { return unsafe.String(&v.text[from], to-from) }
	v.props = [6]Property{
		{Name: record.PropTags, Value: Tags[0]},
		{Name: record.PropKeys, Value: str(0, keysEnd)},
		{Name: record.PropUniqKey, Value: str(uniqAt, textLen)},
		{Name: "WAIT", Value: "true"},
		{Name: "CLUSTER", Value: "DefaultCluster"},
		{Name: "bizType", Value: "order-created"},
	}
	return v
}

// Properties returns the properties of the current message. Their KEYS and
// UNIQ_KEY values change at the next call of Next; the slice's TAGS entry
// does not (read it again after Next).
func (v *Values) Properties() []Property { return v.props[:] }

// Next rewrites the values for the producer's next message and returns
// its TAGS.
func (v *Values) Next() (tags string) {
	putHex(v.text[keysOrder:keysOrder+4], v.worker)
	putHex(v.text[keysOrder+4:keysOrder+16], v.seq)
	putHex(v.text[keysTrace:keysEnd], Mix64(v.worker<<48|v.seq))
	putHex(v.text[uniqSeqAt:textLen], v.seq)
	tags = Tags[v.seq%uint64(len(Tags))]
	v.props[0].Value = tags
	v.seq++
	return tags
}

const hexDigits = "0123456789ABCDEF"

// putHex writes the low 4·len(dst) bits of x into dst as uppercase hex.
func putHex(dst []byte, x uint64) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = hexDigits[x&0xF]
		x >>= 4
	}
}

// Mix64 is splitmix64's finalizer: a bijection, so distinct inputs give
// distinct keys.
func Mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}
