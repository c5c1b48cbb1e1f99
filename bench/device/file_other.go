//go:build !linux

package device

import "os"

// preallocate sizes the file (no fallocate outside Linux).
func preallocate(f *os.File, size int64) error { return f.Truncate(size) }
