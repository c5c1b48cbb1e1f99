//go:build !linux

package bench

import (
	"context"
	"fmt"
	"runtime"
)

func hddDaemon() {}

func (r *runner) setupHDD(context.Context, *target) (*target, error) {
	return nil, fmt.Errorf("--emulate hdd needs Linux (FUSE, loop devices); this is %s", runtime.GOOS)
}
