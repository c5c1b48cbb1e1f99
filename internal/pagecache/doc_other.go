//go:build !linux

// Package pagecache tells whether a file's pages are dirty in the page cache
// (Linux only: /proc/self/pagemap and /proc/kpageflags).
package pagecache

import "errors"

// ErrNoAccess: page flags cannot be read on this system.
var ErrNoAccess = errors.New("pagecache: page flags are readable on Linux only")

// Page is the state of one page of a file in the page cache.
type Page struct {
	Index                      int64
	Resident, Dirty, Writeback bool
}

// Unsynced is unsupported off Linux.
func Unsynced(path string, off, n int64) ([]Page, error) { return nil, ErrNoAccess }

// CheckSynced is unsupported off Linux.
func CheckSynced(path string, off, n int64) error { return ErrNoAccess }

// Resident is unsupported off Linux.
func Resident(path string, off, n int64) (int, error) { return 0, ErrNoAccess }
