// Package record encodes and decodes CommitLog records in the on-disk format of
// Apache RocketMQ 4.9 (see docs/formats.md, "CommitLog record"), plus the helpers the
// ConsumeQueue and IndexFile need: the properties codec, Java's String.hashCode
// (tags codes, index keys) and RocketMQ's topic rule.
//
// All integers are big-endian. A version 1 record with IPv4 hosts is laid out as
//
//	 0 TOTALSIZE int32            48 BORNHOST 4+4 (16+4 if SYSFLAG&0x10)
//	 4 MAGICCODE int32            56 STORETIMESTAMP int64
//	 8 BODYCRC int32              64 STOREHOSTADDRESS 4+4 (16+4 if SYSFLAG&0x20)
//	12 QUEUEID int32              72 RECONSUMETIMES int32
//	16 FLAG int32                 76 PREPAREDTRANSACTIONOFFSET int64
//	20 QUEUEOFFSET int64          84 BODYLENGTH int32 + BODY
//	28 PHYSICALOFFSET int64        … TOPICLENGTH int8 (int16 in v2) + TOPIC
//	36 SYSFLAG int32               … PROPERTIESLENGTH int16 + PROPERTIES
//	40 BORNTIMESTAMP int64
//
// so it is 91 + len(body) + len(topic) + len(properties) bytes; each IPv6 host
// adds 12 bytes and a v2 record (topic longer than 127 bytes) adds 1.
//
// Encode, Patch and PutBlank never allocate; Decode allocates only the Topic
// string. Decode is strict about everything the format can check (lengths,
// magic, CRC, canonical host and version encoding) because only the body is
// covered by the CRC: the extra checks are what catches a damaged header.
package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"net/netip"
)

// Magic codes, sizes, system flag bits and fixed field offsets.
const (
	MagicV1    int32 = -626843481 // 0xDAA320A7
	MagicV2    int32 = -626843477 // 0xDAA320AB: TOPICLENGTH is 2 bytes
	MagicBlank int32 = -875286124 // 0xCBD43194: end-of-segment filler
	BlankSize        = 8          // TOTALSIZE + MAGICCODE of a blank

	SysFlagBornHostV6  = 0x10
	SysFlagStoreHostV6 = 0x20
	sysFlagHostBits    = SysFlagBornHostV6 | SysFlagStoreHostV6

	MaxTopicLenV1      = 127   // longest topic a v1 record can carry (TOPICLENGTH is an int8)
	MaxTopicLenV2      = 32767 // longest topic a v2 record can carry (TOPICLENGTH is an int16)
	MaxPropertiesBytes = 32767 // PROPERTIESLENGTH is an int16

	// MinRecordSize is the smallest valid TOTALSIZE: v1, IPv4 hosts, nothing
	// variable. (Decode additionally requires a topic of at least one byte.)
	MinRecordSize = 91

	// Field offsets that do not depend on the host kinds.
	OffTotalSize      = 0
	OffMagic          = 4
	OffBodyCRC        = 8
	OffQueueID        = 12
	OffFlag           = 16
	OffQueueOffset    = 20
	OffPhysicalOffset = 28
	OffSysFlag        = 36
	OffBornTimestamp  = 40
	OffBornHost       = 48

	// Property names the store understands.
	PropTags    = "TAGS"
	PropKeys    = "KEYS"
	PropUniqKey = "UNIQ_KEY"
)

const (
	hostV4Size = 4 + 4  // address + int32 port
	hostV6Size = 16 + 4 // address + int32 port
	crcMask    = 0x7FFFFFFF
)

// Sentinel errors; test with errors.Is.
var (
	// ErrCorrupt: the bytes are not a valid record. Every Decode and Peek
	// validation failure wraps it (through *DecodeError).
	ErrCorrupt = errors.New("record: corrupt")
	// ErrTooShort: the buffer ended before the record did, so nothing can be
	// decided; recovery treats it as a torn tail. It does not wrap ErrCorrupt.
	ErrTooShort = errors.New("record: buffer too short")
	// ErrInvalid: a message that cannot be encoded (topic, property
	// characters, sizes).
	ErrInvalid = errors.New("record: invalid message")
)

// Property is one message property. Order is kept.
type Property struct{ Name, Value string }

// Message is what a producer gives to the store.
//
// Hosts: an IPv6 address that is not IPv4-mapped sets the matching v6 bit of
// SYSFLAG; an IPv4-mapped address is stored as IPv4; an invalid (zero)
// AddrPort is stored as 0.0.0.0:0; an IPv6 zone is dropped.
type Message struct {
	Topic                     string
	QueueID                   int32
	Flag                      int32
	SysFlag                   int32 // transaction bits etc.; the host bits are derived from the hosts
	BornTimestamp             int64 // milliseconds since the epoch
	BornHost                  netip.AddrPort
	StoreHost                 netip.AddrPort
	ReconsumeTimes            int32
	PreparedTransactionOffset int64
	Body                      []byte
	Properties                []Property // encoded as name 0x01 value 0x02, in order
}

// hostIsV6 reports whether addr is stored in the 16-byte form.
func hostIsV6(addr netip.Addr) bool {
	return addr.Is6() && !addr.Is4In6()
}

// hostSize returns the on-disk size of a host field for the given v6 bit.
func hostSize(sysFlag int32, v6Bit int32) int {
	if sysFlag&v6Bit != 0 {
		return hostV6Size
	}
	return hostV4Size
}

// sysFlagFor returns m.SysFlag with the host bits derived from m's hosts.
func sysFlagFor(m *Message) int32 {
	sysFlag := m.SysFlag &^ sysFlagHostBits
	if hostIsV6(m.BornHost.Addr()) {
		sysFlag |= SysFlagBornHostV6
	}
	if hostIsV6(m.StoreHost.Addr()) {
		sysFlag |= SysFlagStoreHostV6
	}
	return sysFlag
}

// isV2Topic reports whether a topic of topicLen bytes needs a v2 record.
func isV2Topic(topicLen int) bool { return topicLen > MaxTopicLenV1 }

// recordSize is the size implied by the host kinds and the variable lengths.
func recordSize(sysFlag int32, v2 bool, bodyLen, topicLen, propertiesLen int) int {
	size := MinRecordSize + bodyLen + topicLen + propertiesLen +
		hostSize(sysFlag, SysFlagBornHostV6) - hostV4Size +
		hostSize(sysFlag, SysFlagStoreHostV6) - hostV4Size
	if v2 {
		size++
	}
	return size
}

// Size returns the encoded size of m given the length of its already encoded
// properties. The record is v2 iff len(m.Topic) > MaxTopicLenV1.
func Size(m *Message, propertiesLen int) int {
	return recordSize(sysFlagFor(m), isV2Topic(len(m.Topic)), len(m.Body), len(m.Topic), propertiesLen)
}

// StoreTimestampOffset returns the offset of STORETIMESTAMP for a SYSFLAG.
func StoreTimestampOffset(sysFlag int32) int {
	return OffBornHost + hostSize(sysFlag, SysFlagBornHostV6)
}

// BodyCRC is the CRC RocketMQ stores: CRC-32 (IEEE) masked with 0x7FFFFFFF.
func BodyCRC(body []byte) int32 {
	return int32(crc32.ChecksumIEEE(body) & crcMask)
}

// Encode writes the whole record for m into dst, whose length must be
// Size(m, len(props)). props is the output of EncodeProperties; it is copied
// as given. QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP are written as 0
// (see Patch); BODYCRC is computed. Encode checks only what the format can
// represent (topic 1..MaxTopicLenV2 bytes, properties up to MaxPropertiesBytes,
// TOTALSIZE within int32); callers check the topic with ValidateTopic. Errors
// wrap ErrInvalid. Encode does not allocate.
func Encode(dst []byte, m *Message, props []byte) error {
	if err := checkEncodable(len(dst), m, len(props)); err != nil {
		return err
	}
	sysFlag := sysFlagFor(m)
	magic := MagicV1
	if isV2Topic(len(m.Topic)) {
		magic = MagicV2
	}
	be := binary.BigEndian
	be.PutUint32(dst[OffTotalSize:], uint32(len(dst)))
	be.PutUint32(dst[OffMagic:], uint32(magic))
	be.PutUint32(dst[OffBodyCRC:], uint32(BodyCRC(m.Body)))
	be.PutUint32(dst[OffQueueID:], uint32(m.QueueID))
	be.PutUint32(dst[OffFlag:], uint32(m.Flag))
	be.PutUint64(dst[OffQueueOffset:], 0)
	be.PutUint64(dst[OffPhysicalOffset:], 0)
	be.PutUint32(dst[OffSysFlag:], uint32(sysFlag))
	be.PutUint64(dst[OffBornTimestamp:], uint64(m.BornTimestamp))
	at := putHost(dst, OffBornHost, m.BornHost, sysFlag&SysFlagBornHostV6 != 0)
	be.PutUint64(dst[at:], 0) // STORETIMESTAMP
	at = putHost(dst, at+8, m.StoreHost, sysFlag&SysFlagStoreHostV6 != 0)
	be.PutUint32(dst[at:], uint32(m.ReconsumeTimes))
	be.PutUint64(dst[at+4:], uint64(m.PreparedTransactionOffset))
	at += 12
	be.PutUint32(dst[at:], uint32(len(m.Body)))
	at += 4 + copy(dst[at+4:], m.Body)
	if magic == MagicV2 {
		be.PutUint16(dst[at:], uint16(len(m.Topic)))
		at += 2
	} else {
		dst[at] = byte(len(m.Topic))
		at++
	}
	at += copy(dst[at:], m.Topic)
	be.PutUint16(dst[at:], uint16(len(props)))
	copy(dst[at+2:], props)
	return nil
}

// checkEncodable validates the sizes Encode relies on. Only its error paths
// allocate.
func checkEncodable(dstLen int, m *Message, propertiesLen int) error {
	switch {
	case len(m.Topic) == 0:
		return fmt.Errorf("%w: empty topic", ErrInvalid)
	case len(m.Topic) > MaxTopicLenV2:
		return fmt.Errorf("%w: topic is %d bytes, longer than %d", ErrInvalid, len(m.Topic), MaxTopicLenV2)
	case propertiesLen > MaxPropertiesBytes:
		return fmt.Errorf("%w: properties are %d bytes, longer than %d", ErrInvalid, propertiesLen, MaxPropertiesBytes)
	}
	size := Size(m, propertiesLen)
	if size > math.MaxInt32 {
		return fmt.Errorf("%w: record would be %d bytes, longer than an int32 TOTALSIZE", ErrInvalid, size)
	}
	if dstLen != size {
		return fmt.Errorf("%w: destination is %d bytes, record is %d", ErrInvalid, dstLen, size)
	}
	return nil
}

// putHost writes an address and its port as int32 at dst[at:] and returns the
// offset just after it.
func putHost(dst []byte, at int, host netip.AddrPort, v6 bool) int {
	addr := host.Addr()
	if v6 {
		a16 := addr.As16()
		copy(dst[at:at+16], a16[:])
		at += 16
	} else {
		var a4 [4]byte
		if addr.IsValid() {
			a4 = addr.Unmap().As4()
		}
		copy(dst[at:at+4], a4[:])
		at += 4
	}
	binary.BigEndian.PutUint32(dst[at:], uint32(host.Port()))
	return at + 4
}

// Patch writes the three fields the store assigns at append time into an
// encoded record in place. It reads SYSFLAG from rec to find STORETIMESTAMP.
// rec must hold at least the fixed header; Patch does not allocate.
func Patch(rec []byte, queueOffset, physicalOffset, storeTimestamp int64) {
	be := binary.BigEndian
	be.PutUint64(rec[OffQueueOffset:], uint64(queueOffset))
	be.PutUint64(rec[OffPhysicalOffset:], uint64(physicalOffset))
	sysFlag := int32(be.Uint32(rec[OffSysFlag:]))
	be.PutUint64(rec[StoreTimestampOffset(sysFlag):], uint64(storeTimestamp))
}

// PutBlank writes the 8-byte end-of-segment blank: TOTALSIZE = remaining (the
// bytes left in the segment, blank included), MAGICCODE = MagicBlank.
func PutBlank(dst []byte, remaining int32) {
	magic := MagicBlank
	binary.BigEndian.PutUint32(dst[OffTotalSize:], uint32(remaining))
	binary.BigEndian.PutUint32(dst[OffMagic:], uint32(magic))
}

// The whole-record checksum, in the layout of RocketMQ's `__CRC32#`
// property: the last property of a record, its value ten decimal digits of
// the CRC-32 (IEEE, masked with 0x7FFFFFFF) of every byte of the record
// before the property, least significant digit first. BODYCRC covers the
// body alone; this covers the header (offsets, store timestamp), the topic
// and the properties as well, so a record whose bytes mix what was written
// with what an older use of the file left there does not pass.
const (
	PropRecordCRC = "__CRC32#"
	// RecordCRCSize is the property's size: name, 0x01, ten digits, 0x02.
	RecordCRCSize = len(PropRecordCRC) + 1 + 10 + 1
)

// AppendRecordCRC appends the whole-record checksum property to encoded
// properties, its digits left for PutRecordCRC to fill once every other
// byte of the record is final.
func AppendRecordCRC(props []byte) []byte {
	props = append(props, PropRecordCRC...)
	props = append(props, nameValueSeparator)
	props = append(props, "0000000000"...)
	return append(props, propertySeparator)
}

// PutRecordCRC computes the checksum of rec (a whole encoded record whose
// properties end with AppendRecordCRC's property) and writes its digits.
// It does not allocate.
func PutRecordCRC(rec []byte) {
	n := len(rec) - RecordCRCSize
	crc := crc32.ChecksumIEEE(rec[:n]) & crcMask
	digits := rec[n+len(PropRecordCRC)+1 : len(rec)-1]
	for i := range digits {
		digits[i] = byte('0' + crc%10)
		crc /= 10
	}
}

// CheckRecordCRC verifies the whole-record checksum of rec, decoded as r
// (found at at): the property must be the record's last and its digits the
// checksum of every byte before it. Errors are *DecodeError wrapping
// ErrCorrupt.
func CheckRecordCRC(rec []byte, at int64) error {
	n := len(rec) - RecordCRCSize
	if n < MinRecordSize-2 || string(rec[n:n+len(PropRecordCRC)]) != PropRecordCRC ||
		rec[n+len(PropRecordCRC)] != nameValueSeparator || rec[len(rec)-1] != propertySeparator {
		return &DecodeError{Offset: at, Field: FieldPropertiesLength, Reason: "the whole-record checksum property " + PropRecordCRC + " is not the record's last", Err: ErrCorrupt}
	}
	var stored uint64
	digits := rec[n+len(PropRecordCRC)+1 : len(rec)-1]
	for i := len(digits) - 1; i >= 0; i-- {
		d := digits[i]
		if d < '0' || d > '9' {
			return &DecodeError{Offset: at, Field: FieldPropertiesLength, Reason: fmt.Sprintf("the whole-record checksum has a non-digit 0x%02x", d), Err: ErrCorrupt}
		}
		stored = stored*10 + uint64(d-'0')
	}
	if want := uint64(crc32.ChecksumIEEE(rec[:n]) & crcMask); stored != want {
		return &DecodeError{Offset: at, Field: PropRecordCRC, Reason: fmt.Sprintf("whole-record checksum %d, the bytes give %d", stored, want), Err: ErrCorrupt}
	}
	return nil
}
