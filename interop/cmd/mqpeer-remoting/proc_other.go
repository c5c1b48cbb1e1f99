//go:build !linux

package main

import "os/exec"

// setDeathSignal: only Linux can tie the broker's life to this program's.
func setDeathSignal(*exec.Cmd) {}
