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

// emulated mounts the emulated device of kind (the only one: an HDD,
// host.EmulateHDD) inside the first target's work directory and makes a
// target of it. It needs the journal, which only root opens.
func (r *runner) emulated(ctx context.Context, kind string) (*target, error) {
	if r.journal == nil {
		return nil, fmt.Errorf("%w; running as uid %d", errNeedsRoot, os.Geteuid())
	}
	r.progress.note("building the emulated %s (a FUSE latency model under a loop device, ext4)…", kind)
	r.progress.note("setting up the emulated HDD and calibrating it with fio (about 20 s)…")
	base := r.targets[0]
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
