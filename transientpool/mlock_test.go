//go:build linux

package transientpool

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const mlockChildEnv = "MQSTORE_TRANSIENTPOOL_MLOCK_CHILD"

// mlockChildLimit is the RLIMIT_MEMLOCK the child runs under.
const mlockChildLimit = 64 << 10

// TestMlockErrorMessage runs itself in a child process with RLIMIT_MEMLOCK
// lowered (and, when root, CAP_IPC_LOCK dropped from the thread that locks),
// and checks the error New returns explains the limit. In the child
// (mlockChildEnv set) it makes New fail and prints the error.
func TestMlockErrorMessage(t *testing.T) {
	if os.Getenv(mlockChildEnv) == "1" {
		mlockChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMlockErrorMessage$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), mlockChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	text := string(out)
	if err != nil {
		t.Fatalf("child failed: %v\n%s", err, text)
	}
	line := ""
	for _, l := range strings.Split(text, "\n") {
		if i := strings.Index(l, "MLOCK-ERROR: "); i >= 0 {
			line = l[i:]
		}
	}
	if line == "" {
		t.Fatalf("the child printed no error:\n%s", text)
	}
	t.Log(line)
	wanted := strconv.Itoa(2 * 1 << 20)
	for _, want := range []string{wanted, "RLIMIT_MEMLOCK is " + strconv.Itoa(mlockChildLimit) + " bytes", "ulimit -l", "NoLock"} {
		if !strings.Contains(line, want) {
			t.Errorf("mlock error %q does not mention %q", line, want)
		}
	}
}

// mlockChild lowers RLIMIT_MEMLOCK (lowering a soft limit, like dropping a
// capability from one's own thread, needs no privilege) and makes New fail.
func mlockChild(t *testing.T) {
	// Capabilities are per thread: drop CAP_IPC_LOCK from this one and keep
	// the goroutine on it; the thread dies with the child.
	runtime.LockOSThread()
	if err := dropIPCLock(); err != nil {
		t.Fatalf("cannot drop CAP_IPC_LOCK: %v", err)
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatalf("getrlimit: %v", err)
	}
	lim.Cur = mlockChildLimit
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatalf("setrlimit RLIMIT_MEMLOCK: %v", err)
	}
	b, err := New(Options{SegmentSizeBytes: 1 << 20, PoolSize: 2})
	if err == nil {
		b.Close()
		t.Fatal("New locked 2 MiB under a 64 KiB RLIMIT_MEMLOCK")
	}
	if !errors.Is(err, unix.ENOMEM) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("unexpected error kind: %v", err)
	}
	fmt.Printf("MLOCK-ERROR: %v\n", err)
}

// dropIPCLock clears CAP_IPC_LOCK from the calling thread's effective set.
func dropIPCLock() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[unix.CAP_IPC_LOCK/32].Effective &^= 1 << (unix.CAP_IPC_LOCK % 32)
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
