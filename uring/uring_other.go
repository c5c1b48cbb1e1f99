//go:build !linux

package uring

import (
	"context"
	"fmt"
	"time"

	"github.com/mqstore/mqstore/mappedfile"
)

var errNotLinux = fmt.Errorf("uring: io_uring needs Linux; use the mmap or transient backend: %w", ErrUnsupported)

// NewBackend returns an error wrapping ErrUnsupported: io_uring is Linux only.
func NewBackend(Options) (mappedfile.Backend, error) { return nil, errNotLinux }

// ProbeSequentialWrite returns an error wrapping ErrUnsupported: io_uring is Linux only.
func ProbeSequentialWrite(context.Context, string, int64, int, int) (ProbeResult, error) {
	return ProbeResult{}, errNotLinux
}

// ProbeSyncLatency returns an error wrapping ErrUnsupported outside Linux.
func ProbeSyncLatency(context.Context, string, int) ([]time.Duration, error) {
	return nil, errNotLinux
}
