package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// setDeathSignal kills the broker if this program dies first, so no broker
// outlives its run.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// clockTick is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// every Linux architecture Go runs on).
const clockTick = 10 * time.Millisecond

// processCPU is the user and system CPU time of process pid so far, from
// /proc/<pid>/stat (in clockTick units).
func processCPU(pid int) (user, sys time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("the CPU time of process %d: %w", pid, err)
	}
	// The command name, in parentheses, may hold spaces: the fields
	// after it start past the last ')'. utime and stime are the 14th
	// and 15th fields, the 12th and 13th after it.
	i := bytes.LastIndexByte(b, ')')
	fields := bytes.Fields(b[i+1:])
	if i < 0 || len(fields) < 13 {
		return 0, 0, fmt.Errorf("the CPU time of process %d: /proc/%d/stat has %d fields after the command: %q", pid, pid, len(fields), b)
	}
	u, err1 := strconv.ParseInt(string(fields[11]), 10, 64)
	s, err2 := strconv.ParseInt(string(fields[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("the CPU time of process %d: utime %q, stime %q in /proc/%d/stat", pid, fields[11], fields[12], pid)
	}
	return time.Duration(u) * clockTick, time.Duration(s) * clockTick, nil
}
