package bench

import (
	"cmp"
	"context"
	"fmt"
	"os"

	"github.com/mqstore/mqstore/bench/host"
	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/internal/hostctl"
)

// MeasureDevice measures the limits alone (the device probes, the
// group-commit limit for cfg.Sizes, fio) in a temporary directory inside
// cfg.Dir (mqbench device).
func MeasureDevice(ctx context.Context, cfg Config, o RunOptions) (*runfile.RunFile, error) {
	work, err := absTempDir(cfg.Dir, "mqbench-device-")
	if err != nil {
		return nil, fmt.Errorf("work directory in %s: %w", cfg.Dir, err)
	}
	defer os.RemoveAll(work)
	hc := hostctl.Default()
	r := &runner{cfg: cfg, host: hc, work: work, prober: cmp.Or[DeviceProber](o.Prober, BuiltinProber{})}
	dev := host.DescribeDevice(cfg.Dir)
	r.file = &runfile.RunFile{Schema: runfile.SchemaVersion, Machine: host.DescribeMachine(hc), Devices: []runfile.Device{dev}, Config: cfg}
	r.progress = newProgress(o.Progress, o.Terminal, limitRuns(&cfg, 1), limitSeconds(&cfg))
	r.measureLimits(ctx)
	r.progress.close()
	if ctx.Err() != nil {
		return r.file, fmt.Errorf("%w", ErrInterrupted)
	}
	return r.file, nil
}
