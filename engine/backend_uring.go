package engine

import (
	"fmt"

	"github.com/mqstore/mqstore/mappedfile"
	"github.com/mqstore/mqstore/uring"
)

// newUringBackend builds "uring" or "uring-direct". When io_uring cannot run
// here the error says why and names the other backends.
func newUringBackend(o Options) (mappedfile.Backend, error) {
	b, err := uring.NewBackend(uring.Options{Direct: o.Backend == uring.NameDirect, PreZero: o.UringPreZero,
		StagingBuffers: o.UringStagingBuffers})
	if err != nil {
		return nil, fmt.Errorf("backend %s: %w", o.Backend, err)
	}
	return b, nil
}
