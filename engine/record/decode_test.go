package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func TestDecodeErrors(t *testing.T) {
	base := baseMessage()
	baseRec := encodeMessage(t, &base, 1, 2, 3)
	bodyLenOff := 84
	topicLenOff := bodyLenOff + 4 + len(base.Body)
	propsLenOff := topicLenOff + 1 + len(base.Topic)

	minimal := Message{Topic: "T"}
	minimalRec := encodeMessage(t, &minimal, 0, 0, 0)

	v2 := baseMessage()
	v2.Topic = strings.Repeat("L", 200)
	v2Rec := encodeMessage(t, &v2, 0, 0, 0)

	v6 := baseMessage()
	v6.BornHost = netip.MustParseAddrPort("[2001:db8::1]:80")
	v6Rec := encodeMessage(t, &v6, 0, 0, 0)

	putU32 := func(rec []byte, at int, v uint32) { binary.BigEndian.PutUint32(rec[at:], v) }
	putU16 := func(rec []byte, at int, v uint16) { binary.BigEndian.PutUint16(rec[at:], v) }
	tests := []struct {
		name    string
		base    []byte
		mutate  func(rec []byte) []byte
		wantErr error
		field   string
		reason  string // regexp the reason must match
	}{
		{"bad magic", baseRec, func(r []byte) []byte { putU32(r, OffMagic, 0x01020304); return r },
			ErrCorrupt, FieldMagic, `^0x01020304 is not a record magic$`},
		{"blank magic", baseRec, func(r []byte) []byte { putU32(r, OffMagic, 0xCBD43194); return r },
			ErrCorrupt, FieldMagic, `CBD43194`},
		{"TOTALSIZE larger than fields", baseRec, func(r []byte) []byte {
			putU32(r, OffTotalSize, uint32(len(r)+1))
			return append(r, 0)
		}, ErrCorrupt, FieldTotalSize, `^stored 176, the length fields add up to 175$`},
		{"TOTALSIZE below minimum", baseRec, func(r []byte) []byte { putU32(r, OffTotalSize, 90); return r },
			ErrCorrupt, FieldTotalSize, `90 is less than the minimum record size 91`},
		{"TOTALSIZE below minimum for ipv6 hosts", minimalRec, func(r []byte) []byte {
			putU32(r, OffSysFlag, SysFlagBornHostV6|SysFlagStoreHostV6)
			return r
		}, ErrCorrupt, FieldTotalSize, `92 is less than the minimum 115 for SYSFLAG 0x30`},
		{"body length overflowing", baseRec, func(r []byte) []byte { putU32(r, bodyLenOff, uint32(len(r))); return r },
			ErrCorrupt, FieldBodyLength, `175 does not fit`},
		{"body length leaves no room for the length fields", baseRec, func(r []byte) []byte {
			putU32(r, bodyLenOff, uint32(len(r)-bodyLenOff-4-2))
			return r
		}, ErrCorrupt, FieldBodyLength, `does not fit`},
		{"body length negative", baseRec, func(r []byte) []byte { putU32(r, bodyLenOff, 0xFFFFFFFF); return r },
			ErrCorrupt, FieldBodyLength, `^-1 does not fit`},
		{"topic length overflowing", baseRec, func(r []byte) []byte { r[topicLenOff] = 127; return r },
			ErrCorrupt, FieldTopicLength, `^127 does not fit`},
		{"topic length negative", baseRec, func(r []byte) []byte { r[topicLenOff] = 0x80; return r },
			ErrCorrupt, FieldTopicLength, `^-128 does not fit`},
		{"topic length zero", baseRec, func(r []byte) []byte { r[topicLenOff] = 0; return r },
			ErrCorrupt, FieldTopicLength, `^0 does not fit`},
		{"v2 topic length overflowing", v2Rec, func(r []byte) []byte { putU16(r, topicLenOff, 0x7FFF); return r },
			ErrCorrupt, FieldTopicLength, `^32767 does not fit`},
		{"v2 magic with a short topic", baseRec, func(r []byte) []byte {
			// Re-lay the v1 record as v2: TOPICLENGTH grows to 2 bytes.
			out := append(bytes.Clone(r[:topicLenOff]), 0)
			out = append(out, r[topicLenOff:]...)
			putU32(out, OffTotalSize, uint32(len(out)))
			putU32(out, OffMagic, 0xDAA320AB)
			return out
		}, ErrCorrupt, FieldTopicLength, `v2 record with a 9-byte topic`},
		{"properties length overflowing", baseRec, func(r []byte) []byte {
			putU16(r, propsLenOff, binary.BigEndian.Uint16(r[propsLenOff:])+1)
			return r
		}, ErrCorrupt, FieldPropertiesLength, `^64 does not fit in TOTALSIZE 175$`},
		{"properties length negative", baseRec, func(r []byte) []byte { putU16(r, propsLenOff, 0xFFFF); return r },
			ErrCorrupt, FieldPropertiesLength, `^-1 does not fit`},
		{"properties shorter than TOTALSIZE", baseRec, func(r []byte) []byte {
			putU16(r, propsLenOff, binary.BigEndian.Uint16(r[propsLenOff:])-1)
			return r
		}, ErrCorrupt, FieldTotalSize, `^stored 175, the length fields add up to 174$`},
		{"CRC mismatch", baseRec, func(r []byte) []byte { r[bodyLenOff+4] ^= 1; return r },
			ErrCorrupt, FieldBodyCRC, `^stored 0x[0-9A-F]{8} computed 0x[0-9A-F]{8}$`},
		{"born port out of range", baseRec, func(r []byte) []byte { putU32(r, OffBornHost+4, 70000); return r },
			ErrCorrupt, FieldBornHost, `port outside`},
		{"store port negative", baseRec, func(r []byte) []byte { putU32(r, 64+4, 0x80000000); return r },
			ErrCorrupt, FieldStoreHost, `port outside`},
		{"ipv4-mapped address in an ipv6 field", v6Rec, func(r []byte) []byte {
			a := netip.MustParseAddr("::ffff:1.2.3.4").As16()
			copy(r[OffBornHost:], a[:])
			return r
		}, ErrCorrupt, FieldBornHost, `IPv4-mapped`},
		{"truncated by one byte", baseRec, func(r []byte) []byte { return r[:len(r)-1] },
			ErrTooShort, FieldTotalSize, `^buffer has 174 bytes, need 175$`},
		{"truncated to the header", baseRec, func(r []byte) []byte { return r[:8] },
			ErrTooShort, FieldTotalSize, `need 175`},
		{"fewer than 8 bytes", baseRec, func(r []byte) []byte { return r[:5] },
			ErrTooShort, FieldTotalSize, `^buffer has 5 bytes, need 8$`},
	}
	const at = 1234567
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := tc.mutate(bytes.Clone(tc.base))
			_, err := Decode(rec, at, true)
			checkDecodeError(t, err, tc.wantErr, tc.field, at)
			var de *DecodeError
			errors.As(err, &de)
			if !regexp.MustCompile(tc.reason).MatchString(de.Reason) {
				t.Fatalf("reason %q does not match %q", de.Reason, tc.reason)
			}
		})
	}
}

func TestDecodeWithoutCRCCheck(t *testing.T) {
	m := baseMessage()
	rec := encodeMessage(t, &m, 0, 0, 0)
	rec[88] ^= 0xFF // first body byte
	if _, err := Decode(rec, 0, false); err != nil {
		t.Fatalf("Decode(checkCRC=false) of a record with a bad body: %v", err)
	}
	if _, err := Decode(rec, 0, true); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Decode(checkCRC=true): %v, want ErrCorrupt", err)
	}
}

func TestDecodeIgnoresBytesAfterRecord(t *testing.T) {
	m := baseMessage()
	rec := encodeMessage(t, &m, 0, 0, 0)
	buf := append(bytes.Clone(rec), 0xDE, 0xAD, 0xBE, 0xEF)
	got, err := Decode(buf, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if int(got.TotalSize) != len(rec) || cap(got.Properties) != len(got.Properties) || cap(got.Body) != len(got.Body) {
		t.Fatalf("decoded slices reach past the record: size %d, props cap %d len %d",
			got.TotalSize, cap(got.Properties), len(got.Properties))
	}
}

func TestDecodeAliasesBuffer(t *testing.T) {
	m := baseMessage()
	rec := encodeMessage(t, &m, 0, 0, 0)
	got, err := Decode(rec, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	rec[88] = 'X'
	if got.Body[0] != 'X' {
		t.Fatal("Body is a copy, want a view of the buffer")
	}
	topicOff := 88 + len(m.Body) + 1
	rec[topicOff] = 'X'
	if got.Topic != m.Topic {
		t.Fatal("Topic changed with the buffer, want a copy")
	}
}

func TestRecordPropertyAccessors(t *testing.T) {
	tests := []struct {
		name     string
		props    []Property
		wantTags string
		tagsOK   bool
		wantKeys []string
		wantUniq string
		uniqOK   bool
	}{
		{name: "none"},
		{name: "all", props: []Property{{PropTags, "TagA"}, {PropKeys, "k1 k2"}, {PropUniqKey, "U1"}},
			wantTags: "TagA", tagsOK: true, wantKeys: []string{"k1", "k2"}, wantUniq: "U1", uniqOK: true},
		{name: "keys with empty parts", props: []Property{{PropKeys, " a  b "}}, wantKeys: []string{"a", "b"}},
		{name: "empty values are absent", props: []Property{{PropTags, ""}, {PropKeys, ""}, {PropUniqKey, ""}}},
		{name: "later occurrence wins", props: []Property{{PropTags, "old"}, {PropTags, "new"}}, wantTags: "new", tagsOK: true},
		{name: "other properties kept out", props: []Property{{"TAGSX", "no"}, {"XTAGS", "no"}, {"a", "b"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := baseMessage()
			m.Properties = tc.props
			r, err := Decode(encodeMessage(t, &m, 0, 0, 0), 0, true)
			if err != nil {
				t.Fatal(err)
			}
			if tags, ok := r.Tags(); tags != tc.wantTags || ok != tc.tagsOK {
				t.Errorf("Tags() = %q %v, want %q %v", tags, ok, tc.wantTags, tc.tagsOK)
			}
			if keys := r.Keys(); !reflect.DeepEqual(keys, tc.wantKeys) {
				t.Errorf("Keys() = %q, want %q", keys, tc.wantKeys)
			}
			if uniq, ok := r.UniqKey(); uniq != tc.wantUniq || ok != tc.uniqOK {
				t.Errorf("UniqKey() = %q %v, want %q %v", uniq, ok, tc.wantUniq, tc.uniqOK)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	for kind, want := range map[Kind]string{KindRecord: "record", KindBlank: "blank", KindEnd: "end", Kind(9): "Kind(9)"} {
		if got := kind.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(kind), got, want)
		}
	}
}
