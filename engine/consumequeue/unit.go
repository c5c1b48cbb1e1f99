// Package consumequeue is RocketMQ's ConsumeQueue: per (topic, queue id), a
// queue of fixed-size files of 20-byte units, one per message, that point at
// the message's record in the CommitLog (docs/formats.md "ConsumeQueue unit").
//
// The ConsumeQueue is derived data, built by the engine's dispatch from the
// CommitLog; it can always be rebuilt. Files live under
// <consumequeue>/<topic>/<queueId>/ and are named by the 20-digit byte offset
// of their first unit; unit number (the queue offset) = byte offset / 20.
package consumequeue

import (
	"encoding/binary"
	"errors"
	"math"
)

// UnitSize is the size of one ConsumeQueue unit in bytes.
const UnitSize = 20

// DefaultFileSizeBytes is RocketMQ's ConsumeQueue file size: 300,000 units.
const DefaultFileSizeBytes = 300000 * UnitSize

// BlankUnitSize is the size field of RocketMQ's pre-blank unit
// (fillPreBlank): physical offset 0, size Integer.MAX_VALUE, tags code 0.
const BlankUnitSize = math.MaxInt32

const blankSize = BlankUnitSize

// Unit is one ConsumeQueue entry.
type Unit struct {
	// PhysicalOffset is the CommitLog offset of the record's first byte.
	PhysicalOffset int64
	// Size is the record's TOTALSIZE.
	Size int32
	// TagsCode is the tags hash (record.TagsCode) used for server-side filtering.
	TagsCode int64
}

// End returns the CommitLog offset right after the record.
func (u Unit) End() int64 { return u.PhysicalOffset + int64(u.Size) }

// IsBlank reports whether u is a pre-blank unit (a placeholder written in
// front of the first real unit of a queue that did not start at offset 0).
func (u Unit) IsBlank() bool {
	return u.PhysicalOffset == 0 && u.Size == blankSize && u.TagsCode == 0
}

// plausible is RocketMQ's recovery test for a unit: offset ≥ 0 and size > 0.
// A zero unit (offset 0, size 0) marks the end of the written data.
//
// It also refuses a unit whose end would overflow int64: torn garbage can
// look plausible, and an overflowed End() would pass for "before everything"
// (retention would then delete the file holding it).
func (u Unit) plausible() bool {
	return u.PhysicalOffset >= 0 && u.Size > 0 && u.PhysicalOffset <= math.MaxInt64-int64(u.Size)
}

// EncodeUnit writes u into dst[:UnitSize], big-endian.
func EncodeUnit(dst []byte, u Unit) {
	_ = dst[UnitSize-1]
	binary.BigEndian.PutUint64(dst[0:8], uint64(u.PhysicalOffset))
	binary.BigEndian.PutUint32(dst[8:12], uint32(u.Size))
	binary.BigEndian.PutUint64(dst[12:20], uint64(u.TagsCode))
}

// DecodeUnit reads a unit from src[:UnitSize].
func DecodeUnit(src []byte) Unit {
	_ = src[UnitSize-1]
	return Unit{
		PhysicalOffset: int64(binary.BigEndian.Uint64(src[0:8])),
		Size:           int32(binary.BigEndian.Uint32(src[8:12])),
		TagsCode:       int64(binary.BigEndian.Uint64(src[12:20])),
	}
}

var errEncodeLength = errors.New("consumequeue: reserved length is not one unit")

// unitEncoder is the reusable mappedfile.Encoder of one unit: Append passes
// a pointer to the Queue's own encoder, so appending allocates nothing.
type unitEncoder struct {
	unit [UnitSize]byte
}

// EncodeAt implements mappedfile.Encoder.
func (e *unitEncoder) EncodeAt(dst []byte, _ int64) error {
	if len(dst) != UnitSize {
		return errEncodeLength
	}
	copy(dst, e.unit[:])
	return nil
}

// blankEncoder fills a reserved range with pre-blank units.
type blankEncoder struct{}

var errBlankLength = errors.New("consumequeue: reserved length is not a whole number of units")

// EncodeAt implements mappedfile.Encoder.
func (blankEncoder) EncodeAt(dst []byte, _ int64) error {
	if len(dst)%UnitSize != 0 {
		return errBlankLength
	}
	for i := 0; i < len(dst); i += UnitSize {
		EncodeUnit(dst[i:], Unit{Size: blankSize})
	}
	return nil
}
