package record

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestEncodeParseProperties(t *testing.T) {
	tests := []struct {
		name  string
		props []Property
		wire  string
	}{
		{"none", nil, ""},
		{"one", []Property{{"TAGS", "a"}}, "TAGS\x01a\x02"},
		{"order and duplicates kept", []Property{{"b", "2"}, {"a", "1"}, {"b", "3"}}, "b\x012\x02a\x011\x02b\x013\x02"},
		{"empty value", []Property{{"k", ""}}, "k\x01\x02"},
		{"utf-8", []Property{{"名", "値 😀"}}, "名\x01値 😀\x02"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []byte("keep")
			wire, err := EncodeProperties(prefix, tc.props)
			if err != nil {
				t.Fatal(err)
			}
			if string(wire) != "keep"+tc.wire {
				t.Fatalf("EncodeProperties = %q, want %q", wire, "keep"+tc.wire)
			}
			parsed, err := ParseProperties(wire[len(prefix):])
			if err != nil {
				t.Fatal(err)
			}
			if len(parsed) != len(tc.props) || (len(parsed) > 0 && !reflect.DeepEqual(parsed, tc.props)) {
				t.Fatalf("ParseProperties = %q, want %q", parsed, tc.props)
			}
		})
	}
}

func TestEncodePropertiesRejects(t *testing.T) {
	tests := []struct {
		name  string
		props []Property
		want  string
	}{
		{"empty name", []Property{{"ok", "1"}, {"", "v"}}, "property 1 has an empty name"},
		{"0x01 in name", []Property{{"a\x01b", "v"}}, "separator byte 0x01 at byte 1"},
		{"0x02 in name", []Property{{"ab\x02", "v"}}, "separator byte 0x02 at byte 2"},
		{"0x01 in value", []Property{{"n", "\x01"}}, "value: separator byte 0x01 at byte 0"},
		{"0x02 in value", []Property{{"n", "x\x02y"}}, "value: separator byte 0x02 at byte 1"},
		{"invalid utf-8 in name", []Property{{"\xff", "v"}}, "not valid UTF-8"},
		{"invalid utf-8 in value", []Property{{"n", "a\xe2\x82"}}, "not valid UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := EncodeProperties([]byte("x"), tc.props)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("EncodeProperties: %v, want ErrInvalid with %q", err, tc.want)
			}
			if string(out) != "x" {
				t.Fatalf("dst changed on error: %q", out)
			}
		})
	}
}

func TestParsePropertiesMalformed(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want string
	}{
		{"no terminator", "a\x01b", "at byte 0 has no terminating 0x02"},
		{"second lacks terminator", "a\x01b\x02c\x01d", "at byte 4 has no terminating 0x02"},
		{"no name/value separator", "ab\x02", "no 0x01 separator"},
		{"empty item", "a\x01b\x02\x02", "at byte 4 has no 0x01 separator"},
		{"empty name", "\x01v\x02", "empty name"},
		{"two separators", "a\x01b\x01c\x02", "more than one 0x01"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseProperties([]byte(tc.raw))
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseProperties(%q): %v, want ErrCorrupt with %q", tc.raw, err, tc.want)
			}
		})
	}
}

// TestLookupPropertyJavaSemantics: the expectations for the first raw string
// were produced by Java 17 running RocketMQ's string2messageProperties logic
// (split on 0x02, split on 0x01, keep items with exactly 2 parts, map.put):
// it printed {=q, A=z, B=y}.
func TestLookupPropertyJavaSemantics(t *testing.T) {
	javaChecked := "A\x01x\x01\x02B\x01y\x02A\x01z\x01\x02C\x01\x02\x01q\x02"
	tests := []struct {
		raw, name string
		want      string
		ok        bool
	}{
		{javaChecked, "A", "z", true},
		{javaChecked, "B", "y", true},
		{javaChecked, "C", "", false},
		{javaChecked, "", "q", true},
		{javaChecked, "x", "", false},
		{"TAGS\x01a", "TAGS", "a", true}, // no final 0x02
		{"TAGS\x01a\x01b\x02", "TAGS", "", false},
		{"TAGS\x01\x01a\x02", "TAGS", "", false},
		{"\x02\x02TAGS\x01a\x02\x02", "TAGS", "a", true},
		{"TAG\x01a\x02", "TAGS", "", false},
		{"TAGSS\x01a\x02", "TAGS", "", false},
		{"", "TAGS", "", false},
	}
	for _, tc := range tests {
		value, ok := LookupProperty([]byte(tc.raw), tc.name)
		if string(value) != tc.want || ok != tc.ok {
			t.Errorf("LookupProperty(%q, %q) = %q %v, want %q %v", tc.raw, tc.name, value, ok, tc.want, tc.ok)
		}
	}
}

func TestLookupPropertyDoesNotAllocate(t *testing.T) {
	raw, err := EncodeProperties(nil, baseMessage().Properties)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	allocs := testing.AllocsPerRun(100, func() {
		_, found = LookupProperty(raw, PropUniqKey)
	})
	if !found || allocs != 0 {
		t.Fatalf("found %v, %v allocations per lookup, want 0", found, allocs)
	}
}

// TestLookupDispatchPropertiesMatchesLookupProperty: the one-pass lookup
// finds what three LookupProperty calls find, on the Java-semantics cases
// and on seeded random property texts built from the names and separators.
func TestLookupDispatchPropertiesMatchesLookupProperty(t *testing.T) {
	raws := []string{"A\x01x\x01\x02B\x01y\x02A\x01z\x01\x02C\x01\x02\x01q\x02", "TAGS\x01a", "TAGS\x01a\x01b\x02",
		"TAGS\x01\x01a\x02", "\x02\x02TAGS\x01a\x02\x02", "TAGSS\x01a\x02", "", "TAGS\x01a\x02TAGS\x01\x01b\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01u\x01"}
	rng := rand.New(rand.NewPCG(1, 2))
	parts := []string{PropTags, PropKeys, PropUniqKey, "TAG", "KEYSX", "v", "a b", "\x01", "\x02", "\x01\x01", ""}
	for range 5000 {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		raws = append(raws, b.String())
	}
	for _, raw := range raws {
		p := LookupDispatchProperties([]byte(raw))
		for _, c := range []struct {
			name  string
			value []byte
			has   bool
		}{{PropTags, p.Tags, p.HasTags}, {PropKeys, p.Keys, p.HasKeys}, {PropUniqKey, p.UniqKey, p.HasUniqKey}} {
			want, ok := LookupProperty([]byte(raw), c.name)
			if !bytes.Equal(c.value, want) || c.has != ok {
				t.Fatalf("%q: %s = %q %v, LookupProperty says %q %v", raw, c.name, c.value, c.has, want, ok)
			}
		}
	}
}

func FuzzLookupDispatchProperties(f *testing.F) {
	f.Add([]byte("TAGS\x01a\x02KEYS\x01k\x02UNIQ_KEY\x01u\x02"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p := LookupDispatchProperties(raw)
		for _, c := range []struct {
			name  string
			value []byte
			has   bool
		}{{PropTags, p.Tags, p.HasTags}, {PropKeys, p.Keys, p.HasKeys}, {PropUniqKey, p.UniqKey, p.HasUniqKey}} {
			if want, ok := LookupProperty(raw, c.name); !bytes.Equal(c.value, want) || c.has != ok {
				t.Fatalf("%q: %s = %q %v, LookupProperty says %q %v", raw, c.name, c.value, c.has, want, ok)
			}
		}
	})
}

// TestCheckPropertyTextEveryPosition: a separator or invalid UTF-8 is found
// at every position of texts around the eight-byte words the check reads;
// 0x00, 0x03 and valid UTF-8 are accepted there.
func TestCheckPropertyTextEveryPosition(t *testing.T) {
	base := strings.Repeat("abcdefgh", 3)
	for n := 1; n <= len(base); n++ {
		for at := 0; at < n; at++ {
			for _, c := range []struct {
				insert string
				ok     bool
			}{{"\x01", false}, {"\x02", false}, {"\xff", false}, {"\xc3", false}, {"\x00", true}, {"\x03", true}, {"é", true}, {"\x7f", true}} {
				s := base[:at] + c.insert + base[at:n]
				if err := checkPropertyText(s); (err == nil) != c.ok {
					t.Fatalf("checkPropertyText(%+q) = %v, want ok %v", s, err, c.ok)
				}
			}
		}
	}
}

// TestEncodePropertiesChecksEachString: EncodeProperties checks the text
// it wrote once, whole; it must accept and refuse exactly what a check of
// each name and value does (checkProperties), with the same error, over
// random properties with separators, zero bytes, empty names and values,
// and valid and broken UTF-8 anywhere in them.
func TestEncodePropertiesChecksEachString(t *testing.T) {
	pieces := []string{"a", "TAGS", "x y", "\x00", "\x01", "\x02", "é", "日本", "\xff", "\xe2\x82", "\x82", "\xe2\x82\xac", "", "0123456789abcdef"}
	rng := rand.New(rand.NewPCG(1, 2))
	text := func() string {
		var b strings.Builder
		for range rng.IntN(4) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return b.String()
	}
	for i := range 20000 {
		props := make([]Property, 1+rng.IntN(6))
		for j := range props {
			props[j] = Property{Name: text(), Value: text()}
		}
		got, err := EncodeProperties([]byte("dst"), props)
		want := checkProperties(props)
		if (err == nil) != (want == nil) || (err != nil && err.Error() != want.Error()) {
			t.Fatalf("case %d %q: EncodeProperties error %v, each string checked: %v", i, props, err, want)
		}
		if err != nil {
			if string(got) != "dst" {
				t.Fatalf("case %d %q: dst %q after a refusal", i, props, got)
			}
			continue
		}
		naive := []byte("dst")
		for _, p := range props {
			naive = append(append(append(append(naive, p.Name...), 1), p.Value...), 2)
		}
		if !bytes.Equal(got, naive) {
			t.Fatalf("case %d %q: encoded %q, want %q", i, props, got, naive)
		}
	}
}
