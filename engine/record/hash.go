package record

// JavaHashCode returns Java's String.hashCode of s: h = 31*h + c over the
// UTF-16 code units of s, with int32 overflow. A rune outside the BMP counts
// as its surrogate pair. Invalid UTF-8 counts as one U+FFFD per bad byte (Go's
// decoding; Java's decoder may merge some bad sequences into one U+FFFD, which
// is why EncodeProperties rejects invalid UTF-8).
func JavaHashCode(s string) int32 { return JavaHashCodeAppend(0, s) }

// JavaHashCodeAppend continues a JavaHashCode h over s: JavaHashCode(a+b) is
// JavaHashCodeAppend(JavaHashCode(a), b) whenever a ends with a whole rune
// (an index key's "topic#" always does), so a key is hashed without being
// built. ASCII, what keys and tags nearly always are, costs a byte loop.
func JavaHashCodeAppend(h int32, s string) int32 {
	i := 0
	// Four ASCII bytes at a time: h·31⁴ + a·31³ + b·31² + c·31 + d, the
	// same sum with a shorter chain of dependent multiplies.
	for ; i+4 <= len(s) && (s[i]|s[i+1]|s[i+2]|s[i+3]) < 0x80; i += 4 {
		h = 923521*h + 29791*int32(s[i]) + 961*int32(s[i+1]) + 31*int32(s[i+2]) + int32(s[i+3])
	}
	for ; i < len(s) && s[i] < 0x80; i++ {
		h = 31*h + int32(s[i])
	}
	for _, r := range s[i:] {
		if r >= 0x10000 {
			r -= 0x10000
			h = 31*h + (0xD800 + (r>>10)&0x3FF)
			h = 31*h + (0xDC00 + r&0x3FF)
			continue
		}
		h = 31*h + r
	}
	return h
}

// TagsCode is the ConsumeQueue tags code of a TAGS value: JavaHashCode
// sign-extended to int64, 0 for "" (as RocketMQ 4.9 computes it for plain,
// non-delayed messages).
func TagsCode(tags string) int64 {
	if tags == "" {
		return 0
	}
	return int64(JavaHashCode(tags))
}

// IndexKeyHash is the IndexFile keyHash of a key (topic + "#" + key):
// |JavaHashCode(key)|, and 0 when that is still negative (math.MinInt32).
func IndexKeyHash(key string) int32 { return indexHash(JavaHashCode(key)) }

// IndexKeyPrefix is the hash of topic + "#" that IndexKeyHashIn continues:
// a record's keys share it. topic is a valid topic name (ASCII,
// ValidateTopic).
func IndexKeyPrefix(topic string) int32 { return 31*JavaHashCode(topic) + '#' }

// IndexKeyHashIn is IndexKeyHash(topic + "#" + key) without building the
// key, for prefix = IndexKeyPrefix(topic).
func IndexKeyHashIn(prefix int32, key string) int32 {
	return indexHash(JavaHashCodeAppend(prefix, key))
}

func indexHash(h int32) int32 {
	if h < 0 {
		h = -h
	}
	if h < 0 {
		return 0
	}
	return h
}
