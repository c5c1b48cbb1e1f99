// Package indexfile is RocketMQ's IndexFile: a hash index from message keys
// ("topic#key") to CommitLog offsets, in files of a fixed size named by
// creation time (docs/formats.md "IndexFile").
//
// A file is a 40-byte header, SlotCount 4-byte hash slots, then MaxEntries
// 20-byte entries; entry 0 is "none", so a file holds MaxEntries − 1 keys.
// Every slot holds the number of the newest entry whose key hashes to it and
// every entry the number of the entry the slot held before (a chain, newest
// first). Entries are appended through the MappedFile seam; slots and header
// are rewritten in place through mappedfile.Overwriter.
package indexfile

import (
	"encoding/binary"
	"errors"

	"github.com/mqstore/mqstore/mappedfile"
)

// Sizes of the parts of an IndexFile, in bytes, and RocketMQ's defaults.
const (
	HeaderSize        = 40
	SlotSize          = 4
	EntrySize         = 20
	DefaultSlotCount  = 5_000_000
	DefaultMaxEntries = 20_000_000
)

// ErrCorrupt: an index file's name or header is not what an IndexFile holds.
var ErrCorrupt = errors.New("indexfile: bad index file")

// Header is the 40-byte header of an IndexFile.
type Header struct {
	BeginTimestamp int64 // store time (ms) of the first entry
	EndTimestamp   int64 // store time (ms) of the last entry
	BeginPhyOffset int64 // CommitLog offset of the first entry's record
	EndPhyOffset   int64 // CommitLog offset of the last entry's record
	HashSlotCount  int32 // RocketMQ 4.9 counts every put here
	IndexCount     int32 // next entry number; starts at 1
}

// EncodeHeader writes h into dst[:HeaderSize], big-endian.
func EncodeHeader(dst []byte, h Header) {
	_ = dst[HeaderSize-1]
	binary.BigEndian.PutUint64(dst[0:], uint64(h.BeginTimestamp))
	binary.BigEndian.PutUint64(dst[8:], uint64(h.EndTimestamp))
	binary.BigEndian.PutUint64(dst[16:], uint64(h.BeginPhyOffset))
	binary.BigEndian.PutUint64(dst[24:], uint64(h.EndPhyOffset))
	binary.BigEndian.PutUint32(dst[32:], uint32(h.HashSlotCount))
	binary.BigEndian.PutUint32(dst[36:], uint32(h.IndexCount))
}

// DecodeHeader reads a header from src[:HeaderSize].
func DecodeHeader(src []byte) Header {
	_ = src[HeaderSize-1]
	return Header{
		BeginTimestamp: int64(binary.BigEndian.Uint64(src[0:])),
		EndTimestamp:   int64(binary.BigEndian.Uint64(src[8:])),
		BeginPhyOffset: int64(binary.BigEndian.Uint64(src[16:])),
		EndPhyOffset:   int64(binary.BigEndian.Uint64(src[24:])),
		HashSlotCount:  int32(binary.BigEndian.Uint32(src[32:])),
		IndexCount:     int32(binary.BigEndian.Uint32(src[36:])),
	}
}

// Entry is one 20-byte index entry.
type Entry struct {
	KeyHash   int32 // record.IndexKeyHash of the key
	PhyOffset int64 // CommitLog offset of the record
	TimeDiff  int32 // whole seconds since the file's BeginTimestamp
	PrevIndex int32 // previous entry of the same slot; 0 = end of chain
}

// EncodeEntry writes e into dst[:EntrySize], big-endian.
func EncodeEntry(dst []byte, e Entry) {
	_ = dst[EntrySize-1]
	binary.BigEndian.PutUint32(dst[0:], uint32(e.KeyHash))
	binary.BigEndian.PutUint64(dst[4:], uint64(e.PhyOffset))
	binary.BigEndian.PutUint32(dst[12:], uint32(e.TimeDiff))
	binary.BigEndian.PutUint32(dst[16:], uint32(e.PrevIndex))
}

// DecodeEntry reads an entry from src[:EntrySize].
func DecodeEntry(src []byte) Entry {
	_ = src[EntrySize-1]
	return Entry{
		KeyHash:   int32(binary.BigEndian.Uint32(src[0:])),
		PhyOffset: int64(binary.BigEndian.Uint64(src[4:])),
		TimeDiff:  int32(binary.BigEndian.Uint32(src[12:])),
		PrevIndex: int32(binary.BigEndian.Uint32(src[16:])),
	}
}

// entriesEncoder is a reusable mappedfile.Encoder of a run of entries over
// a buffer the Index owns and grows to the longest run, so Put allocates
// nothing in steady state.
type entriesEncoder struct {
	buf []byte
}

var errEncodeLength = errors.New("indexfile: reserved length differs from the entries' length")

// EncodeAt implements mappedfile.Encoder.
func (e *entriesEncoder) EncodeAt(dst []byte, _ int64) error {
	if len(dst) != len(e.buf) {
		return errEncodeLength
	}
	copy(dst, e.buf)
	return nil
}

// zeroEncoder fills a reserved range with zeros (the slot area and entry 0
// of a new file). It writes only where dst is not zero already: a new
// mmap'ed file reads as zeros, and clearing its 20 MB slot area anyway would
// dirty every page, to be written back by the flush that follows.
type zeroEncoder struct{}

// EncodeAt implements mappedfile.Encoder.
func (zeroEncoder) EncodeAt(dst []byte, _ int64) error {
	mappedfile.ZeroDirty(dst)
	return nil
}
