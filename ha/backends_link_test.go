package ha

// The tests open stores on backends by name: this import registers them.
import _ "github.com/mqstore/mqstore/backends"
