package record

import "fmt"

// ValidateTopic applies RocketMQ's topic rule: a non-empty string of
// [%|a-zA-Z0-9_-] of at most MaxTopicLenV1 bytes, or at most MaxTopicLenV2
// bytes when allowV2 (such a topic is stored in a v2 record). Errors wrap
// ErrInvalid and say what is wrong and where.
func ValidateTopic(topic string, allowV2 bool) error {
	maxLen := MaxTopicLenV1
	if allowV2 {
		maxLen = MaxTopicLenV2
	}
	switch {
	case topic == "":
		return fmt.Errorf("%w: empty topic", ErrInvalid)
	case len(topic) > maxLen:
		return fmt.Errorf("%w: topic is %d bytes, longer than %d", ErrInvalid, len(topic), maxLen)
	}
	for i := 0; i < len(topic); i++ {
		if !isTopicByte(topic[i]) {
			return fmt.Errorf("%w: topic has byte %q at position %d, allowed are [%%|a-zA-Z0-9_-]", ErrInvalid, topic[i], i)
		}
	}
	return nil
}

func isTopicByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '%', c == '|', c == '_', c == '-':
		return true
	}
	return false
}
