// Package hostctl makes the root-only changes to the host that mqbench's
// pressure and device emulation need — vm.dirty_* and other sysctls, sysfs
// attributes, swapfiles, cgroup v1 groups, loop devices, mounts, neighbour
// processes — and undoes them. Every change is recorded in a state file
// (a Journal) before it is made, so the run undoes it on exit, Ctrl-C or
// error, and Cleanup undoes it after a killed run.
//
// Where a change lands is taken from a Host (the /proc/sys and cgroup
// roots), so the code is tested on a temporary directory: tests never
// change the machine's settings.
//
// Files: journal.go (the journal, undo, cleanup), host.go (the roots,
// sysctls, swap, cgroups, loop devices, mounts), process.go (processes).
package hostctl

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultStateDir holds one state file per run that changed the system
// (/run is emptied at boot, as are the changes it records).
const DefaultStateDir = "/run/mqbench"

// Change kinds, each with its undo.
const (
	ChangeVMDirty = "vm-dirty"       // undo: write back the four original vm.dirty_* values
	ChangeSysctl  = "sysctl"         // undo: write Original to Path
	ChangeFile    = "file"           // undo: remove Path
	ChangeDir     = "dir"            // undo: rmdir Path (never recursive: it may be a mount point)
	ChangeSwapon  = "swapon"         // undo: swapoff Path
	ChangeCgroup  = "cgroup"         // undo: move its processes to the parent, rmdir
	ChangeSubtree = "cgroup-subtree" // undo: write "-Value" to Path (a v2 cgroup.subtree_control)
	ChangeLoop    = "loop"           // undo: losetup -d Path when its backing file is still Backing
	ChangeMount   = "mount"          // undo: umount Path (lazily when busy)
	ChangeProcess = "process"        // undo: SIGKILL PID when its start time is still StartTicks
)

// Change is one modification of the system, recorded before it is made.
type Change struct {
	Kind string `json:"kind"`
	Path string `json:"path"`
	// Original is the value a sysctl or sysfs attribute had (vm-dirty: the
	// four values as dirty_bytes,dirty_background_bytes,dirty_ratio,dirty_background_ratio).
	Original   string `json:"original,omitempty"`
	Value      string `json:"value,omitempty"`
	Backing    string `json:"backing,omitempty"`
	PID        int    `json:"pid,omitempty"`
	StartTicks uint64 `json:"startTicks,omitempty"`
	Undone     bool   `json:"undone"`
	UndoError  string `json:"undoError,omitempty"`
}

// String says what the change was.
func (c Change) String() string {
	switch c.Kind {
	case ChangeVMDirty:
		return fmt.Sprintf("vm.dirty_bytes,dirty_background_bytes set to %s (were bytes,bg_bytes,ratio,bg_ratio = %s)", c.Value, c.Original)
	case ChangeSysctl:
		return fmt.Sprintf("%s set to %s (was %s)", c.Path, c.Value, c.Original)
	case ChangeProcess:
		return fmt.Sprintf("process %d (%s)", c.PID, c.Value)
	case ChangeLoop:
		return fmt.Sprintf("loop device %s on %s", c.Path, c.Backing)
	case ChangeSubtree:
		return fmt.Sprintf("cgroup v2 controller %s enabled in %s", c.Value, c.Path)
	}
	return c.Kind + " " + c.Path
}

type journalState struct {
	PID        int       `json:"pid"`
	StartTicks uint64    `json:"startTicks"`
	StartedAt  time.Time `json:"startedAt"`
	Changes    []Change  `json:"changes"`
}

// Journal records every system change of a run in a state file before it is
// made, so Undo (on exit, Ctrl-C or error) and Cleanup (after a killed run)
// can restore the system. Safe for concurrent use.
type Journal struct {
	mu    sync.Mutex
	host  Host
	path  string
	state journalState
}

// OpenJournal creates this process's state file in dir; the changes it
// makes land on host.
func OpenJournal(dir string, host Host) (*Journal, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	pid := os.Getpid()
	j := &Journal{host: host, path: filepath.Join(dir, fmt.Sprintf("run-%d.json", pid)),
		state: journalState{PID: pid, StartTicks: processStartTicks(pid), StartedAt: time.Now(), Changes: []Change{}}}
	return j, j.save()
}

// Path is the state file.
func (j *Journal) Path() string { return j.path }

func (j *Journal) save() error {
	b, err := json.MarshalIndent(j.state, "", " ")
	if err != nil {
		return err
	}
	tmp := j.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	if err := os.Rename(tmp, j.path); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	return nil
}

// Record adds a change (before it is made) and saves the state file.
func (j *Journal) Record(c Change) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.state.Changes = append(j.state.Changes, c)
	return j.save()
}

// Changes returns a copy of the recorded changes.
func (j *Journal) Changes() []Change {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Change(nil), j.state.Changes...)
}

// Mark is the position of the next change, for UndoSince.
func (j *Journal) Mark() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.state.Changes)
}

// UndoSince undoes the changes recorded at or after mark, newest first.
func (j *Journal) UndoSince(mark int) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.undoLocked(mark)
}

// Undo undoes every change not yet undone, newest first, and removes the
// state file when all succeeded. It returns what it could not undo.
func (j *Journal) Undo() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	err := j.undoLocked(0)
	if err == nil {
		if rerr := os.Remove(j.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return rerr
		}
	}
	return err
}

func (j *Journal) undoLocked(mark int) error {
	var errs []error
	for i := len(j.state.Changes) - 1; i >= mark; i-- {
		c := &j.state.Changes[i]
		if c.Undone {
			continue
		}
		if err := undo(*c); err != nil {
			c.UndoError = err.Error()
			errs = append(errs, fmt.Errorf("undo %s: %w", c, err))
		} else {
			c.Undone, c.UndoError = true, ""
		}
		_ = j.save()
	}
	return errors.Join(errs...)
}

// CleanupReport is what Cleanup did with one state file.
type CleanupReport struct {
	File    string
	Skipped string // why it was left alone (its run is alive)
	Undone  []Change
	Err     error
}

// Cleanup undoes what runs left in dir's state files. A file whose run is
// still alive is skipped unless force.
func Cleanup(dir string, force bool) ([]CleanupReport, error) {
	files, err := filepath.Glob(filepath.Join(dir, "run-*.json"))
	if err != nil {
		return nil, err
	}
	var out []CleanupReport
	for _, f := range files {
		rep := CleanupReport{File: f}
		b, err := os.ReadFile(f)
		if err != nil {
			rep.Err = err
			out = append(out, rep)
			continue
		}
		j := &Journal{path: f}
		if err := json.Unmarshal(b, &j.state); err != nil {
			rep.Err = fmt.Errorf("%s: %w", f, err)
			out = append(out, rep)
			continue
		}
		if !force && j.state.PID != os.Getpid() && ProcessAlive(j.state.PID, j.state.StartTicks) {
			rep.Skipped = fmt.Sprintf("its run (pid %d) is still running; stop it, or pass --force", j.state.PID)
			out = append(out, rep)
			continue
		}
		for _, c := range j.state.Changes {
			if !c.Undone {
				rep.Undone = append(rep.Undone, c)
			}
		}
		rep.Err = j.Undo()
		out = append(out, rep)
	}
	return out, nil
}

// LeftoverStates lists state files of runs that are no longer alive and
// left system changes to undo. A dead run's file that records no change
// (killed before it made one) is removed: there is nothing to clean up.
func LeftoverStates(dir string) []string {
	files, _ := filepath.Glob(filepath.Join(dir, "run-*.json"))
	var out []string
	for _, f := range files {
		var st journalState
		if b, err := os.ReadFile(f); err == nil && json.Unmarshal(b, &st) == nil && !ProcessAlive(st.PID, st.StartTicks) {
			if len(st.Changes) == 0 && os.Remove(f) == nil {
				continue
			}
			out = append(out, f)
		}
	}
	return out
}

func undo(c Change) error {
	switch c.Kind {
	case ChangeVMDirty:
		return restoreVMDirty(c.Path, c.Original)
	case ChangeSysctl:
		if c.Original == "" {
			return nil
		}
		err := os.WriteFile(c.Path, []byte(c.Original), 0)
		if errors.Is(err, os.ErrNotExist) {
			return nil // the device it belonged to is gone
		}
		return err
	case ChangeFile:
		if err := os.Remove(c.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	case ChangeDir:
		if err := os.Remove(c.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	case ChangeSwapon:
		if !swapActive(c.Path) {
			return nil
		}
		return RunTool("swapoff", c.Path)
	case ChangeCgroup:
		return removeCgroup(c.Path)
	case ChangeSubtree:
		err := os.WriteFile(c.Path, []byte("-"+c.Value), 0o644)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	case ChangeLoop:
		if loopBacking(c.Path) != c.Backing || c.Backing == "" {
			return nil // detached already (or reused for another file: not ours)
		}
		return RunTool("losetup", "-d", c.Path)
	case ChangeMount:
		if !isMountPoint(c.Path) {
			return nil
		}
		if err := RunTool("umount", c.Path); err != nil {
			return RunTool("umount", "-l", c.Path)
		}
	case ChangeProcess:
		if ProcessAlive(c.PID, c.StartTicks) {
			if err := syscall.Kill(c.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return err
			}
			waitGone(c.PID, c.StartTicks, 5*time.Second)
		}
	default:
		return fmt.Errorf("unknown change kind %q", c.Kind)
	}
	return nil
}

// RunTool runs a system tool and returns its output in the error.
func RunTool(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
