//go:build linux

// Command hddfs builds an emulated 7200 rpm disk (internal/hddfs): a FUSE
// file whose requests pay a drive's seek, rotation and transfer time, a
// loop device on it, ext4 on that, mounted at DIR/mnt. It prints the
// mount point, then either calibrates the disk with fio and tears it down
// (--calibrate), or serves until SIGINT/SIGTERM and tears it down.
//
//	hddfs --dir DIR [--size 4GiB-in-bytes] [--nice -5] [--calibrate] [--runtime 8s]
//	hddfs --cleanup   # undo what a killed hddfs left (its journal in --state)
//
// Needs root, /dev/fuse, loop devices and mkfs.ext4; --calibrate needs fio.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mqstore/mqstore/internal/hddfs"
	"github.com/mqstore/mqstore/internal/hostctl"
)

func main() {
	hddfs.RunDaemonIfRequested()
	os.Exit(run())
}

func run() int {
	dir := flag.String("dir", "", "directory on a real file system for the image and the mount points (required)")
	size := flag.Int64("size", 4<<30, "disk size in bytes (the model's whole stroke)")
	nice := flag.Int("nice", 0, "scheduling priority of the FUSE daemon, -20..19")
	calibrate := flag.Bool("calibrate", false, "run the fio calibration, print its table, tear down")
	runtime := flag.Duration("runtime", 8*time.Second, "length of each timed calibration job")
	state := flag.String("state", "/run/hddfs", "journal directory (what to undo after a killed run)")
	cleanup := flag.Bool("cleanup", false, "undo what killed runs left in --state, and exit")
	flag.Parse()
	if *cleanup {
		reps, err := hostctl.Cleanup(*state, false)
		for _, r := range reps {
			fmt.Printf("%s: undone %d changes %s %v\n", r.File, len(r.Undone), r.Skipped, r.Err)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "hddfs:", err)
			return 1
		}
		return 0
	}
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "hddfs: --dir is required")
		return 2
	}
	j, err := hostctl.OpenJournal(*state, hostctl.Default())
	if err != nil {
		fmt.Fprintln(os.Stderr, "hddfs:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := hddfs.Setup(ctx, hddfs.Config{Dir: *dir, SizeBytes: *size, Model: hddfs.DefaultModel(), Journal: j, DaemonNice: nice})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		j.Undo()
		return 1
	}
	fmt.Printf("emulated disk %s (%s) mounted at %s\n", d.Device, d.MajorMinor, d.Dir)
	code := 0
	if *calibrate {
		c, err := hddfs.Calibrate(ctx, d, hddfs.CalibrationOptions{Runtime: *runtime})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		} else {
			fmt.Print(c)
		}
	} else {
		<-ctx.Done()
	}
	if err := d.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "hddfs: tear down:", err)
		code = 1
	}
	if err := j.Undo(); err != nil {
		fmt.Fprintln(os.Stderr, "hddfs: tear down:", err)
		code = 1
	}
	return code
}
