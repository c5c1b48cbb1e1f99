package record

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// Property separators (RocketMQ's MessageDecoder.NAME_VALUE_SEPARATOR and
// PROPERTY_SEPARATOR).
const (
	nameValueSeparator = 0x01
	propertySeparator  = 0x02
)

// EncodeProperties appends the wire form of props to dst: name 0x01 value 0x02
// for each property, in order. Errors wrap ErrInvalid: an empty name, a name or
// value containing 0x01 or 0x02, or one that is not valid UTF-8 (RocketMQ reads
// properties as a Java String, so other bytes would not read back the same).
// An empty value is allowed, but RocketMQ's reader (and LookupProperty) treat
// it as absent. The caller checks the result against MaxPropertiesBytes (Encode
// does).
func EncodeProperties(dst []byte, props []Property) ([]byte, error) {
	// The text goes in first and is checked once, whole: it holds exactly
	// one 0x01 and one 0x02 per property (those written here) when no name
	// or value holds one, and it is UTF-8 exactly when every name and value
	// is (the separators are ASCII: no sequence runs across one). Three
	// vectorized passes over ~200 bytes cost less than a check of each of a
	// RocketMQ message's dozen short strings; a failing check looks again,
	// string by string, to say which property is wrong.
	start := len(dst)
	for _, p := range props {
		if p.Name == "" {
			return dst[:start], checkProperties(props)
		}
		dst = append(dst, p.Name...)
		dst = append(dst, nameValueSeparator)
		dst = append(dst, p.Value...)
		dst = append(dst, propertySeparator)
	}
	text := dst[start:]
	if n := len(props); bytes.Count(text, nameValueSeparators) == n && bytes.Count(text, propertySeparators) == n && utf8.Valid(text) {
		return dst, nil
	}
	if err := checkProperties(props); err != nil {
		return dst[:start], err
	}
	return dst, nil
}

// The separators, as bytes.Count takes them.
var nameValueSeparators, propertySeparators = []byte{nameValueSeparator}, []byte{propertySeparator}

// checkProperties returns the first property EncodeProperties refuses, and
// why.
func checkProperties(props []Property) error {
	for i, p := range props {
		if p.Name == "" {
			return fmt.Errorf("%w: property %d has an empty name", ErrInvalid, i)
		}
		if err := checkPropertyText(p.Name); err != nil {
			return fmt.Errorf("%w: property %d name %q: %v", ErrInvalid, i, p.Name, err)
		}
		if err := checkPropertyText(p.Value); err != nil {
			return fmt.Errorf("%w: property %d (%q) value: %v", ErrInvalid, i, p.Name, err)
		}
	}
	return nil
}

// checkPropertyText refuses the separators and text that is not UTF-8, in
// one pass over the bytes (a Put checks every property: TAGS, KEYS, UNIQ_KEY
// and the rest are short and ASCII, so the UTF-8 check rarely runs).
func checkPropertyText(s string) error {
	ascii := true
	i := 0
	// Eight bytes at a time while each is ASCII and above 0x02 (a word w
	// has a byte below 3 iff (w − 0x03…03) & ^w & 0x80…80 ≠ 0, for bytes
	// below 0x80); the byte loop below takes the rest, and any word that
	// is not so (a 0x00, a separator, non-ASCII) from its first byte.
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if w&highs != 0 || (w-3*ones)&^w&highs != 0 {
			break
		}
	}
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c == nameValueSeparator || c == propertySeparator:
			return fmt.Errorf("separator byte 0x%02X at byte %d", c, i)
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	if !ascii && !utf8.ValidString(s) {
		return fmt.Errorf("not valid UTF-8")
	}
	return nil
}

// ParseProperties parses raw properties strictly, keeping order and
// duplicates: every property must be a non-empty name, 0x01, a value without
// separators, and a terminating 0x02. Errors wrap ErrCorrupt. (Lookups on
// stored records use LookupProperty, which is as lenient as RocketMQ.)
func ParseProperties(raw []byte) ([]Property, error) {
	var props []Property
	for pos := 0; pos < len(raw); {
		end := bytes.IndexByte(raw[pos:], propertySeparator)
		if end < 0 {
			return nil, fmt.Errorf("%w: property at byte %d has no terminating 0x02", ErrCorrupt, pos)
		}
		item := raw[pos : pos+end]
		sep := bytes.IndexByte(item, nameValueSeparator)
		switch {
		case sep < 0:
			return nil, fmt.Errorf("%w: property at byte %d has no 0x01 separator", ErrCorrupt, pos)
		case sep == 0:
			return nil, fmt.Errorf("%w: property at byte %d has an empty name", ErrCorrupt, pos)
		case bytes.IndexByte(item[sep+1:], nameValueSeparator) >= 0:
			return nil, fmt.Errorf("%w: property at byte %d has more than one 0x01 separator", ErrCorrupt, pos)
		}
		props = append(props, Property{Name: string(item[:sep]), Value: string(item[sep+1:])})
		pos += end + 1
	}
	return props, nil
}

// LookupProperty returns the value of the property name in raw, reading it
// the way RocketMQ's MessageDecoder.string2messageProperties does, so that tags
// codes and index keys match a RocketMQ broker's: raw is split on 0x02, each
// item on 0x01 with trailing empty parts dropped, and only items with exactly
// two parts count; a later occurrence overrides an earlier one. So an empty
// value counts as absent and a final item needs no 0x02. It does not allocate;
// value aliases raw.
func LookupProperty(raw []byte, name string) (value []byte, ok bool) {
	for len(raw) > 0 {
		item := raw
		if end := bytes.IndexByte(raw, propertySeparator); end >= 0 {
			item, raw = raw[:end], raw[end+1:]
		} else {
			raw = nil
		}
		itemName, itemValue, valid := splitJavaItem(item)
		if valid && string(itemName) == name {
			value, ok = itemValue, true
		}
	}
	return value, ok
}

// DispatchProperties are the properties dispatch reads from every record:
// TAGS (the ConsumeQueue's tags code), KEYS and UNIQ_KEY (the index). Each
// Has field says whether LookupProperty would report the property present.
type DispatchProperties struct {
	Tags, Keys, UniqKey          []byte
	HasTags, HasKeys, HasUniqKey bool
}

// LookupDispatchProperties is LookupProperty of TAGS, KEYS and UNIQ_KEY
// in one pass over raw (dispatch reads all three of every record): the
// same values, found the same way. An item whose name is none of them is
// passed over at the cost of finding its separators.
func LookupDispatchProperties(raw []byte) DispatchProperties {
	var p DispatchProperties
	for len(raw) > 0 {
		item := raw
		if end := bytes.IndexByte(raw, propertySeparator); end >= 0 {
			item, raw = raw[:end], raw[end+1:]
		} else {
			raw = nil
		}
		// A valid item's name ends at its first separator (splitJavaItem
		// trims only trailing ones), so the name decides before the check.
		sep := bytes.IndexByte(item, nameValueSeparator)
		if sep < 0 {
			continue
		}
		var value *[]byte
		var has *bool
		switch string(item[:sep]) {
		case PropTags:
			value, has = &p.Tags, &p.HasTags
		case PropKeys:
			value, has = &p.Keys, &p.HasKeys
		case PropUniqKey:
			value, has = &p.UniqKey, &p.HasUniqKey
		default:
			continue
		}
		if _, v, valid := splitJavaItem(item); valid {
			*value, *has = v, true
		}
	}
	return p
}

// splitJavaItem mimics Java's item.split("\u0001") followed by a check for
// exactly two parts: trailing separators are ignored, then one separator must
// remain, followed by a non-empty value.
func splitJavaItem(item []byte) (name, value []byte, ok bool) {
	trimmed := bytes.TrimRight(item, "\x01")
	sep := bytes.IndexByte(trimmed, nameValueSeparator)
	if sep < 0 || bytes.IndexByte(trimmed[sep+1:], nameValueSeparator) >= 0 {
		return nil, nil, false
	}
	return trimmed[:sep], trimmed[sep+1:], true
}
