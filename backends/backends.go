// Package backends links every I/O backend of this module into a program:
// each blank import below runs its package's init, which adds its
// registrations to mappedfile's registry, where engine.Open (by
// Options.Backend), the commands and the tests find them. A new backend is
// a package that calls mappedfile.Register from its init, plus one import
// line here. The "mem" backend is part of package mappedfile and always
// registered.
package backends

import (
	_ "github.com/mqstore/mqstore/mmapio"        // "mmap"
	_ "github.com/mqstore/mqstore/transientpool" // "transient"
	_ "github.com/mqstore/mqstore/uring"         // "uring", "uring-direct"
)
