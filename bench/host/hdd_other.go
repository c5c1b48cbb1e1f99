//go:build !linux

package host

import (
	"context"
	"fmt"
	"runtime"

	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/internal/hostctl"
)

// HDDDaemon: no emulated disk outside Linux.
func HDDDaemon() {}

// EmulateHDD needs Linux (FUSE, loop devices).
func EmulateHDD(context.Context, string, int64, *hostctl.Journal, runfile.Device, func(string, ...any)) (runfile.Device, func() error, error) {
	return runfile.Device{}, nil, fmt.Errorf("--emulate hdd needs Linux (FUSE, loop devices); this is %s", runtime.GOOS)
}
