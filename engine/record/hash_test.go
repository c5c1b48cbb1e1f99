package record

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Expected values were printed by OpenJDK 17's String.hashCode().
func TestJavaHashCode(t *testing.T) {
	tests := []struct {
		s    string
		want int32
	}{
		{"", 0},
		{"a", 97},
		{"TagA", 2598919},
		{"hello", 99162322},
		{"😀", 1772899}, // surrogate pair 0xD83D 0xDE00: 31*55357 + 56832
		{"polygenelubricants", -2147483648},
		{"TopicTest#key1", -1655984460},
		{"é中文", 870307},
		{"zzzzzzzzzz", -1580979136},
	}
	for _, tc := range tests {
		if got := JavaHashCode(tc.s); got != tc.want {
			t.Errorf("JavaHashCode(%q) = %d, want %d", tc.s, got, tc.want)
		}
	}
}

// TestJavaHashCodeReference compares against a direct implementation over the
// UTF-16 encoding for every rune class (ASCII, 2-, 3- and 4-byte UTF-8, the
// edges of the surrogate ranges, U+FFFF and U+10FFFF).
func TestJavaHashCodeReference(t *testing.T) {
	var b strings.Builder
	for _, r := range []rune{0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFD, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF} {
		b.WriteRune(r)
		s := b.String()
		var want int32
		for _, unit := range utf16Units(s) {
			want = 31*want + int32(unit)
		}
		if got := JavaHashCode(s); got != want {
			t.Errorf("JavaHashCode(%+q) = %d, want %d", s, got, want)
		}
	}
}

func utf16Units(s string) []uint16 {
	var units []uint16
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			units = append(units, uint16(0xD800|r>>10), uint16(0xDC00|r&0x3FF))
			continue
		}
		units = append(units, uint16(r))
	}
	return units
}

func TestTagsCode(t *testing.T) {
	tests := []struct {
		tags string
		want int64
	}{
		{"", 0},
		{"TagA", 2598919},
		{"TopicTest#key1", -1655984460},     // negative hash: sign-extended
		{"polygenelubricants", -2147483648}, // math.MinInt32
	}
	for _, tc := range tests {
		if got := TagsCode(tc.tags); got != tc.want {
			t.Errorf("TagsCode(%q) = %d, want %d", tc.tags, got, tc.want)
		}
	}
	if got := uint64(TagsCode("TopicTest#key1")); got != 0xFFFFFFFF9D4BAEB4 {
		t.Errorf("TagsCode bits = %#x, want 0xFFFFFFFF9D4BAEB4 (sign-extended)", got)
	}
}

func TestIndexKeyHash(t *testing.T) {
	tests := []struct {
		key  string
		want int32
	}{
		{"TopicTest#key1", 1655984460},
		{"hello", 99162322},
		{"polygenelubricants", 0}, // |MinInt32| is still negative
		{"", 0},
	}
	for _, tc := range tests {
		if got := IndexKeyHash(tc.key); got != tc.want {
			t.Errorf("IndexKeyHash(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
}

// TestIndexKeyHashIn: hashing "topic#" and the key in turn is hashing the
// built key, for ASCII, multi-byte, astral and invalid UTF-8 keys.
func TestIndexKeyHashIn(t *testing.T) {
	keys := []string{"", "key1", "ORDER-000001", "ключ", "鍵🔑", "\xff\xfe", "a\xe4\xb8", "🔑" + strings.Repeat("x", 100)}
	for _, topic := range []string{"TopicTest", "t", "%RETRY%group_1|a-b"} {
		for _, key := range keys {
			if got, want := IndexKeyHashIn(IndexKeyPrefix(topic), key), IndexKeyHash(topic+"#"+key); got != want {
				t.Errorf("IndexKeyHashIn(IndexKeyPrefix(%q), %+q) = %d, IndexKeyHash of the built key %d", topic, key, got, want)
			}
		}
	}
}

// TestJavaHashCodeEveryLength: the four-bytes-at-a-time ASCII loop against
// the UTF-16 reference for every length up to 40 and a non-ASCII rune at
// every position.
func TestJavaHashCodeEveryLength(t *testing.T) {
	const ascii = "TopicTest#KEY-0123456789abcdefghij~ !\x7f\x01Z"
	for n := 0; n <= len(ascii); n++ {
		for _, s := range []string{ascii[:n], ascii[:n/2] + "é" + ascii[n/2:n], ascii[:n] + "\U0001F600"} {
			var want int32
			for _, unit := range utf16Units(s) {
				want = 31*want + int32(unit)
			}
			if got := JavaHashCode(s); got != want {
				t.Errorf("JavaHashCode(%+q) = %d, want %d", s, got, want)
			}
			if half := len(s) / 2; utf8ValidCut(s, half) {
				if got := JavaHashCodeAppend(JavaHashCode(s[:half]), s[half:]); got != want {
					t.Errorf("JavaHashCodeAppend over %+q cut in half = %d, want %d", s, got, want)
				}
			}
		}
	}
}

// utf8ValidCut reports whether s cut at i leaves whole runes on both sides.
func utf8ValidCut(s string, i int) bool { return utf8.ValidString(s[:i]) && utf8.ValidString(s[i:]) }
