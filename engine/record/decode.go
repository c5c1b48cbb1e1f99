package record

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
)

// Kind says what sits at a CommitLog position.
type Kind int

const (
	KindRecord Kind = iota // a message record
	KindBlank              // the end-of-segment blank: go to the next segment
	KindEnd                // TOTALSIZE == 0: end of written data
)

func (k Kind) String() string {
	switch k {
	case KindRecord:
		return "record"
	case KindBlank:
		return "blank"
	case KindEnd:
		return "end"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Field names used in DecodeError.Field (docs/formats.md's names).
const (
	FieldTotalSize        = "TOTALSIZE"
	FieldMagic            = "MAGICCODE"
	FieldBodyCRC          = "BODYCRC"
	FieldBornHost         = "BORNHOST"
	FieldStoreHost        = "STOREHOSTADDRESS"
	FieldBodyLength       = "BODYLENGTH"
	FieldTopicLength      = "TOPICLENGTH"
	FieldPropertiesLength = "PROPERTIESLENGTH"
)

// DecodeError says what is wrong with the bytes at a CommitLog offset.
type DecodeError struct {
	Offset int64  // global offset of the record's first byte
	Field  string // the field that failed, e.g. "BODYCRC"
	Reason string
	Err    error // ErrCorrupt or ErrTooShort
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("record at offset %d: field %s: %s", e.Offset, e.Field, e.Reason)
}

// Unwrap returns ErrCorrupt, or ErrTooShort when the buffer ended first.
func (e *DecodeError) Unwrap() error { return e.Err }

func corrupt(at int64, field, format string, args ...any) error {
	return &DecodeError{Offset: at, Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrCorrupt}
}

func tooShort(at int64, have, need int) error {
	return &DecodeError{
		Offset: at, Field: FieldTotalSize,
		Reason: fmt.Sprintf("buffer has %d bytes, need %d", have, need),
		Err:    ErrTooShort,
	}
}

// Peek looks at the first 8 bytes at a position and returns its kind and
// TOTALSIZE. A TOTALSIZE of 0 is KindEnd whatever the magic. A record's
// TOTALSIZE must be in [MinRecordSize, maxSize]; a blank's in [BlankSize,
// maxSize+BlankSize) since a blank is only written when a record of at most
// maxSize bytes plus 8 does not fit (the caller checks it reaches the segment
// end exactly). maxSize <= 0 means no upper bound. Errors are *DecodeError:
// ErrTooShort when len(buf) < 8, ErrCorrupt otherwise.
func Peek(buf []byte, at int64, maxSize int) (Kind, int32, error) {
	if len(buf) < BlankSize {
		return 0, 0, tooShort(at, len(buf), BlankSize)
	}
	totalSize := int32(binary.BigEndian.Uint32(buf[OffTotalSize:]))
	if totalSize == 0 {
		return KindEnd, 0, nil
	}
	magic := int32(binary.BigEndian.Uint32(buf[OffMagic:]))
	switch magic {
	case MagicV1, MagicV2:
		if totalSize < MinRecordSize {
			return 0, 0, corrupt(at, FieldTotalSize, "%d is less than the minimum record size %d", totalSize, MinRecordSize)
		}
		if maxSize > 0 && int64(totalSize) > int64(maxSize) {
			return 0, 0, corrupt(at, FieldTotalSize, "%d is more than the maximum record size %d", totalSize, maxSize)
		}
		return KindRecord, totalSize, nil
	case MagicBlank:
		if totalSize < BlankSize {
			return 0, 0, corrupt(at, FieldTotalSize, "blank of %d bytes, less than %d", totalSize, BlankSize)
		}
		if maxSize > 0 && int64(totalSize) >= int64(maxSize)+BlankSize {
			return 0, 0, corrupt(at, FieldTotalSize, "blank of %d bytes, a record of at most %d bytes would have fit", totalSize, maxSize)
		}
		return KindBlank, totalSize, nil
	}
	return 0, 0, corrupt(at, FieldMagic, "0x%08X is not a record or blank magic", uint32(magic))
}

// Record is a decoded record. Body and Properties alias the decoded buffer;
// Topic is a copy.
type Record struct {
	TotalSize                 int32
	Magic                     int32
	BodyCRC                   int32
	QueueID                   int32
	Flag                      int32
	QueueOffset               int64
	PhysicalOffset            int64
	SysFlag                   int32
	BornTimestamp             int64
	BornHost                  netip.AddrPort
	StoreTimestamp            int64
	StoreHost                 netip.AddrPort
	ReconsumeTimes            int32
	PreparedTransactionOffset int64
	Body                      []byte
	Topic                     string
	Properties                []byte // raw: name 0x01 value 0x02 repeated
}

// Decode validates and decodes the record at buf[0]; at is its global offset,
// used only in errors. It checks, in order: the buffer holds TOTALSIZE
// (ErrTooShort otherwise), the magic is v1 or v2, TOTALSIZE is at least the
// minimum for its host kinds, the hosts are canonical (ports 0..65535, no
// IPv4-mapped address in an IPv6 field), BODYLENGTH, TOPICLENGTH and
// PROPERTIESLENGTH are non-negative and stay inside TOTALSIZE, the topic is
// not empty, a v2 magic comes with a topic longer than 127 bytes, the lengths
// add up to TOTALSIZE exactly, and (if checkCRC) BODYCRC matches the body.
// Properties are returned raw and not parsed (RocketMQ's reader is lenient
// with them). Errors are *DecodeError. Decode allocates only the Topic.
func Decode(buf []byte, at int64, checkCRC bool) (Record, error) {
	return decode(buf, at, checkCRC, nil)
}

// Interner hands out one string per distinct topic, so a reader of a
// record stream (dispatch, recovery) does not allocate a topic string per
// record. It keeps at most maxInterned topics. Not safe for concurrent use.
type Interner struct{ topics map[string]string }

const maxInterned = 4096

// Intern returns b as a string, reusing an earlier copy.
func (in *Interner) Intern(b []byte) string {
	if s, ok := in.topics[string(b)]; ok { // the conversion in a map index does not allocate
		return s
	}
	s := string(b)
	if in.topics == nil {
		in.topics = make(map[string]string)
	}
	if len(in.topics) < maxInterned {
		in.topics[s] = s
	}
	return s
}

// DecodeInterned is Decode taking the topic string from in.
func DecodeInterned(buf []byte, at int64, checkCRC bool, in *Interner) (Record, error) {
	return decode(buf, at, checkCRC, in)
}

func decode(buf []byte, at int64, checkCRC bool, in *Interner) (Record, error) {
	var r Record
	if len(buf) < BlankSize {
		return r, tooShort(at, len(buf), BlankSize)
	}
	be := binary.BigEndian
	r.TotalSize = int32(be.Uint32(buf[OffTotalSize:]))
	r.Magic = int32(be.Uint32(buf[OffMagic:]))
	if r.Magic != MagicV1 && r.Magic != MagicV2 {
		return r, corrupt(at, FieldMagic, "0x%08X is not a record magic", uint32(r.Magic))
	}
	if r.TotalSize < MinRecordSize {
		return r, corrupt(at, FieldTotalSize, "%d is less than the minimum record size %d", r.TotalSize, MinRecordSize)
	}
	if len(buf) < int(r.TotalSize) {
		return r, tooShort(at, len(buf), int(r.TotalSize))
	}
	rec := buf[:r.TotalSize]
	r.BodyCRC = int32(be.Uint32(rec[OffBodyCRC:]))
	r.QueueID = int32(be.Uint32(rec[OffQueueID:]))
	r.Flag = int32(be.Uint32(rec[OffFlag:]))
	r.QueueOffset = int64(be.Uint64(rec[OffQueueOffset:]))
	r.PhysicalOffset = int64(be.Uint64(rec[OffPhysicalOffset:]))
	r.SysFlag = int32(be.Uint32(rec[OffSysFlag:]))
	r.BornTimestamp = int64(be.Uint64(rec[OffBornTimestamp:]))
	if minSize := recordSize(r.SysFlag, r.Magic == MagicV2, 0, 0, 0); int(r.TotalSize) < minSize {
		return r, corrupt(at, FieldTotalSize, "%d is less than the minimum %d for SYSFLAG 0x%X", r.TotalSize, minSize, r.SysFlag)
	}
	pos, err := decodeFixedTail(&r, rec, at)
	if err != nil {
		return r, err
	}
	if err := decodeVariable(&r, rec, pos, at, in); err != nil {
		return r, err
	}
	if checkCRC {
		if computed := BodyCRC(r.Body); computed != r.BodyCRC {
			return r, corrupt(at, FieldBodyCRC, "stored 0x%08X computed 0x%08X", uint32(r.BodyCRC), uint32(computed))
		}
	}
	return r, nil
}

// decodeFixedTail decodes from BORNHOST to PREPAREDTRANSACTIONOFFSET and
// returns the offset of BODYLENGTH. The caller has checked rec is long enough.
func decodeFixedTail(r *Record, rec []byte, at int64) (int, error) {
	be := binary.BigEndian
	var err error
	pos := OffBornHost
	if r.BornHost, pos, err = readHost(rec, pos, r.SysFlag&SysFlagBornHostV6 != 0); err != nil {
		return 0, corrupt(at, FieldBornHost, "%v", err)
	}
	r.StoreTimestamp = int64(be.Uint64(rec[pos:]))
	if r.StoreHost, pos, err = readHost(rec, pos+8, r.SysFlag&SysFlagStoreHostV6 != 0); err != nil {
		return 0, corrupt(at, FieldStoreHost, "%v", err)
	}
	r.ReconsumeTimes = int32(be.Uint32(rec[pos:]))
	r.PreparedTransactionOffset = int64(be.Uint64(rec[pos+4:]))
	return pos + 12, nil
}

// hostError is a static reason, so that readHost does not allocate.
type hostError string

func (e hostError) Error() string { return string(e) }

const (
	errPortRange  = hostError("port outside 0..65535")
	errMappedInV6 = hostError("IPv4-mapped address in an IPv6 field (RocketMQ writes it as IPv4)")
)

// readHost reads an address and an int32 port at rec[pos:].
func readHost(rec []byte, pos int, v6 bool) (netip.AddrPort, int, error) {
	var addr netip.Addr
	if v6 {
		addr = netip.AddrFrom16([16]byte(rec[pos : pos+16]))
		pos += 16
		if addr.Is4In6() {
			return netip.AddrPort{}, 0, errMappedInV6
		}
	} else {
		addr = netip.AddrFrom4([4]byte(rec[pos : pos+4]))
		pos += 4
	}
	port := int32(binary.BigEndian.Uint32(rec[pos:]))
	if port < 0 || port > 0xFFFF {
		return netip.AddrPort{}, 0, errPortRange
	}
	return netip.AddrPortFrom(addr, uint16(port)), pos + 4, nil
}

// decodeVariable decodes BODY, TOPIC and PROPERTIES starting at the
// BODYLENGTH offset pos, checking every length against len(rec).
func decodeVariable(r *Record, rec []byte, pos int, at int64, in *Interner) error {
	be := binary.BigEndian
	bodyLen := int(int32(be.Uint32(rec[pos:])))
	pos += 4
	// Room needed after the body: the topic and properties length fields.
	topicLenSize := 1
	if r.Magic == MagicV2 {
		topicLenSize = 2
	}
	if bodyLen < 0 || bodyLen > len(rec)-pos-topicLenSize-2 {
		return corrupt(at, FieldBodyLength, "%d does not fit in TOTALSIZE %d", bodyLen, r.TotalSize)
	}
	r.Body = rec[pos : pos+bodyLen : pos+bodyLen]
	pos += bodyLen

	var topicLen int
	if r.Magic == MagicV2 {
		topicLen = int(int16(be.Uint16(rec[pos:])))
	} else {
		topicLen = int(int8(rec[pos]))
	}
	pos += topicLenSize
	switch {
	case topicLen <= 0 || topicLen > len(rec)-pos-2:
		return corrupt(at, FieldTopicLength, "%d does not fit in TOTALSIZE %d", topicLen, r.TotalSize)
	case r.Magic == MagicV2 && topicLen <= MaxTopicLenV1:
		return corrupt(at, FieldTopicLength, "v2 record with a %d-byte topic (v2 is only for topics longer than %d)", topicLen, MaxTopicLenV1)
	}
	if in != nil {
		r.Topic = in.Intern(rec[pos : pos+topicLen])
	} else {
		r.Topic = string(rec[pos : pos+topicLen])
	}
	pos += topicLen

	propertiesLen := int(int16(be.Uint16(rec[pos:])))
	pos += 2
	if propertiesLen < 0 || propertiesLen > len(rec)-pos {
		return corrupt(at, FieldPropertiesLength, "%d does not fit in TOTALSIZE %d", propertiesLen, r.TotalSize)
	}
	r.Properties = rec[pos : pos+propertiesLen : pos+propertiesLen]
	if end := pos + propertiesLen; end != len(rec) {
		return corrupt(at, FieldTotalSize, "stored %d, the length fields add up to %d", r.TotalSize, end)
	}
	return nil
}

// Tags returns the TAGS property; ok is false when absent or empty.
func (r *Record) Tags() (string, bool) {
	value, ok := LookupProperty(r.Properties, PropTags)
	return string(value), ok
}

// Keys returns the KEYS property split on single spaces, empty keys dropped
// (as RocketMQ's IndexService does).
func (r *Record) Keys() []string {
	value, ok := LookupProperty(r.Properties, PropKeys)
	if !ok {
		return nil
	}
	var keys []string
	for _, key := range strings.Split(string(value), " ") {
		if key != "" {
			keys = append(keys, key)
		}
	}
	return keys
}

// UniqKey returns the UNIQ_KEY property; ok is false when absent or empty.
func (r *Record) UniqKey() (string, bool) {
	value, ok := LookupProperty(r.Properties, PropUniqKey)
	return string(value), ok
}
