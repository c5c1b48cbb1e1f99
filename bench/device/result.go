package device

import (
	"errors"
	"time"
)

// Errors the probes wrap.
var (
	ErrInvalidArgument = errors.New("invalid argument")
	ErrUnsupported     = errors.New("not supported here")
)

// Result is what a throughput probe did: bytes in a duration.
type Result struct {
	Bytes    int64
	Duration time.Duration
}

// MBps is the result in 10^6 bytes per second.
func (r Result) MBps() float64 {
	if r.Duration <= 0 {
		return 0
	}
	return float64(r.Bytes) / 1e6 / r.Duration.Seconds()
}
