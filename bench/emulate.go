package bench

import "github.com/mqstore/mqstore/bench/runfile"

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

// EmulatedHDDModel is the model every output shows for the emulated disk.
const EmulatedHDDModel = "EMULATED 7200 rpm HDD (FUSE latency model under a loop device)"
