// Package testenv lets tests say what they need from the machine (root,
// io_uring, a loop device, …). A test whose need is not met is skipped with
// a message naming the need — unless the environment variable
// MQSTORE_TEST_REQUIRE lists that need (comma separated, or "all"), in which
// case the test fails instead. CI sets MQSTORE_TEST_REQUIRE=root,uring,fuse
// so that a test cannot pass there by skipping.
//
// Skips that are not about the machine (a helper test run only as a child
// process, a check meaningless under -race) are not environment needs and do
// not go through this package; prefer a build tag or a TestMain dispatch for
// them so that a CI run shows no skips at all.
package testenv

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// EnvRequire is the variable that turns skips into failures.
const EnvRequire = "MQSTORE_TEST_REQUIRE"

// Needs a test can name.
const (
	Root  = "root"  // effective uid 0 (sysctls, mounts, cgroups, mlock without limits)
	Uring = "uring" // io_uring available to this process (and O_DIRECT on the temp dir)
	Loop  = "loop"  // loop devices and mkfs.ext4, for file-system-level tests
	Fio   = "fio"   // fio on PATH
	// Extents: the temporary directory is on a file system with extents
	// (FIEMAP, unwritten extents from fallocate) and O_DIRECT: ext4, xfs.
	Extents = "extents"
	// FUSE: /dev/fuse and root, to mount a FUSE file system with mount(2)
	// (internal/crashfs; no fusermount).
	FUSE = "fuse"
	// THP: Linux with transparent huge pages (/sys/kernel/mm/transparent_hugepage).
	THP = "thp"
)

// Required reports whether MQSTORE_TEST_REQUIRE names need (or "all").
func Required(need string) bool {
	v := os.Getenv(EnvRequire)
	if v == "" {
		return false
	}
	names := strings.Split(v, ",")
	for i := range names {
		names[i] = strings.TrimSpace(names[i])
	}
	return slices.Contains(names, need) || slices.Contains(names, "all")
}

// Skip stops the test because need is not met: a skip with the reason, or a
// failure when MQSTORE_TEST_REQUIRE requires need.
func Skip(t testing.TB, need, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf("needs %s: %s", need, fmt.Sprintf(format, args...))
	if Required(need) {
		t.Fatalf("%s (%s=%s makes this a failure)", msg, EnvRequire, os.Getenv(EnvRequire))
	}
	t.Skip(msg)
}

// LeaveOut keeps the named top-level tests out of this run, as -test.skip
// does (added to any pattern already given): for long trials that run only
// when their flag asks, so that a run without it shows no skip. Call it
// from TestMain after flag.Parse and before m.Run.
func LeaveOut(tests ...string) error {
	if len(tests) == 0 {
		return nil
	}
	f := flag.Lookup("test.skip")
	if f == nil {
		return fmt.Errorf("testenv: no -test.skip flag (call LeaveOut from TestMain, after flag.Parse)")
	}
	pattern := "^(" + strings.Join(tests, "|") + ")$"
	if cur := f.Value.String(); cur != "" {
		pattern = cur + "|" + pattern
	}
	return f.Value.Set(pattern)
}

// NeedFUSE skips (or fails, see Skip) unless the test can mount a FUSE
// file system itself: root and a /dev/fuse it can open.
func NeedFUSE(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, FUSE, "%s: mounting without fusermount needs root", why)
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		Skip(t, FUSE, "%s: %v", why, err)
	}
	f.Close()
}

// SkipOnFUSE skips the test when path is on FUSE (see OnFUSE): a test that
// reads page flags, FIEMAP or the device means nothing there, and keeps
// running on ext4. It is not an environment need: nothing can require it.
func SkipOnFUSE(t testing.TB, path, why string) {
	t.Helper()
	if OnFUSE(path) {
		t.Skipf("%s is on FUSE: %s means nothing there", path, why)
	}
}

// NeedRoot skips (or fails, see Skip) unless the test runs as root.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, Root, "%s", why)
	}
}

// FreeLoopbackAddr is a loopback address nobody listens on now, for a
// process or service the test starts later with that address (a raft peer
// whose address the others must know beforehand). Its port is below the
// kernel's ephemeral range: a port taken from that range (port 0, then
// closed) can be handed to another socket's connect — from this test or a
// package running beside it — before the service binds it, and the bind
// then fails with "address already in use". No two calls in a process
// return the same port.
func FreeLoopbackAddr(t testing.TB) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				low = n
			}
		}
	}
	freePortsMu.Lock()
	defer freePortsMu.Unlock()
	for range 1000 {
		port := 10000 + rand.IntN(low-10000)
		if freePorts[port] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // in use
		}
		ln.Close()
		freePorts[port] = true
		return ln.Addr().String()
	}
	t.Fatalf("no free loopback port below %d after 1000 tries", low)
	return ""
}

var (
	freePortsMu sync.Mutex
	freePorts   = map[int]bool{}
)
