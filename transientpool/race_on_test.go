//go:build race

package transientpool

const raceEnabled = true
