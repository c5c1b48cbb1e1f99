package engine

// The engine's tests run against every backend of this module: this import
// registers them (package engine itself links none).
import _ "github.com/mqstore/mqstore/backends"
