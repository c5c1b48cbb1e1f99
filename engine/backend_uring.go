package engine

import (
	"fmt"

	"github.com/mqstore/mqstore/engine/mappedfile"
)

func newUringBackend(o Options) (mappedfile.Backend, error) {
	return nil, fmt.Errorf("backend %s: not built yet: %w", o.Backend, ErrUnknownBackend)
}
