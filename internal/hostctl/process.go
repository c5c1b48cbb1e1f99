package hostctl

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// --- processes ---

// processStartTicks is field 22 of /proc/pid/stat (0 when gone).
func processStartTicks(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
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
