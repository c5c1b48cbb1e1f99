//go:build race

package main

// raceEnabled: the test binary was built with -race, so the mqpeer it
// builds is too (and reuses the same compiled packages).
const raceEnabled = true
