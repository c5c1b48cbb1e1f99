package engine

import (
	"errors"
	"fmt"

	"github.com/mqstore/mqstore/mappedfile"
)

// The engine names no backend: Options.Backend is looked up in
// mappedfile's registry, which holds "mem" and every backend package the
// program imports (github.com/mqstore/mqstore/backends imports them all),
// or Options.BackendImpl is used as given.

// Backends returns the registered backends, in the order users see them:
// name, description, what each needs to run, whether it keeps files in
// memory only, whether it buffers appends, what it may hold unflushed.
func Backends() []mappedfile.Registration { return mappedfile.Registered().All() }

// BackendNames lists the backends Options.Backend accepts.
func BackendNames() []string { return mappedfile.Registered().Names() }

// DecodeBackendOptions turns the JSON of a backend's options (as a run.json
// records Options.BackendOptions) back into a value for BackendOptions.
func DecodeBackendOptions(backend string, data []byte) (any, error) {
	opts, err := mappedfile.Registered().DecodeOptions(backend, data)
	if err != nil {
		return nil, backendError(backend, err)
	}
	return opts, nil
}

// lookupBackend returns the registration Options.Backend names.
func lookupBackend(name string) (mappedfile.Registration, error) {
	return mappedfile.Registered().Lookup(name)
}

// defaultBackendName is the registry's default backend, "" when none is
// linked (then only "mem" or BackendImpl can open a store).
func defaultBackendName() string {
	reg, err := mappedfile.Registered().Default()
	if err != nil {
		return ""
	}
	return reg.Name
}

// newBackend builds the CommitLog's backend from the options.
func newBackend(o Options) (mappedfile.Backend, error) {
	if o.BackendImpl != nil {
		return o.BackendImpl, nil
	}
	b, err := mappedfile.Registered().New(o.Backend, mappedfile.Config{SegmentSizeBytes: o.SegmentSizeBytes, Logger: o.Logger, SyncFlush: o.FlushMode == FlushSync}, o.BackendOptions)
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

// auxBackend is the backend of ConsumeQueue and IndexFile files: the
// registry's default (mmap, as in RocketMQ), whatever the CommitLog uses —
// except for in-memory stores, where everything stays in the same MemFS
// (crash tests crash it all at once).
func auxBackend(o Options, commitLog mappedfile.Backend) (mappedfile.Backend, error) {
	if o.BackendImpl != nil {
		return commitLog, nil
	}
	if reg, err := lookupBackend(o.Backend); err == nil && reg.Volatile {
		return commitLog, nil
	}
	def, err := mappedfile.Registered().Default()
	if err != nil {
		return nil, backendError(o.Backend, err)
	}
	b, err := def.New(mappedfile.Config{SegmentSizeBytes: o.SegmentSizeBytes, Logger: o.Logger}, nil)
	if err != nil {
		return nil, fmt.Errorf("backend %s for ConsumeQueue and IndexFile files: %w", def.Name, err)
	}
	return b, nil
}
