//go:build linux

package hddfs

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mqstore/mqstore/internal/fusedaemon"
)

// EnvDaemon set to "1" tells a binary that calls RunDaemonIfRequested (a
// command's main, a test binary's TestMain) to run as the daemon.
const EnvDaemon = "HDDFS_DAEMON"

// RunDaemonIfRequested runs the daemon and exits when EnvDaemon is "1";
// otherwise it returns at once. Call it first in main (or TestMain) of a
// binary that Setup starts as its daemon.
func RunDaemonIfRequested() {
	if os.Getenv(EnvDaemon) == "1" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
}

// Main runs the daemon with command-line arguments and returns its exit
// code: it mounts the disk, prints "mounted" on stdout, and serves until
// SIGTERM or SIGINT (it unmounts, once nothing holds the image open) or
// the death of its parent (it exits and leaves the dead mount to the
// journal's cleanup). It logs the drive's counters
// when it ends.
func Main(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("hddfs", flag.ContinueOnError)
	fl.SetOutput(stderr)
	backing := fl.String("backing", "", "file holding the disk's bytes; its size is the disk's (required)")
	mnt := fl.String("mount", "", "mount point; the disk appears there as "+ImageName+" (required)")
	model := fl.String("model", "", "drive model as JSON (default: DefaultModel)")
	nice := fl.String("nice", "", "scheduling priority of every daemon thread, -20..19 (default: inherited)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	m := DefaultModel()
	if *model != "" {
		if err := json.Unmarshal([]byte(*model), &m); err != nil {
			fmt.Fprintf(stderr, "hddfs: --model: %v\n", err)
			return 2
		}
	}
	if *nice != "" {
		n, err := strconv.Atoi(*nice)
		if err == nil && (n < -20 || n > 19) {
			err = errors.New("out of -20..19")
		}
		if err == nil {
			err = setNice(n)
		}
		if err != nil {
			fmt.Fprintf(stderr, "hddfs: --nice %s: %v\n", *nice, err)
			return 2
		}
	}
	if *backing == "" || *mnt == "" {
		fmt.Fprintln(stderr, "hddfs: --backing and --mount are required")
		return 2
	}
	if err := serveDaemon(*backing, *mnt, m, stdout, log); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

func serveDaemon(backing, mnt string, m Model, stdout io.Writer, log *slog.Logger) error {
	f, err := openBacking(backing, log)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("hddfs: backing: %w", err)
	}
	disk, err := NewDisk(m, st.Size())
	if err != nil {
		return err
	}
	d := &drive{disk: disk, epoch: time.Now(), backing: f, size: st.Size(), log: log}
	parent := os.Getppid()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	server, err := mountDrive(mnt, d)
	if err != nil {
		return err
	}
	log.Info("hddfs: mounted", "mount", mnt, "backing", backing, "bytes", st.Size(), "model", m.String())
	fmt.Fprintln(stdout, "mounted")
	go func() {
		for sig := range sigs {
			if sig == syscall.SIGHUP {
				// The parent-death signal (also sent when only the parent's
				// thread that started us exits): act only if it is gone.
				if os.Getppid() == parent {
					continue
				}
				// Exit without unmounting: the dead mount keeps the loop
				// device's backing path, which the journal's cleanup
				// checks before it detaches the device; a lazy unmount
				// here would hide it.
				log.Warn("hddfs: parent died; exiting", "mount", mnt)
				os.Exit(1)
			}
			if err := server.Unmount(); err != nil {
				log.Warn("hddfs: unmount (the image is still open?)", "mount", mnt, "err", err)
			}
		}
	}()
	server.Wait()
	ds := d.stats()
	s := ds.Disk
	log.Info("hddfs: unmounted", "reads", s.Reads, "writes", s.Writes, "flushes", s.Flushes, "cacheReads", s.CacheReads,
		"seeks", s.Seeks, "seekTime", s.SeekTime, "rotationTime", s.RotationTime, "transferTime", s.TransferTime,
		"destagedBytes", s.DestagedBytes, "flushTime", s.FlushTime, "answered", ds.Answered, "late", ds.Late, "maxLate", ds.MaxLate)
	return nil
}

// setNice sets the priority of each of the process's threads (Linux
// priorities are per thread; threads started later inherit it from the
// thread that starts them).
func setNice(n int) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, n); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("thread %d: %w", tid, err)
		}
	}
	return nil
}

// Daemon is a running hddfs process, seen from the process that started it.
type Daemon struct {
	*fusedaemon.Process
	mount string
}

// StartDaemon runs the daemon serving backing at mnt: cmd runs a binary
// that calls RunDaemonIfRequested first (its Args are the program and
// nothing else); StartDaemon adds the arguments and the environment. It
// returns once the disk is mounted. The daemon unmounts and exits if the
// calling process dies.
//
// nice, when not nil, is the daemon's scheduling priority: it stands for
// hardware, and a starved daemon answers late (DaemonStats.Late).
func StartDaemon(ctx context.Context, cmd *exec.Cmd, backing, mnt string, m Model, nice *int) (*Daemon, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	mj, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	cmd.Args = append(cmd.Args, "--backing", backing, "--mount", mnt, "--model", string(mj))
	if nice != nil {
		cmd.Args = append(cmd.Args, "--nice", strconv.Itoa(*nice))
	}
	p, err := fusedaemon.Start(ctx, "hddfs", cmd, EnvDaemon, mnt)
	if err != nil {
		return nil, err
	}
	return &Daemon{Process: p, mount: mnt}, nil
}

// Stop asks the daemon to unmount and waits for it to exit, asking again
// while the image is still held (a loop device detaches asynchronously);
// after 10 s, or when ctx ends, it kills the daemon instead. The mount is
// gone when it returns without error.
func (d *Daemon) Stop(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := d.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return d.Kill()
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-d.Exited():
			t.Stop()
			return fusedaemon.Unmount(d.mount)
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), d.Kill())
		case <-t.C:
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("hddfs: the daemon did not unmount %s in 10s: %s", d.mount, d.Stderr()), d.Kill())
		}
	}
}

// Kill kills the daemon if it runs, waits for it and takes its (dead)
// mount down. Safe to call more than once. Detach a loop device on the
// image first: once the mount is gone its backing path no longer names
// the image.
func (d *Daemon) Kill() error {
	d.KillAndWait()
	return fusedaemon.Unmount(d.mount)
}
