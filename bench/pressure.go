package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/internal/hostctl"
)

// errNeedsRoot is why pressure and emulation are skipped for other users.
var errNeedsRoot = errors.New("needs root (it changes sysctls, swap, cgroups and loop devices)")

// pressureEnv is one pressure applied for a phase of the run.
type pressureEnv struct {
	mark       int
	neighbours []*neighbour
	// memCgroup is the memory cgroup the store's worker joins (swap).
	memCgroup string
	desc      string
	restarts  int // neighbours started again after they died
}

func (e *pressureEnv) cgroups() []string {
	if e == nil || e.memCgroup == "" {
		return nil
	}
	return []string{e.memCgroup}
}

// alive reports an error when a neighbour has died (its pressure is gone).
func (e *pressureEnv) alive() error {
	if e == nil {
		return nil
	}
	for _, n := range e.neighbours {
		if !hostctl.ProcessAlive(n.w.cmd.Process.Pid, 0) {
			// Reap it first: Wait returns once its stderr is copied, so the
			// buffer is read after the last write to it.
			n.w.kill()
			return fmt.Errorf("the %s neighbour died during the repeat: %s%s", n.what, strings.TrimSpace(n.w.stderr.String()), oomNote(e.cgroups()))
		}
	}
	return nil
}

// revive starts again, before a repeat, a neighbour that died during an
// earlier one (the memory cgroup's OOM killer picks the biggest process,
// often the anonymous-memory toucher): the repeat it died in failed, the
// next ones get the pressure back instead of failing one after another.
func (e *pressureEnv) revive(ctx context.Context, j *hostctl.Journal) error {
	if e == nil {
		return nil
	}
	for i, n := range e.neighbours {
		if hostctl.ProcessAlive(n.w.cmd.Process.Pid, 0) {
			continue
		}
		n.w.kill() // reap it
		fresh, err := startNeighbour(ctx, j, n.req, n.what, n.cgroups)
		if err != nil {
			return fmt.Errorf("start the %s neighbour again: %w", n.what, err)
		}
		e.neighbours[i] = fresh
		e.restarts++
	}
	return nil
}

// startPressure applies a pressure for the cells of target t.
func (r *runner) startPressure(ctx context.Context, t *target, name string) (*pressureEnv, error) {
	if name == PressureNone {
		return nil, nil
	}
	if !isRoot() {
		return nil, fmt.Errorf("pressure %s %w; running as uid %d", name, errNeedsRoot, os.Geteuid())
	}
	if r.journal == nil {
		return nil, fmt.Errorf("pressure %s: no state file", name)
	}
	e := &pressureEnv{mark: r.journal.Mark()}
	var desc []string
	ok := false
	defer func() {
		if !ok {
			e.stop(r.journal)
		}
	}()
	if name == PressureDirty || name == PressureBoth {
		if err := r.journal.SetVMDirty(r.cfg.DirtyBytes, r.cfg.DirtyBackgroundBytes); err != nil {
			return nil, err
		}
		n, err := startNeighbour(ctx, r.journal, workerRequest{Kind: workerDirty, Dir: t.work, Bytes: r.cfg.DirtyFileBytes}, "dirty writer", nil)
		if err != nil {
			return nil, err
		}
		e.neighbours = append(e.neighbours, n)
		desc = append(desc, fmt.Sprintf("vm.dirty_bytes=%s, vm.dirty_background_bytes=%s, a neighbour process overwriting a %s file in %s with buffered 1 MiB writes",
			runfile.SizeLabel(int(r.cfg.DirtyBytes)), runfile.SizeLabel(int(r.cfg.DirtyBackgroundBytes)), runfile.SizeLabel(int(r.cfg.DirtyFileBytes)), t.work))
	}
	if name == PressureSwap || name == PressureBoth {
		swap, err := r.ensureSwap()
		if err != nil {
			return nil, err
		}
		mcg, err := r.journal.MakeMemoryCgroup(fmt.Sprintf("mqbench-%d-%s", os.Getpid(), name), r.cfg.SwapLimitBytes)
		if err != nil {
			return nil, err
		}
		cg := mcg.Dir
		e.memCgroup = cg
		n, err := startNeighbour(ctx, r.journal, workerRequest{Kind: workerAnon, Bytes: r.cfg.SwapNeighbourBytes}, "anonymous-memory toucher", []string{cg})
		if err != nil {
			return nil, err
		}
		e.neighbours = append(e.neighbours, n)
		limit := "memory.limit_in_bytes, swappiness 100"
		if mcg.Version == 2 {
			limit = "memory.max, memory.swap.max max; the system's swappiness"
		}
		desc = append(desc, fmt.Sprintf("swap on (%s), the store's process in memory cgroup %s limited to %s (%s) with a neighbour touching %s of anonymous memory in the same cgroup",
			swap, mcg, runfile.SizeLabel(int(r.cfg.SwapLimitBytes)), limit, runfile.SizeLabel(int(r.cfg.SwapNeighbourBytes))))
	}
	e.desc = strings.Join(desc, "; ")
	ok = true
	return e, nil
}

// stop ends the neighbours and undoes the pressure's system changes.
func (e *pressureEnv) stop(j *hostctl.Journal) error {
	if e == nil {
		return nil
	}
	for _, n := range e.neighbours {
		n.w.kill()
	}
	if j == nil {
		return nil
	}
	return j.UndoSince(e.mark)
}

// ensureSwap turns a swapfile on for the rest of the run when no swap is
// active, and describes the swap in use.
func (r *runner) ensureSwap() (string, error) {
	if active := hostctl.ActiveSwaps(); len(active) > 0 {
		return "existing " + strings.Join(active, ", "), nil
	}
	path := filepath.Join(r.targets[0].work, "mqbench.swap")
	if err := r.journal.AddSwapfile(path, r.cfg.SwapFileBytes); err != nil {
		return "", err
	}
	return fmt.Sprintf("a %s swapfile made for the run, %s", runfile.SizeLabel(int(r.cfg.SwapFileBytes)), path), nil
}
