//go:build !race

package transientpool

const raceEnabled = false
