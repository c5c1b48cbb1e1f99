//go:build linux

package hddfs

import (
	"context"
	"errors"
	"flag"
	"os/exec"
	"testing"

	"github.com/mqstore/mqstore/internal/testenv"
)

var calibrate = flag.Bool("hddfs.calibrate", false, "run fio on an emulated 4 GiB disk and print the calibration table (about 30 s)")

// TestCalibrate is the calibration behind -hddfs.calibrate: fio on the
// emulated disk, the table logged, each figure within a fifth of its
// target.
func TestCalibrate(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		testenv.Skip(t, testenv.Fio, "%v", err)
	}
	// The daemon stands for hardware: at the test's own priority (make
	// and CI run tests under nice) it would wait for a CPU and answer late.
	nice := -5
	d := setupT(t, 4<<30, DefaultModel(), &nice)
	c, err := Calibrate(context.Background(), d, CalibrationOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", c)
	for _, r := range c.Rows {
		if q := r.Ratio(); q < 0.8 || q > 1.25 {
			t.Errorf("%s: measured %.4g %s, %.2f× the target %.4g", r.Metric, r.Measured, r.Unit, q, r.Target)
		}
	}
}

// TestCalibrateWithoutFio: with no fio on PATH the calibration says so.
func TestCalibrateWithoutFio(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Calibrate(context.Background(), &Mounted{Model: DefaultModel()}, CalibrationOptions{})
	if !errors.Is(err, ErrNoFio) {
		t.Fatalf("Calibrate without fio: %v, want ErrNoFio", err)
	}
}
