//go:build !linux

package disktest

import "testing"

// inMemory is false off Linux (page flags cannot be read there anyway).
func inMemory(testing.TB, string) bool { return false }
