//go:build !linux

package testenv

// OnFUSE is false off Linux: crashfs (FUSE) runs on Linux only.
func OnFUSE(string) bool { return false }
