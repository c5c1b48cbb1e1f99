package host

// EmulatedHDDModel is the model every output shows for the emulated disk.
const EmulatedHDDModel = "EMULATED 7200 rpm HDD (FUSE latency model under a loop device)"
