//go:build !linux

package main

import (
	"errors"
	"os/exec"
	"time"
)

// setDeathSignal: only Linux can tie the broker's life to this program's.
func setDeathSignal(*exec.Cmd) {}

// processCPU is not measured outside Linux.
func processCPU(int) (user, sys time.Duration, err error) {
	return 0, 0, errors.New("the broker's CPU time is read from /proc, which needs Linux")
}
