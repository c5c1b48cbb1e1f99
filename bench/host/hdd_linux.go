//go:build linux

package host

import (
	"context"
	"fmt"
	"os"

	"github.com/mqstore/mqstore/bench/runfile"
	"github.com/mqstore/mqstore/internal/hddfs"
	"github.com/mqstore/mqstore/internal/hostctl"
)

// HDDDaemon serves the emulated disk's FUSE file system when this process
// was started as its daemon (hddfs re-executes the harness for it).
func HDDDaemon() { hddfs.RunDaemonIfRequested() }

// hddDaemonNice is the daemon's priority: it stands for hardware, and one
// that waits for a CPU behind the cells answers late.
const hddDaemonNice = -5

// EmulateHDD builds the emulated HDD in dir (package hddfs): a FUSE file
// whose every request pays a 7200 rpm drive's seek, rotation and zoned
// transfer time, one at a time, with a volatile write cache that a flush
// empties; a loop device on it marked rotational; ext4 on that, mounted.
// The kernel's writeback and every sync meet the drive's speed, as on a
// real disk. It is calibrated with fio (the table is in the device's
// note; a failed calibration is also given to note). Every step is in the
// journal j; base is the device dir is on. It returns the mounted
// directory's description and its teardown.
func EmulateHDD(ctx context.Context, dir string, imageBytes int64, j *hostctl.Journal, base runfile.Device, note func(format string, args ...any)) (runfile.Device, func() error, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return runfile.Device{}, nil, err
	}
	model := hddfs.DefaultModel()
	m, err := hddfs.Setup(ctx, hddfs.Config{Dir: dir, SizeBytes: imageBytes, Model: model, Journal: j, DaemonNice: new(hddDaemonNice)})
	if err != nil {
		return runfile.Device{}, nil, err
	}
	cal, cerr := hddfs.Calibrate(ctx, m, hddfs.CalibrationOptions{})
	d := DescribeDevice(m.Dir)
	d.Dir, d.Emulated, d.Model, d.Kind = m.Dir, true, EmulatedHDDModel, EmulatedHDDModel
	// The drive itself is slow: buffered writeback and syncs wait for it
	// like on a real disk, and each request pays a seek and a rotation.
	d.BufferedWritebackThrottled, d.ModelsSeeks = true, true
	calibration := "calibration (fio on the mounted disk against the model's data-sheet figures):\n\n" + cal.String()
	if cerr != nil {
		calibration = "NOT calibrated: " + cerr.Error()
		note("the emulated HDD is not calibrated: %v", cerr)
	}
	d.Note = fmt.Sprintf("EMULATED: ext4 on %s (major:minor %s), a loop device on a %s FUSE file on %s's file system (%s) whose daemon charges each request "+
		"a %.0f rpm drive's seek (average %v), rotation and zoned transfer (%.0f–%.0f MB/s), one request at a time, with a %s write cache that a flush empties "+
		"(Seagate Barracuda 7200.14's data sheet; internal/hddfs). %s",
		m.Device, m.MajorMinor, runfile.SizeLabel(int(imageBytes)), base.Label, base.Device, model.RPM, model.AverageSeek,
		model.InnerRate/1e6, model.OuterRate/1e6, runfile.SizeLabel(int(model.WriteCacheBytes)), calibration)
	return d, m.Close, nil
}
