//go:build linux

// Package fusedaemon runs a FUSE file system's daemon as a child process
// and takes its mount down: the parent's side that the project's FUSE
// layers (internal/crashfs, internal/hddfs) share. The child is the same
// binary re-executed with an environment variable set; it prints
// "mounted" on stdout once its mount serves, and is sent SIGHUP when its
// parent dies (its own code decides what that means).
package fusedaemon

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// MountTimeout bounds how long Start waits for the daemon's "mounted".
const MountTimeout = 30 * time.Second

// Process is a running daemon, seen from the process that started it.
type Process struct {
	name   string // for messages: "crashfs", "hddfs"
	mount  string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // the process's exit, once exited is closed

	mu     sync.Mutex
	stderr bytes.Buffer
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Start runs cmd (a binary that serves as the daemon when env is "1"; its
// Args complete) as the daemon of the file system mounted at mount, and
// returns once it printed "mounted". A daemon that exits first, or does
// not mount within MountTimeout or before ctx ends, is killed and its
// mount taken down; the error carries what it logged. name prefixes the
// messages.
func Start(ctx context.Context, name string, cmd *exec.Cmd, env, mount string) (*Process, error) {
	cmd.Env = append(cmd.Environ(), env+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGHUP}
	p := &Process{name: name, mount: mount, cmd: cmd, exited: make(chan struct{})}
	cmd.Stderr = lockedWriter{&p.mu, &p.stderr}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start the daemon: %w", name, err)
	}
	mounted := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if sc.Text() == "mounted" && !ok {
				ok = true
				mounted <- true
			}
		}
		if !ok {
			mounted <- false
		}
		p.err = cmd.Wait()
		close(p.exited)
	}()
	timer := time.NewTimer(MountTimeout)
	defer timer.Stop()
	select {
	case ok := <-mounted:
		if ok {
			return p, nil
		}
		<-p.exited
		return nil, fmt.Errorf("%s: the daemon did not mount (%v): %s", name, p.err, p.Stderr())
	case <-ctx.Done():
		p.KillAndWait()
		return nil, errors.Join(fmt.Errorf("%s: wait for the mount: %w", name, ctx.Err()), Unmount(mount))
	case <-timer.C:
		p.KillAndWait()
		return nil, errors.Join(fmt.Errorf("%s: the daemon did not mount in %v: %s", name, MountTimeout, p.Stderr()), Unmount(mount))
	}
}

// Pid is the daemon's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stderr is what the daemon logged so far.
func (p *Process) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// Exited is closed once the daemon has exited; Err is then how.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is the daemon's exit (after Exited is closed).
func (p *Process) Err() error { return p.err }

// Signal sends sig to the daemon; a daemon that has exited is not an
// error (os.ErrProcessDone is returned as is, for callers that care).
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// KillAndWait kills the daemon if it runs and waits for it; its mount
// stays (Unmount takes a dead one down).
func (p *Process) KillAndWait() {
	select {
	case <-p.exited:
	default:
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}

// Unmount takes the mount at dir down (lazily: a dead FUSE mount
// included); nothing mounted there is not an error.
func Unmount(dir string) error {
	for range 3 {
		ok, err := Mounted(dir)
		if err != nil || !ok {
			return err
		}
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	return nil
}

// Mounted reports whether a file system is mounted at dir (from
// /proc/self/mountinfo).
func Mounted(dir string) (bool, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, err
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && unescapeMount(f[4]) == abs {
			return true, nil
		}
	}
	return false, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
