package bench

import (
	"fmt"
)

// fmtBytes formats a byte count in MB or GB (10^6, 10^9).
func fmtBytes(n int64) string {
	if n >= 1e9 {
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	}
	return fmt.Sprintf("%.0f MB", float64(n)/1e6)
}
