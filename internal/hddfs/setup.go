//go:build linux

package hddfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/mqstore/mqstore/internal/hostctl"
)

// Config says where and how Setup builds the emulated disk.
type Config struct {
	// Dir is a directory on a real file system; Setup creates in it the
	// sparse backing image (image), the FUSE mount point (fuse) and the
	// ext4 mount point (mnt).
	Dir string
	// SizeBytes is the disk's capacity: the whole stroke of the model.
	SizeBytes int64
	Model     Model
	// Journal records every change before it is made (hostctl), so a
	// killed run's leftovers are undone by hostctl.Cleanup.
	Journal *hostctl.Journal
	// Daemon runs the FUSE daemon: a binary that calls
	// RunDaemonIfRequested first, with no arguments. Nil: this program
	// (os.Args[0]).
	Daemon *exec.Cmd
	// DaemonNice, when not nil, is the daemon's scheduling priority
	// (-20..19; nil: this process's). The daemon stands for hardware: one
	// that waits for a CPU answers late (see DaemonStats.Late).
	DaemonNice *int
}

// Mounted is an emulated disk in use: ext4 on a loop device on the FUSE
// file whose requests pay the model's time.
type Mounted struct {
	// Dir is the ext4 mount point.
	Dir string
	// Device is the loop device (/dev/loopN) and MajorMinor its number.
	Device, MajorMinor string
	// Image is the disk file on the FUSE mount; Backing holds its bytes.
	Image, Backing string
	Model          Model

	journal *hostctl.Journal
	mark    int // the journal's position before Setup
	daemonM int // ... after the daemon and its mount were recorded
	daemon  *Daemon
}

// Setup builds the emulated disk: a sparse backing image in c.Dir, the
// FUSE daemon serving it through the model, a loop device on the FUSE
// file (marked rotational), ext4 on it, mounted. Every step is in the
// journal first. On error everything done is undone; otherwise Close
// undoes it, in reverse order.
func Setup(ctx context.Context, c Config) (_ *Mounted, err error) {
	if c.Journal == nil {
		return nil, errors.New("hddfs: setup needs a journal")
	}
	if err := c.Model.Validate(); err != nil {
		return nil, err
	}
	if c.SizeBytes < 64<<20 || c.SizeBytes%4096 != 0 {
		return nil, fmt.Errorf("hddfs: disk size %d bytes: want a multiple of 4096 of at least 64 MiB", c.SizeBytes)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("hddfs: an emulated disk needs root (FUSE mount, loop device); running as uid %d", os.Geteuid())
	}
	j := c.Journal
	m := &Mounted{Model: c.Model, journal: j, mark: j.Mark(),
		Backing: filepath.Join(c.Dir, "image"), Dir: filepath.Join(c.Dir, "mnt")}
	defer func() {
		if err != nil {
			err = errors.Join(err, m.Close())
		}
	}()
	if err := j.Record(hostctl.Change{Kind: hostctl.ChangeFile, Path: m.Backing}); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(m.Backing, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("hddfs: backing image: %w", err)
	}
	err = f.Truncate(c.SizeBytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("hddfs: backing image: %w", err)
	}
	fuseDir := filepath.Join(c.Dir, "fuse")
	if err := j.Record(hostctl.Change{Kind: hostctl.ChangeDir, Path: fuseDir}); err != nil {
		return nil, err
	}
	if err := os.Mkdir(fuseDir, 0o755); err != nil {
		return nil, fmt.Errorf("hddfs: %w", err)
	}
	if err := j.Record(hostctl.Change{Kind: hostctl.ChangeMount, Path: fuseDir}); err != nil {
		return nil, err
	}
	cmd := c.Daemon
	if cmd == nil {
		cmd = exec.Command(os.Args[0])
	}
	m.daemon, err = StartDaemon(ctx, cmd, m.Backing, fuseDir, c.Model, c.DaemonNice)
	if err != nil {
		return nil, err
	}
	if err := j.RecordProcess(m.daemon.Pid(), "hddfs daemon for "+fuseDir); err != nil {
		return nil, err
	}
	m.daemonM = j.Mark()
	m.Image = filepath.Join(fuseDir, ImageName)
	if m.Device, err = j.AttachLoop(m.Image); err != nil {
		return nil, fmt.Errorf("hddfs: %w", err)
	}
	sys := filepath.Join("/sys/block", filepath.Base(m.Device))
	if err := j.SetAttr(filepath.Join(sys, "queue", "rotational"), "1"); err != nil {
		return nil, fmt.Errorf("hddfs: %w", err)
	}
	mm, err := os.ReadFile(filepath.Join(sys, "dev"))
	if err != nil {
		return nil, fmt.Errorf("hddfs: %w", err)
	}
	m.MajorMinor = strings.TrimSpace(string(mm))
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := hostctl.RunTool("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard", m.Device); err != nil {
		return nil, fmt.Errorf("hddfs: %w", err)
	}
	if err := j.Mount(m.Device, "ext4", m.Dir); err != nil {
		return nil, fmt.Errorf("hddfs: %w", err)
	}
	return m, nil
}

// DaemonLog is what the daemon logged so far (its counters once closed).
func (m *Mounted) DaemonLog() string {
	if m.daemon == nil {
		return ""
	}
	return m.daemon.Stderr()
}

// Close undoes Setup newest first: unmounts ext4, detaches the loop
// device, stops the daemon (which unmounts the FUSE file system), removes
// the directories and the image. Safe to call more than once.
func (m *Mounted) Close() error {
	var errs []error
	if m.daemonM > 0 {
		errs = append(errs, m.journal.UndoSince(m.daemonM))
	}
	if m.daemon != nil {
		errs = append(errs, m.daemon.Stop(context.Background()))
	}
	errs = append(errs, m.journal.UndoSince(m.mark))
	return errors.Join(errs...)
}
