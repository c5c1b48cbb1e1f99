//go:build !linux

package engine

// dropUnflushedPages drops cached pages past the flushed offset on Linux
// (dropcache_linux.go); elsewhere recovery reads what the cache holds.
func dropUnflushedPages(string, int64, int64) error { return nil }
