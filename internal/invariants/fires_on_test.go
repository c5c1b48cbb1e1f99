//go:build mqstore_invariants

package invariants

import (
	"errors"
	"strings"
	"testing"
)

// TestFires runs in builds with the invariants on (make test's); a build
// without them runs TestCompiledOut instead.
func TestFires(t *testing.T) {
	for _, c := range violations {
		t.Run(c.name, func(t *testing.T) {
			v := recovered(c.call)
			var viol *Violation
			err, _ := v.(error)
			if !errors.As(err, &viol) {
				t.Fatalf("panic value %#v, want a *Violation", v)
			}
			msg := viol.Error()
			if !strings.HasPrefix(msg, "invariant violated: ") {
				t.Errorf("message %q lacks the prefix", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not name %q", msg, w)
				}
			}
		})
	}
}
