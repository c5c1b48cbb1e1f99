package host

import "fmt"

// EmulatedHDDModel is the model every output shows for the emulated disk.
const EmulatedHDDModel = "EMULATED 7200 rpm HDD (FUSE latency model under a loop device)"

// SizeLabel formats a size in bytes as B, KiB or MiB when it is a whole one.
func SizeLabel(b int) string {
	switch {
	case b == 0:
		return ""
	case b%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", b>>20)
	case b%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}
