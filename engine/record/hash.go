package record

// JavaHashCode returns Java's String.hashCode of s: h = 31*h + c over the
// UTF-16 code units of s, with int32 overflow. A rune outside the BMP counts
// as its surrogate pair. Invalid UTF-8 counts as one U+FFFD per bad byte (Go's
// decoding; Java's decoder may merge some bad sequences into one U+FFFD, which
// is why EncodeProperties rejects invalid UTF-8).
func JavaHashCode(s string) int32 {
	var h int32
	for _, r := range s {
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
func IndexKeyHash(key string) int32 {
	h := JavaHashCode(key)
	if h < 0 {
		h = -h
	}
	if h < 0 {
		return 0
	}
	return h
}
