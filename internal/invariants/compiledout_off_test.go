//go:build !mqstore_invariants

package invariants

import "testing"

// TestCompiledOut runs in builds without mqstore_invariants; make test's
// build runs TestFires instead.
func TestCompiledOut(t *testing.T) {
	for _, c := range violations {
		if v := recovered(c.call); v != nil {
			t.Errorf("%s: panicked in a build without mqstore_invariants: %v", c.name, v)
		}
	}
}
