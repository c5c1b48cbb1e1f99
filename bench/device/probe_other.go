//go:build !linux

package device

import (
	"context"
	"fmt"
	"time"
)

var errNotLinux = fmt.Errorf("device: the io_uring and fdatasync probes need Linux: %w", ErrUnsupported)

// SequentialWrite returns an error wrapping ErrUnsupported: io_uring is Linux only.
func SequentialWrite(context.Context, string, int64, int, int) (Result, error) {
	return Result{}, errNotLinux
}

// DurableSequentialWrite returns an error wrapping ErrUnsupported: io_uring is Linux only.
func DurableSequentialWrite(context.Context, string, int64, int, int) (Result, error) {
	return Result{}, errNotLinux
}

// SyncWrites returns an error wrapping ErrUnsupported outside Linux.
func SyncWrites(context.Context, string, SyncProbe) (SyncResult, error) {
	return SyncResult{}, errNotLinux
}

// CreateSegment returns an error wrapping ErrUnsupported outside Linux.
func CreateSegment(context.Context, string, int64, bool, bool) (time.Duration, error) {
	return 0, errNotLinux
}
