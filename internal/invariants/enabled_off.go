//go:build !mqstore_invariants

package invariants

// Enabled is false in a normal build: every check is dead code the
// compiler removes (see the package doc).
const Enabled = false
