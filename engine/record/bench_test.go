package record

import (
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
