package bench

import "fmt"

// sizeLabel formats a size in bytes as B, KiB or MiB when it is a whole one.
func sizeLabel(b int) string {
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

// fmtBytes formats a byte count in MB or GB (10^6, 10^9).
func fmtBytes(n int64) string {
	if n >= 1e9 {
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	}
	return fmt.Sprintf("%.0f MB", float64(n)/1e6)
}
