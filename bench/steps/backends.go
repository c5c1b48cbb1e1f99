package main

// The backends register themselves; checkouts from before the engine
// stopped importing them have no such package, and run.sh leaves this file
// out there.
import _ "github.com/mqstore/mqstore/backends"
