package engine

import (
	"errors"
	"fmt"

	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/mmapio"
	"github.com/mqstore/mqstore/transientpool"
	"github.com/mqstore/mqstore/uring"
)

// backends is every backend Options.Backend can name, in the order users
// see them. A new backend exports a mappedfile.Registration and is added
// here; nothing else in the engine, the harness or the tests names it.
var backends = mappedfile.MustRegistry(
	mmapio.Registration,
	transientpool.Registration,
	uringRegistration(uring.NameBuffered),
	uringRegistration(uring.NameDirect),
	mappedfile.MemRegistration,
)

// Backends returns the registered backends: name, description, what each
// needs to run, whether it keeps files in memory only.
func Backends() []mappedfile.Registration { return backends.All() }

// BackendNames lists the backends Options.Backend accepts.
func BackendNames() []string { return backends.Names() }

// DecodeBackendOptions turns the JSON of a backend's options (as a run.json
// records Options.BackendOptions) back into a value for BackendOptions.
func DecodeBackendOptions(backend string, data []byte) (any, error) {
	opts, err := backends.DecodeOptions(backend, data)
	if err != nil {
		return nil, backendError(backend, err)
	}
	return opts, nil
}

// newBackend builds the CommitLog's backend from the options.
func newBackend(o Options) (mappedfile.Backend, error) {
	if o.BackendImpl != nil {
		return o.BackendImpl, nil
	}
	b, err := backends.New(o.Backend, mappedfile.Config{SegmentSizeBytes: o.SegmentSizeBytes, Logger: o.Logger, SyncFlush: o.FlushMode == FlushSync}, o.BackendOptions)
	if err != nil {
		return nil, backendError(o.Backend, err)
	}
	return b, nil
}

// backendError gives a registry error the engine's sentinels.
func backendError(backend string, err error) error {
	switch {
	case errors.Is(err, mappedfile.ErrUnknownBackend):
		return fmt.Errorf("%w: %w", ErrUnknownBackend, err)
	case errors.Is(err, mappedfile.ErrInvalidArgument):
		return fmt.Errorf("backend %s: %w: %w", backend, ErrInvalidOption, err)
	}
	return err
}

// auxBackend is the backend of ConsumeQueue and IndexFile files: mmap, as in
// RocketMQ, whatever the CommitLog uses — except for in-memory stores, where
// everything stays in the same MemFS (crash tests crash it all at once).
func auxBackend(o Options, commitLog mappedfile.Backend) mappedfile.Backend {
	if o.BackendImpl != nil || o.Backend == mappedfile.MemRegistration.Name {
		return commitLog
	}
	return mmapio.New(mmapio.Options{Logger: o.Logger})
}
