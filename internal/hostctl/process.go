package hostctl

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// --- processes ---

// statFields are the fields of /proc/pid/stat after the command name
// (which is in parentheses and may hold spaces): the state is [0], field
// k of proc(5) is [k-3].
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name in %q", pid, s)
	}
	return strings.Fields(s[i+1:]), nil
}

// processStartTicks is field 22 of /proc/pid/stat (0 when gone).
func processStartTicks(pid int) uint64 {
	f, err := statFields(pid)
	if err != nil || len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// ClockTick is the unit of /proc/pid/stat's times (USER_HZ: 100 on every
// Linux architecture Go runs on).
const ClockTick = 10 * time.Millisecond

// ProcessCPU is process pid's user and system CPU time so far: fields 14
// and 15 of /proc/pid/stat, in ClockTick units.
func ProcessCPU(pid int) (user, sys time.Duration, err error) {
	f, err := statFields(pid)
	if err == nil && len(f) < 13 {
		err = fmt.Errorf("/proc/%d/stat has %d fields after the command", pid, len(f))
	}
	if err != nil {
		return 0, 0, fmt.Errorf("the CPU time of process %d: %w", pid, err)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("the CPU time of process %d: utime %q, stime %q in /proc/%d/stat", pid, f[11], f[12], pid)
	}
	return time.Duration(u) * ClockTick, time.Duration(s) * ClockTick, nil
}

// ProcessAlive reports whether pid still runs (a zombie does not) and is
// the same process.
func ProcessAlive(pid int, startTicks uint64) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X') {
		return false
	}
	t := processStartTicks(pid)
	return t != 0 && (startTicks == 0 || t == startTicks)
}

func waitGone(pid int, startTicks uint64, d time.Duration) {
	deadline := time.Now().Add(d)
	for ProcessAlive(pid, startTicks) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// RecordProcess records a started neighbour so a cleanup kills it.
func (j *Journal) RecordProcess(pid int, what string) error {
	return j.Record(Change{Kind: ChangeProcess, PID: pid, StartTicks: processStartTicks(pid), Value: what})
}
