package main

// Every backend of this module, by name (Options.Backend, --backends).
import _ "github.com/mqstore/mqstore/backends"
