package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// encodeMessage encodes m the way the engine does and patches it.
func encodeMessage(t testing.TB, m *Message, queueOffset, physicalOffset, storeTimestamp int64) []byte {
	t.Helper()
	props, err := EncodeProperties(nil, m.Properties)
	if err != nil {
		t.Fatalf("EncodeProperties: %v", err)
	}
	rec := make([]byte, Size(m, len(props)))
	if err := Encode(rec, m, props); err != nil {
		t.Fatalf("Encode: %v", err)
	}
	Patch(rec, queueOffset, physicalOffset, storeTimestamp)
	return rec
}

func baseMessage() Message {
	return Message{
		Topic:                     "TopicTest",
		QueueID:                   3,
		Flag:                      -7,
		SysFlag:                   0x8, // transaction commit
		BornTimestamp:             1700000000123,
		BornHost:                  netip.MustParseAddrPort("10.0.0.1:54321"),
		StoreHost:                 netip.MustParseAddrPort("192.168.1.2:10911"),
		ReconsumeTimes:            2,
		PreparedTransactionOffset: 4242,
		Body:                      []byte("hello, world"),
		Properties:                []Property{{PropTags, "TagA"}, {PropKeys, "k1 k2"}, {PropUniqKey, "AC11000100002A9F0000000000000001"}},
	}
}

// TestEncodeLayoutV1IPv4 checks every byte of a small v1 IPv4 record against
// the table in docs/formats.md. The CRC literal comes from zlib/java.util.zip.CRC32
// of "hi" (0xD8932AAC), masked.
func TestEncodeLayoutV1IPv4(t *testing.T) {
	m := Message{
		Topic:                     "T1",
		QueueID:                   3,
		Flag:                      7,
		SysFlag:                   0x4,
		BornTimestamp:             0x0102030405060708,
		BornHost:                  netip.MustParseAddrPort("10.0.0.1:9876"),
		StoreHost:                 netip.MustParseAddrPort("192.168.1.2:10911"),
		ReconsumeTimes:            2,
		PreparedTransactionOffset: 0x1122334455667788,
		Body:                      []byte("hi"),
		Properties:                []Property{{"TAGS", "a"}},
	}
	want := []byte{
		0x00, 0x00, 0x00, 0x66, // 0 TOTALSIZE = 91 + 2 + 2 + 7 = 102
		0xDA, 0xA3, 0x20, 0xA7, // 4 MAGICCODE v1
		0x58, 0x93, 0x2A, 0xAC, // 8 BODYCRC = 0xD8932AAC & 0x7FFFFFFF
		0x00, 0x00, 0x00, 0x03, // 12 QUEUEID
		0x00, 0x00, 0x00, 0x07, // 16 FLAG
		0, 0, 0, 0, 0, 0, 0, 0x05, // 20 QUEUEOFFSET (patched)
		0, 0, 0, 0, 0, 0, 0x10, 0x00, // 28 PHYSICALOFFSET (patched)
		0x00, 0x00, 0x00, 0x04, // 36 SYSFLAG
		0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // 40 BORNTIMESTAMP
		10, 0, 0, 1, 0x00, 0x00, 0x26, 0x94, // 48 BORNHOST 10.0.0.1, port 9876
		0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11, // 56 STORETIMESTAMP (patched)
		192, 168, 1, 2, 0x00, 0x00, 0x2A, 0x9F, // 64 STOREHOSTADDRESS, port 10911
		0x00, 0x00, 0x00, 0x02, // 72 RECONSUMETIMES
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // 76 PREPAREDTRANSACTIONOFFSET
		0x00, 0x00, 0x00, 0x02, 'h', 'i', // 84 BODYLENGTH + BODY
		0x02, 'T', '1', // 90 TOPICLENGTH (int8) + TOPIC
		0x00, 0x07, 'T', 'A', 'G', 'S', 0x01, 'a', 0x02, // 93 PROPERTIESLENGTH (int16) + PROPERTIES
	}
	props, err := EncodeProperties(nil, m.Properties)
	if err != nil {
		t.Fatal(err)
	}
	if got := Size(&m, len(props)); got != 91+len(m.Body)+len(m.Topic)+len(props) || got != len(want) {
		t.Fatalf("Size = %d, want %d", got, len(want))
	}
	rec := make([]byte, len(want))
	if err := Encode(rec, &m, props); err != nil {
		t.Fatal(err)
	}
	unpatched := bytes.Clone(want)
	copy(unpatched[OffQueueOffset:], make([]byte, 16))
	copy(unpatched[56:], make([]byte, 8))
	if !bytes.Equal(rec, unpatched) {
		t.Fatalf("Encode:\n got % X\nwant % X", rec, unpatched)
	}
	Patch(rec, 5, 0x1000, 0x0A0B0C0D0E0F1011)
	if !bytes.Equal(rec, want) {
		t.Fatalf("after Patch:\n got % X\nwant % X", rec, want)
	}
}

func TestRoundTrip(t *testing.T) {
	v6Born := netip.MustParseAddrPort("[2001:db8::1]:40000")
	v6Store := netip.MustParseAddrPort("[fe80::abcd:1]:10911")
	manyProps := make([]Property, 200)
	for i := range manyProps {
		manyProps[i] = Property{fmt.Sprintf("p%03d", i), strings.Repeat("v", i%17)}
	}
	tests := []struct {
		name      string
		edit      func(m *Message)
		wantSize  int // 0: do not check
		wantMagic int32
		wantFlags int32 // host bits expected in SYSFLAG
	}{
		{name: "v1 ipv4", wantMagic: MagicV1},
		{name: "v2 200-byte topic", edit: func(m *Message) { m.Topic = strings.Repeat("t", 200) }, wantMagic: MagicV2},
		{name: "v1 127-byte topic", edit: func(m *Message) { m.Topic = strings.Repeat("t", 127) }, wantMagic: MagicV1},
		{name: "v2 128-byte topic", edit: func(m *Message) { m.Topic = strings.Repeat("t", 128) }, wantMagic: MagicV2},
		{name: "born ipv6", edit: func(m *Message) { m.BornHost = v6Born }, wantMagic: MagicV1, wantFlags: SysFlagBornHostV6},
		{name: "store ipv6", edit: func(m *Message) { m.StoreHost = v6Store }, wantMagic: MagicV1, wantFlags: SysFlagStoreHostV6},
		{name: "both ipv6", edit: func(m *Message) { m.BornHost, m.StoreHost = v6Born, v6Store }, wantMagic: MagicV1, wantFlags: SysFlagBornHostV6 | SysFlagStoreHostV6},
		{name: "both ipv6 v2", edit: func(m *Message) {
			m.BornHost, m.StoreHost, m.Topic = v6Born, v6Store, strings.Repeat("x", 300)
		}, wantMagic: MagicV2, wantFlags: SysFlagBornHostV6 | SysFlagStoreHostV6},
		{name: "empty body", edit: func(m *Message) { m.Body = nil }, wantMagic: MagicV1},
		{name: "empty properties", edit: func(m *Message) { m.Properties = nil }, wantMagic: MagicV1},
		{name: "minimal", edit: func(m *Message) { m.Body, m.Properties, m.Topic = nil, nil, "T" }, wantSize: MinRecordSize + 1, wantMagic: MagicV1},
		{name: "many properties", edit: func(m *Message) { m.Properties = manyProps }, wantMagic: MagicV1},
		{name: "host bits in SysFlag are ignored", edit: func(m *Message) { m.SysFlag |= SysFlagBornHostV6 | SysFlagStoreHostV6 }, wantMagic: MagicV1},
		{name: "large body", edit: func(m *Message) { m.Body = bytes.Repeat([]byte{0xAB}, 1<<20) }, wantMagic: MagicV1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := baseMessage()
			if tc.edit != nil {
				tc.edit(&m)
			}
			rec := encodeMessage(t, &m, 77, 1<<40, 1700000000999)
			if tc.wantSize != 0 && len(rec) != tc.wantSize {
				t.Fatalf("size %d, want %d", len(rec), tc.wantSize)
			}
			got, err := Decode(rec, 1<<40, true)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			checkDecoded(t, &got, &m, rec)
			if got.Magic != tc.wantMagic {
				t.Errorf("magic 0x%08X, want 0x%08X", uint32(got.Magic), uint32(tc.wantMagic))
			}
			if want := m.SysFlag&^sysFlagHostBits | tc.wantFlags; got.SysFlag != want {
				t.Errorf("SysFlag 0x%X, want 0x%X", got.SysFlag, want)
			}
			if got.QueueOffset != 77 || got.PhysicalOffset != 1<<40 || got.StoreTimestamp != 1700000000999 {
				t.Errorf("patched fields = %d %d %d", got.QueueOffset, got.PhysicalOffset, got.StoreTimestamp)
			}
			parsed, err := ParseProperties(got.Properties)
			if err != nil {
				t.Fatalf("ParseProperties: %v", err)
			}
			if len(parsed) != len(m.Properties) || (len(parsed) > 0 && !reflect.DeepEqual(parsed, m.Properties)) {
				t.Errorf("properties %q, want %q", parsed, m.Properties)
			}
		})
	}
}

// checkDecoded compares every field but the patched ones and SYSFLAG.
func checkDecoded(t *testing.T, got *Record, m *Message, rec []byte) {
	t.Helper()
	if int(got.TotalSize) != len(rec) {
		t.Errorf("TotalSize %d, want %d", got.TotalSize, len(rec))
	}
	if got.BodyCRC != int32(crc32.ChecksumIEEE(m.Body)&0x7FFFFFFF) {
		t.Errorf("BodyCRC 0x%08X", uint32(got.BodyCRC))
	}
	if got.Topic != m.Topic || got.QueueID != m.QueueID || got.Flag != m.Flag ||
		got.BornTimestamp != m.BornTimestamp || got.ReconsumeTimes != m.ReconsumeTimes ||
		got.PreparedTransactionOffset != m.PreparedTransactionOffset {
		t.Errorf("decoded %+v\nfrom %+v", got, m)
	}
	if got.BornHost != m.BornHost || got.StoreHost != m.StoreHost {
		t.Errorf("hosts %v %v, want %v %v", got.BornHost, got.StoreHost, m.BornHost, m.StoreHost)
	}
	if !bytes.Equal(got.Body, m.Body) {
		t.Errorf("body differs (%d bytes, want %d)", len(got.Body), len(m.Body))
	}
}

func TestHostNormalization(t *testing.T) {
	tests := []struct {
		name       string
		host       netip.AddrPort
		want       netip.AddrPort
		wantV6Flag bool
	}{
		{"ipv4", netip.MustParseAddrPort("1.2.3.4:5"), netip.MustParseAddrPort("1.2.3.4:5"), false},
		{"ipv4-mapped stored as ipv4", netip.MustParseAddrPort("[::ffff:1.2.3.4]:5"), netip.MustParseAddrPort("1.2.3.4:5"), false},
		{"zero AddrPort stored as 0.0.0.0:0", netip.AddrPort{}, netip.MustParseAddrPort("0.0.0.0:0"), false},
		{"ipv6 zone dropped", netip.MustParseAddrPort("[fe80::1%eth0]:65535"), netip.MustParseAddrPort("[fe80::1]:65535"), true},
		{"ipv6 unspecified", netip.MustParseAddrPort("[::]:1"), netip.MustParseAddrPort("[::]:1"), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := baseMessage()
			m.BornHost, m.StoreHost = tc.host, tc.host
			got, err := Decode(encodeMessage(t, &m, 0, 0, 0), 0, true)
			if err != nil {
				t.Fatal(err)
			}
			if got.BornHost != tc.want || got.StoreHost != tc.want {
				t.Errorf("hosts %v %v, want %v", got.BornHost, got.StoreHost, tc.want)
			}
			if v6 := got.SysFlag&sysFlagHostBits == sysFlagHostBits; v6 != tc.wantV6Flag || (!v6 && got.SysFlag&sysFlagHostBits != 0) {
				t.Errorf("SysFlag 0x%X, want v6 bits %v", got.SysFlag, tc.wantV6Flag)
			}
		})
	}
}

func TestPatchThenDecode(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("bornV6=%v", v6), func(t *testing.T) {
			m := baseMessage()
			if v6 {
				m.BornHost = netip.MustParseAddrPort("[2001:db8::2]:1")
			}
			rec := encodeMessage(t, &m, 0, 0, 0)
			before, err := Decode(rec, 0, true)
			if err != nil {
				t.Fatal(err)
			}
			if before.QueueOffset != 0 || before.PhysicalOffset != 0 || before.StoreTimestamp != 0 {
				t.Fatalf("Encode left %d %d %d, want zeros", before.QueueOffset, before.PhysicalOffset, before.StoreTimestamp)
			}
			Patch(rec, -1, 1<<62, -5)
			after, err := Decode(rec, 1<<62, true)
			if err != nil {
				t.Fatal(err)
			}
			if after.QueueOffset != -1 || after.PhysicalOffset != 1<<62 || after.StoreTimestamp != -5 {
				t.Fatalf("after Patch: %d %d %d", after.QueueOffset, after.PhysicalOffset, after.StoreTimestamp)
			}
			if after.BornHost != m.BornHost || after.StoreHost != m.StoreHost || after.ReconsumeTimes != m.ReconsumeTimes {
				t.Fatalf("Patch damaged neighbouring fields: %+v", after)
			}
		})
	}
}

func TestStoreTimestampOffset(t *testing.T) {
	for _, tc := range []struct {
		sysFlag int32
		want    int
	}{{0, 56}, {SysFlagStoreHostV6, 56}, {SysFlagBornHostV6, 68}, {SysFlagBornHostV6 | SysFlagStoreHostV6 | 0xC, 68}} {
		if got := StoreTimestampOffset(tc.sysFlag); got != tc.want {
			t.Errorf("StoreTimestampOffset(0x%X) = %d, want %d", tc.sysFlag, got, tc.want)
		}
	}
}

func TestBodyCRCMasksTopBit(t *testing.T) {
	body := []byte("hi")
	raw := crc32.ChecksumIEEE(body)
	if raw != 0xD8932AAC || raw&0x80000000 == 0 {
		t.Fatalf("test body must have its CRC top bit set, crc32 = 0x%08X", raw)
	}
	if got := BodyCRC(body); got != 0x58932AAC {
		t.Fatalf("BodyCRC = 0x%08X, want 0x58932AAC", uint32(got))
	}
	m := baseMessage()
	m.Body = body
	rec := encodeMessage(t, &m, 0, 0, 0)
	if stored := binary.BigEndian.Uint32(rec[OffBodyCRC:]); stored != 0x58932AAC {
		t.Fatalf("stored BODYCRC 0x%08X, want 0x58932AAC", stored)
	}
	if _, err := Decode(rec, 0, true); err != nil {
		t.Fatalf("Decode of a masked CRC: %v", err)
	}
	binary.BigEndian.PutUint32(rec[OffBodyCRC:], raw) // unmasked: must not match
	if _, err := Decode(rec, 0, true); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Decode with unmasked CRC: %v, want ErrCorrupt", err)
	}
}

func TestEncodeErrors(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(m *Message)
		props   []byte
		dstSkew int
		want    string
	}{
		{name: "empty topic", edit: func(m *Message) { m.Topic = "" }, want: "empty topic"},
		{name: "topic too long", edit: func(m *Message) { m.Topic = strings.Repeat("t", MaxTopicLenV2+1) }, want: "topic is 32768 bytes"},
		{name: "properties too long", props: bytes.Repeat([]byte("a"), MaxPropertiesBytes+1), want: "properties are 32768 bytes"},
		{name: "dst too short", dstSkew: -1, want: "destination is"},
		{name: "dst too long", dstSkew: 1, want: "destination is"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := baseMessage()
			if tc.edit != nil {
				tc.edit(&m)
			}
			dst := make([]byte, Size(&m, len(tc.props))+tc.dstSkew)
			err := Encode(dst, &m, tc.props)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Encode: %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
}

func TestPutBlankAndPeek(t *testing.T) {
	blank := make([]byte, BlankSize)
	PutBlank(blank, 1234)
	if want := []byte{0, 0, 0x04, 0xD2, 0xCB, 0xD4, 0x31, 0x94}; !bytes.Equal(blank, want) {
		t.Fatalf("PutBlank = % X, want % X", blank, want)
	}
	m := baseMessage()
	rec := encodeMessage(t, &m, 0, 0, 0)
	header := func(totalSize, magic uint32) []byte {
		return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, totalSize), magic)
	}
	const maxSize = 4096
	tests := []struct {
		name      string
		buf       []byte
		wantKind  Kind
		wantSize  int32
		wantErr   error
		wantField string
	}{
		{name: "record", buf: rec, wantKind: KindRecord, wantSize: int32(len(rec))},
		{name: "blank", buf: blank, wantKind: KindBlank, wantSize: 1234},
		{name: "end of data", buf: make([]byte, 8), wantKind: KindEnd},
		{name: "end with stray magic", buf: header(0, 0xDAA320A7), wantKind: KindEnd},
		{name: "largest record", buf: header(maxSize, 0xDAA320AB), wantKind: KindRecord, wantSize: maxSize},
		{name: "largest blank", buf: header(maxSize+7, 0xCBD43194), wantKind: KindBlank, wantSize: maxSize + 7},
		{name: "7 bytes", buf: rec[:7], wantErr: ErrTooShort, wantField: FieldTotalSize},
		{name: "bad magic", buf: header(100, 0x12345678), wantErr: ErrCorrupt, wantField: FieldMagic},
		{name: "record below minimum", buf: header(MinRecordSize-1, 0xDAA320A7), wantErr: ErrCorrupt, wantField: FieldTotalSize},
		{name: "negative size", buf: header(0xFFFFFFFF, 0xDAA320A7), wantErr: ErrCorrupt, wantField: FieldTotalSize},
		{name: "record above max", buf: header(maxSize+1, 0xDAA320A7), wantErr: ErrCorrupt, wantField: FieldTotalSize},
		{name: "blank below 8", buf: header(7, 0xCBD43194), wantErr: ErrCorrupt, wantField: FieldTotalSize},
		{name: "blank where a record fits", buf: header(maxSize+8, 0xCBD43194), wantErr: ErrCorrupt, wantField: FieldTotalSize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kind, size, err := Peek(tc.buf, 8192, maxSize)
			if tc.wantErr != nil {
				checkDecodeError(t, err, tc.wantErr, tc.wantField, 8192)
				return
			}
			if err != nil || kind != tc.wantKind || size != tc.wantSize {
				t.Fatalf("Peek = %v %d %v, want %v %d", kind, size, err, tc.wantKind, tc.wantSize)
			}
		})
	}
	if kind, _, err := Peek(header(1<<30, 0xDAA320A7), 0, 0); err != nil || kind != KindRecord {
		t.Fatalf("Peek with no max: %v %v", kind, err)
	}
}

// checkDecodeError checks err is a *DecodeError for field at offset wrapping want.
func checkDecodeError(t *testing.T, err, want error, field string, offset int64) {
	t.Helper()
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T), want *DecodeError", err, err)
	}
	if !errors.Is(err, want) {
		t.Fatalf("error %q does not wrap %v", err, want)
	}
	if want == ErrTooShort && errors.Is(err, ErrCorrupt) {
		t.Fatalf("error %q wraps ErrCorrupt as well as ErrTooShort", err)
	}
	if de.Field != field || de.Offset != offset {
		t.Fatalf("error %q: field %q offset %d, want %q %d", err, de.Field, de.Offset, field, offset)
	}
	prefix := fmt.Sprintf("record at offset %d: field %s: ", offset, field)
	if !strings.HasPrefix(err.Error(), prefix) {
		t.Fatalf("error %q does not start with %q", err, prefix)
	}
}
