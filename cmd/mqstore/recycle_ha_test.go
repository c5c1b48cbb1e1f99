//go:build linux

package main

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

var storeLineRE = regexp.MustCompile(`msg=store .*segmentsRecycled=(\d+)`)

var haRecycleTrials = flag.Int("ha.recycle.trials", 1, "SIGKILL trials of a recycling SYNC_MASTER in TestKillRecyclingSyncMaster")

// TestKillRecyclingSyncMaster is TestKillSyncMasterLosesNoAck with segment
// reuse on both brokers (uring-direct, the backend that reuses): retention
// set from the command line retires every full segment at once, both keep
// two for reuse, and the SYNC_MASTER producer runs through many reused
// segments before it is killed. Every acknowledged message the slave still
// holds (retention deleted the oldest) must read back right, the slave must
// verify — every record from its recordcrc offset carries a valid
// whole-record checksum — and its CommitLog must equal the master's over the
// range both hold; both restarted, the slave follows the master to its end.
//
//	go test ./cmd/mqstore -run KillRecyclingSyncMaster -ha.recycle.trials 20
func TestKillRecyclingSyncMaster(t *testing.T) {
	for trial := 0; trial < *haRecycleTrials; trial++ {
		t.Run(fmt.Sprint(trial), func(t *testing.T) { killRecyclingMasterTrial(t, uint64(trial+1)) })
	}
}

func killRecyclingMasterTrial(t *testing.T, seed uint64) {
	const (
		backend  = "uring-direct"
		segment  = 262144
		queues   = 3
		pool     = "2"
		segments = 12 // segments the producer fills before the kill, at least
	)
	rng := rand.New(rand.NewPCG(seed, 19))
	base := t.TempDir()
	m, s := filepath.Join(base, "M"), filepath.Join(base, "S")
	size := 200 + rng.IntN(1800)
	killAfter := segments*segment/(size+200) + rng.IntN(2000)
	// Segments expire 100 ms after their newest message: the slave keeps the
	// last few, whose acknowledged messages are checked.
	retention := []string{"--recycle-segments", pool, "--file-reserved-time", "100ms", "--delete-when", "*", "--clean-interval", "20ms"}
	acks, producer, slave := killSyncMaster(t, rng, killAfter,
		append([]string{"--dir", m, "--topic", "HA", "--queues", fmt.Sprint(queues), "--size", fmt.Sprint(size), "--backend", backend,
			"--segment-size", fmt.Sprint(segment)}, retention...),
		append([]string{"--dir", s, "--backend", backend, "--segment-size", fmt.Sprint(segment), "--status-interval", "0"}, retention...))
	for _, dir := range []string{m, s} {
		if _, err := os.Stat(filepath.Join(dir, "recordcrc")); err != nil {
			t.Fatalf("%s does not reuse segments (no recordcrc file): %v\nmaster:\n%s\nslave:\n%s", dir, err, producer.stderr(), slave.stderr())
		}
	}
	// The slave's last status line says how many segments it took from its pool.
	if st := storeLineRE.FindAllStringSubmatch(slave.stderr(), -1); len(st) == 0 || st[len(st)-1][1] == "0" {
		t.Fatalf("the slave reused no segment:\n%s", slave.stderr())
	}
	start, end := verifyStore(t, s)
	if start == 0 {
		t.Fatalf("retention deleted nothing on the slave (its log starts at 0, ends at %d)", end)
	}
	var held []ack
	for _, a := range acks {
		if a.PhysicalOffset >= start {
			held = append(held, a)
		}
	}
	if len(held) == 0 || held[len(held)-1] != acks[len(acks)-1] {
		t.Fatalf("the slave's log [%d,%d) lacks the newest acknowledged messages (%d acks, the last at %d)", start, end, len(acks), acks[len(acks)-1].PhysicalOffset)
	}
	checkAcksOn(t, s, held, size, queues)
	mStart, _ := verifyStore(t, m)
	from := max(start, mStart)
	mb, sb := commitLogFrom(t, m), commitLogFrom(t, s)
	if !bytes.Equal(mb.slice(t, from, end), sb.slice(t, from, end)) {
		t.Fatalf("the slave's CommitLog [%d,%d) differs from the master's", from, end)
	}
	_, masterEnd := verifyStore(t, m)
	if masterEnd < end {
		t.Fatalf("the master recovered up to %d after the kill; the slave holds up to %d", masterEnd, end)
	}
	restartPair(t, append([]string{"--dir", m, "--backend", backend}, retention...), append([]string{"--dir", s, "--backend", backend}, retention...), masterEnd)
	s2, e2 := verifyStore(t, s)
	m2, _ := verifyStore(t, m)
	from = max(s2, m2)
	if e2 != masterEnd || !bytes.Equal(commitLogFrom(t, m).slice(t, from, e2), commitLogFrom(t, s).slice(t, from, e2)) {
		t.Fatalf("after the restart the slave ends at %d (master %d) or differs over [%d,%d)", e2, masterEnd, from, e2)
	}
	t.Logf("%d acks (size %d), the %d the slave holds from %d all there; CommitLogs equal over [%d,%d); resumed to %d after the restart",
		len(acks), size, len(held), start, max(start, mStart), end, masterEnd)
}
