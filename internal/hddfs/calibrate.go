//go:build linux

package hddfs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mqstore/mqstore/internal/segfile"
)

// ErrNoFio is returned (wrapped) by Calibrate when fio is not on PATH.
var ErrNoFio = errors.New("hddfs: fio is not installed (apt-get install fio), so the emulated disk cannot be calibrated")

// CalibrationOptions sizes the calibration; zero fields take the defaults.
type CalibrationOptions struct {
	// SeqBytes is the sequential write's size (default 512 MiB, at most a
	// quarter of the disk). It must be well above the model's write cache
	// (64 MiB) for the figure to be the media's: calibrate a disk of 2 GiB
	// or more. The whole calibration takes SeqBytes at the media rate plus
	// twice Runtime (about 20 s by default).
	SeqBytes int64
	// Runtime is the length of the random-read and of the sync-write job
	// (default 8 s).
	Runtime time.Duration
}

// Row is one calibration figure: what fio measured on the emulated disk
// beside what the drive's published figures predict.
type Row struct {
	Metric   string
	Unit     string
	Measured float64
	Target   float64
	// Basis says where the target comes from.
	Basis string
	// Samples is how many requests fio timed.
	Samples int64
	// Late is how much later than the model's time the daemon answered,
	// on average over the job's requests (the machine's load and timer
	// slack: the emulator's own error; it lowers rates and IOPS).
	Late time.Duration
}

// Ratio is Measured / Target.
func (r Row) Ratio() float64 { return r.Measured / r.Target }

// Calibration is the result of Calibrate.
type Calibration struct {
	Model      Model
	Device     string
	Fio        string // fio's version
	Rows       []Row
	Duration   time.Duration
	SeqExtents int // extents of the sequential file (its position sets its target)
}

// String is the calibration as a Markdown table with the model above it.
func (c Calibration) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Emulated disk %s, model: %s. Measured with %s in %.0f s.\n\n", c.Device, c.Model, c.Fio, c.Duration.Seconds())
	b.WriteString("| metric | measured | target | measured/target | samples | daemon late (mean) | target from |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range c.Rows {
		fmt.Fprintf(&b, "| %s | %.4g %s | %.4g %s | %.2f | %d | %.0f µs | %s |\n", r.Metric, r.Measured, r.Unit, r.Target, r.Unit, r.Ratio(), r.Samples,
			float64(r.Late)/1e3, r.Basis)
	}
	return b.String()
}

// Calibrate runs fio on the emulated disk d and compares with what its
// model's published figures predict:
//
//   - sequential 1 MiB O_DIRECT writes of a new file on the ext4, ending
//     with an fsync: MB/s, against the model's media rate over the
//     extents ext4 gave the file (FIEMAP), so the zone is accounted;
//   - random 4 KiB O_DIRECT reads at queue depth 1 over the whole device
//     (read only; the mounted ext4 is not touched): IOPS, against one per
//     average seek + half a revolution + the transfer (the data sheet's
//     average seek is over the whole stroke, which a file on a small
//     ext4 does not span);
//   - 4 KiB writes over a laid-out file, each followed by fdatasync: the
//     p50 of the fdatasync, against one revolution (the next sector has
//     just passed the head when the flush reaches the drive, the figure
//     behind "a 7200 rpm disk syncs about 120 times a second").
func Calibrate(ctx context.Context, d *Mounted, opt CalibrationOptions) (Calibration, error) {
	fio, err := exec.LookPath("fio")
	if err != nil {
		return Calibration{}, fmt.Errorf("%w: %v", ErrNoFio, err)
	}
	ver, _ := exec.CommandContext(ctx, fio, "--version").Output()
	c := Calibration{Model: d.Model, Device: d.Device, Fio: strings.TrimSpace(string(ver))}
	start := time.Now()
	size, err := deviceSize(d.Image)
	if err != nil {
		return c, err
	}
	if opt.SeqBytes <= 0 {
		opt.SeqBytes = 512 << 20
	}
	opt.SeqBytes = min(opt.SeqBytes, size/4) &^ (1<<20 - 1)
	if opt.Runtime <= 0 {
		opt.Runtime = 8 * time.Second
	}
	rt := strconv.Itoa(max(1, int(opt.Runtime.Seconds())))
	model, err := NewDisk(d.Model, size)
	if err != nil {
		return c, err
	}

	fuseDir := filepath.Dir(d.Image)
	var before DaemonStats
	mark := func() error {
		var err error
		before, err = ReadDaemonStats(fuseDir)
		return err
	}
	late := func() (time.Duration, error) {
		after, err := ReadDaemonStats(fuseDir)
		if n := after.Answered - before.Answered; err == nil && n > 0 {
			return (after.Late - before.Late) / time.Duration(n), nil
		}
		return 0, err
	}

	// Sequential writes.
	seq := filepath.Join(d.Dir, "calibrate-seq")
	defer os.Remove(seq)
	if err := mark(); err != nil {
		return c, err
	}
	res, err := runFio(ctx, fio, "--name=seqwrite", "--filename="+seq, "--rw=write", "--bs=1M", "--direct=1",
		"--ioengine=psync", "--iodepth=1", "--size="+strconv.FormatInt(opt.SeqBytes, 10), "--end_fsync=1")
	if err != nil {
		return c, err
	}
	ext, err := physicalExtents(seq)
	if err != nil {
		return c, err
	}
	c.SeqExtents = len(ext)
	lateSeq, err := late()
	if err != nil {
		return c, err
	}
	var media time.Duration
	for _, e := range ext {
		media += model.transfer(e.off, e.n)
	}
	w := res.Write
	c.Rows = append(c.Rows, Row{Metric: "sequential 1 MiB writes (O_DIRECT, then fsync)", Unit: "MB/s",
		Measured: float64(w.IOBytes) / (float64(res.JobRuntime) / 1e3) / 1e6,
		Target:   float64(opt.SeqBytes) / media.Seconds() / 1e6,
		Basis: fmt.Sprintf("media rate over the file's %d extents (data sheet: %.0f MB/s max sustained OD, %.0f MB/s average)",
			len(ext), d.Model.OuterRate/1e6, (d.Model.OuterRate+d.Model.InnerRate)/2e6),
		Samples: w.TotalIOs, Late: lateSeq})

	// Random reads over the whole device.
	if err := mark(); err != nil {
		return c, err
	}
	res, err = runFio(ctx, fio, "--name=randread", "--filename="+d.Device, "--readonly", "--rw=randread", "--bs=4k",
		"--direct=1", "--ioengine=psync", "--iodepth=1", "--norandommap", "--randseed=1", "--time_based", "--runtime="+rt)
	if err != nil {
		return c, err
	}
	lateRand, err := late()
	if err != nil {
		return c, err
	}
	c.Rows = append(c.Rows, Row{Metric: "random 4 KiB reads, queue depth 1, whole disk", Unit: "IOPS",
		Measured: res.Read.IOPS, Target: d.Model.RandomReadIOPS(4096),
		Basis: fmt.Sprintf("1 / (%.1f ms average seek + %.2f ms half revolution + transfer)",
			ms(d.Model.AverageSeek), ms(d.Model.Revolution())/2),
		Samples: res.Read.TotalIOs, Late: lateRand})

	// Sync writes.
	syncf := filepath.Join(d.Dir, "calibrate-sync")
	defer os.Remove(syncf)
	if err := mark(); err != nil {
		return c, err
	}
	res, err = runFio(ctx, fio, "--name=syncwrite", "--filename="+syncf, "--rw=write", "--bs=4k", "--size=4M",
		"--overwrite=1", "--ioengine=sync", "--fdatasync=1", "--time_based", "--runtime="+rt)
	if err != nil {
		return c, err
	}
	lateSync, err := late()
	if err != nil {
		return c, err
	}
	p50, ok := res.Sync.Lat.Percentile["50.000000"]
	if !ok {
		return c, fmt.Errorf("hddfs: fio reported no fdatasync p50 (sync.lat_ns.percentile)")
	}
	c.Rows = append(c.Rows, Row{Metric: "4 KiB write + fdatasync, fdatasync p50", Unit: "ms",
		Measured: float64(p50) / 1e6, Target: ms(d.Model.Revolution()),
		Basis:   fmt.Sprintf("one revolution at %.0f rpm", d.Model.RPM),
		Samples: res.Sync.Lat.N, Late: lateSync})
	c.Duration = time.Since(start)
	return c, nil
}

type fioDir struct {
	IOBytes  int64   `json:"io_bytes"`
	IOPS     float64 `json:"iops"`
	TotalIOs int64   `json:"total_ios"`
}

type fioJob struct {
	Error      int    `json:"error"`
	JobRuntime int64  `json:"job_runtime"` // ms
	Read       fioDir `json:"read"`
	Write      fioDir `json:"write"`
	Sync       struct {
		Lat struct {
			N          int64            `json:"N"`
			Percentile map[string]int64 `json:"percentile"`
		} `json:"lat_ns"`
	} `json:"sync"`
}

func runFio(ctx context.Context, fio string, args ...string) (fioJob, error) {
	cmd := exec.CommandContext(ctx, fio, append([]string{"--output-format=json"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fioJob{}, fmt.Errorf("hddfs: fio %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	// fio may print notes before the JSON.
	if i := strings.IndexByte(string(out), '{'); i > 0 {
		out = out[i:]
	}
	var r struct {
		Jobs []fioJob `json:"jobs"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return fioJob{}, fmt.Errorf("hddfs: fio %s: its JSON: %w", args[0], err)
	}
	if len(r.Jobs) != 1 || r.Jobs[0].Error != 0 {
		return fioJob{}, fmt.Errorf("hddfs: fio %s: %d jobs, error %v: %s", args[0], len(r.Jobs), r.Jobs, stderr.String())
	}
	return r.Jobs[0], nil
}

func deviceSize(image string) (int64, error) {
	st, err := os.Stat(image)
	if err != nil {
		return 0, fmt.Errorf("hddfs: %w", err)
	}
	return st.Size(), nil
}

// physicalExtents lists where the file's bytes are on its device (FIEMAP).
func physicalExtents(path string) ([]extent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hddfs: %w", err)
	}
	defer f.Close()
	es, err := segfile.Extents(f, true)
	if err != nil {
		return nil, fmt.Errorf("hddfs: %w", err)
	}
	out := make([]extent, 0, len(es))
	for _, e := range es {
		out = append(out, extent{e.Physical, e.Length})
	}
	return out, nil
}
