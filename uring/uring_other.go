//go:build !linux

package uring

import (
	"fmt"

	"github.com/mqstore/mqstore/mappedfile"
)

var errNotLinux = fmt.Errorf("uring: io_uring needs Linux; use the mmap or transient backend: %w", ErrUnsupported)

// NewBackend returns an error wrapping ErrUnsupported: io_uring is Linux only.
func NewBackend(Options) (mappedfile.Backend, error) { return nil, errNotLinux }
