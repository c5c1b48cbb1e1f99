//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mqstore/mqstore/engine"
	"github.com/mqstore/mqstore/engine/record"
	"github.com/mqstore/mqstore/internal/testenv"
)

var killTrials = flag.Int("kill.trials", 10, "SIGKILL trials per backend in TestKillDuringSyncProduce")

// mqstoreCmd returns a command running this test binary as mqstore.
func mqstoreCmd(args ...string) *exec.Cmd {
	cmd := selfCmd(args...)
	cmd.Env = append(cmd.Env, "MQSTORE_AS_CLI=1")
	return cmd
}

// selfCmd returns a command running this test binary. Under -race a
// process sleeps a second at exit (GORACE atexit_sleep_ms) unless told
// not to: the crash tests run hundreds of short processes.
func selfCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	return cmd
}

// runCLI runs mqstore to completion and returns stdout, stderr and the exit code.
func runCLI(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	cmd := mqstoreCmd(args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("run mqstore %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// TestKillDuringSyncProduce is the real process crash test: mqstore produce
// with sync flush prints an ack per durable message; it is killed with
// SIGKILL at a random moment; in half the trials a recovering open (mqstore
// verify) is killed too; every printed ack must then be readable by mqstore
// consume with the right body CRC, and verify must pass.
//
//	go test ./cmd/mqstore -run KillDuringSyncProduce -kill.trials 100
func TestKillDuringSyncProduce(t *testing.T) {
	for _, reg := range engine.Backends() {
		if reg.Volatile {
			continue // nothing on disk for a killed process to leave behind
		}
		backend := reg.Name
		t.Run(backend, func(t *testing.T) {
			violations := 0
			for trial := 0; trial < *killTrials; trial++ {
				seed := uint64(trial + 1)
				if err := killTrial(t, backend, seed); err != nil {
					if strings.Contains(err.Error(), "cannot run here") {
						testenv.Skip(t, testenv.Uring, "%v", err)
					}
					violations++
					t.Errorf("trial %d (seed %d): %v", trial, seed, err)
				}
			}
			t.Logf("%s: %d SIGKILL trials, %d violations", backend, *killTrials, violations)
		})
	}
}

func killTrial(t *testing.T, backend string, seed uint64) (err error) {
	rng := rand.New(rand.NewPCG(seed, 77))
	dir := t.TempDir()
	// Each trial's store holds a 420 MB (fallocated) index file: remove it
	// now (a long -kill.trials run would fill the disk); a failed trial's
	// store stays until the test ends.
	defer func() {
		if err == nil {
			os.RemoveAll(dir)
		}
	}()
	size := 1 + rng.IntN(3000)
	killAfter := 1 + rng.IntN(150)
	cmd := mqstoreCmd("produce", "--dir", dir, "--topic", "Crash", "--queues", "3", "--count", "1000000", "--size", fmt.Sprint(size),
		"--flush", "sync", "--print-acks", "--backend", backend, "--segment-size", "262144", "--keys", "--tags", "K")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	var acks []ack
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var a ack
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			continue // a line cut by the kill
		}
		acks = append(acks, a)
		if len(acks) == killAfter {
			// Kill at a random moment after this ack: the producer keeps going meanwhile.
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				return err
			}
		}
	}
	io.Copy(io.Discard, stdout)
	waitErr := cmd.Wait()
	if len(acks) < killAfter {
		msg := stderr.String()
		if strings.Contains(msg, "unsupported on this system") {
			return fmt.Errorf("backend %s cannot run here: %s", backend, msg)
		}
		return fmt.Errorf("producer ended after %d acks before the kill: %v: %s", len(acks), waitErr, msg)
	}
	var logs strings.Builder // what the opens after the kill logged, for a failure's report
	if rng.IntN(2) == 0 {
		// Kill a recovering open too, at a random moment: whatever recovery
		// had done (truncation, syncs, re-dispatch), the store must recover
		// again with every acknowledged message.
		rec := mqstoreCmd("verify", "--dir", dir)
		var recErr bytes.Buffer
		rec.Stdout, rec.Stderr = io.Discard, &recErr
		if err := rec.Start(); err != nil {
			return err
		}
		time.Sleep(time.Duration(rng.IntN(40000)) * time.Microsecond)
		if err := rec.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return err
		}
		rec.Wait()
		fmt.Fprintf(&logs, "the recovering open killed after a random delay logged:\n%s", recErr.String())
	}
	// Every acknowledged message is there, with the right body.
	if err := checkAcked(t, dir, "Crash", 3, size, acks, &logs); err != nil {
		return err
	}
	if out, errOut, code := runCLI(t, "verify", "--dir", dir); code != 0 {
		return fmt.Errorf("verify after the kill (%d acks, size %d; store in %s): exit %d:\n%s%s\nproducer logged:\n%s%sverify logged:\n%s",
			len(acks), size, dir, code, out, ackTail(acks), stderr.String(), logs.String(), errOut)
	}
	return nil
}

// checkAcked fails unless every acknowledged message is readable by mqstore
// consume at its queue offset, at its CommitLog offset, with its body (the
// CRC of Body(i, size)), its UNIQ_KEY and its KEYS (k<i>, as produce --keys
// sets them). What the consumes logged goes to logs.
func checkAcked(t *testing.T, dir, topic string, queues, size int, acks []ack, logs io.Writer) error {
	byQueue := map[int32]map[int64]recordLine{}
	for q := int32(0); q < int32(queues); q++ {
		out, errOut, code := runCLI(t, "consume", "--dir", dir, "--topic", topic, "--queue", fmt.Sprint(q))
		fmt.Fprintf(logs, "consume --queue %d logged:\n%s", q, errOut)
		if code != 0 {
			return fmt.Errorf("consume queue %d: exit %d: %s", q, code, errOut)
		}
		byQueue[q] = map[int64]recordLine{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line == "" {
				continue
			}
			var l recordLine
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				return fmt.Errorf("consume output %q: %v", line, err)
			}
			byQueue[q][l.QueueOffset] = l
		}
	}
	for _, a := range acks {
		l, ok := byQueue[a.QueueID][a.QueueOffset]
		if err := ackMatches(a, l, ok, size, len(acks)); err != nil {
			return err
		}
	}
	return nil
}

// ackMatches says what is wrong with the record l read back for the
// acknowledged message a (found: whether there was one).
func ackMatches(a ack, l recordLine, found bool, size, nAcks int) error {
	switch {
	case !found:
		return fmt.Errorf("acknowledged message %d (queue %d offset %d, at %d) lost; %d acks", a.I, a.QueueID, a.QueueOffset, a.PhysicalOffset, nAcks)
	case l.PhysicalOffset != a.PhysicalOffset || l.QueueID != a.QueueID || l.QueueOffset != a.QueueOffset ||
		l.BodyCRC != record.BodyCRC(Body(a.I, size)) || l.UniqKey != a.UniqKey || !slices.Contains(l.Keys, fmt.Sprintf("k%d", a.I)):
		return fmt.Errorf("acknowledged message %d read back wrong: %+v", a.I, l)
	}
	return nil
}

// ackTail describes the last acknowledgements, for a failure's report.
func ackTail(acks []ack) string {
	var b strings.Builder
	for _, a := range acks[max(0, len(acks)-3):] {
		fmt.Fprintf(&b, "ack %d: queue %d offset %d at %d\n", a.I, a.QueueID, a.QueueOffset, a.PhysicalOffset)
	}
	return b.String()
}
