//go:build linux

package crashfs

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
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mqstore/mqstore/internal/fusedaemon"
)

// EnvDaemon set to "1" tells a binary that dispatches to Main (the crashfs
// command, or a test binary's TestMain) to run as the daemon.
const EnvDaemon = "CRASHFS_DAEMON"

// ReportName is the crash report's name in the state directory when
// Config.Report is empty.
const ReportName = "report.json"

func (c Config) args() []string {
	a := []string{"--backing", c.Backing, "--mount", c.Mount, "--state", c.State, "--names", string(c.Names),
		"--dio-align", strconv.FormatInt(c.DIOAlign, 10), "--seed", strconv.FormatUint(c.Seed, 10),
		"--report", c.Report}
	if c.Writeback {
		a = append(a, "--writeback")
	}
	if c.CrashAfterFsync > 0 {
		a = append(a, "--crash-after-fsync", strconv.Itoa(c.CrashAfterFsync), "--crash-path", c.CrashPath)
	}
	return a
}

// Main runs the daemon with command-line arguments and returns its exit
// code: it mounts, prints "mounted" on stdout, and serves until SIGUSR1
// (a power cut: the Writeback subset is applied, the report written, the
// process exits and the kernel's connection with it), an armed crash point,
// SIGTERM or SIGINT (an unmount: unsynced data is lost as in a cut, and
// names=strict changes stay for Recover), or the death of its parent.
func Main(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("crashfs", flag.ContinueOnError)
	fl.SetOutput(stderr)
	var c Config
	fl.StringVar(&c.Backing, "backing", "", "directory holding the durable image (required)")
	fl.StringVar(&c.Mount, "mount", "", "mount point (required)")
	fl.StringVar(&c.State, "state", "", "directory for the names journal, its graveyard and the report, on the backing's file system (required)")
	names := fl.String("names", string(NamesDurable), "durable: every name change survives; strict: only those whose directories were fsynced")
	fl.Int64Var(&c.DIOAlign, "dio-align", 4096, "O_DIRECT offset and length alignment to enforce (0: none)")
	fl.BoolVar(&c.Writeback, "writeback", false, "a crash keeps a seeded random subset of the unsynced pages, torn at 512-byte sectors")
	fl.Uint64Var(&c.Seed, "seed", 1, "seed of the crash's random choices")
	fl.IntVar(&c.CrashAfterFsync, "crash-after-fsync", 0, "crash after applying (and before answering) the n-th FSYNC or FSYNCDIR of a path matching --crash-path")
	fl.StringVar(&c.CrashPath, "crash-path", "", "regular expression on the path relative to the root, for --crash-after-fsync")
	fl.StringVar(&c.Report, "report", "", "crash report file (default STATE/"+ReportName+")")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	c.Names = Names(*names)
	if c.State == "" {
		fmt.Fprintln(stderr, "crashfs: --state is required")
		return 2
	}
	if c.Report == "" {
		c.Report = filepath.Join(c.State, ReportName)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if err := serve(c, stdout, log); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

func serve(c Config, stdout io.Writer, log *slog.Logger) error {
	if err := c.validate(); err != nil {
		return err
	}
	s := &fsys{cfg: c, re: regexp.MustCompile(c.CrashPath), log: log, inodes: map[uint64]*inode{}}
	if c.Names == NamesStrict {
		// A journal left by a killed daemon: make the backing the durable image first.
		if _, err := Recover(c.State, c.Backing); err != nil {
			return err
		}
		j, err := openJournal(c.State)
		if err != nil {
			return err
		}
		s.names = j
	}
	parent := os.Getppid()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	server, err := mount(s)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "mounted")
	go func() {
		for sig := range sigs {
			switch sig {
			case syscall.SIGUSR1:
				s.crash("SIGUSR1")
			case syscall.SIGHUP:
				// The parent-death signal (also sent when only the parent's
				// thread that started us exits): act only if the parent is gone.
				if os.Getppid() == parent {
					continue
				}
				log.Warn("crashfs: parent died; unmounting", "mount", c.Mount)
				unix.Unmount(c.Mount, unix.MNT_DETACH)
				os.Exit(1)
			default:
				if err := server.Unmount(); err != nil {
					unix.Unmount(c.Mount, unix.MNT_DETACH)
				}
			}
		}
	}()
	server.Wait()
	return nil
}

// Daemon is a running crashfs process, seen from the test that started it.
type Daemon struct {
	*fusedaemon.Process
	cfg Config

	mu     sync.Mutex
	closed bool
}

// Start runs the daemon: cmd runs a binary whose main dispatches to Main
// when EnvDaemon is "1" (its Args are the program and nothing else); Start
// adds the arguments and the environment. It returns once the file system
// is mounted. The daemon is killed (and the mount taken down) if the
// calling process dies.
func Start(ctx context.Context, cmd *exec.Cmd, c Config) (*Daemon, error) {
	if c.Report == "" {
		c.Report = filepath.Join(c.State, ReportName)
	}
	if c.Names == "" {
		c.Names = NamesDurable
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.State == "" {
		return nil, fmt.Errorf("crashfs: a state directory is required")
	}
	if err := os.MkdirAll(c.State, 0o755); err != nil {
		return nil, fmt.Errorf("crashfs: state: %w", err)
	}
	os.Remove(c.Report)
	cmd.Args = append(cmd.Args, c.args()...)
	p, err := fusedaemon.Start(ctx, "crashfs", cmd, EnvDaemon, c.Mount)
	if err != nil {
		return nil, err
	}
	return &Daemon{Process: p, cfg: c}, nil
}

// ErrNoReport is returned when a crash left no report.
var ErrNoReport = errors.New("crashfs: no crash report")

// Crash cuts the power: the daemon applies the Writeback subset, undoes
// unsynced name changes, writes the report and exits; the mount goes.
// Kill the processes using the mount before or at the same time.
func (d *Daemon) Crash(ctx context.Context) (*Report, error) {
	if err := d.Signal(syscall.SIGUSR1); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return nil, fmt.Errorf("crashfs: signal the daemon: %w", err)
	}
	return d.Wait(ctx)
}

// Wait waits for the daemon to die by a crash (signalled, or an armed
// crash point), takes the dead mount down and returns the report.
func (d *Daemon) Wait(ctx context.Context) (*Report, error) {
	timer := time.NewTimer(60 * time.Second)
	defer timer.Stop()
	select {
	case <-d.Exited():
	case <-ctx.Done():
		d.Close()
		return nil, ctx.Err()
	case <-timer.C:
		d.Close()
		return nil, fmt.Errorf("crashfs: the daemon did not finish its crash in 60s: %s", d.Stderr())
	}
	d.Close()
	b, err := os.ReadFile(d.cfg.Report)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w (daemon exit: %v): %s", ErrNoReport, d.Err(), d.Stderr())
	} else if err != nil {
		return nil, err
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("crashfs: report %s: %w", d.cfg.Report, err)
	}
	return &rep, nil
}

// Kill is a power cut by SIGKILL: every unsynced byte the daemon held is
// lost (and not listed), the kernel's dirty pages die with the connection,
// and Recover undoes unsynced name changes.
func (d *Daemon) Kill() (*Report, error) {
	d.Close()
	rep := &Report{Seed: d.cfg.Seed, Reason: "SIGKILL", Names: d.cfg.Names, AllUnsyncedLost: true}
	undone, err := Recover(d.cfg.State, d.cfg.Backing)
	rep.Undone = undone
	return rep, err
}

// Close kills the daemon if it runs, waits for it and takes the mount
// down. It is safe to call more than once, and from a test's Cleanup.
func (d *Daemon) Close() error {
	d.mu.Lock()
	closed := d.closed
	d.closed = true
	d.mu.Unlock()
	if !closed {
		d.KillAndWait()
	}
	return Unmount(d.cfg.Mount)
}

// Unmount takes the mount at dir down (a dead FUSE mount included); it is
// not an error when nothing is mounted there.
func Unmount(dir string) error { return fusedaemon.Unmount(dir) }

// Mounted reports whether a file system is mounted at dir (from
// /proc/self/mountinfo).
func Mounted(dir string) (bool, error) { return fusedaemon.Mounted(dir) }
