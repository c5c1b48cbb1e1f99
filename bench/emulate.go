package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mqstore/mqstore/bench/host"
	"github.com/mqstore/mqstore/bench/runfile"
)

// target is one device the run measures: a user directory, or an emulated
// device mounted for the run.
type target struct {
	label    string
	work     string // the run's temporary directory on it
	device   runfile.Device
	emulated bool
	// close tears an emulated device down (nil for a real one); the
	// journal undoes it too if the run is killed.
	close func() error
}

// setupHDD mounts the emulated HDD (host.EmulateHDD) inside base's work
// directory and makes a target of it.
func (r *runner) setupHDD(ctx context.Context, base *target) (*target, error) {
	if !isRoot() {
		return nil, fmt.Errorf("--emulate hdd %w; running as uid %d", errNeedsRoot, os.Geteuid())
	}
	r.progress.note("setting up the emulated HDD and calibrating it with fio (about 20 s)…")
	dev, closeHDD, err := host.EmulateHDD(ctx, filepath.Join(base.work, "hdd"), r.cfg.EmulateImageBytes, r.journal, base.device, r.note)
	if err != nil {
		return nil, fmt.Errorf("emulated hdd: %w", err)
	}
	work, err := os.MkdirTemp(dev.Dir, "mqbench-")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("emulated hdd: %w", err), closeHDD())
	}
	dev.Label = "hdd-emulated"
	return &target{label: dev.Label, work: work, emulated: true, close: closeHDD, device: dev}, nil
}
