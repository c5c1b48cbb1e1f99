package bench

import (
	"cmp"
	"fmt"
	"net/netip"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/internal/rmqmsg"
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

// rocketmqTags are the tags a rocketmq message cycles through.
var rocketmqTags = rmqmsg.Tags

// producerMessages is one producer's messages: a single engine.Message
// reused for every Put. For rocketmq, the per-message property values
// (KEYS, UNIQ_KEY) are strings over a buffer the producer owns and
// rewrites in place before each Put (rmqmsg.Values): no allocation per
// message. That is sound because the engine copies the properties into the
// record during Put and keeps no reference to the Message after Put
// returns — the same contract the body, shared by all of a producer's
// Puts, already relies on (TestRocketMQMessagesAreStoredAsSent checks it,
// under the race detector too).
type producerMessages struct {
	m      engine.Message
	values *rmqmsg.Values
	props  [6]engine.Property
}

// newProducerMessages returns worker's messages of kind with bodies of
// sizeBytes (load.Body(worker, sizeBytes)), in queue worker % 8.
func newProducerMessages(kind string, worker, sizeBytes int) *producerMessages {
	g := &producerMessages{m: engine.Message{Topic: benchTopic, QueueID: int32(worker % 8), Body: load.Body(worker, sizeBytes)}}
	if messageKind(kind) != MessageRocketMQ {
		return g
	}
	g.values = rmqmsg.New(worker)
	for i, p := range g.values.Properties() {
		g.props[i] = engine.Property{Name: p.Name, Value: p.Value}
	}
	g.m.Properties = g.props[:]
	g.m.BornHost = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(50000+worker%10000))
	return g
}

// next returns the producer's next message (the same *engine.Message,
// rewritten), valid until the following call.
func (g *producerMessages) next() *engine.Message {
	if g.values != nil {
		g.props[0].Value = g.values.Next()
	}
	return &g.m
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
