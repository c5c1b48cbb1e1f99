package record

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
)

var netipV6ForTest = netip.MustParseAddrPort("[2001:db8::7]:10911")

func benchMessage(bodySize int) (*Message, []byte) {
	m := baseMessage()
	m.Body = make([]byte, bodySize)
	for i := range m.Body {
		m.Body[i] = byte(i * 7)
	}
	props, err := EncodeProperties(nil, m.Properties)
	if err != nil {
		panic(err)
	}
	return &m, props
}

var benchSizes = []int{128, 1024, 4096}

func BenchmarkEncode(b *testing.B) {
	for _, bodySize := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", bodySize), func(b *testing.B) {
			m, props := benchMessage(bodySize)
			dst := make([]byte, Size(m, len(props)))
			b.SetBytes(int64(len(dst)))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := Encode(dst, m, props); err != nil {
					b.Fatal(err)
				}
				Patch(dst, int64(i), int64(i)*int64(len(dst)), 1700000000000)
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, bodySize := range benchSizes {
		b.Run(fmt.Sprintf("size=%d", bodySize), func(b *testing.B) {
			m, props := benchMessage(bodySize)
			rec := make([]byte, Size(m, len(props)))
			if err := Encode(rec, m, props); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(rec)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(rec, 0, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkJavaHashCode(b *testing.B) {
	key := "TopicTest#AC11000100002A9F0000000000000001"
	b.SetBytes(int64(len(key)))
	b.ReportAllocs()
	for b.Loop() {
		JavaHashCode(key)
	}
}

// TestEncodePatchDoNotAllocate is the test form of the allocation promise
// (the benchmarks report the same with -benchmem).
func TestEncodePatchDoNotAllocate(t *testing.T) {
	for _, bodySize := range benchSizes {
		m, props := benchMessage(bodySize)
		m.BornHost = netipV6ForTest
		dst := make([]byte, Size(m, len(props)))
		allocs := testing.AllocsPerRun(100, func() {
			if err := Encode(dst, m, props); err != nil {
				t.Fatal(err)
			}
			Patch(dst, 1, 2, 3)
			PutBlank(dst, 8)
		})
		if allocs != 0 {
			t.Errorf("size=%d: %v allocations per Encode+Patch+PutBlank, want 0", bodySize, allocs)
		}
	}
}

func TestDecodeAllocatesOnlyTopic(t *testing.T) {
	m, props := benchMessage(1024)
	m.StoreHost = netipV6ForTest
	rec := make([]byte, Size(m, len(props)))
	if err := Encode(rec, m, props); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := Decode(rec, 0, true); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Errorf("%v allocations per Decode, want at most 1 (the Topic string)", allocs)
	}
}

// BenchmarkRecordCRC is what the whole-record checksum adds to an append
// (PutRecordCRC, under the append lock) and to recovery's check of a
// record (CheckRecordCRC).
func BenchmarkRecordCRC(b *testing.B) {
	for _, bodySize := range benchSizes {
		m, props := benchMessage(bodySize)
		props = AppendRecordCRC(props)
		rec := make([]byte, Size(m, len(props)))
		if err := Encode(rec, m, props); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("put/size=%d", bodySize), func(b *testing.B) {
			b.SetBytes(int64(len(rec)))
			b.ReportAllocs()
			for b.Loop() {
				PutRecordCRC(rec)
			}
		})
		b.Run(fmt.Sprintf("check/size=%d", bodySize), func(b *testing.B) {
			b.SetBytes(int64(len(rec)))
			b.ReportAllocs()
			for b.Loop() {
				if err := CheckRecordCRC(rec, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRecordCRC: the checksum PutRecordCRC writes checks, and a change to
// any byte before it — header, body, topic, properties — fails the check,
// as does a record whose last property is not the checksum.
func TestRecordCRC(t *testing.T) {
	m, props := benchMessage(200)
	props = AppendRecordCRC(props)
	rec := make([]byte, Size(m, len(props)))
	if err := Encode(rec, m, props); err != nil {
		t.Fatal(err)
	}
	Patch(rec, 5, 4096, 1700000000000)
	PutRecordCRC(rec)
	if err := CheckRecordCRC(rec, 4096); err != nil {
		t.Fatal(err)
	}
	r, err := Decode(rec, 4096, true)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := LookupProperty(r.Properties, PropRecordCRC); !ok || len(v) != 10 {
		t.Fatalf("the checksum property reads %q %v", v, ok)
	}
	for _, at := range []int{OffPhysicalOffset + 7, OffMagic + 3, 100, len(rec) - RecordCRCSize - 2} {
		bad := append([]byte(nil), rec...)
		bad[at] ^= 0x10
		if err := CheckRecordCRC(bad, 4096); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d changed: %v", at, err)
		}
	}
	m2, plain := benchMessage(200)
	rec2 := make([]byte, Size(m2, len(plain)))
	if err := Encode(rec2, m2, plain); err != nil {
		t.Fatal(err)
	}
	if err := CheckRecordCRC(rec2, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a record without the property: %v", err)
	}
}

// BenchmarkEncodeProperties encodes the properties of mqbench's RocketMQ
// message (rmqmsg: TAGS, KEYS, UNIQ_KEY, WAIT, CLUSTER, a user property).
//
//	go test -run '^$' -bench EncodeProperties ./engine/record/
func BenchmarkEncodeProperties(b *testing.B) {
	props := []Property{
		{PropTags, "TagB"}, {PropKeys, "ORDER-0003000000001A2B TRACE-9F1E2D3C4B5A6978"},
		{PropUniqKey, "7F00000100AB000000030000001A2B"}, {"WAIT", "true"},
		{"CLUSTER", "DefaultCluster"}, {"bizType", "order-created"},
	}
	dst := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = EncodeProperties(dst[:0], props); err != nil {
			b.Fatal(err)
		}
	}
}
