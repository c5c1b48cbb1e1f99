package bench

import (
	"cmp"
	"fmt"
	"net/netip"
	"os"
	"unsafe"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/record"
)

// Message kinds (--message): what a store cell's producers put.
const (
	// MessageBare is the body alone, no properties: what the peers write.
	MessageBare = "bare"
	// MessageRocketMQ is what a RocketMQ producer sends: TAGS, KEYS (two,
	// unique per message, so the IndexFile indexes real keys), a UNIQ_KEY in
	// RocketMQ's message-id format, WAIT=true, the CLUSTER property the
	// broker adds, a user property, and the client's address as BornHost.
	MessageRocketMQ = "rocketmq"
)

// MessageKinds lists the kinds --message accepts.
func MessageKinds() []string { return []string{MessageBare, MessageRocketMQ} }

// messageKind is a configured kind, bare when unset (run files written
// before the kind was recorded put the bare body).
func messageKind(kind string) string { return cmp.Or(kind, MessageBare) }

// rocketmqTags are the tags a rocketmq message cycles through (one length,
// so every record has the same size).
var rocketmqTags = [...]string{"TagA", "TagB", "TagC", "TagD"}

// Offsets of the per-message values in producerMessages.text.
const (
	keysOrder   = len("ORDER-")                   // 16 hex: worker, sequence
	keysTrace   = keysOrder + 16 + len(" TRACE-") // 16 hex: a bijective mix of the two
	keysEnd     = keysTrace + 16
	uniqAt      = keysEnd
	uniqSeqAt   = uniqAt + 20 // the 12 hex of the sequence follow the fixed 20
	messageText = uniqAt + 32
)

// producerMessages is one producer's messages: a single engine.Message
// reused for every Put. For rocketmq, the per-message property values
// (KEYS, UNIQ_KEY) are strings over text, a buffer the producer owns and
// rewrites in place before each Put: no allocation per message. That is
// sound because the engine copies the properties into the record during
// Put and keeps no reference to the Message after Put returns — the same
// contract the body, shared by all of a producer's Puts, already relies
// on (TestRocketMQMessagesAreStoredAsSent checks it, under the race
// detector too).
type producerMessages struct {
	m      engine.Message
	text   []byte
	props  [6]engine.Property
	worker uint64
	seq    uint64
}

// newProducerMessages returns worker's messages of kind with bodies of
// sizeBytes (load.Body(worker, sizeBytes)), in queue worker % 8.
func newProducerMessages(kind string, worker, sizeBytes int) *producerMessages {
	g := &producerMessages{m: engine.Message{Topic: benchTopic, QueueID: int32(worker % 8), Body: load.Body(worker, sizeBytes)}, worker: uint64(worker)}
	if messageKind(kind) != MessageRocketMQ {
		return g
	}
	g.text = make([]byte, messageText)
	copy(g.text, "ORDER-")
	copy(g.text[keysOrder+16:], " TRACE-")
	// RocketMQ's message id (MessageClientIDSetter): 16 bytes as 32
	// uppercase hex — the client's IPv4 address, its PID and a per-client
	// hash (here the worker), then what varies per message (RocketMQ: the
	// time since the month began and a counter; here a 48-bit per-worker
	// sequence, so every id of a run is unique).
	putHex(g.text[uniqAt:uniqAt+8], 0x7F000001)
	putHex(g.text[uniqAt+8:uniqAt+12], uint64(os.Getpid()))
	putHex(g.text[uniqAt+12:uniqAt+20], g.worker)
	str := func(from, to int) string { return unsafe.String(&g.text[from], to-from) }
	g.props = [6]engine.Property{
		{Name: record.PropTags, Value: rocketmqTags[0]},
		{Name: record.PropKeys, Value: str(0, keysEnd)},
		{Name: record.PropUniqKey, Value: str(uniqAt, messageText)},
		{Name: "WAIT", Value: "true"},
		{Name: "CLUSTER", Value: "DefaultCluster"},
		{Name: "bizType", Value: "order-created"},
	}
	g.m.Properties = g.props[:]
	g.m.BornHost = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(50000+worker%10000))
	return g
}

// next returns the producer's next message (the same *engine.Message,
// rewritten), valid until the following call.
func (g *producerMessages) next() *engine.Message {
	if g.text != nil {
		putHex(g.text[keysOrder:keysOrder+4], g.worker)
		putHex(g.text[keysOrder+4:keysOrder+16], g.seq)
		putHex(g.text[keysTrace:keysEnd], mix64(g.worker<<48|g.seq))
		putHex(g.text[uniqSeqAt:messageText], g.seq)
		g.props[0].Value = rocketmqTags[g.seq%uint64(len(rocketmqTags))]
	}
	g.seq++
	return &g.m
}

const hexDigits = "0123456789ABCDEF"

// putHex writes the low 4·len(dst) bits of v into dst as uppercase hex.
func putHex(dst []byte, v uint64) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = hexDigits[v&0xF]
		v >>= 4
	}
}

// mix64 is splitmix64's finalizer: a bijection, so distinct inputs give
// distinct keys.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// recordBytes is the size of the CommitLog record the store writes for a
// message of kind with a body of sizeBytes (every message of a kind has
// the same size): what the group-commit limit writes per message.
func recordBytes(kind string, sizeBytes int) int {
	return messageRecordBytes(kind, sizeBytes, false)
}

// storeRecordBytes is the size of the CommitLog record a store cell with
// store's options writes for a body of sizeBytes: recordBytes of the
// store's message, with the whole-record checksum property
// (record.PropRecordCRC) a store with RecycleSegments adds to every
// record.
func storeRecordBytes(store StoreConfig, sizeBytes int) int {
	return messageRecordBytes(store.Message, sizeBytes, store.RecycleSegments > 0)
}

func messageRecordBytes(kind string, sizeBytes int, recordCRC bool) int {
	m := newProducerMessages(kind, 0, sizeBytes).next()
	props, err := record.EncodeProperties(nil, m.Properties)
	if err != nil {
		panic(fmt.Sprintf("bench: the %s message's properties do not encode: %v", kind, err)) // a programming error
	}
	if recordCRC {
		props = record.AppendRecordCRC(props)
	}
	return record.Size(m, len(props))
}
