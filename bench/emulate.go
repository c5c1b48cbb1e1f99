package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mqstore/mqstore/internal/hostctl"
)

// target is one device the run measures: a user directory, or an emulated
// device mounted for the run.
type target struct {
	label    string
	work     string // the run's temporary directory on it
	device   Device
	emulated bool
	// blkio is the cgroup whose throttle emulates the device: the harness
	// joins it for the target's cells (their workers inherit it).
	blkio string
}

// EmulatedHDDModel is the model every output shows for the emulated disk.
const EmulatedHDDModel = "EMULATED 7200 rpm HDD (loop device, blkio-throttled)"

// setupHDD builds the emulated HDD: a sparse image on base's file system,
// attached to a loop device with direct I/O, marked rotational, formatted
// ext4 and mounted, with a blkio cgroup throttling the loop device to a 7200
// rpm disk's bandwidth and IOPS. Every step is in the journal.
func (r *runner) setupHDD(ctx context.Context, base *target) (*target, error) {
	if !isRoot() {
		return nil, fmt.Errorf("--emulate hdd %w; running as uid %d", errNeedsRoot, os.Geteuid())
	}
	j := r.journal
	image := filepath.Join(base.work, "hdd.img")
	if err := j.Record(hostctl.Change{Kind: hostctl.ChangeFile, Path: image}); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(image, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	err = f.Truncate(r.cfg.EmulateImageBytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("hdd image: %w", err)
	}
	dev, err := j.AttachLoop(image)
	if err != nil {
		return nil, err
	}
	sys := filepath.Join("/sys/block", filepath.Base(dev))
	if err := j.SetAttr(filepath.Join(sys, "queue", "rotational"), "1"); err != nil {
		return nil, err
	}
	if err := runToolContext(ctx, "mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard", dev); err != nil {
		return nil, err
	}
	mnt := filepath.Join(base.work, "hdd-mnt")
	if err := j.Mount(dev, "ext4", mnt); err != nil {
		return nil, err
	}
	majMin, err := os.ReadFile(filepath.Join(sys, "dev"))
	if err != nil {
		return nil, err
	}
	mm := strings.TrimSpace(string(majMin))
	icg, err := j.MakeIOCgroup(fmt.Sprintf("mqbench-%d-hdd", os.Getpid()), mm, int64(r.cfg.HDDBandwidthBytes), int64(r.cfg.HDDIOPS))
	if err != nil {
		return nil, err
	}
	cg := icg.Dir
	work, err := os.MkdirTemp(mnt, "mqbench-")
	if err != nil {
		return nil, err
	}
	t := &target{label: "hdd-emulated", work: work, emulated: true, blkio: cg}
	r.describeHDD(t, base, mnt, dev, mm, icg)
	return t, nil
}

// describeHDD describes the emulated disk t: its device, what the
// throttle reaches (cgroup v1 or v2) and what it does not model.
func (r *runner) describeHDD(t, base *target, mnt, dev, mm string, icg hostctl.Cgroup) {
	t.device = DescribeDevice(t.work)
	t.device.Dir, t.device.Emulated, t.device.Label, t.device.Model = mnt, true, t.label, EmulatedHDDModel
	t.device.Kind = fmt.Sprintf("EMULATED 7200 rpm HDD (loop device throttled by cgroup v%d %s)", icg.Version, map[int]string{1: "blkio", 2: "io.max"}[icg.Version])
	// cgroup v1 charges the kernel's writeback to the root blkio cgroup: the
	// throttle does not reach buffered writes that the flusher threads write
	// back, so async cells of buffered backends here are not limited by it.
	// cgroup v2 charges writeback to the cgroup that dirtied the pages.
	t.device.BufferedWritebackThrottled = icg.Version == 2
	// A bandwidth and IOPS limit charges no seek or rotation: nothing is
	// recommended from this device (runfile.Device.ModelsSeeks).
	t.device.ModelsSeeks = false
	writeback := "writeback by the kernel's flusher threads is charged to the root blkio cgroup in cgroup v1, so only I/O the store's own threads submit " +
		"(fsync/fdatasync/msync, O_DIRECT and io_uring writes, reads) is throttled"
	if icg.Version == 2 {
		writeback = "cgroup v2 charges writeback to the cgroup that dirtied the pages, so buffered writes are throttled too"
	}
	t.device.Note = fmt.Sprintf("EMULATED: %s (major:minor %s, direct I/O) on a sparse %s image on %s's file system (%s), ext4, marked rotational; "+
		"%s: %.0f MB/s and %d IOPS each way. Not modelled: seek and rotational latency of a single request (so no recommendation is drawn from it); %s.",
		dev, mm, sizeLabel(int(r.cfg.EmulateImageBytes)), base.label, base.device.Device, icg, float64(r.cfg.HDDBandwidthBytes)/1e6, r.cfg.HDDIOPS, writeback)
}

func runToolContext(ctx context.Context, name string, args ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return hostctl.RunTool(name, args...)
}

// enter moves the harness into the target's blkio cgroup (a no-op for real
// devices) and returns the way out.
func (t *target) enter() (func(), error) {
	if t.blkio == "" {
		return func() {}, nil
	}
	if err := hostctl.JoinCgroup(t.blkio, os.Getpid()); err != nil {
		return func() {}, err
	}
	return func() { _ = hostctl.JoinCgroup(filepath.Dir(t.blkio), os.Getpid()) }, nil
}
