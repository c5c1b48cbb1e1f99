package engine

import (
	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/uring"
)

// uringRegistration returns the registration of "uring" or "uring-direct"
// (package uring owns them; see uring.RegistrationBuffered). The store's
// sync flush reaches the backend through mappedfile.Config.SyncFlush, and
// makes each commit durable by itself (uring.Options.SyncAtCommit).
func uringRegistration(name string) mappedfile.Registration {
	if name == uring.NameDirect {
		return uring.RegistrationDirect
	}
	return uring.RegistrationBuffered
}
