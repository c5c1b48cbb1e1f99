//go:build linux

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mqstore/mqstore/bench/host"
	"github.com/mqstore/mqstore/internal/hddfs"
)

// hddDaemon serves the emulated disk's FUSE file system when this process
// was started as its daemon (hddfs re-executes the harness for it).
func hddDaemon() { hddfs.RunDaemonIfRequested() }

// hddDaemonNice is the daemon's priority: it stands for hardware, and one
// that waits for a CPU behind the cells answers late.
const hddDaemonNice = -5

// setupHDD builds the emulated HDD (package hddfs): a FUSE file whose every
// request pays a 7200 rpm drive's seek, rotation and zoned transfer time,
// one at a time, with a volatile write cache that a flush empties; a loop
// device on it marked rotational; ext4 on that, mounted. The kernel's
// writeback and every sync meet the drive's speed, as on a real disk. It
// is calibrated with fio before the cells run (the table is in the
// device's note). Every step is in the journal.
func (r *runner) setupHDD(ctx context.Context, base *target) (*target, error) {
	if !isRoot() {
		return nil, fmt.Errorf("--emulate hdd %w; running as uid %d", errNeedsRoot, os.Geteuid())
	}
	nice := hddDaemonNice
	dir := filepath.Join(base.work, "hdd")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("emulated hdd: %w", err)
	}
	model := hddfs.DefaultModel()
	m, err := hddfs.Setup(ctx, hddfs.Config{Dir: dir, SizeBytes: r.cfg.EmulateImageBytes, Model: model, Journal: r.journal, DaemonNice: &nice})
	if err != nil {
		return nil, fmt.Errorf("emulated hdd: %w", err)
	}
	r.progress.note("calibrating the emulated HDD with fio (about 20 s)…")
	cal, cerr := hddfs.Calibrate(ctx, m, hddfs.CalibrationOptions{})
	work, err := os.MkdirTemp(m.Dir, "mqbench-")
	if err != nil {
		return nil, errors.Join(fmt.Errorf("emulated hdd: %w", err), m.Close())
	}
	t := &target{label: "hdd-emulated", work: work, emulated: true, close: m.Close}
	t.device = host.DescribeDevice(t.work)
	t.device.Dir, t.device.Emulated, t.device.Label, t.device.Model = m.Dir, true, t.label, EmulatedHDDModel
	t.device.Kind = EmulatedHDDModel
	// The drive itself is slow: buffered writeback and syncs wait for it
	// like on a real disk, and each request pays a seek and a rotation.
	t.device.BufferedWritebackThrottled, t.device.ModelsSeeks = true, true
	calibration := "calibration (fio on the mounted disk against the model's data-sheet figures):\n\n" + cal.String()
	if cerr != nil {
		calibration = "NOT calibrated: " + cerr.Error()
		r.note("the emulated HDD is not calibrated: %v", cerr)
	}
	t.device.Note = fmt.Sprintf("EMULATED: ext4 on %s (major:minor %s), a loop device on a %s FUSE file on %s's file system (%s) whose daemon charges each request "+
		"a %.0f rpm drive's seek (average %v), rotation and zoned transfer (%.0f–%.0f MB/s), one request at a time, with a %s write cache that a flush empties "+
		"(Seagate Barracuda 7200.14's data sheet; internal/hddfs). %s",
		m.Device, m.MajorMinor, sizeLabel(int(r.cfg.EmulateImageBytes)), base.label, base.device.Device, model.RPM, model.AverageSeek,
		model.InnerRate/1e6, model.OuterRate/1e6, sizeLabel(int(model.WriteCacheBytes)), calibration)
	return t, nil
}
