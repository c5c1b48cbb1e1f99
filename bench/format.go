package bench

import (
	"fmt"

	"github.com/mqstore/mqstore/bench/host"
)

// sizeLabel formats a size in bytes as B, KiB or MiB when it is a whole one.
var sizeLabel = host.SizeLabel

// fmtBytes formats a byte count in MB or GB (10^6, 10^9).
func fmtBytes(n int64) string {
	if n >= 1e9 {
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	}
	return fmt.Sprintf("%.0f MB", float64(n)/1e6)
}
