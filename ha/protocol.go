package ha

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The wire format, RocketMQ 4.x's classic HA (HAConnection, HAClient); all
// integers big-endian:
//
//	slave → master: 8 bytes, the slave's CommitLog offset
//	master → slave: 12 bytes, physical offset int64 | body size int32,
//	                then body size raw CommitLog bytes (size 0: heartbeat)
const (
	reportSize = 8
	headerSize = 12
	// notAUnit is the offset of the heartbeat a master refuses a slave
	// with when the slave asked to start inside one of the master's
	// records (no CommitLog offset is negative).
	notAUnit = -1
)

// Errors; test with errors.Is. The error returned says what happened, at
// which offsets, and what to do.
var (
	// ErrDiverged: the slave's CommitLog is ahead of the master's or
	// differs from it (the master lost or rewrote a tail the slave holds).
	// The slave stops; nothing is changed. The repair is explicit:
	// mqstore repair-slave.
	ErrDiverged = errors.New("ha: the slave's CommitLog diverged from the master's")
	// ErrMasterGap: the master no longer stores what the slave needs next
	// (its retention deleted it): the slave must be started anew.
	ErrMasterGap = errors.New("ha: the master no longer has what the slave needs")
	// ErrProtocol: the peer does not speak the HA protocol, or broke it.
	ErrProtocol = errors.New("ha: protocol error")
	// ErrClosed: the master or slave was closed.
	ErrClosed = errors.New("ha: closed")
)

func putHeader(b []byte, offset int64, size int) {
	binary.BigEndian.PutUint64(b[0:], uint64(offset))
	binary.BigEndian.PutUint32(b[8:], uint32(int32(size)))
}

func parseHeader(b []byte) (offset int64, size int32) {
	return int64(binary.BigEndian.Uint64(b[0:])), int32(binary.BigEndian.Uint32(b[8:]))
}

// implausible says why an offset cannot be one a peer holds, or "".
// A CommitLog offset is not negative, and this far past the master's end
// (a terabyte) it is no slave's: bytes from something else.
func implausible(offset, masterEnd int64) string {
	switch {
	case offset < 0:
		return "it is negative"
	case offset > masterEnd+1<<40:
		return fmt.Sprintf("it is more than 1 TiB past the master's end %d", masterEnd)
	}
	return ""
}

// asText shows 8 raw bytes as text, for an error about a peer that sent
// something else (an HTTP request, say).
func asText(offset int64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(offset))
	return fmt.Sprintf("%q", b[:])
}
