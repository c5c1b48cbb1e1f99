package record

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateTopic(t *testing.T) {
	tests := []struct {
		name    string
		topic   string
		allowV2 bool
		want    string // "" = valid; else a substring of the error
	}{
		{"simple", "TopicTest", false, ""},
		{"all allowed characters", "%RETRY%group|a-Z_09", false, ""},
		{"127 bytes", strings.Repeat("a", 127), false, ""},
		{"empty", "", false, "empty topic"},
		{"empty with v2", "", true, "empty topic"},
		{"128 bytes without v2", strings.Repeat("a", 128), false, "topic is 128 bytes, longer than 127"},
		{"128 bytes with v2", strings.Repeat("a", 128), true, ""},
		{"32767 bytes with v2", strings.Repeat("a", 32767), true, ""},
		{"32768 bytes with v2", strings.Repeat("a", 32768), true, "topic is 32768 bytes, longer than 32767"},
		{"space", "a b", false, `byte ' ' at position 1`},
		{"dot", "a.b", false, `byte '.' at position 1`},
		{"hash", "#", false, `byte '#' at position 0`},
		{"slash", "a/", false, `byte '/' at position 1`},
		{"non-ASCII", "tópico", false, `at position 1`},
		{"NUL", "a\x00", false, `byte '\x00' at position 1`},
		{"bad character in a long topic", strings.Repeat("a", 200) + "!", true, "at position 200"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateTopic(tc.topic, tc.allowV2)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ValidateTopic: %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ValidateTopic: %v, want ErrInvalid with %q", err, tc.want)
			}
		})
	}
}
