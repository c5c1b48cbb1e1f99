package main

import (
	"os/exec"
	"syscall"
)

// setDeathSignal kills the broker if this program dies first, so no broker
// outlives its run.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
