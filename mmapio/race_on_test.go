//go:build race

package mmapio

const raceEnabled = true
