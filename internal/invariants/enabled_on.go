//go:build mqstore_invariants

package invariants

// Enabled is true in a build with the mqstore_invariants tag (make test
// sets it): every check runs.
const Enabled = true
