//go:build linux

package crashfs

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// With names=strict a name change (create, mkdir, link, symlink, rename,
// unlink, rmdir) reaches the durable image only once every directory it
// touched has been fsynced after it. The daemon applies the change to the
// backing directory at once (the application must see it) and first
// appends to a journal, outside the backing directory, how to undo it; an
// FSYNCDIR appends a sync line. Undoing the changes whose directories were
// not synced, newest first, turns the backing directory into the durable
// image: the daemon does it itself when it crashes on purpose, and Recover
// does it after the daemon was killed. What an unlink or a rename replaced
// is kept in a graveyard next to the journal, so it can come back.

const (
	journalName = "names.jsonl"
	graveName   = "grave"
)

// nameOp is a journal line: a name change and how to undo it, or a sync.
type nameOp struct {
	Op    string `json:"op"`              // create, mkdir, unlink, rmdir, rename, sync
	Path  string `json:"path"`            // relative to the backing root (rename: the old name)
	To    string `json:"to,omitempty"`    // rename: the new name
	Grave string `json:"grave,omitempty"` // unlink, rename over a name: what it replaced, in the graveyard
}

// dirs are the directories whose sync makes the change durable.
func (o nameOp) dirs() []string {
	ds := []string{filepath.Dir(o.Path)}
	if o.Op == "rename" && filepath.Dir(o.To) != ds[0] {
		ds = append(ds, filepath.Dir(o.To))
	}
	return ds
}

// NameUndo reports one name change a power loss undid.
type NameUndo struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	To    string `json:"to,omitempty"`
	Error string `json:"error,omitempty"` // the undo failed (a later change moved the name)
}

// journal is the daemon's side: it appends, and counts graves.
type journal struct {
	mu     sync.Mutex
	f      *os.File
	state  string
	graves int
}

func openJournal(state string) (*journal, error) {
	if err := os.MkdirAll(filepath.Join(state, graveName), 0o755); err != nil {
		return nil, fmt.Errorf("crashfs: names journal: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(state, journalName), os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("crashfs: names journal (Recover the last run first): %w", err)
	}
	return &journal{f: f, state: state}, nil
}

// grave returns a fresh graveyard path (absolute) and its journal name.
func (j *journal) grave() (string, string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.graves++
	name := fmt.Sprintf("%d", j.graves)
	return filepath.Join(j.state, graveName, name), name
}

// log appends a line; a write(2), which the host keeps (only the machine
// under test loses power).
func (j *journal) log(op nameOp) error {
	b, err := json.Marshal(op)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, err := j.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("crashfs: names journal: %w", err)
	}
	return nil
}

func (j *journal) close() error { return j.f.Close() }

// Recover turns backing into the durable image after a daemon that ran
// with names=strict died: it undoes, newest first, the name changes whose
// directories were not synced, empties the graveyard and removes the
// journal. Without a journal in state it does nothing.
func Recover(state, backing string) ([]NameUndo, error) {
	f, err := os.Open(filepath.Join(state, journalName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("crashfs: recover names: %w", err)
	}
	ops, err := unsyncedNameOps(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("crashfs: recover names: %w", err)
	}
	var undone []NameUndo
	for i := len(ops) - 1; i >= 0; i-- {
		undone = append(undone, undoNameOp(state, backing, ops[i]))
	}
	if err := os.RemoveAll(filepath.Join(state, graveName)); err != nil {
		return undone, fmt.Errorf("crashfs: recover names: %w", err)
	}
	if err := os.Remove(filepath.Join(state, journalName)); err != nil {
		return undone, fmt.Errorf("crashfs: recover names: %w", err)
	}
	return undone, nil
}

// unsyncedNameOps reads the journal and returns, oldest first, the name
// changes that a directory sync has not made durable: a change is durable
// once every directory it touched (nameOp.dirs) was synced after it.
func unsyncedNameOps(journal io.Reader) ([]nameOp, error) {
	type pending struct {
		op   nameOp
		dirs []string
	}
	var ops []*pending
	sc := bufio.NewScanner(journal)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var op nameOp
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			continue // a line cut by the kill: its change was not applied either
		}
		if op.Op != "sync" {
			ops = append(ops, &pending{op: op, dirs: op.dirs()})
			continue
		}
		kept := ops[:0]
		for _, p := range ops {
			p.dirs = slices.DeleteFunc(p.dirs, func(d string) bool { return d == op.Path })
			if len(p.dirs) > 0 {
				kept = append(kept, p)
			}
		}
		ops = kept
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	out := make([]nameOp, len(ops))
	for i, p := range ops {
		out[i] = p.op
	}
	return out, nil
}

// undoNameOp reverts one name change in backing (an unlinked or replaced
// file comes back from the graveyard in state) and says how it went.
func undoNameOp(state, backing string, op nameOp) NameUndo {
	abs := func(rel string) string { return filepath.Join(backing, rel) }
	graveAbs := func(name string) string { return filepath.Join(state, graveName, name) }
	var err error
	switch op.Op {
	case "create":
		err = os.Remove(abs(op.Path))
	case "mkdir":
		err = os.RemoveAll(abs(op.Path))
	case "rmdir":
		err = os.Mkdir(abs(op.Path), 0o755)
	case "unlink":
		err = os.Rename(graveAbs(op.Grave), abs(op.Path))
	case "rename":
		err = os.Rename(abs(op.To), abs(op.Path))
		if err == nil && op.Grave != "" {
			err = os.Rename(graveAbs(op.Grave), abs(op.To))
		}
	default:
		err = fmt.Errorf("unknown change %q", op.Op)
	}
	u := NameUndo{Op: op.Op, Path: op.Path, To: op.To}
	if err != nil {
		u.Error = err.Error()
	}
	return u
}
