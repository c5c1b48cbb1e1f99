package rmqmsg

import (
	"regexp"
	"strings"
	"testing"

	"github.com/mqstore/mqstore/engine/record"
)

// TestValues: every message of every worker has TAGS from Tags in turn, two
// KEYS and a UNIQ_KEY of 32 uppercase hex digits, none of them used twice;
// the properties a caller holds see each Next's values in place.
func TestValues(t *testing.T) {
	uniqFormat := regexp.MustCompile(`^[0-9A-F]{32}$`)
	seen := map[string]bool{}
	for worker := range 3 {
		v := New(worker)
		props := v.Properties()
		names := []string{record.PropTags, record.PropKeys, record.PropUniqKey, "WAIT", "CLUSTER", "bizType"}
		for i, p := range props {
			if p.Name != names[i] {
				t.Fatalf("property %d is %q, want %q", i, p.Name, names[i])
			}
		}
		for i := range 5000 {
			tags := v.Next()
			if tags != Tags[i%len(Tags)] || props[0].Value != tags {
				t.Fatalf("worker %d message %d: TAGS %q (properties say %q), want %q", worker, i, tags, props[0].Value, Tags[i%len(Tags)])
			}
			keys := strings.Fields(props[1].Value)
			if len(keys) != 2 || !uniqFormat.MatchString(props[2].Value) {
				t.Fatalf("worker %d message %d: KEYS %q, UNIQ_KEY %q", worker, i, props[1].Value, props[2].Value)
			}
			for _, k := range append(keys, props[2].Value) {
				k = strings.Clone(k) // a view of the buffer the next message rewrites
				if seen[k] {
					t.Fatalf("worker %d message %d: %q was used before", worker, i, k)
				}
				seen[k] = true
			}
		}
	}
}

// TestMix64IsABijection on a sample: distinct inputs, distinct outputs.
func TestMix64IsABijection(t *testing.T) {
	out := map[uint64]uint64{}
	for z := range uint64(100000) {
		m := Mix64(z)
		if prev, ok := out[m]; ok {
			t.Fatalf("Mix64(%d) = Mix64(%d) = %#x", z, prev, m)
		}
		out[m] = z
	}
}
